#include <cfloat>

#include "cuda/device_math.cuh"
#include "cuda/tensor_ops.h"

namespace nereid::kernels::cuda {
namespace {

constexpr int kSoftmaxThreads = 256;

// The block's reduction of v (max or sum); every thread gets the result.
template <bool kMax>
__device__ float BlockReduce(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch is reused between reductions
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kSoftmaxThreads / 32 ? scratch[lane] : (kMax ? -FLT_MAX : 0.f);
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  return v;
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

cudaError_t Transpose(size_t elem_bytes, const void* x, void* y, int rank, const int64_t* dims,
                      const int* perm, cudaStream_t stream) {
  if (rank < 1 || rank > kMaxTransposeRank) return cudaErrorInvalidValue;
  TransposeArgs a{};
  a.rank = rank;
  int64_t in_stride[kMaxTransposeRank], count = 1;
  bool seen[kMaxTransposeRank] = {};
  for (int d = rank - 1; d >= 0; --d) {
    if (dims[d] < 0) return cudaErrorInvalidValue;
    in_stride[d] = count;
    count *= dims[d];
  }
  for (int d = 0; d < rank; ++d) {
    if (perm[d] < 0 || perm[d] >= rank || seen[perm[d]]) return cudaErrorInvalidValue;
    seen[perm[d]] = true;
    a.out_dims[d] = dims[perm[d]];
    a.in_stride[d] = in_stride[perm[d]];
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

}  // namespace nereid::kernels::cuda
