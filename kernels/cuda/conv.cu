#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "cuda/conv.h"
#include "cuda/depth_cursor.h"
#include "cuda/device_math.cuh"

namespace nereid::kernels::cuda {
namespace {

__device__ __forceinline__ float ApplyConvActivation(ConvActivation act, float v, float a,
                                                     float b) {
  switch (act) {
    case ConvActivation::kRelu:  // NaN stays NaN in every one (as on the CPU)
      return v < 0.f ? 0.f : v;
    case ConvActivation::kClip:
      return ClampKeepingNaN(v, a, b);
    case ConvActivation::kLeakyRelu:
      return v >= 0.f ? v : v * a;
    case ConvActivation::kHardSigmoid:
      return ClampKeepingNaN(a * v + b, 0.f, 1.f);
    case ConvActivation::kHardSwish:
      return v * ClampKeepingNaN(v * (1.f / 6.f) + 0.5f, 0.f, 1.f);
    default:
      return v;
  }
}

// y[pixel][channel] = act(acc + bias + residual), in y's type.
template <typename T>
__device__ __forceinline__ void StoreConvOutput(const ConvProblem& p, int64_t pixel,
                                                int64_t channel, float acc) {
  if (p.bias != nullptr) acc += p.bias[channel];
  const int64_t at = pixel * p.g.c_out + channel;
  if (p.residual != nullptr) acc += ToFloat(static_cast<const T*>(p.residual)[at]);
  static_cast<T*>(p.y)[at] = FromFloat<T>(ApplyConvActivation(p.act, acc, p.act_a, p.act_b));
}

// Output pixel 'm' (n x oh x ow, row-major): its image and the top-left corner of its window in
// that image (padding included, so negative at the edges).
struct WindowOrigin {
  int64_t img, y0, x0;
};
__device__ __forceinline__ WindowOrigin OriginOf(const Conv2dGeometry& g, int64_t m) {
  const int64_t ox = m % g.ow, rest = m / g.ow;
  return {rest / g.oh, rest % g.oh * g.stride_h - g.pad_top, ox * g.stride_w - g.pad_left};
}

// ---- generic implicit GEMM (CUDA cores) ---------------------------------------------------------
// A block computes 64 pixels x 64 output channels of one group; each of its 256 threads 4 x 4.
// Tiles of 16 of the depth (ky, kx, channel) are gathered into shared memory as fp32.
constexpr int kGenericTile = 64, kGenericDepth = 16;

template <typename T>
__global__ void __launch_bounds__(256) ConvGenericKernel(ConvProblem p) {
  const Conv2dGeometry& g = p.g;
  const int64_t pixels = g.n * g.oh * g.ow;
  const int64_t cin_g = g.c_in / g.groups, cout_g = g.c_out / g.groups;
  const int64_t depth = g.kh * g.kw * cin_g;
  const int64_t group = blockIdx.z;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kGenericTile;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kGenericTile;
  __shared__ float a_tile[kGenericDepth][kGenericTile + 4];
  __shared__ float b_tile[kGenericDepth][kGenericTile + 4];
  const int tid = static_cast<int>(threadIdx.x);
  const int kk = tid % kGenericDepth, row0 = tid / kGenericDepth;  // rows row0 + 16 i
  int64_t base[4], iy0[4], ix0[4];
  bool row_ok[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t m = m0 + row0 + 16 * i;
    row_ok[i] = m < pixels;
    const WindowOrigin o = OriginOf(g, row_ok[i] ? m : 0);
    base[i] = o.img * g.h * g.w * g.c_in + group * cin_g;
    iy0[i] = o.y0, ix0[i] = o.x0;
  }
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.w) + group * cout_g * depth;
  float acc[4][4] = {};
  const int ty = tid / 16, tx = tid % 16;
  for (int64_t k0 = 0; k0 < depth; k0 += kGenericDepth) {
    const int64_t k = k0 + kk;
    const bool k_ok = k < depth;
    int64_t ky = 0, kx = 0, ci = 0;
    if (k_ok) {
      ci = k % cin_g;
      const int64_t tap = k / cin_g;
      kx = tap % g.kw, ky = tap / g.kw;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t iy = iy0[i] + ky * g.dilation_h, ix = ix0[i] + kx * g.dilation_w;
      float v = 0.f;
      if (k_ok && row_ok[i] && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
        v = ToFloat(x[base[i] + (iy * g.w + ix) * g.c_in + ci]);
      a_tile[kk][row0 + 16 * i] = v;
      const int64_t co = n0 + row0 + 16 * i;
      b_tile[kk][row0 + 16 * i] = k_ok && co < cout_g ? ToFloat(w[co * depth + k]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kGenericDepth; ++q) {
      float a[4], b[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) a[j] = a_tile[q][ty * 4 + j], b[j] = b_tile[q][tx * 4 + j];
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int l = 0; l < 4; ++l) acc[j][l] = fmaf(a[j], b[l], acc[j][l]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t m = m0 + ty * 4 + j;
    if (m >= pixels) continue;
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const int64_t co = n0 + tx * 4 + l;
      if (co < cout_g) StoreConvOutput<T>(p, m, group * cout_g + co, acc[j][l]);
    }
  }
}

// ---- depthwise ----------------------------------------------------------------------------------
// One thread per output element, channels fastest (coalesced); weights as [kh][kw][c].
template <typename T>
__global__ void ConvDepthwiseKernel(ConvProblem p) {
  const Conv2dGeometry& g = p.g;
  const int64_t c = g.c_out, total = g.n * g.oh * g.ow * c;
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.w);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ch = i % c, pixel = i / c;
    const auto [img, y0, x0] = OriginOf(g, pixel);
    float acc = 0.f;
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      const int64_t iy = y0 + ky * g.dilation_h;
      if (iy < 0 || iy >= g.h) continue;
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        const int64_t ix = x0 + kx * g.dilation_w;
        if (ix < 0 || ix >= g.w) continue;
        acc = fmaf(ToFloat(x[((img * g.h + iy) * g.w + ix) * c + ch]),
                   ToFloat(w[(ky * g.kw + kx) * c + ch]), acc);
      }
    }
    StoreConvOutput<T>(p, pixel, ch, acc);
  }
}

