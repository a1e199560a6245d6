#include <cfloat>
#include <cstdint>

#include "cuda/device_math.cuh"
#include "cuda/tensor_ops.h"

namespace nereid::kernels::cuda {
namespace {

constexpr int kSoftmaxThreads = 256;

// The warp's reduction of v (max or sum); every lane gets the result.
template <bool kMax>
__device__ __forceinline__ float WarpReduce(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  return v;
}

// The block's reduction of v (max or sum); every thread gets the result.
template <bool kMax>
__device__ float BlockReduce(float v, float* scratch) {
  v = WarpReduce<kMax>(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch is reused between reductions
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kSoftmaxThreads / 32 ? scratch[lane] : (kMax ? -FLT_MAX : 0.f);
  return WarpReduce<kMax>(v);
}

template <typename T>
__global__ void __launch_bounds__(kSoftmaxThreads)
    SoftmaxKernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  __shared__ float scratch[kSoftmaxThreads / 32];
  const T* row = x + blockIdx.x * n;
  T* out = y + blockIdx.x * n;
  float m = -FLT_MAX;
  for (int64_t i = threadIdx.x; i < n; i += kSoftmaxThreads) m = fmaxf(m, ToFloat(row[i]));
  m = BlockReduce<true>(m, scratch);
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += kSoftmaxThreads) sum += __expf(ToFloat(row[i]) - m);
  sum = BlockReduce<false>(sum, scratch);
  const float inv = 1.f / sum;
  for (int64_t i = threadIdx.x; i < n; i += kSoftmaxThreads)
    out[i] = FromFloat<T>(__expf(ToFloat(row[i]) - m) * inv);
}

// One block per row: the mean, then the variance around it (fp32 sums), then the affine map.
template <typename T>
__global__ void __launch_bounds__(kSoftmaxThreads)
    LayerNormKernel(const T* __restrict__ x, T* __restrict__ y, int64_t n,
                    const float* __restrict__ scale, const float* __restrict__ bias, float eps,
                    T* __restrict__ mean_out, T* __restrict__ inv_out) {
  __shared__ float scratch[kSoftmaxThreads / 32];
  const T* row = x + blockIdx.x * n;
  T* out = y + blockIdx.x * n;
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += kSoftmaxThreads) sum += ToFloat(row[i]);
  const float mean = BlockReduce<false>(sum, scratch) / static_cast<float>(n);
  float squares = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += kSoftmaxThreads) {
    const float d = ToFloat(row[i]) - mean;
    squares += d * d;
  }
  const float inv = rsqrtf(BlockReduce<false>(squares, scratch) / static_cast<float>(n) + eps);
  if (threadIdx.x == 0 && mean_out != nullptr) mean_out[blockIdx.x] = FromFloat<T>(mean);
  if (threadIdx.x == 0 && inv_out != nullptr) inv_out[blockIdx.x] = FromFloat<T>(inv);
  for (int64_t i = threadIdx.x; i < n; i += kSoftmaxThreads) {
    float v = (ToFloat(row[i]) - mean) * inv;
    if (scale != nullptr) v *= scale[i];
    if (bias != nullptr) v += bias[i];
    out[i] = FromFloat<T>(v);
  }
}

// Rows of up to 32 x kPer vectors of 16 bytes (BERT's 768 bf16 values: 96 vectors, 3 a lane):
// a warp per row, the row held in registers, so it is read from memory once (the block-per-row
// kernel above reads it three times, 2 bytes a load, and waits on two block-wide reductions).
// Statistics as above: the mean, then the squares around it, in fp32.
constexpr int kRowWarps = 4;

