// The GEMM epilogue as its own kernel: y = act(acc + bias) + residual, or act(acc + bias +
// residual) with 'residual_first' (a convolution's order), converted to y's type. The cuBLAS path
// runs it after cuBLAS writes fp32 accumulators; the custom GEMMs fuse the same arithmetic
// (device_math.cuh's Activate) into their stores.
#pragma once

#include "cuda/common.h"

namespace nereid::kernels::cuda {

// acc: rows x cols fp32, row-major; bias: cols fp32 or null; residual: rows x cols of out_type or
// null; out: rows x cols of out_type (kF32, kBF16, kF16). out may alias acc when out_type is kF32.
cudaError_t BiasActivation(const float* acc, int64_t rows, int64_t cols, const float* bias,
                           Activation act, const void* residual, ElemType out_type, void* out,
                           cudaStream_t stream, bool residual_first = false);

// The same after a split-K GEMM: acc holds 'splits' partial sums of rows x cols each (split s at
// acc + s * rows * cols), y = act(alpha * sum + bias) + residual (or the residual first).
cudaError_t SplitEpilogue(const float* acc, int splits, float alpha, int64_t rows, int64_t cols,
                          const float* bias, Activation act, const void* residual,
                          ElemType out_type, void* out, cudaStream_t stream,
                          bool residual_first = false);

}  // namespace nereid::kernels::cuda
