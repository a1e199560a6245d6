#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/device_math.cuh"
#include "cuda/gemm_int8.h"

namespace nereid::kernels::cuda {
namespace {

constexpr int kQuantizeThreads = 256;

// A row holding NaN gets a NaN scale (its products then NaN, as on the CPU; a NaN's bits order
// above every number's for atomicMax). Its bytes are 0 where NaN.
template <typename T>
__global__ __launch_bounds__(kQuantizeThreads) void QuantizeRowsKernel(const T* __restrict__ in,
                                                                       int64_t k,
                                                                       int8_t* __restrict__ q,
                                                                       float* __restrict__ scale) {
  const T* row = in + blockIdx.x * k;
  float absmax = 0.f;
  for (int64_t i = threadIdx.x; i < k; i += kQuantizeThreads)
    absmax = MaxKeepingNaN(absmax, fabsf(ToFloat(row[i])));
  __shared__ float warp_max[kQuantizeThreads / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) absmax = MaxKeepingNaN(absmax, __shfl_xor_sync(~0u, absmax, o));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = absmax;
  __syncthreads();
  absmax = 0.f;
#pragma unroll
  for (int w = 0; w < kQuantizeThreads / 32; ++w) absmax = MaxKeepingNaN(absmax, warp_max[w]);
  // Exactly the host's arithmetic (IEEE division and product, rounding half to even), so a
  // quantized row is the same bits wherever it was made.
  const float inv = absmax > 0.f ? 127.f / absmax : 0.f;
  if (threadIdx.x == 0) scale[blockIdx.x] = absmax / 127.f;
  int8_t* out = q + blockIdx.x * k;
  for (int64_t i = threadIdx.x; i < k; i += kQuantizeThreads)
    out[i] = static_cast<int8_t>(max(-127, min(127, __float2int_rn(ToFloat(row[i]) * inv))));
}

// Short rows (a pixel's or a token's channels: k a multiple of 8, at most kShortRowMax) a group of
// G lanes each, 8 values per lane and load (16 bytes of bf16/fp16), so that a block holds
// 256 / G rows instead of one row per block leaving most of its threads idle; the row's second
// pass reads it again from L1. The same arithmetic as QuantizeRowsKernel, so the same bits.
constexpr int64_t kShortRowMax = 4096;

template <typename T>
__device__ __forceinline__ void Load8(const T* p, float (&v)[8]) {
  if constexpr (std::is_same_v<T, float>) {
    const float4 a = *reinterpret_cast<const float4*>(p),
                 b = *reinterpret_cast<const float4*>(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = ToFloat(e[j]);
  }
}

template <typename T, int G>
__global__ __launch_bounds__(kQuantizeThreads) void QuantizeShortRowsKernel(
    const T* __restrict__ in, int64_t rows, int k, int8_t* __restrict__ q,
    float* __restrict__ scale) {
  const int lane = static_cast<int>(threadIdx.x % G);
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * kQuantizeThreads + threadIdx.x) / G;
  const bool live = row < rows;  // (every lane takes part in the shuffles below)
  const T* src = in + (live ? row : 0) * k;
  float absmax = 0.f, v[8];
  if (live)
    for (int i = lane * 8; i < k; i += G * 8) {
      Load8(src + i, v);
#pragma unroll
      for (int j = 0; j < 8; ++j) absmax = MaxKeepingNaN(absmax, fabsf(v[j]));
    }
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1)
    absmax = MaxKeepingNaN(absmax, __shfl_xor_sync(~0u, absmax, o));
  if (!live) return;
  const float inv = absmax > 0.f ? 127.f / absmax : 0.f;
  if (lane == 0) scale[row] = absmax / 127.f;
  int8_t* out = q + row * k;
  for (int i = lane * 8; i < k; i += G * 8) {
    Load8(src + i, v);
    alignas(8) int8_t packed[8];
#pragma unroll
    for (int j = 0; j < 8; ++j)
      packed[j] = static_cast<int8_t>(max(-127, min(127, __float2int_rn(v[j] * inv))));
    *reinterpret_cast<uint2*>(out + i) = *reinterpret_cast<const uint2*>(packed);
  }
}

template <typename T>
cudaError_t LaunchShortRows(const T* in, int64_t rows, int64_t k, int8_t* q, float* scale,
                            cudaStream_t stream) {
  // Lanes per row: as many as the row has 8-value pieces, up to a warp.
  const int pieces = static_cast<int>(k / 8);
  const int g = pieces >= 32 ? 32 : pieces >= 16 ? 16 : pieces >= 8 ? 8 : pieces >= 4 ? 4 : 2;
  const int64_t blocks = (rows * g + kQuantizeThreads - 1) / kQuantizeThreads;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  auto launch = [&](auto lanes) {
    QuantizeShortRowsKernel<T, decltype(lanes)::value>
        <<<static_cast<unsigned>(blocks), kQuantizeThreads, 0, stream>>>(
            in, rows, static_cast<int>(k), q, scale);
    return cudaGetLastError();
  };
  switch (g) {
    case 32:
      return launch(std::integral_constant<int, 32>{});
    case 16:
      return launch(std::integral_constant<int, 16>{});
    case 8:
      return launch(std::integral_constant<int, 8>{});
    case 4:
      return launch(std::integral_constant<int, 4>{});
    default:
      return launch(std::integral_constant<int, 2>{});
  }
}

// f(in as the pointer type of 'in_type': kF32, kBF16 or kF16), or cudaErrorInvalidValue.
template <typename F>
cudaError_t WithFloatType(ElemType in_type, const void* in, const F& f) {
  switch (in_type) {
    case ElemType::kF32:
      return f(static_cast<const float*>(in));
    case ElemType::kBF16:
      return f(static_cast<const __nv_bfloat16*>(in));
    case ElemType::kF16:
      return f(static_cast<const __half*>(in));
    default:
      return cudaErrorInvalidValue;
  }
}

// Long rows (an image per row: a convolution's input): each row split over blocks of kChunk
// elements, their largest magnitudes joined by atomicMax on the bits (non-negative floats order
// as unsigned integers), then every block quantizes its chunk with the row's: the same arithmetic
// as QuantizeRowsKernel, so the same bits.
constexpr int64_t kChunk = 8192;

template <typename T>
__global__ __launch_bounds__(kQuantizeThreads) void AbsMaxChunksKernel(
    const T* __restrict__ in, int64_t k, unsigned* __restrict__ bits) {
  const T* row = in + blockIdx.y * k;
  const int64_t end = min(k, (static_cast<int64_t>(blockIdx.x) + 1) * kChunk);
  float absmax = 0.f;
  for (int64_t i = blockIdx.x * kChunk + threadIdx.x; i < end; i += kQuantizeThreads)
    absmax = MaxKeepingNaN(absmax, fabsf(ToFloat(row[i])));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) absmax = MaxKeepingNaN(absmax, __shfl_xor_sync(~0u, absmax, o));
  if (threadIdx.x % 32 == 0) atomicMax(&bits[blockIdx.y], __float_as_uint(absmax));
}

