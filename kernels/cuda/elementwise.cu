#include <type_traits>

#include "cuda/device_math.cuh"
#include "cuda/elementwise.h"

namespace nereid::kernels::cuda {

size_t ElemSize(ElemType t) {
  switch (t) {
    case ElemType::kF32:
      return 4;
    case ElemType::kBF16:
      return 2;
    case ElemType::kF16:
      return 2;
    case ElemType::kI32:
      return 4;
    case ElemType::kI64:
      return 8;
    case ElemType::kI8:
      return 1;
  }
  return 0;
}

const char* ElemTypeName(ElemType t) {
  switch (t) {
    case ElemType::kF32:
      return "fp32";
    case ElemType::kBF16:
      return "bf16";
    case ElemType::kF16:
      return "fp16";
    case ElemType::kI32:
      return "int32";
    case ElemType::kI64:
      return "int64";
    case ElemType::kI8:
      return "int8";
  }
  return "?";
}

const char* ActivationName(Activation a) {
  switch (a) {
    case Activation::kNone:
      return "none";
    case Activation::kRelu:
      return "relu";
    case Activation::kSigmoid:
      return "sigmoid";
    case Activation::kTanh:
      return "tanh";
    case Activation::kGelu:
      return "gelu";
  }
  return "?";
}

namespace {

template <typename T, BinaryOp Op>
__device__ __forceinline__ T Apply(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    if constexpr (Op == BinaryOp::kAdd) return x + y;
    if constexpr (Op == BinaryOp::kSub) return x - y;
    if constexpr (Op == BinaryOp::kMul) return x * y;
    if constexpr (Op == BinaryOp::kMax) return x > y ? x : y;
    if constexpr (Op == BinaryOp::kMin) return x < y ? x : y;
    return y == 0 ? T(0) : x / y;
  } else {
    const float fx = ToFloat(x), fy = ToFloat(y);
    float r;
    if constexpr (Op == BinaryOp::kAdd)
      r = fx + fy;
    else if constexpr (Op == BinaryOp::kSub)
      r = fx - fy;
    else if constexpr (Op == BinaryOp::kMul)
      r = fx * fy;
    else if constexpr (Op == BinaryOp::kMax)  // NaN propagates, as ONNX's Max does
      r = fx != fx || fx > fy ? fx : fy;
    else if constexpr (Op == BinaryOp::kMin)
      r = fx != fx || fx < fy ? fx : fy;
    else
      r = fx / fy;
    return FromFloat<T>(r);
  }
}

template <typename T, BinaryOp Op>
__global__ void BinaryKernel(const T* __restrict__ a, int64_t a_count, const T* __restrict__ b,
                             int64_t b_count, T* __restrict__ out, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    const T x = a[a_count == count ? i : i % a_count];
    const T y = b[b_count == count ? i : i % b_count];
    out[i] = Apply<T, Op>(x, y);
  }
}

template <typename T, BinaryOp Op>
__global__ void BroadcastKernel(const T* __restrict__ a, const T* __restrict__ b,
                                T* __restrict__ out, BroadcastShape s, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    int64_t rest = i, ia = 0, ib = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int64_t coord = rest % s.dims[d];
      rest /= s.dims[d];
      ia += coord * s.a_stride[d];
      ib += coord * s.b_stride[d];
    }
    out[i] = Apply<T, Op>(a[ia], b[ib]);
  }
}

// Calls f(std::integral_constant<BinaryOp, op>).
template <typename F>
void DispatchBinary(BinaryOp op, const F& f) {
  using C = BinaryOp;
  switch (op) {
    case C::kAdd:
      return f(std::integral_constant<C, C::kAdd>{});
    case C::kSub:
      return f(std::integral_constant<C, C::kSub>{});
    case C::kMul:
      return f(std::integral_constant<C, C::kMul>{});
    case C::kDiv:
      return f(std::integral_constant<C, C::kDiv>{});
    case C::kMax:
      return f(std::integral_constant<C, C::kMax>{});
    case C::kMin:
      return f(std::integral_constant<C, C::kMin>{});
  }
}

template <typename T>
cudaError_t LaunchBinary(BinaryOp op, const void* a, int64_t a_count, const void* b,
                         int64_t b_count, void* out, int64_t count, cudaStream_t stream) {
  DispatchBinary(op, [&](auto o) {
    BinaryKernel<T, decltype(o)::value><<<GridFor(count), 256, 0, stream>>>(
        static_cast<const T*>(a), a_count, static_cast<const T*>(b), b_count, static_cast<T*>(out),
        count);
  });
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchBroadcast(BinaryOp op, const void* a, const void* b, const BroadcastShape& s,
                            void* out, int64_t count, cudaStream_t stream) {
  DispatchBinary(op, [&](auto o) {
    BroadcastKernel<T, decltype(o)::value><<<GridFor(count), 256, 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), s, count);
  });
  return cudaGetLastError();
}

