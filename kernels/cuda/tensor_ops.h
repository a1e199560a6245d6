// The native engine's GPU kernels for the ops around convolutions in vision models (the model
// zoo's, RapidOCR's, openWakeWord's): Softmax, LayerNorm, products of two activations, LRN,
// Transpose and strided copies, Resize and ConvTranspose; and for text encoders the rows of an
// embedding table gathered by token ids. Concat
// needs no kernel (strided copies). Types kF32, kBF16, kF16 with fp32 arithmetic (Transpose moves
// any element size). Entry points check their arguments, return cudaErrorInvalidValue for what
// they cannot run and never synchronize.
#pragma once

#include "conv_geometry.h"
#include "cuda/common.h"

namespace nereid::kernels::cuda {

// Softmax over each of 'rows' contiguous rows of n values (one block per row).
cudaError_t Softmax(ElemType type, const void* x, void* y, int64_t rows, int64_t n,
                    cudaStream_t stream);

// LayerNormalization of each of 'rows' contiguous rows of n values (one block per row, fp32
// statistics): y = (x - mean) / sqrt(var + eps) * scale + bias, scale and bias (fp32, n values)
// each optional (null); each row's mean and 1 / sqrt(var + eps) to 'mean' and 'inv_std' (of the
// type; each optional).
cudaError_t LayerNorm(ElemType type, const void* x, void* y, int64_t rows, int64_t n,
                      const float* scale, const float* bias, float eps, void* mean, void* inv_std,
                      cudaStream_t stream);

// LayerNorm of the sum a GEMM's epilogue would have written, without writing it: each value
// acc + sum_bias[col] (fp32; sum_bias optional) + residual, rounded to the type as the epilogue
// rounds it, then normalized as LayerNorm does (a warp per row). For a GEMM run by cuBLAS whose
// output only a layer norm reads: one kernel where the epilogue and the norm were two, and the
// sum never stored. Rows of whole 16-byte vectors, up to 256 of them; acc, residual and y
// 16-byte aligned.
bool LayerNormOfSumSupported(ElemType type, int64_t n);
cudaError_t LayerNormOfSum(ElemType type, const float* acc, const float* sum_bias,
                           const void* residual, void* y, int64_t rows, int64_t n,
                           const float* scale, const float* bias, float eps, cudaStream_t stream);

// c[i] = a[i] b[i] for i < batch: a[i] m x k, b[i] k x n and c[i] m x n, each contiguous and
// row-major, fp32 sums (the products of two activations, as attention's; CUDA cores).
cudaError_t BatchedMatMul(ElemType type, const void* a, const void* b, void* c, int64_t batch,
                          int64_t m, int64_t n, int64_t k, cudaStream_t stream);

// y[i] = the row of 'table' (table_rows x width, of the type) that indices[i] names, for i <
// count: an embedding lookup. 'indices' kI32 or kI64 on the device; a negative index counts from
// the end (ONNX's Gather); one outside [-table_rows, table_rows) gives a row of zeros (the host
// refuses such a request before it runs: this is never an out-of-bounds read).
cudaError_t GatherRows(ElemType type, const void* table, int64_t table_rows, int64_t width,
                       ElemType index_type, const void* indices, int64_t count, void* y,
                       cudaStream_t stream);

// ONNX LRN across channels on an NHWC tensor of 'pixels' x c: y = x / (bias + alpha / size *
// sum of x^2 over channels [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)])^beta.
cudaError_t LrnNhwc(ElemType type, const void* x, void* y, int64_t pixels, int64_t c, int64_t size,
                    float alpha, float beta, float bias, cudaStream_t stream);

// y = x transposed: 'dims' the input's rank dims, y's dim d is x's dim perm[d] (rank at most 6).
constexpr int kMaxTransposeRank = 6;
cudaError_t Transpose(size_t elem_bytes, const void* x, void* y, int rank, const int64_t* dims,
                      const int* perm, cudaStream_t stream);
// y (contiguous, 'out_dims', rank at most 6) = x read through element strides: y's element
// (i_0, ..., i_r-1) is x[sum of i_d * in_strides[d]] (a transpose, a slice, or both).
cudaError_t StridedCopy(size_t elem_bytes, const void* x, void* y, int rank,
                        const int64_t* out_dims, const int64_t* in_strides, cudaStream_t stream);

// Resize of an NHWC image n x h x w x c to n x oh x ow x c from per-axis taps (output index ->
// two source indices and the second's weight, nearest modes giving i0 == i1 and weight 0), which
// the host computes once per model: y = lerp(lerp(r0[x0], r0[x1], fx), lerp(r1[x0], r1[x1], fx),
// fy).
struct ResizeTap {
  int32_t i0 = 0, i1 = 0;
  float f = 0.f;
};
cudaError_t ResizeNhwc(ElemType type, const void* x, int64_t n, int64_t h, int64_t w, int64_t c,
                       const ResizeTap* taps_y, int64_t oh, const ResizeTap* taps_x, int64_t ow,
                       void* y, cudaStream_t stream);

// ConvTranspose on NHWC tensors: input g.h x g.w x g.c_in, output g.oh x g.ow x g.c_out, each input
// pixel (iy, ix) adding w * x at (iy * stride - pad + k * dilation). 'w' in ConvTransposeWeights'
// order, 'bias' (fp32, c_out) or null. Each thread gathers one output element (fp32 sums).
cudaError_t ConvTransposeNhwc(ElemType type, const Conv2dGeometry& g, const void* x, const void* w,
                              const float* bias, void* y, cudaStream_t stream);
// ONNX's [c_in][c_out / groups][kh][kw] as the kernel reads them: [kh][kw][c_in][c_out / groups].
void ConvTransposeWeights(const Conv2dGeometry& g, const float* onnx, float* out);

}  // namespace nereid::kernels::cuda
