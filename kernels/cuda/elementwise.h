// Elementwise kernels of the native engine's GPU path: binary arithmetic with trailing broadcast,
// activations, and conversions between float types.
#pragma once

#include "cuda/common.h"

namespace nereid::kernels::cuda {

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kMax, kMin };

// out[i] = a[i % a_count] op b[i % b_count] for i < count: equal shapes, or one operand's shape a
// suffix of the output's (a bias row, a scalar). Types kF32, kBF16, kF16 (computed in float), kI32,
// kI64 (integer division truncates; division by zero yields 0 rather than trapping).
cudaError_t Binary(BinaryOp op, ElemType type, const void* a, int64_t a_count, const void* b,
                   int64_t b_count, void* out, int64_t count, cudaStream_t stream);

// Numpy broadcasting in up to kMaxBroadcastRank dimensions: the output is dims[0] x ... x
// dims[rank - 1] (row-major), and each operand is read at sum(index[d] * stride[d]) (a stride of 0
// repeats it along that dimension; any order, so a channels-last output can read an NCHW
// constant). Float types and kI32/kI64, as Binary.
constexpr int kMaxBroadcastRank = 6;
struct BroadcastShape {
  int rank = 0;
  int64_t dims[kMaxBroadcastRank] = {};
  int64_t a_stride[kMaxBroadcastRank] = {};
  int64_t b_stride[kMaxBroadcastRank] = {};
};
cudaError_t BinaryBroadcast(BinaryOp op, ElemType type, const void* a, const void* b,
                            const BroadcastShape& shape, void* out, cudaStream_t stream);

// out[i] = act(in[i]); float types only (computed in float). In place is allowed.
cudaError_t Unary(Activation act, ElemType type, const void* in, void* out, int64_t count,
                  cudaStream_t stream);

// Type conversion to kF32, kBF16 or kF16 (rounding to nearest even) from those or from kI32 and
// kI64 (ONNX's Cast of integers to FLOAT: an attention mask).
cudaError_t Convert(ElemType from, const void* in, ElemType to, void* out, int64_t count,
                    cudaStream_t stream);

// Copies 'bytes' bytes with a kernel (16 bytes per thread where both addresses allow). Either side
// may be page-locked host memory mapped into the device's address space: for a few KiB a kernel
// reading or writing host memory over the bus finishes well before a copy engine's transfer
// would have started (~5 us of latency per copy node in a CUDA graph on an H200).
cudaError_t CopyBytes(void* dst, const void* src, size_t bytes, cudaStream_t stream);

}  // namespace nereid::kernels::cuda
