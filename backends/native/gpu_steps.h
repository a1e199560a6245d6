// One step of a compiled GPU model (gpu_model.h) put on a stream: the kernel (or copy) each kind
// of step runs, for 'rows' rows. The GEMMs are the instance's (its tuner picks their kernel per
// row count); every other kind is here, the GPU engine's one table of launches.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "gpu_model.h"
#include "nereid/status.h"

namespace nereid::native {

// Where an instance keeps what the steps read and write.
struct StepBuffers {
  std::function<void*(int)> buf;  // a value's device buffer, by value id
  void* quantized;                // int8 convolutions: the image quantized per row
  float* row_scale;               // and its scale per row
  unsigned* absmax;               // (the quantizer's scratch)
  float* conv_workspace;          // split-K convolutions' partial sums
};

// Enqueues step 's' (not a GEMM) of 'm' for 'rows' rows on 'stream'.
Status LaunchStep(const GpuModel& m, const Step& s, int64_t rows, const StepBuffers& b,
                  cudaStream_t stream);

}  // namespace nereid::native