template <typename T>
__global__ __launch_bounds__(kQuantizeThreads) void QuantizeChunksKernel(
    const T* __restrict__ in, int64_t k, const unsigned* __restrict__ bits, int8_t* __restrict__ q,
    float* __restrict__ scale) {
  const float absmax = __uint_as_float(bits[blockIdx.y]);
  const float inv = absmax > 0.f ? 127.f / absmax : 0.f;
  if (blockIdx.x == 0 && threadIdx.x == 0) scale[blockIdx.y] = absmax / 127.f;
  const T* row = in + blockIdx.y * k;
  int8_t* out = q + blockIdx.y * k;
  const int64_t end = min(k, (static_cast<int64_t>(blockIdx.x) + 1) * kChunk);
  for (int64_t i = blockIdx.x * kChunk + threadIdx.x; i < end; i += kQuantizeThreads)
    out[i] = static_cast<int8_t>(max(-127, min(127, __float2int_rn(ToFloat(row[i]) * inv))));
}

constexpr int kSmallThreads = 256;  // 8 warps splitting k

__device__ __forceinline__ int Dot16(const uint4& a, const uint4& b, int acc) {
  acc = __dp4a(static_cast<int>(a.x), static_cast<int>(b.x), acc);
  acc = __dp4a(static_cast<int>(a.y), static_cast<int>(b.y), acc);
  acc = __dp4a(static_cast<int>(a.z), static_cast<int>(b.z), acc);
  return __dp4a(static_cast<int>(a.w), static_cast<int>(b.w), acc);
}