// Calls f(T{}) for the element type's C++ type (float types and the integers of Binary).
template <typename F>
cudaError_t DispatchArithmetic(ElemType type, const F& f) {
  switch (type) {
    case ElemType::kF32:
      return f(float{});
    case ElemType::kBF16:
      return f(__nv_bfloat16{});
    case ElemType::kF16:
      return f(__half{});
    case ElemType::kI32:
      return f(int32_t{});
    case ElemType::kI64:
      return f(int64_t{});
    case ElemType::kI8:  // quantized GEMM operands only
      break;
  }
  return cudaErrorInvalidValue;
}

template <typename T, Activation A>
__global__ void UnaryKernel(const T* __restrict__ in, T* __restrict__ out, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride)
    out[i] = FromFloat<T>(Activate<A>(ToFloat(in[i])));
}

template <typename T>
cudaError_t LaunchUnary(Activation act, const void* in, void* out, int64_t count,
                        cudaStream_t stream) {
  auto launch = [&](auto a) {
    UnaryKernel<T, decltype(a)::value><<<GridFor(count), 256, 0, stream>>>(
        static_cast<const T*>(in), static_cast<T*>(out), count);
  };
  NEREID_DISPATCH_ACTIVATION(act, launch);
  return cudaGetLastError();
}

template <typename From, typename To>
__global__ void ConvertKernel(const From* __restrict__ in, To* __restrict__ out, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride)
    out[i] = FromFloat<To>(ToFloat(in[i]));
}

template <typename From>
cudaError_t LaunchConvert(const void* in, ElemType to, void* out, int64_t count,
                          cudaStream_t stream) {
  const auto* src = static_cast<const From*>(in);
  const unsigned grid = GridFor(count);
  switch (to) {
    case ElemType::kF32:
      ConvertKernel<<<grid, 256, 0, stream>>>(src, static_cast<float*>(out), count);
      break;
    case ElemType::kBF16:
      ConvertKernel<<<grid, 256, 0, stream>>>(src, static_cast<__nv_bfloat16*>(out), count);
      break;
    case ElemType::kF16:
      ConvertKernel<<<grid, 256, 0, stream>>>(src, static_cast<__half*>(out), count);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t Binary(BinaryOp op, ElemType type, const void* a, int64_t a_count, const void* b,
                   int64_t b_count, void* out, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (a_count <= 0 || b_count <= 0 || count % a_count != 0 || count % b_count != 0)
    return cudaErrorInvalidValue;
  return DispatchArithmetic(type, [&](auto t) {
    return LaunchBinary<decltype(t)>(op, a, a_count, b, b_count, out, count, stream);
  });
}

cudaError_t BinaryBroadcast(BinaryOp op, ElemType type, const void* a, const void* b,
                            const BroadcastShape& shape, void* out, cudaStream_t stream) {
  if (shape.rank < 1 || shape.rank > kMaxBroadcastRank) return cudaErrorInvalidValue;
  int64_t count = 1;
  for (int d = 0; d < shape.rank; ++d) {
    if (shape.dims[d] < 0) return cudaErrorInvalidValue;
    count *= shape.dims[d];
  }
  if (count == 0) return cudaSuccess;
  return DispatchArithmetic(type, [&](auto t) {
    return LaunchBroadcast<decltype(t)>(op, a, b, shape, out, count, stream);
  });
}

template <typename T>
__global__ void CopyKernel(const T* __restrict__ in, T* __restrict__ out, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride)
    out[i] = in[i];
}

cudaError_t CopyBytes(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  const auto count = static_cast<int64_t>(bytes);
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes) % 16 == 0) {
    CopyKernel<<<GridFor(count / 16), 256, 0, stream>>>(static_cast<const uint4*>(src),
                                                        static_cast<uint4*>(dst), count / 16);
  } else {
    CopyKernel<<<GridFor(count), 256, 0, stream>>>(static_cast<const uint8_t*>(src),
                                                   static_cast<uint8_t*>(dst), count);
  }
  return cudaGetLastError();
}

cudaError_t Unary(Activation act, ElemType type, const void* in, void* out, int64_t count,
                  cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (type) {
    case ElemType::kF32:
      return LaunchUnary<float>(act, in, out, count, stream);
    case ElemType::kBF16:
      return LaunchUnary<__nv_bfloat16>(act, in, out, count, stream);
    case ElemType::kF16:
      return LaunchUnary<__half>(act, in, out, count, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t Convert(ElemType from, const void* in, ElemType to, void* out, int64_t count,
                    cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (from) {
    case ElemType::kF32:
      return LaunchConvert<float>(in, to, out, count, stream);
    case ElemType::kBF16:
      return LaunchConvert<__nv_bfloat16>(in, to, out, count, stream);
    case ElemType::kF16:
      return LaunchConvert<__half>(in, to, out, count, stream);
    case ElemType::kI32:
      return LaunchConvert<int32_t>(in, to, out, count, stream);
    case ElemType::kI64:
      return LaunchConvert<int64_t>(in, to, out, count, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace nereid::kernels::cuda