// ---- implicit GEMM on the tensor cores ----------------------------------------------------------
// A block computes 128 pixels x 64 output channels: 8 warps as 4 (pixels) x 2 (channels), each
// 32 x 32 as 2 x 4 mma.sync tiles (m16n8k16 on bf16/fp16, m16n8k32 on int8: 32 bytes of the depth
// either way). Per step of 64 bytes of the depth (32 bf16/fp16 channels, 64 int8 ones), each
// thread gathers two 16-byte pieces of the image (8 or 16 channels of one tap: c_in a multiple of
// that keeps a piece inside a tap) and one of the weights with cp.async, zero-filled where the
// window leaves the image, into one of three shared-memory stages (two steps load while one
// computes). Rows in shared memory are 80 bytes apart, so ldmatrix's eight row addresses fall in
// distinct banks. Int8 sums are exact in int32 and scaled once (the image's scale times the output
// channel's). Split K (blockIdx.z of 'splits'): on a GPU with thread-block clusters the splits of
// a tile are one cluster along z, each block leaving its partial sums in its own shared memory
// (over the stages, done with) and then finishing 1/splits of the tile's values from every block's
// sums, read in rank order (deterministic) through distributed shared memory: one kernel, no
// workspace. Elsewhere each split writes fp32 partials (scaled) to the workspace, which
// ConvSplitEpilogueKernel adds up and finishes.
constexpr int kTcPixels = 128, kTcChannels = 64, kTcStepBytes = 64, kTcRowBytes = 80;
constexpr int kTcStages = 3;
constexpr int kTcABytes = kTcStages * kTcPixels * kTcRowBytes;
constexpr int kTcBBytes = kTcStages * kTcChannels * kTcRowBytes;
// A cluster split's partial sums in shared memory: rows 4 floats longer than the tile, so the
// fragments' stores spread over the banks and every row stays 16-byte aligned.
constexpr int kTcPartialRow = kTcChannels + 4;
static_assert(kTcPixels * kTcPartialRow * 4 <= kTcABytes + kTcBBytes);

// T's elements per 16 bytes (one cp.async piece, one ldmatrix row).
template <typename T>
constexpr int kTcVec = 16 / static_cast<int>(sizeof(T));

__device__ __forceinline__ void CommitCopies() { asm volatile("cp.async.commit_group;\n" ::); }

__device__ __forceinline__ void LoadMatrices(uint32_t (&r)[4], const void* shared) {
  const auto at = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

// T: x's and w's storage (bf16, fp16, or int8 with p.x_scale and p.w_scale); O: y's. 'clustered':
// the splits along z are one thread-block cluster (ConvSplits).
template <typename T, typename O>
__global__ void __launch_bounds__(256)
    ConvTensorCoreKernel(ConvProblem p, int splits, bool clustered) {
  constexpr int kVec = kTcVec<T>, kStep = kTcStepBytes / sizeof(T), kRow = kTcRowBytes / sizeof(T);
  using Acc = std::conditional_t<std::is_same_v<T, int8_t>, int32_t, float>;
  const Conv2dGeometry& g = p.g;
  __shared__ __align__(16) unsigned char smem[kTcABytes + kTcBBytes];
  auto a_tile = reinterpret_cast<T(*)[kTcPixels][kRow]>(smem);
  auto b_tile = reinterpret_cast<T(*)[kTcChannels][kRow]>(smem + kTcABytes);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t pixels = g.n * g.oh * g.ow, depth = g.kh * g.kw * g.c_in;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTcPixels;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kTcChannels;
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.w);
  // What this thread loads: pixel rows tid / 4 and tid / 4 + 64, weight row tid / 4, each at
  // piece tid % 4 of the depth step.
  const int piece = tid % 4, row = tid / 4;
  int64_t base[2];
  int iy0[2], ix0[2];
  bool row_ok[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t m = m0 + row + 64 * i;
    row_ok[i] = m < pixels;
    const WindowOrigin o = OriginOf(g, row_ok[i] ? m : 0);
    base[i] = o.img * g.h * g.w * g.c_in;
    iy0[i] = static_cast<int>(o.y0), ix0[i] = static_cast<int>(o.x0);
  }
  const int64_t co_load = n0 + row;
  const bool co_ok = co_load < g.c_out;
  // This split's steps.
  const int64_t steps = (depth + kStep - 1) / kStep;
  const int64_t per_split = (steps + splits - 1) / splits;
  const int64_t first = blockIdx.z * per_split;
  const int64_t count = first < steps ? min(per_split, steps - first) : 0;
  // The thread's place in the depth, advanced one step per load: no division per step.
  DepthCursor at(first * kStep + piece * kVec, depth, g.c_in, g.kw);
  const int c_in = static_cast<int>(g.c_in), kw = static_cast<int>(g.kw);
  auto load = [&](int stage) {
    const bool k_ok = at.k < depth;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t iy = iy0[i] + static_cast<int64_t>(at.ky) * g.dilation_h;
      const int64_t ix = ix0[i] + static_cast<int64_t>(at.kx) * g.dilation_w;
      const bool ok = k_ok && row_ok[i] && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
      CopyAsync16(&a_tile[stage][row + 64 * i][piece * kVec],
                  ok ? x + base[i] + (iy * g.w + ix) * g.c_in + at.ci : x, ok);
    }
    const bool ok = k_ok && co_ok;
    CopyAsync16(&b_tile[stage][row][piece * kVec], ok ? w + co_load * depth + at.k : w, ok);
    at.Advance(kStep, c_in, kw);
  };
  const int wm = warp % 4, wn = warp / 4;
  Acc acc[2][4][4] = {};
#pragma unroll
  for (int s = 0; s < kTcStages - 1; ++s) {
    if (s < count) load(s);
    CommitCopies();  // (empty groups keep the count wait_group relies on)
  }
  for (int64_t i = 0; i < count; ++i) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kTcStages - 2));
    __syncthreads();  // step i landed for everyone, and step i - 1's stage is free again
    const int64_t next = i + kTcStages - 1;
    if (next < count) load(static_cast<int>(next % kTcStages));
    CommitCopies();
    const int stage = static_cast<int>(i % kTcStages);