// kSum: x is the sum a GEMM's epilogue would have written, made here from its fp32 accumulators
// 'acc', the GEMM's bias 'sum_bias' (or null) and 'x' as the residual, rounded to T as the
// epilogue rounds it (LayerNormOfSum).
template <typename T, int kPer, bool kSum = false>
__global__ void __launch_bounds__(kRowWarps * 32)
    LayerNormRowsKernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int n,
                        const float* __restrict__ scale, const float* __restrict__ bias, float eps,
                        T* __restrict__ mean_out, T* __restrict__ inv_out,
                        const float* __restrict__ acc, const float* __restrict__ sum_bias) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32, vectors = n / kVec;
  const uint4* in = reinterpret_cast<const uint4*>(x + row * n);
  float v[kPer][kVec];
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int c = lane + 32 * j;
    uint4 raw = make_uint4(0, 0, 0, 0);
    float4 a[kVec / 4];
#pragma unroll
    for (int q = 0; q < kVec / 4; ++q) a[q] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (c < vectors) {
      raw = in[c];
      if constexpr (kSum) {
        const float4* pa = reinterpret_cast<const float4*>(acc + row * n) + c * (kVec / 4);
#pragma unroll
        for (int q = 0; q < kVec / 4; ++q) a[q] = pa[q];
      }
    }
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      v[j][k] = ToFloat(e[k]);
      if constexpr (kSum) {
        float t = reinterpret_cast<const float*>(a)[k];
        if (sum_bias != nullptr && c < vectors) t += sum_bias[c * kVec + k];
        v[j][k] = ToFloat(FromFloat<T>(t + v[j][k]));
      }
      sum += v[j][k];
    }
  }
  const float mean = WarpReduce<false>(sum) / static_cast<float>(n);
  float squares = 0.f;
#pragma unroll
  for (int j = 0; j < kPer; ++j)
    if (lane + 32 * j < vectors)
#pragma unroll
      for (int k = 0; k < kVec; ++k) squares += (v[j][k] - mean) * (v[j][k] - mean);
  const float inv = rsqrtf(WarpReduce<false>(squares) / static_cast<float>(n) + eps);
  if (lane == 0 && mean_out != nullptr) mean_out[row] = FromFloat<T>(mean);
  if (lane == 0 && inv_out != nullptr) inv_out[row] = FromFloat<T>(inv);
  uint4* out = reinterpret_cast<uint4*>(y + row * n);
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int c = lane + 32 * j;
    if (c >= vectors) continue;
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      float t = (v[j][k] - mean) * inv;
      if (scale != nullptr) t *= scale[c * kVec + k];
      if (bias != nullptr) t += bias[c * kVec + k];
      e[k] = FromFloat<T>(t);
    }
    out[c] = raw;
  }
}

// C[b] = A[b] B[b] in 16 x 16 tiles through shared memory, fp32 sums; grid.z strides the batch.
constexpr int kMatMulTile = 16;

template <typename T>
__global__ void BatchedMatMulKernel(const T* __restrict__ a, const T* __restrict__ b,
                                    T* __restrict__ c, int64_t batch, int64_t m, int64_t n,
                                    int64_t k) {
  __shared__ float as[kMatMulTile][kMatMulTile + 1], bs[kMatMulTile][kMatMulTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = static_cast<int64_t>(blockIdx.y) * kMatMulTile + ty;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kMatMulTile + tx;
  for (int64_t item = blockIdx.z; item < batch; item += gridDim.z) {
    const T* pa = a + item * m * k;
    const T* pb = b + item * k * n;
    float acc = 0.f;
    for (int64_t t = 0; t < k; t += kMatMulTile) {
      as[ty][tx] = row < m && t + tx < k ? ToFloat(pa[row * k + t + tx]) : 0.f;
      bs[ty][tx] = t + ty < k && col < n ? ToFloat(pb[(t + ty) * n + col]) : 0.f;
      __syncthreads();
#pragma unroll
      for (int q = 0; q < kMatMulTile; ++q) acc += as[ty][q] * bs[q][tx];
      __syncthreads();
    }
    if (row < m && col < n) c[item * m * n + row * n + col] = FromFloat<T>(acc);
  }
}

template <typename T>
__global__ void LrnKernel(const T* __restrict__ x, T* __restrict__ y, int64_t count, int64_t c,
                          int64_t before, int64_t after, float alpha_over_size, float beta,
                          float bias) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    const int64_t ch = i % c, base = i - ch;
    const int64_t lo = ch - before < 0 ? 0 : ch - before;
    const int64_t hi = ch + after >= c ? c - 1 : ch + after;
    float sum = 0.f;
    for (int64_t k = lo; k <= hi; ++k) {
      const float v = ToFloat(x[base + k]);
      sum += v * v;
    }
    y[i] = FromFloat<T>(ToFloat(x[i]) * __powf(bias + alpha_over_size * sum, -beta));
  }
}

