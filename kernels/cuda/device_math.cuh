// Device-side helpers shared by the .cu files of kernels/cuda: loads and stores of each element
// type as float, and the activations.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common.h"

namespace nereid::kernels::cuda {

// 16 bytes from global to shared memory without registers (cp.async, L2 only); 'valid' false
// zero-fills them and reads nothing.
__device__ __forceinline__ void CopyAsync16(void* shared, const void* global, bool valid) {
  const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global),
               "r"(bytes));
}

template <typename T>
__device__ __forceinline__ float ToFloat(T v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float ToFloat(__half v) {
  return __half2float(v);
}

template <typename T>
__device__ __forceinline__ T FromFloat(float v) {
  return static_cast<T>(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half FromFloat(float v) {
  return __float2half_rn(v);
}

// 16 bytes read once (weights streamed through): no L1 allocation.
__device__ __forceinline__ uint4 LoadStream(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// max(a, b) that returns NaN where either is one (fmaxf returns the other operand), as ONNX's
// reference and the CPU kernels do: a NaN in an activation's input stays NaN in its output.
__device__ __forceinline__ float MaxKeepingNaN(float a, float b) { return b != b || b > a ? b : a; }

// v clamped to [lo, hi], NaN kept.
__device__ __forceinline__ float ClampKeepingNaN(float v, float lo, float hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

template <Activation A>
__device__ __forceinline__ float Activate(float x) {
  if constexpr (A == Activation::kRelu) return x < 0.f ? 0.f : x;  // (NaN stays NaN)
  if constexpr (A == Activation::kSigmoid) return 1.f / (1.f + __expf(-x));
  if constexpr (A == Activation::kTanh) return tanhf(x);
  if constexpr (A == Activation::kGelu) return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
  return x;
}

// The activation chosen at run time (epilogues: applied once per output, so a switch costs nothing
// and saves a kernel instantiation per activation).
__device__ __forceinline__ float ActivateAny(Activation a, float x) {
  switch (a) {
    case Activation::kRelu:
      return Activate<Activation::kRelu>(x);
    case Activation::kSigmoid:
      return Activate<Activation::kSigmoid>(x);
    case Activation::kTanh:
      return Activate<Activation::kTanh>(x);
    case Activation::kGelu:
      return Activate<Activation::kGelu>(x);
    default:
      return x;
  }
}

// Calls f with a value of the CUDA element type for 'type' (float types only), then
// the launch's error; cudaErrorInvalidValue for other types.
template <typename F>
inline cudaError_t WithFloatType(ElemType type, F&& f) {
  switch (type) {
    case ElemType::kF32:
      f(float{});
      break;
    case ElemType::kBF16:
      f(__nv_bfloat16{});
      break;
    case ElemType::kF16:
      f(__half{});
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

// The tensor cores' mma.sync (conv.cu's implicit GEMM, attention.cu): c += a b, a 16 x k and
// b k x 8 fragments in registers as PTX lays them out, k 16 bf16/fp16 or 32 int8 values.
template <typename T, typename Acc>
__device__ __forceinline__ void MmaStep(Acc (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  if constexpr (std::is_same_v<T, int8_t>) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

}  // namespace nereid::kernels::cuda

// Expands F with each activation as a compile-time constant: DISPATCH_ACTIVATION(act, F) calls
// F(std::integral_constant<Activation, act>).
#define NEREID_DISPATCH_ACTIVATION(act, F)                           \
  switch (act) {                                                     \
    case Activation::kRelu:                                          \
      F(std::integral_constant<Activation, Activation::kRelu>{});    \
      break;                                                         \
    case Activation::kSigmoid:                                       \
      F(std::integral_constant<Activation, Activation::kSigmoid>{}); \
      break;                                                         \
    case Activation::kTanh:                                          \
      F(std::integral_constant<Activation, Activation::kTanh>{});    \
      break;                                                         \
    case Activation::kGelu:                                          \
      F(std::integral_constant<Activation, Activation::kGelu>{});    \
      break;                                                         \
    default:                                                         \
      F(std::integral_constant<Activation, Activation::kNone>{});    \
      break;                                                         \
  }