#pragma unroll
    for (int ks = 0; ks < kStep; ks += 2 * kVec) {  // 32 bytes of the depth per mma
      uint32_t a[2][4], b[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
        LoadMatrices(a[mt], &a_tile[stage][wm * 32 + mt * 16 + lane % 16][ks + lane / 16 * kVec]);
#pragma unroll
      for (int np = 0; np < 2; ++np)  // two 8-channel tiles, both 16-byte halves, per x4 load
        LoadMatrices(b[np], &b_tile[stage][wn * 32 + np * 16 + lane % 8 + lane / 16 * 8]
                                   [ks + (lane / 8) % 2 * kVec]);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
          MmaStep<T>(acc[mt][nt], a[mt], b[nt / 2][(nt % 2) * 2], b[nt / 2][(nt % 2) * 2 + 1]);
    }
  }
  asm volatile("cp.async.wait_group 0;\n" ::);
  const int gid = lane / 4, tig = lane % 4;
  const int64_t image_pixels = g.oh * g.ow;
  // The accumulator of (tile row r, tile column c) as a float, int8 sums scaled.
  auto value = [&](int mt, int half, int nt, int j, int64_t m) {
    float v = static_cast<float>(acc[mt][nt][half * 2 + j]);
    if constexpr (std::is_same_v<T, int8_t>)
      v *= p.x_scale[m / image_pixels] *
           p.w_scale[min(n0 + wn * 32 + nt * 8 + tig * 2 + j, g.c_out - 1)];
    return v;
  };
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (clustered) {
    namespace cg = cooperative_groups;
    auto part = reinterpret_cast<float(*)[kTcPartialRow]>(smem);
    __syncthreads();  // every warp is done with the stages
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = wm * 32 + mt * 16 + gid + half * 8;
        const int64_t m = min(m0 + r, pixels - 1);  // rows past the image: never read
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int j = 0; j < 2; ++j)
            part[r][wn * 32 + nt * 8 + tig * 2 + j] = value(mt, half, nt, j, m);
      }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every split's sums are in its shared memory
    const int rank = static_cast<int>(cluster.block_rank());
    const int rows = static_cast<int>(min(static_cast<int64_t>(kTcPixels), pixels - m0));
    constexpr int kQuads = kTcChannels / 4;
    for (int i = tid + rank * 256; i < rows * kQuads; i += 256 * splits) {
      const int r = i / kQuads, c = i % kQuads * 4;
      float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int q = 0; q < splits; ++q) {
        const float4 v = *cluster.map_shared_rank(reinterpret_cast<float4*>(&part[r][c]), q);
        sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
      }
      const float sums[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (n0 + c + j < g.c_out) StoreConvOutput<O>(p, m0 + r, n0 + c + j, sums[j]);
    }
    cluster.sync();  // no block leaves while another still reads its shared memory
    return;
  }
#endif
  float* partial = splits > 1 ? p.workspace + blockIdx.z * pixels * g.c_out : nullptr;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t m = m0 + wm * 32 + mt * 16 + gid + half * 8;
      if (m >= pixels) continue;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int64_t co = n0 + wn * 32 + nt * 8 + tig * 2;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          if (co + j >= g.c_out) continue;
          const float v = value(mt, half, nt, j, m);
          if (partial != nullptr)
            partial[m * g.c_out + co + j] = v;
          else
            StoreConvOutput<O>(p, m, co + j, v);
        }
      }
    }
}

// The splits' partial sums added up, then the epilogue.
template <typename T>
__global__ void ConvSplitEpilogueKernel(ConvProblem p, int splits) {
  const int64_t total = p.g.n * p.g.oh * p.g.ow * p.g.c_out;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0.f;
    for (int s = 0; s < splits; ++s) sum += p.workspace[s * total + i];
    StoreConvOutput<T>(p, i / p.g.c_out, i % p.g.c_out, sum);
  }
}

// ---- pools --------------------------------------------------------------------------------------

template <typename T, PoolKind kKind>
__global__ void Pool2dKernel(Conv2dGeometry g, int64_t pad_bottom, int64_t pad_right,
                             bool count_include_pad, const T* x, T* y) {
  const int64_t c = g.c_in, total = g.n * g.oh * g.ow * c;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ch = i % c, pixel = i / c;
    const auto [img, y0, x0] = OriginOf(g, pixel);
    const T* src = x + img * g.h * g.w * c + ch;
    float out;
    if constexpr (kKind == PoolKind::kMax) {
      out = -INFINITY;
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = y0 + ky * g.dilation_h;
        if (iy < 0 || iy >= g.h) continue;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const int64_t ix = x0 + kx * g.dilation_w;
          if (ix < 0 || ix >= g.w) continue;
          const float v = ToFloat(src[(iy * g.w + ix) * c]);
          out = v > out || v != v ? v : out;  // NaN propagates, as on the CPU
        }
      }
    } else {
      auto lo = [](int64_t a, int64_t b) { return a < b ? a : b; };
      auto hi = [](int64_t a, int64_t b) { return a > b ? a : b; };
      const int64_t y1 = lo(y0 + g.kh, g.h + pad_bottom), x1 = lo(x0 + g.kw, g.w + pad_right);
      const int64_t ys = hi(y0, 0), ye = lo(y1, g.h), xs = hi(x0, 0), xe = lo(x1, g.w);
      const int64_t count =
          count_include_pad ? (y1 - y0) * (x1 - x0) : hi(ye - ys, 0) * hi(xe - xs, 0);
      float sum = 0.f;
      for (int64_t iy = ys; iy < ye; ++iy)
        for (int64_t ix = xs; ix < xe; ++ix) sum += ToFloat(src[(iy * g.w + ix) * c]);
      out = count > 0 ? sum * (1.f / static_cast<float>(count)) : 0.f;
    }
    y[i] = FromFloat<T>(out);
  }
}