// Rows of w per block for M rows of x: few rows of x take 8 (twice the loads in flight per
// thread), more take 4 (registers: kWRows x M accumulators per thread).
constexpr int WRowsFor(int m) { return m <= 4 ? 8 : 4; }

// Block b: rows kWRows * b .. of w (columns of y) against every row of x (M >= m, a power of 2).
template <int M, typename OutT, int kWRows = WRowsFor(M)>
__global__ __launch_bounds__(kSmallThreads) void SmallMInt8Kernel(
    const int8_t* __restrict__ x, const float* __restrict__ x_scale, const int8_t* __restrict__ w,
    const float* __restrict__ w_scale, int m, int n, int k, float alpha,
    const float* __restrict__ bias, Activation act, const OutT* __restrict__ residual,
    OutT* __restrict__ y) {
  const int j0 = blockIdx.x * kWRows;
  int acc[kWRows][M];
#pragma unroll
  for (int r = 0; r < kWRows; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) acc[r][i] = 0;
  const int chunks = k / 16;
  for (int c = threadIdx.x; c < chunks; c += kSmallThreads) {
    uint4 wv[kWRows];
#pragma unroll
    for (int r = 0; r < kWRows; ++r)
      wv[r] = j0 + r < n ? LoadStream(w + static_cast<int64_t>(j0 + r) * k + c * 16)
                         : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < M; ++i) {
      if (i >= m) break;
      const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + static_cast<int64_t>(i) * k) + c);
#pragma unroll
      for (int r = 0; r < kWRows; ++r) acc[r][i] = Dot16(wv[r], xv, acc[r][i]);
    }
  }
  // Each warp's sums, then the 8 warps' in shared memory, in a fixed order (deterministic).
  __shared__ int partial[kSmallThreads / 32][kWRows * M];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < kWRows; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) {
      int v = acc[r][i];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
      if (lane == 0) partial[warp][r * M + i] = v;
    }
  __syncthreads();
  for (int t = threadIdx.x; t < kWRows * M; t += kSmallThreads) {
    const int r = t / M, i = t % M, j = j0 + r;
    if (i >= m || j >= n) continue;
    int sum = 0;
#pragma unroll
    for (int wp = 0; wp < kSmallThreads / 32; ++wp) sum += partial[wp][t];
    float v = alpha * x_scale[i] * w_scale[j] * static_cast<float>(sum);
    if (bias != nullptr) v += bias[j];
    v = ActivateAny(act, v);
    const int64_t at = static_cast<int64_t>(i) * n + j;
    if (residual != nullptr) v += ToFloat(residual[at]);
    y[at] = FromFloat<OutT>(v);
  }
}

