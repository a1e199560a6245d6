// Kernel launches with programmatic dependent launch (PDL; compute capability 9.0 and later).
//
// Every kernel of kernels/cuda starts with PdlWait() and is launched through LaunchKernel, which
// lets the GPU start it while the kernel before it in the stream is finishing (that kernel's
// blocks exiting, or all of them having passed PdlWait and triggered): its blocks are resident
// and waiting when the previous grid's memory becomes visible, instead of being launched only
// then. In a CUDA graph of a hundred small kernels (an encoder at batch 1) that gap is most of
// the time between kernels. PdlWait comes before a kernel's first read or write of global memory,
// so no kernel ever sees its predecessor's outputs unfinished; it is a no-op for a kernel launched
// without the attribute. A predecessor that is not a kernel (a copy, a memset) is waited for as
// usual. Off unless NEREID_CUDA_PDL=1 is in the environment (until it has been measured on the
// device; docs/native-engine.md).
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace nereid::kernels::cuda {

// Waits until the grid this one depends on has completed and its memory is visible, then lets the
// next grid in the stream be launched early. The first thing every kernel does.
__device__ __forceinline__ void PdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether launches on the current device carry the PDL attribute: compute capability 9.0 or later
// and NEREID_CUDA_PDL=1 (read once per process).
bool PdlEnabled();

// kernel<<<grid, block, smem, stream>>>(args...), with PDL where PdlEnabled(). Returns the
// launch's error.
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                         cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid, config.blockDim = block;
  config.dynamicSmemBytes = smem, config.stream = stream;
  cudaLaunchAttribute pdl[1];
  pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = pdl;
  config.numAttrs = PdlEnabled() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace nereid::kernels::cuda