// The same windows 16 bytes of channels at a time (c a multiple of V = 16 / sizeof(T), x and y
// aligned): one thread per V channels of an output pixel, so the index arithmetic is paid once per
// vector and every load and store is 16 bytes. Image and pixel indices in int (Pool2dNhwc checks).
template <typename T, PoolKind kKind>
__global__ void Pool2dVectorKernel(Conv2dGeometry g, int pad_bottom, int pad_right,
                                   bool count_include_pad, const T* x, T* y) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  const int cv = static_cast<int>(g.c_in / V), ow = static_cast<int>(g.ow);
  const int ohw = static_cast<int>(g.oh * g.ow), h = static_cast<int>(g.h),
            w = static_cast<int>(g.w);
  const int64_t total = g.n * ohw * cv;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int vec = static_cast<int>(i % cv);
    const int pixel = static_cast<int>(i / cv);
    const int img = pixel / ohw, rest = pixel - img * ohw, oy = rest / ow, ox = rest - oy * ow;
    const int y0 = oy * static_cast<int>(g.stride_h) - static_cast<int>(g.pad_top);
    const int x0 = ox * static_cast<int>(g.stride_w) - static_cast<int>(g.pad_left);
    const T* src = x + static_cast<int64_t>(img) * h * w * g.c_in + static_cast<int64_t>(vec) * V;
    float out[V];
    auto each = [&](int iy, int ix, auto&& f) {
      const uint4 raw =
          *reinterpret_cast<const uint4*>(src + (static_cast<int64_t>(iy) * w + ix) * g.c_in);
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < V; ++j) f(j, ToFloat(e[j]));
    };
    if constexpr (kKind == PoolKind::kMax) {
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] = -INFINITY;
      for (int ky = 0; ky < g.kh; ++ky) {
        const int iy = y0 + ky * static_cast<int>(g.dilation_h);
        if (iy < 0 || iy >= h) continue;
        for (int kx = 0; kx < g.kw; ++kx) {
          const int ix = x0 + kx * static_cast<int>(g.dilation_w);
          if (ix < 0 || ix >= w) continue;
          each(iy, ix, [&](int j, float v) {
            out[j] = v > out[j] || v != v ? v : out[j];  // NaN propagates, as on the CPU
          });
        }
      }
    } else {
      const int y1 = min(y0 + static_cast<int>(g.kh), h + pad_bottom);
      const int x1 = min(x0 + static_cast<int>(g.kw), w + pad_right);
      const int ys = max(y0, 0), ye = min(y1, h), xs = max(x0, 0), xe = min(x1, w);
      const int count =
          count_include_pad ? (y1 - y0) * (x1 - x0) : max(ye - ys, 0) * max(xe - xs, 0);
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] = 0.f;
      for (int iy = ys; iy < ye; ++iy)
        for (int ix = xs; ix < xe; ++ix) each(iy, ix, [&](int j, float v) { out[j] += v; });
      const float scale = count > 0 ? 1.f / static_cast<float>(count) : 0.f;
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] *= scale;
    }
    uint4 packed;
    T* o = reinterpret_cast<T*>(&packed);
#pragma unroll
    for (int j = 0; j < V; ++j) o[j] = FromFloat<T>(out[j]);
    *reinterpret_cast<uint4*>(y + i * V) = packed;
  }
}

// One thread per (image, channel), reading the channel down the pixels (coalesced across threads);
// the images over the grid's y (more than it holds: each block steps on by its height).
// With 'ends' the images are segments of one run of pixels: image i spans pixels [ends[i - 1] (0
// for the first), ends[i]) (packed sequences' tokens); an empty one pools to 0.
template <typename T, PoolKind kKind>
__global__ void GlobalPoolKernel(int64_t n, int64_t hw, int64_t c, const T* x, T* y,
                                 const int32_t* ends) {
  const int64_t ch = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (ch >= c) return;
  for (int64_t img = blockIdx.y; img < n; img += gridDim.y) {
    const int64_t begin = ends == nullptr ? img * hw : img > 0 ? ends[img - 1] : 0;
    if (ends != nullptr) hw = ends[img] > begin ? ends[img] - begin : 0;
    const T* src = x + begin * c + ch;
    float out = kKind == PoolKind::kMax && hw > 0 ? -INFINITY : 0.f;
    for (int64_t i = 0; i < hw; ++i) {
      const float v = ToFloat(src[i * c]);
      if constexpr (kKind == PoolKind::kMax)
        out = v > out || v != v ? v : out;
      else
        out += v;
    }
    if constexpr (kKind == PoolKind::kAverage) out *= hw > 0 ? 1.f / static_cast<float>(hw) : 0.f;
    y[img * c + ch] = FromFloat<T>(out);
  }
}

// ---- layouts ------------------------------------------------------------------------------------

// Channels-last with 16 bytes per output pixel (c_pad V = 16 / sizeof(U): an RGB image padded to 8
// bf16 channels for the stem): one thread per pixel gathers its c channels (each read coalesced
// across the threads' neighbouring pixels) and writes them in one store.
template <typename U>
__global__ void ToLastPixelKernel(const U* x, int64_t n, int64_t c, int64_t hw, U* y) {
  constexpr int V = 16 / static_cast<int>(sizeof(U));
  const int64_t total = n * hw;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t img = i / hw, p = i - img * hw;
    uint4 packed;
    U* o = reinterpret_cast<U*>(&packed);
#pragma unroll
    for (int j = 0; j < V; ++j) o[j] = j < c ? x[(img * c + j) * hw + p] : U{0};
    reinterpret_cast<uint4*>(y)[i] = packed;
  }
}

// U is a type of the element's size: the transposes move bits.
// Channels-last output may have c_pad >= c channels, the extra ones zero.
template <typename U, bool kToLast>
__global__ void TransposeKernel(const U* x, int64_t n, int64_t c, int64_t hw, int64_t c_pad, U* y) {
  const int64_t total = n * (kToLast ? c_pad : c) * hw;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // i indexes the output, so writes coalesce.
    if constexpr (kToLast) {
      const int64_t ch = i % c_pad, p = i / c_pad % hw, img = i / (c_pad * hw);
      y[i] = ch < c ? x[(img * c + ch) * hw + p] : U{0};
    } else {
      const int64_t p = i % hw, ch = i / hw % c, img = i / (c * hw);
      y[i] = x[(img * hw + p) * c + ch];
    }
  }
}

