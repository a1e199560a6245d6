// Shared by the CUDA kernels of kernels/cuda: element types, activations, and launch helpers. Every
// entry point returns cudaError_t (the launch's own error, cudaGetLastError after it) and never
// synchronizes: callers own the stream and check errors at their boundary.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace nereid::kernels::cuda {

enum class ElemType { kF32, kBF16, kF16, kI32, kI64 };
// Activation applied in a fused epilogue (or on its own): ONNX Relu, Sigmoid, Tanh and Gelu (the
// exact erf form).
enum class Activation { kNone, kRelu, kSigmoid, kTanh, kGelu };

size_t ElemSize(ElemType t);
const char* ElemTypeName(ElemType t);
const char* ActivationName(Activation a);

// Whether 'p' is 16-byte aligned (what vector loads and TMA need).
inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Blocks of 256 threads, each thread handling 'per_thread' elements, capped so a grid-stride loop
// covers the rest.
inline unsigned GridFor(int64_t n, int per_thread = 4) {
  const int64_t blocks = (n + 256LL * per_thread - 1) / (256LL * per_thread);
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > 65535 * 16 ? 65535 * 16 : blocks);
}

}  // namespace nereid::kernels::cuda