template <int M, typename OutT>
cudaError_t LaunchSmall(const GemmProblem& p, cudaStream_t stream) {
  constexpr int kWRows = WRowsFor(M);
  const auto blocks = static_cast<unsigned>((p.n + kWRows - 1) / kWRows);
  SmallMInt8Kernel<M, OutT><<<blocks, kSmallThreads, 0, stream>>>(
      static_cast<const int8_t*>(p.x), p.x_scale, static_cast<const int8_t*>(p.w), p.w_scale,
      static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), p.alpha, p.bias, p.act,
      static_cast<const OutT*>(p.residual), static_cast<OutT*>(p.y));
  return cudaGetLastError();
}

template <typename OutT>
cudaError_t LaunchSmallOut(const GemmProblem& p, cudaStream_t stream) {
  if (p.m <= 1) return LaunchSmall<1, OutT>(p, stream);
  if (p.m <= 2) return LaunchSmall<2, OutT>(p, stream);
  if (p.m <= 4) return LaunchSmall<4, OutT>(p, stream);
  if (p.m <= 8) return LaunchSmall<8, OutT>(p, stream);
  return LaunchSmall<16, OutT>(p, stream);
}

}  // namespace

cudaError_t QuantizeRowsInt8(ElemType in_type, const void* in, int64_t rows, int64_t k, int8_t* q,
                             float* scale, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (rows < 0 || rows > 0x7fffffff || k <= 0) return cudaErrorInvalidValue;
  const bool short_rows = k % 8 == 0 && k <= kShortRowMax &&
                          reinterpret_cast<uintptr_t>(in) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(q) % 8 == 0;
  return WithFloatType(in_type, in, [&](const auto* typed) {
    if (short_rows) return LaunchShortRows(typed, rows, k, q, scale, stream);
    QuantizeRowsKernel<<<static_cast<unsigned>(rows), kQuantizeThreads, 0, stream>>>(typed, k, q,
                                                                                     scale);
    return cudaGetLastError();
  });
}

cudaError_t QuantizeLongRowsInt8(ElemType in_type, const void* in, int64_t rows, int64_t k,
                                 int8_t* q, float* scale, unsigned* absmax_bits,
                                 cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (rows < 0 || rows > 65535 || k <= 0 || absmax_bits == nullptr) return cudaErrorInvalidValue;
  const int64_t chunks = (k + kChunk - 1) / kChunk;
  if (chunks > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(rows));
  if (cudaError_t e = cudaMemsetAsync(absmax_bits, 0, rows * sizeof(unsigned), stream);
      e != cudaSuccess)
    return e;
  auto launch = [&](const auto* typed) {
    AbsMaxChunksKernel<<<grid, kQuantizeThreads, 0, stream>>>(typed, k, absmax_bits);
    QuantizeChunksKernel<<<grid, kQuantizeThreads, 0, stream>>>(typed, k, absmax_bits, q, scale);
    return cudaGetLastError();
  };
  return WithFloatType(in_type, in, launch);
}

bool SmallMInt8Supported(const GemmProblem& p) {
  constexpr int64_t kMax = int64_t{1} << 30;
  const bool out_ok =
      p.out_type == ElemType::kF32 || p.out_type == ElemType::kBF16 || p.out_type == ElemType::kF16;
  return p.ab_type == ElemType::kI8 && p.x_scale != nullptr && p.w_scale != nullptr && out_ok &&
         !Sm90Only(p) && p.m >= 1 && p.m <= kSmallMInt8Max && p.n >= 1 && p.n < kMax && p.k >= 16 &&
         p.k < kMax && p.k % 16 == 0 && Aligned16(p.x) && Aligned16(p.w);
}

cudaError_t GemmSmallMInt8(const GemmProblem& p, cudaStream_t stream) {
  if (!SmallMInt8Supported(p)) return cudaErrorInvalidValue;
  switch (p.out_type) {
    case ElemType::kBF16:
      return LaunchSmallOut<__nv_bfloat16>(p, stream);
    case ElemType::kF16:
      return LaunchSmallOut<__half>(p, stream);
    default:
      return LaunchSmallOut<float>(p, stream);
  }
}

}  // namespace nereid::kernels::cuda