// One output pixel a thread: its channels gathered from the s x s block of every source channel
// (neighbouring threads read neighbouring blocks of a row), stored 16 bytes at a time.
template <typename I, typename O>
__global__ void SpaceToDepthKernel(const I* __restrict__ x, Conv2dGeometry g, O* __restrict__ y) {
  constexpr int V = 16 / static_cast<int>(sizeof(O));
  const int s = static_cast<int>(g.stride_h), c = static_cast<int>(g.c_in);
  const int used = s * s * c, chunks = static_cast<int>(g.c_out) / V;
  const int64_t plane = g.oh * g.ow, total = g.n * plane;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t img = i / plane, p = i - img * plane, by = p / g.ow, bx = p - by * g.ow;
    const I* src = x + img * g.c_in * g.h * g.w;
    uint4* dst = reinterpret_cast<uint4*>(y + i * g.c_out);
    for (int chunk = 0; chunk < chunks; ++chunk) {
      uint4 packed;
      O* o = reinterpret_cast<O*>(&packed);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int cc = chunk * V + j, tap = cc / c, ci = cc - tap * c;
        const int64_t row = by * s + tap / s - g.pad_top, col = bx * s + tap % s - g.pad_left;
        o[j] = FromFloat<O>(cc < used && row >= 0 && row < g.h && col >= 0 && col < g.w
                                ? ToFloat(src[(ci * g.h + row) * g.w + col])
                                : 0.f);
      }
      dst[chunk] = packed;
    }
  }
}

int MultiprocessorCount() {
  static std::atomic<int> cache[kMaxDevices];
  return PerDevice(cache, [](int dev) {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    return sms > 0 ? sms : 1;
  });
}

bool FloatType(ElemType t) {
  return t == ElemType::kF32 || t == ElemType::kBF16 || t == ElemType::kF16;
}

bool GeometryValid(const Conv2dGeometry& g) {
  return g.n > 0 && g.h > 0 && g.w > 0 && g.c_in > 0 && g.oh > 0 && g.ow > 0 && g.kh > 0 &&
         g.kw > 0 && g.stride_h > 0 && g.stride_w > 0 && g.dilation_h > 0 && g.dilation_w > 0;
}

}  // namespace

ConvKernel ChooseConvKernel(const ConvProblem& p) {
  const Conv2dGeometry& g = p.g;
  if (p.int8)  // (Conv2dNhwc refuses the int8 problems this kernel cannot take)
    return ConvKernel::kTensorCore;
  if (g.groups > 1 && g.groups == g.c_in && g.groups == g.c_out) return ConvKernel::kDepthwise;
  if ((p.type == ElemType::kBF16 || p.type == ElemType::kF16) && g.groups == 1 && g.c_in % 8 == 0 &&
      Aligned16(p.x) && Aligned16(p.w))
    return ConvKernel::kTensorCore;
  return ConvKernel::kGeneric;
}

// Splits of the depth on a cluster (ConvSplits), at most the portable cluster size.
constexpr int kConvMaxClusterSplits = 8;

// Temporary tuning knobs (device A/B runs): NEREID_CONV_SPLIT_BLOCKS blocks per SM aimed at,
// NEREID_CONV_SPLIT_STEPS the fewest depth steps a split takes.
static int Knob(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

// The tensor-core kernel's launch over 'grid' with 'splits' along z, one cluster when
// 'clustered'; 'attr' holds the cluster's attribute for the configuration.
static cudaLaunchConfig_t TensorCoreLaunch(dim3 grid, int splits, bool clustered,
                                           cudaStream_t stream, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(grid.x, grid.y, static_cast<unsigned>(splits));
  config.blockDim = dim3(256, 1, 1);
  config.stream = stream;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = 1;
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = static_cast<unsigned>(splits);
  config.attrs = attr;
  config.numAttrs = clustered ? 1 : 0;
  return config;
}

// The largest cluster along z (8, 4 or 2; -1: none) of which device 'dev' (the current one) holds
// at least one of the tensor-core kernel's: a GPU partition (MIG) may have fewer SMs to a GPC than
// a cluster of 8 needs. Every instance has the same block and shared memory.
static int LargestClusterThatFits(int /*dev*/) {
  for (int splits = kConvMaxClusterSplits; splits > 1; splits /= 2) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t config = TensorCoreLaunch(dim3(1, 1), splits, true, nullptr, &attr);
    int fit = 0;
    if (cudaOccupancyMaxActiveClusters(&fit, &ConvTensorCoreKernel<__nv_bfloat16, __nv_bfloat16>,
                                       &config) == cudaSuccess &&
        fit > 0)
      return splits;
    cudaGetLastError();  // (a refused query leaves no error behind)
  }
  return -1;
}

// The most splits of 'p' one cluster takes on the current device (LargestClusterThatFits, asked
// once per device), or 0 where its splits go through the workspace: no clusters on this GPU, none
// that fits, or p.clusters false.
static int ClusterSplits(const ConvProblem& p) {
  if (!p.clusters || !ClusterLaunch()) return 0;
  static std::atomic<int> cache[kMaxDevices];
  return std::max(PerDevice(cache, LargestClusterThatFits), 0);
}

int ConvSplits(const ConvProblem& p) {
  if (ChooseConvKernel(p) != ConvKernel::kTensorCore) return 1;
  const int cluster_splits = ClusterSplits(p);
  const bool cluster = cluster_splits > 1;
  if (!cluster && p.workspace == nullptr) return 1;
  const Conv2dGeometry& g = p.g;
  const int64_t pixels = g.n * g.oh * g.ow;
  const int64_t tiles =
      (pixels + kTcPixels - 1) / kTcPixels * ((g.c_out + kTcChannels - 1) / kTcChannels);
  const int64_t sms = std::max(MultiprocessorCount(), 1);
  if (tiles >= sms) return 1;
  static const int blocks_per_sm = std::max(Knob("NEREID_CONV_SPLIT_BLOCKS", 2), 1);
  static const int min_steps = std::max(Knob("NEREID_CONV_SPLIT_STEPS", 4), 1);
  // About 'blocks_per_sm' blocks per SM, each split at least 'min_steps' steps of the depth.
  const int64_t step = p.int8 ? kTcStepBytes : kTcStepBytes / 2;  // depth per step
  const int64_t steps = (g.kh * g.kw * g.c_in + step - 1) / step;
  int64_t splits =
      std::min<int64_t>({cluster ? cluster_splits : kConvMaxSplits,
                         (blocks_per_sm * sms + tiles - 1) / tiles, steps / min_steps});
  if (!cluster)
    while (splits > 1 && splits * pixels * g.c_out > kConvWorkspaceFloats) --splits;
  return static_cast<int>(std::max<int64_t>(splits, 1));
}