struct TransposeArgs {
  int rank;
  int64_t out_dims[kMaxTransposeRank];
  int64_t in_stride[kMaxTransposeRank];  // x's stride of y's dimension d
};

template <typename T>
__global__ void TransposeKernel(const T* __restrict__ x, T* __restrict__ y, TransposeArgs a,
                                int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    int64_t rest = i, from = 0;
    for (int d = a.rank - 1; d >= 0; --d) {
      from += rest % a.out_dims[d] * a.in_stride[d];
      rest /= a.out_dims[d];
    }
    y[i] = x[from];
  }
}

template <typename T>
__global__ void ResizeKernel(const T* __restrict__ x, int64_t h, int64_t w, int64_t c,
                             const ResizeTap* __restrict__ ty, int64_t oh,
                             const ResizeTap* __restrict__ tx, int64_t ow, T* __restrict__ y,
                             int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    const int64_t ch = i % c, ox = i / c % ow, oy = i / (c * ow) % oh, b = i / (c * ow * oh);
    const ResizeTap a = ty[oy], t = tx[ox];
    const T* image = x + b * h * w * c + ch;
    const T* r0 = image + a.i0 * w * c;
    const T* r1 = image + a.i1 * w * c;
    // Taps that both read one pixel (every pixel in the nearest modes): a copy of it, as the CPU
    // op does (the blend would turn an infinity into NaN: inf + (inf - inf) * 0).
    if (a.i0 == a.i1 && a.f == 0.f && t.i0 == t.i1 && t.f == 0.f) {
      y[i] = r0[t.i0 * c];
      continue;
    }
    const float p00 = ToFloat(r0[t.i0 * c]), p01 = ToFloat(r0[t.i1 * c]);
    const float p10 = ToFloat(r1[t.i0 * c]), p11 = ToFloat(r1[t.i1 * c]);
    const float top = p00 + (p01 - p00) * t.f, bottom = p10 + (p11 - p10) * t.f;
    y[i] = FromFloat<T>(top + (bottom - top) * a.f);
  }
}

template <typename T>
__global__ void ConvTransposeKernel(Conv2dGeometry g, const T* __restrict__ x,
                                    const T* __restrict__ w, const float* __restrict__ bias,
                                    T* __restrict__ y, int64_t count) {
  const int64_t cig = g.c_in / g.groups, cog = g.c_out / g.groups;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    const int64_t co = i % g.c_out, ox = i / g.c_out % g.ow, oy = i / (g.c_out * g.ow) % g.oh,
                  b = i / (g.c_out * g.ow * g.oh);
    const int64_t grp = co / cog, cg = co % cog;
    float acc = bias != nullptr ? bias[co] : 0.f;
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      const int64_t ty = oy + g.pad_top - ky * g.dilation_h;
      if (ty < 0 || ty % g.stride_h != 0 || ty / g.stride_h >= g.h) continue;
      const int64_t iy = ty / g.stride_h;
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        const int64_t tx = ox + g.pad_left - kx * g.dilation_w;
        if (tx < 0 || tx % g.stride_w != 0 || tx / g.stride_w >= g.w) continue;
        const int64_t ix = tx / g.stride_w;
        const T* px = x + ((b * g.h + iy) * g.w + ix) * g.c_in + grp * cig;
        const T* pw = w + ((ky * g.kw + kx) * g.c_in + grp * cig) * cog + cg;
        for (int64_t ci = 0; ci < cig; ++ci) acc += ToFloat(px[ci]) * ToFloat(pw[ci * cog]);
      }
    }
    y[i] = FromFloat<T>(acc);
  }
}

}  // namespace

