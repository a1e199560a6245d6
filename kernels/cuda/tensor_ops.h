// The native engine's GPU kernels for the ops around convolutions in vision models (the model
// zoo's, RapidOCR's, openWakeWord's): Softmax, LRN, Transpose, Resize and ConvTranspose. Concat
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

// ONNX LRN across channels on an NHWC tensor of 'pixels' x c: y = x / (bias + alpha / size *
// sum of x^2 over channels [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)])^beta.
cudaError_t LrnNhwc(ElemType type, const void* x, void* y, int64_t pixels, int64_t c, int64_t size,
                    float alpha, float beta, float bias, cudaStream_t stream);

// y = x transposed: 'dims' the input's rank dims, y's dim d is x's dim perm[d] (rank at most 6).
constexpr int kMaxTransposeRank = 6;
cudaError_t Transpose(size_t elem_bytes, const void* x, void* y, int rank, const int64_t* dims,
                      const int* perm, cudaStream_t stream);

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