bool Int8ConvSupported(const ConvProblem& p) {
  return p.g.groups == 1 && p.g.c_in % 16 == 0 && p.x_scale != nullptr && p.w_scale != nullptr &&
         (p.type == ElemType::kBF16 || p.type == ElemType::kF16) && Aligned16(p.x) &&
         Aligned16(p.w);
}

const char* ConvKernelName(ConvKernel k) {
  switch (k) {
    case ConvKernel::kTensorCore:
      return "tensor-core implicit GEMM";
    case ConvKernel::kDepthwise:
      return "depthwise";
    case ConvKernel::kGeneric:
      return "implicit GEMM";
  }
  return "?";
}

std::vector<float> ConvWeightsLayout(const ConvProblem& p, const float* oihw) {
  const Conv2dGeometry& g = p.g;
  const int64_t cin_g = g.c_in / g.groups, taps = g.kh * g.kw;
  std::vector<float> out(static_cast<size_t>(g.c_out * cin_g * taps));
  const bool depthwise = ChooseConvKernel(p) == ConvKernel::kDepthwise;
  for (int64_t co = 0; co < g.c_out; ++co)
    for (int64_t ci = 0; ci < cin_g; ++ci)
      for (int64_t t = 0; t < taps; ++t) {
        const float v = oihw[(co * cin_g + ci) * taps + t];
        out[depthwise ? t * g.c_out + co : (co * taps + t) * cin_g + ci] = v;
      }
  return out;
}