cudaError_t Softmax(ElemType type, const void* x, void* y, int64_t rows, int64_t n,
                    cudaStream_t stream) {
  if (rows < 0 || n < 1 || rows > 0x7fffffff) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  return WithFloatType(type, [&](auto t) {
    using T = decltype(t);
    SoftmaxKernel<T><<<static_cast<unsigned>(rows), kSoftmaxThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), n);
  });
}

cudaError_t LrnNhwc(ElemType type, const void* x, void* y, int64_t pixels, int64_t c, int64_t size,
                    float alpha, float beta, float bias, cudaStream_t stream) {
  if (pixels < 0 || c < 1 || size < 1) return cudaErrorInvalidValue;
  const int64_t count = pixels * c;
  if (count == 0) return cudaSuccess;
  return WithFloatType(type, [&](auto t) {
    using T = decltype(t);
    LrnKernel<T><<<GridFor(count), 256, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                     count, c, (size - 1) / 2, size / 2,
                                                     alpha / static_cast<float>(size), beta, bias);
  });
}

namespace {

// The 16-byte vectors a lane of LayerNormRowsKernel takes for rows of n values of 'elem_size'
// bytes (1 to 4, or 8), or 0 where the rows are not whole vectors or need more than 8 a lane.
int64_t RowVectorsPerLane(int64_t n, int64_t elem_size) {
  const int64_t vec = 16 / elem_size, per = (n / vec + 31) / 32;
  return n >= 1 && n % vec == 0 && per <= 8 ? per : 0;
}

// LayerNormRowsKernel<T, per, kSum> over 'rows' rows, a warp each ('per' from RowVectorsPerLane).
template <typename T, bool kSum>
void LaunchLayerNormRows(int64_t per, const T* x, T* y, int64_t rows, int64_t n, const float* scale,
                         const float* bias, float eps, T* mean, T* inv_std, const float* acc,
                         const float* sum_bias, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((rows + kRowWarps - 1) / kRowWarps);
  const auto launch = [&](auto kernel) {
    kernel<<<blocks, kRowWarps * 32, 0, stream>>>(x, y, rows, static_cast<int>(n), scale, bias, eps,
                                                  mean, inv_std, acc, sum_bias);
  };
  if (per <= 1) return launch(LayerNormRowsKernel<T, 1, kSum>);
  if (per <= 2) return launch(LayerNormRowsKernel<T, 2, kSum>);
  if (per <= 3) return launch(LayerNormRowsKernel<T, 3, kSum>);
  if (per <= 4) return launch(LayerNormRowsKernel<T, 4, kSum>);
  return launch(LayerNormRowsKernel<T, 8, kSum>);
}

}  // namespace

cudaError_t LayerNorm(ElemType type, const void* x, void* y, int64_t rows, int64_t n,
                      const float* scale, const float* bias, float eps, void* mean, void* inv_std,
                      cudaStream_t stream) {
  if (rows < 0 || n < 1 || rows > 0x7fffffff || !(eps >= 0.f)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  return WithFloatType(type, [&](auto t) {
    using T = decltype(t);
    // Rows of whole 16-byte vectors, 16-byte aligned, at most 8 a lane: a warp each.
    const int64_t per = RowVectorsPerLane(n, sizeof(T));
    const bool aligned =
        reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
    if (per > 0 && aligned)
      return LaunchLayerNormRows<T, false>(per, static_cast<const T*>(x), static_cast<T*>(y), rows,
                                           n, scale, bias, eps, static_cast<T*>(mean),
                                           static_cast<T*>(inv_std), nullptr, nullptr, stream);
    LayerNormKernel<T><<<static_cast<unsigned>(rows), kSoftmaxThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), n, scale, bias, eps, static_cast<T*>(mean),
        static_cast<T*>(inv_std));
  });
}

bool LayerNormOfSumSupported(ElemType type, int64_t n) {
  return (type == ElemType::kF32 || type == ElemType::kBF16 || type == ElemType::kF16) &&
         RowVectorsPerLane(n, static_cast<int64_t>(ElemSize(type))) > 0;
}

