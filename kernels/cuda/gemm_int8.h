// INT8 on the GPU path: per-row symmetric quantization and the small-M int8 GEMM.
//
// Weights are quantized once at load, one scale per output channel (row of w); activations per
// row at run time (dynamic). Both are symmetric: q = round_half_even(v * 127 / absmax(row)),
// clamped to [-127, 127], scale = absmax / 127 (a row of zeros gets scale 0). A GEMM on the
// quantized operands (GemmProblem with ab_type kI8, x_scale and w_scale) accumulates exactly in
// int32 and applies alpha * x_scale[i] * w_scale[j], the bias, the activation and the residual as
// it stores y:
//  - GemmSm90 (gemm.h) runs it on Hopper's int8 tensor cores (wgmma s8) for shapes that fill the
//    GPU;
//  - GemmSmallMInt8 here streams w once for serving batches (m <= 16): each block takes 8 rows of
//    w (m <= 4) or 4, its 8 warps split k, 16 bytes per load, and dp4a sums 4 products per
//    instruction, so the kernel moves a quarter of fp32's weight bytes and half of bf16's.
#pragma once

#include "cuda/gemm.h"

namespace nereid::kernels::cuda {

// q (rows x k int8) and scale (rows floats) from in (rows x k of in_type: kF32, kBF16 or kF16),
// row-major. Rows of a multiple of 8 up to 4,096 values (16-byte aligned in, 8-byte aligned q) go
// several to a block, 16 bytes per load; the others one to a block.
cudaError_t QuantizeRowsInt8(ElemType in_type, const void* in, int64_t rows, int64_t k, int8_t* q,
                             float* scale, cudaStream_t stream);
// The same bits for long rows (an image per row, a convolution's input; rows <= 65535): each row
// split over blocks; 'absmax_bits' (rows unsigned ints of scratch) joins their maxima.
cudaError_t QuantizeLongRowsInt8(ElemType in_type, const void* in, int64_t rows, int64_t k,
                                 int8_t* q, float* scale, unsigned* absmax_bits,
                                 cudaStream_t stream);

constexpr int64_t kSmallMInt8Max = 16;
// Whether GemmSmallMInt8 can run 'p': kI8 operands with both scales, 1 <= m <= 16, k a multiple
// of 16, 16-byte aligned x and w, y in fp32, bf16 or fp16.
bool SmallMInt8Supported(const GemmProblem& p);
cudaError_t GemmSmallMInt8(const GemmProblem& p, cudaStream_t stream);

}  // namespace nereid::kernels::cuda