// A convolution whose 128-pixel tiles fill a Hopper GPU runs as GemmSm90's implicit GEMM (wgmma,
// w by TMA, the windows gathered by cp.async): bf16/fp16, one group, c_in a multiple of 8, or int8
// with y in bf16 (c_in a multiple of 16, a scale per image); Relu or no activation. The rest,
// batch-1 layers of fewer tiles than SMs among them (the mma.sync kernel splits their depth over
// blocks), stay on this file's kernels. NEREID_CONV_SM90=0 turns it off (for comparisons).
static bool Sm90Conv(const ConvProblem& p, GemmProblem* q, Sm90Config* c) {
  static const bool enabled = [] {
    const char* v = std::getenv("NEREID_CONV_SM90");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  Activation act;
  if (!enabled || (p.int8 && p.type != ElemType::kBF16) || !GemmActivationOf(p.act, &act))
    return false;
  const int sms = Sm90SmCount();
  if (sms == 0) return false;
  *q = ImplicitGemm(p);
  const int64_t row_tiles = (q->m + 127) / 128, c_out = p.g.c_out;
  if (row_tiles * ((c_out + 127) / 128) < sms) return false;
  if (c_out <= 64)
    c->tile = Sm90Tile::k128x64;
  else if (c_out % 256 == 0 && row_tiles * (c_out / 256) >= sms)
    c->tile = Sm90Tile::k128x256;
  else
    c->tile = Sm90Tile::k128x128;
  c->splits = 1;
  return Sm90Supported(*q, *c);
}

bool GemmActivationOf(ConvActivation act, Activation* out) {
  if (act != ConvActivation::kNone && act != ConvActivation::kRelu) return false;
  *out = act == ConvActivation::kRelu ? Activation::kRelu : Activation::kNone;
  return true;
}

GemmProblem ImplicitGemm(const ConvProblem& p) {
  const Conv2dGeometry& g = p.g;
  GemmProblem q;
  q.m = g.n * g.oh * g.ow, q.n = g.c_out, q.k = g.kh * g.kw * g.c_in;
  q.ab_type = q.out_type = p.type;
  if (p.int8) q.ab_type = ElemType::kI8, q.x_scale = p.x_scale, q.w_scale = p.w_scale;
  q.x = p.x, q.w = p.w, q.y = p.y, q.bias = p.bias, q.residual = p.residual;
  GemmActivationOf(p.act, &q.act);  // (kNone where there is no GEMM form)
  q.residual_first = true, q.implicit = true, q.image = g;
  return q;
}

bool ConvOnSm90(const ConvProblem& p) {
  GemmProblem q;
  Sm90Config c;
  return Sm90Conv(p, &q, &c);
}

// The tensor-core implicit GEMM (ChooseConvKernel's kTensorCore), split as ConvSplits says.
static cudaError_t LaunchConvTensorCore(const ConvProblem& p, cudaStream_t stream) {
  const Conv2dGeometry& g = p.g;
  const int64_t pixels = g.n * g.oh * g.ow;
  const dim3 grid(static_cast<unsigned>((pixels + kTcPixels - 1) / kTcPixels),
                  static_cast<unsigned>((g.c_out + kTcChannels - 1) / kTcChannels));
  const int splits = ConvSplits(p);
  if (grid.y > 65535) return cudaErrorInvalidValue;
  // Split on a cluster where the GPU has them (no workspace, one kernel), else through the
  // workspace and a second kernel.
  const bool clustered = splits > 1 && ClusterSplits(p) > 1;
  const unsigned finish = GridFor(pixels * g.c_out, 4);
  auto launch = [&](auto in, auto out) {
    using T = decltype(in);
    using O = decltype(out);
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t config = TensorCoreLaunch(grid, splits, clustered, stream, &attr);
    const cudaError_t e =
        cudaLaunchKernelEx(&config, &ConvTensorCoreKernel<T, O>, p, splits, clustered);
    if (e != cudaSuccess) return e;
    if (splits > 1 && !clustered) ConvSplitEpilogueKernel<O><<<finish, 256, 0, stream>>>(p, splits);
    return cudaGetLastError();
  };
  if (p.int8 && p.type == ElemType::kBF16) return launch(int8_t{}, __nv_bfloat16{});
  if (p.int8) return launch(int8_t{}, __half{});
  if (p.type == ElemType::kBF16) return launch(__nv_bfloat16{}, __nv_bfloat16{});
  return launch(__half{}, __half{});
}

cudaError_t Conv2dNhwc(const ConvProblem& p, cudaStream_t stream) {
  const Conv2dGeometry& g = p.g;
  if (!GeometryValid(g) || g.c_out <= 0 || g.groups <= 0 || g.groups > 65535 ||
      g.c_in % g.groups != 0 || g.c_out % g.groups != 0 || p.x == nullptr || p.w == nullptr ||
      p.y == nullptr || !FloatType(p.type))
    return cudaErrorInvalidValue;
  if (p.int8 && !Int8ConvSupported(p)) return cudaErrorInvalidValue;
  GemmProblem sm90;
  if (Sm90Config c; Sm90Conv(p, &sm90, &c)) return GemmSm90(sm90, stream, c);
  const int64_t pixels = g.n * g.oh * g.ow;
  switch (ChooseConvKernel(p)) {
    case ConvKernel::kTensorCore:
      return LaunchConvTensorCore(p, stream);
    case ConvKernel::kDepthwise:
      return WithFloatType(p.type, [&](auto t) {
        ConvDepthwiseKernel<decltype(t)><<<GridFor(pixels * g.c_out, 1), 256, 0, stream>>>(p);
      });
    case ConvKernel::kGeneric: {
      const dim3 grid(static_cast<unsigned>((pixels + kGenericTile - 1) / kGenericTile),
                      static_cast<unsigned>((g.c_out / g.groups + kGenericTile - 1) / kGenericTile),
                      static_cast<unsigned>(g.groups));
      if (grid.y > 65535) return cudaErrorInvalidValue;
      return WithFloatType(
          p.type, [&](auto t) { ConvGenericKernel<decltype(t)><<<grid, 256, 0, stream>>>(p); });
    }
  }
  return cudaErrorInvalidValue;
}

ConvProblem GemmAsConvProblem(const GemmProblem& p) {
  ConvProblem c;
  c.g.n = p.m, c.g.c_in = p.k, c.g.c_out = p.n;  // m images of one pixel
  c.int8 = p.ab_type == ElemType::kI8;
  c.type = p.out_type;
  c.x = p.x, c.w = p.w, c.y = p.y, c.bias = p.bias, c.residual = p.residual;
  c.x_scale = p.x_scale, c.w_scale = p.w_scale;
  c.act = p.act == Activation::kRelu ? ConvActivation::kRelu : ConvActivation::kNone;
  return c;  // (no workspace: splits only on clusters)
}

bool GemmAsConvSupported(const GemmProblem& p) {
  // A current device with bf16 tensor cores (compute capability 8.0 or later).
  static std::atomic<int> cache[kMaxDevices];
  const bool device = PerDevice(cache, [](int dev) {
                        int major = 0;
                        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
                        return major >= 8 ? 1 : -1;
                      }) > 0;
  const bool int8 = p.ab_type == ElemType::kI8;
  const bool act = p.act == Activation::kNone ||
                   (p.act == Activation::kRelu && (p.residual == nullptr || p.residual_first));
  if (!device || !act || (!int8 && p.out_type != p.ab_type) || p.implicit || p.tf32 ||
      p.alpha != 1.f || p.m < 1 || p.n < 1 || p.k < 1 || p.n > 65535 * int64_t{kTcChannels})
    return false;
  // The rest (types, channel multiples, scales, alignment) is the tensor-core kernel's own rule.
  const ConvProblem c = GemmAsConvProblem(p);
  return int8 ? Int8ConvSupported(c) : ChooseConvKernel(c) == ConvKernel::kTensorCore;
}

cudaError_t GemmAsConv(const GemmProblem& p, cudaStream_t stream) {
  if (!GemmAsConvSupported(p)) return cudaErrorInvalidValue;
  return LaunchConvTensorCore(GemmAsConvProblem(p), stream);
}

cudaError_t Pool2dNhwc(PoolKind kind, const Conv2dGeometry& g, int64_t pad_bottom,
                       int64_t pad_right, bool count_include_pad, ElemType type, const void* x,
                       void* y, cudaStream_t stream) {
  if (!GeometryValid(g) || x == nullptr || y == nullptr || kind == PoolKind::kSum)
    return cudaErrorInvalidValue;
  // 16 bytes of channels per thread where they divide evenly and every index fits an int.
  constexpr int64_t kIntMax = 0x7fffffff;
  const int64_t vec = 16 / static_cast<int64_t>(ElemSize(type));
  if (g.c_in % vec == 0 && Aligned16(x) && Aligned16(y) && g.n * g.oh * g.ow < kIntMax &&
      g.n * g.h * g.w < kIntMax && g.h < (1 << 20) && g.w < (1 << 20) && g.kh < (1 << 20) &&
      g.kw < (1 << 20) && g.stride_h < (1 << 20) && g.stride_w < (1 << 20) &&
      g.dilation_h < (1 << 20) && g.dilation_w < (1 << 20) && g.pad_top < (1 << 20) &&
      g.pad_left < (1 << 20) && pad_bottom < (1 << 20) && pad_right < (1 << 20)) {
    const unsigned grid = GridFor(g.n * g.oh * g.ow * g.c_in / vec, 1);
    return WithFloatType(type, [&](auto t) {
      using T = decltype(t);
      const int pb = static_cast<int>(pad_bottom), pr = static_cast<int>(pad_right);
      if (kind == PoolKind::kMax)
        Pool2dVectorKernel<T, PoolKind::kMax><<<grid, 256, 0, stream>>>(
            g, pb, pr, count_include_pad, static_cast<const T*>(x), static_cast<T*>(y));
      else
        Pool2dVectorKernel<T, PoolKind::kAverage><<<grid, 256, 0, stream>>>(
            g, pb, pr, count_include_pad, static_cast<const T*>(x), static_cast<T*>(y));
    });
  }
  const unsigned grid = GridFor(g.n * g.oh * g.ow * g.c_in, 1);
  return WithFloatType(type, [&](auto t) {
    using T = decltype(t);
    if (kind == PoolKind::kMax)
      Pool2dKernel<T, PoolKind::kMax>
          <<<grid, 256, 0, stream>>>(g, pad_bottom, pad_right, count_include_pad,
                                     static_cast<const T*>(x), static_cast<T*>(y));
    else
      Pool2dKernel<T, PoolKind::kAverage>
          <<<grid, 256, 0, stream>>>(g, pad_bottom, pad_right, count_include_pad,
                                     static_cast<const T*>(x), static_cast<T*>(y));
  });
}

cudaError_t GlobalPoolNhwc(PoolKind kind, int64_t n, int64_t hw, int64_t c, ElemType type,
                           const void* x, void* y, cudaStream_t stream, const int32_t* ends) {
  if (n <= 0 || (hw <= 0 && ends == nullptr) || c <= 0 || x == nullptr || y == nullptr)
    return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((c + 255) / 256),
                  static_cast<unsigned>(std::min<int64_t>(n, 65535)));
  return WithFloatType(type, [&](auto t) {
    using T = decltype(t);
    auto launch = [&](auto k) {
      GlobalPoolKernel<T, decltype(k)::value>
          <<<grid, 256, 0, stream>>>(n, hw, c, static_cast<const T*>(x), static_cast<T*>(y), ends);
    };
    switch (kind) {
      case PoolKind::kMax:
        return launch(std::integral_constant<PoolKind, PoolKind::kMax>{});
      case PoolKind::kAverage:
        return launch(std::integral_constant<PoolKind, PoolKind::kAverage>{});
      case PoolKind::kSum:
        return launch(std::integral_constant<PoolKind, PoolKind::kSum>{});
    }
  });
}