cudaError_t LayerNormOfSum(ElemType type, const float* acc, const float* sum_bias,
                           const void* residual, void* y, int64_t rows, int64_t n,
                           const float* scale, const float* bias, float eps, cudaStream_t stream) {
  if (rows < 0 || rows > 0x7fffffff || !(eps >= 0.f) || !LayerNormOfSumSupported(type, n) ||
      acc == nullptr || residual == nullptr)
    return cudaErrorInvalidValue;
  for (const void* p : {static_cast<const void*>(acc), residual, static_cast<const void*>(y)})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  return WithFloatType(type, [&](auto t) {
    using T = decltype(t);
    LaunchLayerNormRows<T, true>(RowVectorsPerLane(n, sizeof(T)), static_cast<const T*>(residual),
                                 static_cast<T*>(y), rows, n, scale, bias, eps, nullptr, nullptr,
                                 acc, sum_bias, stream);
  });
}

cudaError_t BatchedMatMul(ElemType type, const void* a, const void* b, void* c, int64_t batch,
                          int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (batch < 0 || m < 0 || n < 0 || k < 0) return cudaErrorInvalidValue;
  if (batch == 0 || m == 0 || n == 0) return cudaSuccess;
  const int64_t tiles_x = (n + kMatMulTile - 1) / kMatMulTile;
  const int64_t tiles_y = (m + kMatMulTile - 1) / kMatMulTile;
  if (tiles_x > 0x7fffffff || tiles_y > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(tiles_x), static_cast<unsigned>(tiles_y),
                  static_cast<unsigned>(batch < 65535 ? batch : 65535));
  return WithFloatType(type, [&](auto t) {
    using T = decltype(t);
    BatchedMatMulKernel<T><<<grid, dim3(kMatMulTile, kMatMulTile), 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(c), batch, m, n, k);
  });
}

cudaError_t Transpose(size_t elem_bytes, const void* x, void* y, int rank, const int64_t* dims,
                      const int* perm, cudaStream_t stream) {
  if (rank < 1 || rank > kMaxTransposeRank) return cudaErrorInvalidValue;
  int64_t stride[kMaxTransposeRank], out_dims[kMaxTransposeRank], in_stride[kMaxTransposeRank];
  int64_t count = 1;
  bool seen[kMaxTransposeRank] = {};
  for (int d = rank - 1; d >= 0; --d) {
    if (dims[d] < 0) return cudaErrorInvalidValue;
    stride[d] = count;
    count *= dims[d];
  }
  for (int d = 0; d < rank; ++d) {
    if (perm[d] < 0 || perm[d] >= rank || seen[perm[d]]) return cudaErrorInvalidValue;
    seen[perm[d]] = true;
    out_dims[d] = dims[perm[d]];
    in_stride[d] = stride[perm[d]];
  }
  return StridedCopy(elem_bytes, x, y, rank, out_dims, in_stride, stream);
}

