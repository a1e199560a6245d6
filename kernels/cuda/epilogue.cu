#include <type_traits>

#include "cuda/device_math.cuh"
#include "cuda/epilogue.h"

namespace nereid::kernels::cuda {
namespace {

template <typename OutT, Activation A>
__global__ void BiasActivationKernel(const float* acc, int splits, float alpha, int64_t rows,
                                     int64_t cols, const float* __restrict__ bias,
                                     const OutT* residual, bool residual_first, OutT* out) {
  const int64_t count = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    float v = acc[i];
    for (int s = 1; s < splits; ++s) v += acc[s * count + i];
    v *= alpha;
    if (bias != nullptr) v += bias[i % cols];
    if (residual != nullptr && residual_first) v += ToFloat(residual[i]);
    v = Activate<A>(v);
    if (residual != nullptr && !residual_first) v += ToFloat(residual[i]);
    out[i] = FromFloat<OutT>(v);
  }
}

template <typename OutT>
void Launch(const float* acc, int splits, float alpha, int64_t rows, int64_t cols,
            const float* bias, Activation act, const void* residual, bool residual_first, void* out,
            cudaStream_t stream) {
  auto launch = [&](auto a) {
    BiasActivationKernel<OutT, decltype(a)::value><<<GridFor(rows * cols), 256, 0, stream>>>(
        acc, splits, alpha, rows, cols, bias, static_cast<const OutT*>(residual), residual_first,
        static_cast<OutT*>(out));
  };
  NEREID_DISPATCH_ACTIVATION(act, launch);
}

}  // namespace

cudaError_t SplitEpilogue(const float* acc, int splits, float alpha, int64_t rows, int64_t cols,
                          const float* bias, Activation act, const void* residual,
                          ElemType out_type, void* out, cudaStream_t stream, bool residual_first) {
  if (rows * cols == 0) return cudaSuccess;
  if (splits < 1) return cudaErrorInvalidValue;
  switch (out_type) {
    case ElemType::kF32:
      Launch<float>(acc, splits, alpha, rows, cols, bias, act, residual, residual_first, out,
                    stream);
      break;
    case ElemType::kBF16:
      Launch<__nv_bfloat16>(acc, splits, alpha, rows, cols, bias, act, residual, residual_first,
                            out, stream);
      break;
    case ElemType::kF16:
      Launch<__half>(acc, splits, alpha, rows, cols, bias, act, residual, residual_first, out,
                     stream);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t BiasActivation(const float* acc, int64_t rows, int64_t cols, const float* bias,
                           Activation act, const void* residual, ElemType out_type, void* out,
                           cudaStream_t stream, bool residual_first) {
  return SplitEpilogue(acc, 1, 1.f, rows, cols, bias, act, residual, out_type, out, stream,
                       residual_first);
}

}  // namespace nereid::kernels::cuda