namespace {

template <bool kToLast>
cudaError_t Transpose(ElemType type, const void* x, int64_t n, int64_t c, int64_t hw, int64_t c_pad,
                      void* y, cudaStream_t stream) {
  if (n <= 0 || c <= 0 || hw <= 0 || c_pad < c || x == nullptr || y == nullptr || !FloatType(type))
    return cudaErrorInvalidValue;
  if (kToLast && c_pad * static_cast<int64_t>(ElemSize(type)) == 16 && Aligned16(y)) {
    const unsigned pixels = GridFor(n * hw, 1);
    if (ElemSize(type) == 4)
      ToLastPixelKernel<uint32_t><<<pixels, 256, 0, stream>>>(static_cast<const uint32_t*>(x), n, c,
                                                              hw, static_cast<uint32_t*>(y));
    else
      ToLastPixelKernel<uint16_t><<<pixels, 256, 0, stream>>>(static_cast<const uint16_t*>(x), n, c,
                                                              hw, static_cast<uint16_t*>(y));
    return cudaGetLastError();
  }
  const unsigned grid = GridFor(n * c_pad * hw, 1);
  if (ElemSize(type) == 4)
    TransposeKernel<uint32_t, kToLast><<<grid, 256, 0, stream>>>(
        static_cast<const uint32_t*>(x), n, c, hw, c_pad, static_cast<uint32_t*>(y));
  else
    TransposeKernel<uint16_t, kToLast><<<grid, 256, 0, stream>>>(
        static_cast<const uint16_t*>(x), n, c, hw, c_pad, static_cast<uint16_t*>(y));
  return cudaGetLastError();
}

}  // namespace

cudaError_t ChannelsLast(ElemType type, const void* x, int64_t n, int64_t c, int64_t hw, void* y,
                         cudaStream_t stream, int64_t c_pad) {
  return Transpose<true>(type, x, n, c, hw, c_pad > 0 ? c_pad : c, y, stream);
}

cudaError_t ChannelsFirst(ElemType type, const void* x, int64_t n, int64_t c, int64_t hw, void* y,
                          cudaStream_t stream) {
  return Transpose<false>(type, x, n, c, hw, c, y, stream);
}

cudaError_t SpaceToDepth(ElemType type, const void* x, const Conv2dGeometry& g, void* y,
                         cudaStream_t stream, ElemType x_type) {
  const int64_t s = g.stride_h, elem = FloatType(type) ? ElemSize(type) : 0;
  if (x == nullptr || y == nullptr || elem == 0 || !Aligned16(y) || g.n <= 0 || g.c_in <= 0 ||
      g.h <= 0 || g.w <= 0 || g.oh <= 0 || g.ow <= 0 || s < 1 || s > 8 || g.stride_w != s ||
      g.c_out < s * s * g.c_in || g.c_out * elem % 16 != 0 || g.c_out > 1024 ||
      (x_type != type && x_type != ElemType::kF32))
    return cudaErrorInvalidValue;
  const unsigned grid = GridFor(g.n * g.oh * g.ow, 1);
  return WithFloatType(type, [&](auto t) {
    using O = decltype(t);
    if (x_type == ElemType::kF32)
      SpaceToDepthKernel<float, O>
          <<<grid, 256, 0, stream>>>(static_cast<const float*>(x), g, static_cast<O*>(y));
    else
      SpaceToDepthKernel<O, O>
          <<<grid, 256, 0, stream>>>(static_cast<const O*>(x), g, static_cast<O*>(y));
  });
}

template <typename T>
__global__ void ConvActivationKernel(ConvActivation act, float a, float b, const T* __restrict__ x,
                                     T* __restrict__ y, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride)
    y[i] = FromFloat<T>(ApplyConvActivation(act, ToFloat(x[i]), a, b));
}

cudaError_t ActivateLikeConv(ConvActivation act, float a, float b, ElemType type, const void* x,
                             void* y, int64_t count, cudaStream_t stream) {
  if (count < 0) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  return WithFloatType(type, [&](auto t) {
    using T = decltype(t);
    ConvActivationKernel<T><<<GridFor(count), 256, 0, stream>>>(act, a, b, static_cast<const T*>(x),
                                                                static_cast<T*>(y), count);
  });
}

}  // namespace nereid::kernels::cuda