cudaError_t StridedCopy(size_t elem_bytes, const void* x, void* y, int rank,
                        const int64_t* out_dims, const int64_t* in_strides, cudaStream_t stream) {
  if (rank < 1 || rank > kMaxTransposeRank) return cudaErrorInvalidValue;
  TransposeArgs a{};
  a.rank = rank;
  int64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    if (out_dims[d] < 0 || in_strides[d] < 0) return cudaErrorInvalidValue;
    a.out_dims[d] = out_dims[d];
    a.in_stride[d] = in_strides[d];
    count *= out_dims[d];
  }
  if (count == 0) return cudaSuccess;
  auto launch = [&](auto t) {
    using T = decltype(t);
    TransposeKernel<T><<<GridFor(count), 256, 0, stream>>>(static_cast<const T*>(x),
                                                           static_cast<T*>(y), a, count);
    return cudaGetLastError();
  };
  switch (elem_bytes) {
    case 1:
      return launch(uint8_t{});
    case 2:
      return launch(uint16_t{});
    case 4:
      return launch(uint32_t{});
    case 8:
      return launch(uint64_t{});
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t ResizeNhwc(ElemType type, const void* x, int64_t n, int64_t h, int64_t w, int64_t c,
                       const ResizeTap* taps_y, int64_t oh, const ResizeTap* taps_x, int64_t ow,
                       void* y, cudaStream_t stream) {
  if (n < 0 || h < 1 || w < 1 || c < 1 || oh < 0 || ow < 0) return cudaErrorInvalidValue;
  const int64_t count = n * oh * ow * c;
  if (count == 0) return cudaSuccess;
  return WithFloatType(type, [&](auto t) {
    using T = decltype(t);
    ResizeKernel<T><<<GridFor(count), 256, 0, stream>>>(static_cast<const T*>(x), h, w, c, taps_y,
                                                        oh, taps_x, ow, static_cast<T*>(y), count);
  });
}

cudaError_t ConvTransposeNhwc(ElemType type, const Conv2dGeometry& g, const void* x, const void* w,
                              const float* bias, void* y, cudaStream_t stream) {
  if (g.n < 0 || g.groups < 1 || g.c_in % g.groups != 0 || g.c_out % g.groups != 0 ||
      g.stride_h < 1 || g.stride_w < 1 || g.dilation_h < 1 || g.dilation_w < 1)
    return cudaErrorInvalidValue;
  const int64_t count = g.n * g.oh * g.ow * g.c_out;
  if (count == 0) return cudaSuccess;
  return WithFloatType(type, [&](auto t) {
    using T = decltype(t);
    ConvTransposeKernel<T><<<GridFor(count, 1), 256, 0, stream>>>(
        g, static_cast<const T*>(x), static_cast<const T*>(w), bias, static_cast<T*>(y), count);
  });
}

void ConvTransposeWeights(const Conv2dGeometry& g, const float* onnx, float* out) {
  const int64_t cog = g.c_out / g.groups;
  for (int64_t ci = 0; ci < g.c_in; ++ci)
    for (int64_t co = 0; co < cog; ++co)
      for (int64_t ky = 0; ky < g.kh; ++ky)
        for (int64_t kx = 0; kx < g.kw; ++kx)
          out[((ky * g.kw + kx) * g.c_in + ci) * cog + co] =
              onnx[((ci * cog + co) * g.kh + ky) * g.kw + kx];
}

namespace {

// One thread per output element, a row's elements side by side (coalesced reads of the table's
// row and writes of y's).
template <typename T, typename I>
__global__ void GatherRowsKernel(const T* __restrict__ table, int64_t table_rows, int64_t width,
                                 const I* __restrict__ indices, int64_t count, T* __restrict__ y) {
  const int64_t total = count * width;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / width, col = e - i * width;
    int64_t row = static_cast<int64_t>(indices[i]);
    if (row < 0) row += table_rows;
    y[e] = row >= 0 && row < table_rows ? table[row * width + col] : T{};
  }
}

}  // namespace

cudaError_t GatherRows(ElemType type, const void* table, int64_t table_rows, int64_t width,
                       ElemType index_type, const void* indices, int64_t count, void* y,
                       cudaStream_t stream) {
  if (table_rows < 1 || width < 1 || count < 0 ||
      (index_type != ElemType::kI32 && index_type != ElemType::kI64))
    return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  return WithFloatType(type, [&](auto t) {
    using T = decltype(t);
    const unsigned grid = GridFor(count * width);
    if (index_type == ElemType::kI64)
      GatherRowsKernel<<<grid, 256, 0, stream>>>(static_cast<const T*>(table), table_rows, width,
                                                 static_cast<const int64_t*>(indices), count,
                                                 static_cast<T*>(y));
    else
      GatherRowsKernel<<<grid, 256, 0, stream>>>(static_cast<const T*>(table), table_rows, width,
                                                 static_cast<const int32_t*>(indices), count,
                                                 static_cast<T*>(y));
  });
}

}  // namespace nereid::kernels::cuda
