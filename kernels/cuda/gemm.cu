#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <type_traits>

#include "cuda/device_math.cuh"
#include "cuda/epilogue.h"
#include "cuda/gemm.h"

namespace nereid::kernels::cuda {
namespace {

// ---- GemmSmallM ---------------------------------------------------------------------------------
// Variants kWarpRows2/4: one warp computes kRows consecutive output columns (rows of w) for all m
// rows of x. Each lane walks k in 16-byte vectors, 32 lanes apart, so a warp reads 512 contiguous
// bytes of a w row per step and every byte of w once; x (m x k, small) comes through L1 and is
// reused for the kRows rows. The m x kRows dot products are reduced across the warp with shuffles,
// and lane j < kRows*M writes one element of y with the epilogue applied.
constexpr int kWarps = 4;

template <typename T>
struct Vec {
  static constexpr int kCount = 16 / sizeof(T);
  float v[kCount];
  __device__ __forceinline__ void Load(const T* p) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kCount; ++i) v[i] = ToFloat(e[i]);
  }
};

// The epilogue of one element of y: y[i, col] = act(alpha * sum + bias[col]) + residual[i, col].
template <typename OutT>
__device__ __forceinline__ void StoreOne(float sum, int i, int64_t col, int64_t n, float alpha,
                                         const float* __restrict__ bias, Activation act,
                                         const OutT* residual, OutT* y) {
  float v = alpha * sum;
  if (bias != nullptr) v += bias[col];
  v = ActivateAny(act, v);
  if (residual != nullptr) v += ToFloat(residual[i * n + col]);
  y[i * n + col] = FromFloat<OutT>(v);
}

// Each of the warp's kRows x M dot products summed across the lanes (butterfly: afterwards every
// lane holds every sum).
template <int M, int kRows>
__device__ __forceinline__ void WarpReduce(float (&acc)[kRows][M]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i)
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1)
        acc[r][i] += __shfl_xor_sync(0xffffffffu, acc[r][i], offset);
}

// The end of the warp-per-rows kernels: the sums reduced across the warp, then lane
// (r * M + i) % 32 applies the epilogue and stores y[i, row0 + r].
template <int M, int kRows, typename OutT>
__device__ __forceinline__ void ReduceAndStore(float (&acc)[kRows][M], int lane, int64_t row0,
                                               int m, int64_t n, float alpha,
                                               const float* __restrict__ bias, Activation act,
                                               const OutT* residual, OutT* y) {
  WarpReduce<M, kRows>(acc);
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const int64_t col = row0 + r;
      if (lane == (r * M + i) % 32 && i < m && col < n)
        StoreOne(acc[r][i], i, col, n, alpha, bias, act, residual, y);
    }
}

// This thread's share of the kRows x M dot products: k walked in 16-byte vectors from 'start',
// 'step' elements apart (32 vectors for a warp alone, 128 for a block of 4 splitting k).
template <typename T, int M, int kRows>
__device__ __forceinline__ void Accumulate(float (&acc)[kRows][M], const T* const (&wr)[kRows],
                                           const T* __restrict__ x, int m, int64_t k, int64_t start,
                                           int64_t step) {
#pragma unroll 2
  for (int64_t base = start; base < k; base += step) {
    Vec<T> wv[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) wv[r].Load(wr[r] + base);
#pragma unroll
    for (int i = 0; i < M; ++i) {
      if (i < m) {
        Vec<T> xv;
        xv.Load(x + i * k + base);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int e = 0; e < Vec<T>::kCount; ++e) acc[r][i] = fmaf(wv[r].v[e], xv.v[e], acc[r][i]);
      }
    }
  }
}

template <typename T, int M, int kRows, typename OutT>
__global__ __launch_bounds__(kWarps * 32) void SmallMKernel(Activation act, int m, int64_t n,
                                                            int64_t k, const T* __restrict__ x,
                                                            const T* __restrict__ w, float alpha,
                                                            const float* __restrict__ bias,
                                                            const OutT* residual, OutT* y) {
  constexpr int V = Vec<T>::kCount;
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * kRows;
  if (row0 >= n) return;
  float acc[kRows][M] = {};
  const T* wr[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) wr[r] = w + (row0 + r < n ? row0 + r : row0) * k;
  Accumulate<T, M, kRows>(acc, wr, x, m, k, static_cast<int64_t>(lane) * V, 32 * V);
  ReduceAndStore<M, kRows>(acc, lane, row0, m, n, alpha, bias, act, residual, y);
}

// Variant kSplitK2: the block's 4 warps share 2 rows of w and split k between them (the block walks
// k 128 vectors wide), so a GEMM with few output columns keeps 4x the warps, and the loads they
// have in flight, on every SM (what streaming w at HBM speed needs); the warps' partial sums meet
// in shared memory and warp 0 applies the epilogue.
template <typename T, int M, int kRows, typename OutT>
__global__ __launch_bounds__(kWarps * 32) void SmallMSplitKernel(
    Activation act, int m, int64_t n, int64_t k, const T* __restrict__ x, const T* __restrict__ w,
    float alpha, const float* __restrict__ bias, const OutT* residual, OutT* y) {
  constexpr int V = Vec<T>::kCount;
  __shared__ float partial[kWarps][kRows][M];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  float acc[kRows][M] = {};
  const T* wr[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) wr[r] = w + (row0 + r < n ? row0 + r : row0) * k;
  Accumulate<T, M, kRows>(acc, wr, x, m, k, static_cast<int64_t>(threadIdx.x) * V, kWarps * 32 * V);
  WarpReduce<M, kRows>(acc);
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int i = 0; i < M; ++i) partial[warp][r][i] = acc[r][i];
  __syncthreads();
  if (warp != 0) return;
  for (int idx = lane; idx < kRows * M; idx += 32) {
    const int r = idx / M, i = idx % M;
    const int64_t col = row0 + r;
    if (i >= m || col >= n) continue;
    float sum = 0;
#pragma unroll
    for (int q = 0; q < kWarps; ++q) sum += partial[q][r][i];
    StoreOne(sum, i, col, n, alpha, bias, act, residual, y);
  }
}

// Variant kSharedX: the block (8 warps) stages x[:, k0:k0+kt] in shared memory once per tile, so
// the m rows of x are read from device memory once per block instead of once per warp; each warp
// then streams kRows rows of w against the staged tile.
constexpr int kSharedWarps = 8;
constexpr size_t kSharedXBytes = 32 << 10;

template <typename T, int M, int kRows, typename OutT>
__global__ __launch_bounds__(kSharedWarps * 32) void SmallMSharedKernel(
    Activation act, int m, int64_t n, int64_t k, int64_t kt, const T* __restrict__ x,
    const T* __restrict__ w, float alpha, const float* __restrict__ bias, const OutT* residual,
    OutT* y) {
  constexpr int V = Vec<T>::kCount;
  extern __shared__ uint4 shared_raw[];
  T* xs = reinterpret_cast<T*>(shared_raw);  // M x kt
  const int lane = threadIdx.x & 31;
  const int64_t row0 =
      (static_cast<int64_t>(blockIdx.x) * kSharedWarps + (threadIdx.x >> 5)) * kRows;
  const bool active = row0 < n;
  float acc[kRows][M] = {};
  const T* wr[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) wr[r] = w + (row0 + r < n ? row0 + r : (active ? row0 : 0)) * k;

  for (int64_t k0 = 0; k0 < k; k0 += kt) {
    const int64_t len = k - k0 < kt ? k - k0 : kt;
    const int64_t vecs = len / V;
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < m * vecs; idx += blockDim.x) {
      const int64_t i = idx / vecs, c = idx % vecs;
      reinterpret_cast<uint4*>(xs + i * kt)[c] =
          __ldg(reinterpret_cast<const uint4*>(x + i * k + k0) + c);
    }
    __syncthreads();
    if (!active) continue;
#pragma unroll 2
    for (int64_t base = static_cast<int64_t>(lane) * V; base < len; base += 32 * V) {
      Vec<T> wv[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) wv[r].Load(wr[r] + k0 + base);
#pragma unroll
      for (int i = 0; i < M; ++i) {
        if (i < m) {
          const uint4 raw = *reinterpret_cast<const uint4*>(xs + i * kt + base);
          const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
          for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int j = 0; j < V; ++j) acc[r][i] = fmaf(wv[r].v[j], ToFloat(e[j]), acc[r][i]);
        }
      }
    }
  }
  if (!active) return;
  ReduceAndStore<M, kRows>(acc, lane, row0, m, n, alpha, bias, act, residual, y);
}

// ---- GemmSmallM on the tensor cores (kTensorCore16/32) --------------------------------------
// y^T = w x^T as mma.sync tiles: 16 rows of w are the MMA's rows (A), 8 rows of x its columns (B).
// A "chunk" of k is what four lanes cover with one 16-byte load each (32 bf16/fp16, 16 fp32). The
// MMA's k order is free as long as A and B agree, so lane (g, t) of the warp takes w rows g and
// g + 8 and x row g at k = chunk + 16t/elem .. +16 bytes, and those registers are the fragments as
// they stand: m16n8k16 (bf16/fp16) or m16n8k8 (tf32) twice per chunk, no shuffles, no shared
// memory on the way in. The block's 8 warps split the chunks; partial sums meet in shared memory.
constexpr int kTcWarps = 8;

// int8 (Acc int): m16n8k32 takes 4 bytes per register where bf16 takes 2 elements, in the same
// places, so the same registers are its fragments (k permuted alike in w and x), s32 accumulators.
template <typename T, typename Acc>
__device__ __forceinline__ void MmaChunk(Acc (&c)[4], const uint4& w_lo, const uint4& w_hi,
                                         const uint4& xv) {
  // Halves of the 16-byte loads: (x, y) feed the first MMA, (z, w) the second.
  const uint32_t a0[4] = {w_lo.x, w_hi.x, w_lo.y, w_hi.y}, b0[2] = {xv.x, xv.y};
  const uint32_t a1[4] = {w_lo.z, w_hi.z, w_lo.w, w_hi.w}, b1[2] = {xv.z, xv.w};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const uint32_t* a = half == 0 ? a0 : a1;
    const uint32_t* b = half == 0 ? b0 : b1;
    if constexpr (std::is_same_v<T, int8_t>) {
      asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
          "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
          : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
          "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else if constexpr (std::is_same_v<T, __half>) {
      asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
          "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
      asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
          "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
  }
}

// The four fp32 values of 'v' rounded to the nearest tf32 (the MMA itself would truncate them).
__device__ __forceinline__ uint32_t RoundTf32(uint32_t bits) {
  uint32_t out;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(out) : "f"(__uint_as_float(bits)));
  return out;
}
__device__ __forceinline__ void RoundTf32(uint4& v) {
  v = make_uint4(RoundTf32(v.x), RoundTf32(v.y), RoundTf32(v.z), RoundTf32(v.w));
}

// kRT: 16-row tiles of w per block; kNT: 8-row tiles of x (m <= 8 kNT). gridDim.y > 1 splits the
// chunks of k over the blocks of a thread-block cluster (1 x gridDim.y x 1): each block sums its
// warps' partials in its own shared memory, the cluster synchronizes, and each block then reads
// its share of the values from every block's shared memory (in rank order, so the sum is
// deterministic) and applies the epilogue.
// int8 operands (T = int8_t): exact int32 sums, scaled by x_scale[row] * w_scale[col] as stored.
template <typename T, int kRT, int kNT, typename OutT>
__global__ __launch_bounds__(kTcWarps * 32) void SmallMTensorCoreKernel(
    Activation act, int m, int n, int k, const T* __restrict__ x, const T* __restrict__ w,
    float alpha, const float* __restrict__ bias, const OutT* residual, OutT* y,
    const float* __restrict__ x_scale, const float* __restrict__ w_scale) {
  constexpr bool kInt8 = std::is_same_v<T, int8_t>;
  using Acc = std::conditional_t<kInt8, int, float>;
  constexpr int V = 16 / sizeof(T);  // elements per 16-byte load
  constexpr int kChunk = 4 * V;
  constexpr int U = 4;  // chunks in flight per warp
  __shared__ Acc partial[kTcWarps][kRT][kNT][4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n0 = blockIdx.x * 16 * kRT;
  const int chunks = k / kChunk;
  const int splits = static_cast<int>(gridDim.y);
  const int per_split = (chunks + splits - 1) / splits;
  const int c_begin = static_cast<int>(blockIdx.y) * per_split;
  const int c_end = min(chunks, c_begin + per_split);

  const T* wp[kRT][2];
#pragma unroll
  for (int rt = 0; rt < kRT; ++rt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = min(n0 + rt * 16 + g + 8 * h, n - 1);  // past n: computed, never stored
      wp[rt][h] = w + static_cast<int64_t>(row) * k + V * t;
    }
  const T* xp[kNT];
  bool x_ok[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    x_ok[nt] = nt * 8 + g < m;
    xp[nt] = x + static_cast<int64_t>(x_ok[nt] ? nt * 8 + g : 0) * k + V * t;
  }

  Acc acc[kRT][kNT][4] = {};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int c0 = c_begin + warp; c0 < c_end; c0 += kTcWarps * U) {
    uint4 wv[U][kRT][2], xv[U][kNT];
    // Every load is issued, unconditionally and all U chunks at once (a chunk past the end
    // re-reads the warp's first one, then counts as zeros): loads under branches were sunk to
    // their MMAs by the compiler, leaving about half the bytes in flight.
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u * kTcWarps;
      const bool ok = c < c_end;
      const int64_t off = static_cast<int64_t>(ok ? c : c0) * kChunk;
#pragma unroll
      for (int rt = 0; rt < kRT; ++rt)
#pragma unroll
        for (int h = 0; h < 2; ++h) wv[u][rt][h] = LoadStream(wp[rt][h] + off);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
        xv[u][nt] = __ldg(reinterpret_cast<const uint4*>(xp[nt] + off));
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool ok = c0 + u * kTcWarps < c_end;
#pragma unroll
      for (int rt = 0; rt < kRT; ++rt)
#pragma unroll
        for (int h = 0; h < 2; ++h) wv[u][rt][h] = ok ? wv[u][rt][h] : zero;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) xv[u][nt] = ok && x_ok[nt] ? xv[u][nt] : zero;
      if constexpr (std::is_same_v<T, float>) {  // fp32 bits rounded to tf32, as cuBLAS does
#pragma unroll
        for (int rt = 0; rt < kRT; ++rt)
#pragma unroll
          for (int h = 0; h < 2; ++h) RoundTf32(wv[u][rt][h]);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) RoundTf32(xv[u][nt]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int rt = 0; rt < kRT; ++rt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
          MmaChunk<T>(acc[rt][nt], wv[u][rt][0], wv[u][rt][1], xv[u][nt]);
  }

#pragma unroll
  for (int rt = 0; rt < kRT; ++rt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) partial[warp][rt][nt][r][lane] = acc[rt][nt][r];
  __syncthreads();
  // Value i is register r = i / 32 % 4 of lane src = i % 32 for tiles nt = i / 128 % kNT and
  // rt = i / (128 kNT); in the C fragment of m16n8 that is w row g + 8 (r / 2), x row 2t + r % 2.
  constexpr int kValues = kRT * kNT * 4 * 32;
  auto store = [&](int i, Acc sum) {
    const int src = i % 32, r = i / 32 % 4, nt = i / 128 % kNT, rt = i / (128 * kNT);
    const int col = n0 + rt * 16 + src / 4 + 8 * (r / 2);
    const int row = nt * 8 + 2 * (src % 4) + r % 2;
    if (row >= m || col >= n) return;
    float v = alpha * static_cast<float>(sum);
    if constexpr (kInt8) v *= x_scale[row] * w_scale[col];
    if (bias != nullptr) v += bias[col];
    v = ActivateAny(act, v);
    const int64_t at = static_cast<int64_t>(row) * n + col;
    if (residual != nullptr) v += ToFloat(residual[at]);
    y[at] = FromFloat<OutT>(v);
  };
  auto block_sum = [&](int i) {
    Acc sum = 0;
#pragma unroll
    for (int wi = 0; wi < kTcWarps; ++wi) sum += (&partial[wi][0][0][0][0])[i];
    return sum;
  };
  if (splits == 1) {
    for (int i = threadIdx.x; i < kValues; i += kTcWarps * 32) store(i, block_sum(i));
    return;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // In place: value i of warp 0's slice is read and written by one thread only.
  Acc* const reduced = &partial[0][0][0][0][0];
  for (int i = threadIdx.x; i < kValues; i += kTcWarps * 32) reduced[i] = block_sum(i);
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's sums are in its shared memory
  const int rank = static_cast<int>(cluster.block_rank());
  for (int i = threadIdx.x + rank * kTcWarps * 32; i < kValues; i += kTcWarps * 32 * splits) {
    Acc sum = 0;
    for (int q = 0; q < splits; ++q) sum += cluster.map_shared_rank(reduced, q)[i];
    store(i, sum);
  }
  cluster.sync();  // no block leaves while another still reads its shared memory
#endif
}

// Launched as a cluster of 'splits' blocks along y when splits > 1.
template <typename T, int kRT, int kNT, typename OutT>
cudaError_t LaunchTensorCoreKernel(const GemmProblem& p, int splits, cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>((p.n + 16 * kRT - 1) / (16 * kRT)),
                        static_cast<unsigned>(splits), 1);
  config.blockDim = dim3(kTcWarps * 32, 1, 1);
  config.stream = stream;
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = 1;
  cluster[0].val.clusterDim.y = static_cast<unsigned>(splits);
  cluster[0].val.clusterDim.z = 1;
  config.attrs = cluster;
  config.numAttrs = splits > 1 ? 1 : 0;
  return cudaLaunchKernelEx(&config, &SmallMTensorCoreKernel<T, kRT, kNT, OutT>, p.act,
                            static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k),
                            static_cast<const T*>(p.x), static_cast<const T*>(p.w), p.alpha, p.bias,
                            static_cast<const OutT*>(p.residual), static_cast<OutT*>(p.y),
                            p.x_scale, p.w_scale);
}

template <typename T, int kRT, typename OutT>
cudaError_t LaunchTensorCore(const GemmProblem& p, int splits, cudaStream_t stream) {
  if (p.m <= 8) return LaunchTensorCoreKernel<T, kRT, 1, OutT>(p, splits, stream);
  if (p.m <= 16) return LaunchTensorCoreKernel<T, kRT, 2, OutT>(p, splits, stream);
  if (p.m <= 32) return LaunchTensorCoreKernel<T, kRT, 4, OutT>(p, splits, stream);
  // 33..64: one row tile, so the partial sums stay within 32 KiB of shared memory
  return LaunchTensorCoreKernel<T, 1, 8, OutT>(p, splits, stream);
}

template <typename T, int M, int kRows, typename OutT>
void LaunchVariant(SmallMVariant variant, const GemmProblem& p, cudaStream_t stream) {
  const auto* x = static_cast<const T*>(p.x);
  const auto* w = static_cast<const T*>(p.w);
  const auto* res = static_cast<const OutT*>(p.residual);
  auto* y = static_cast<OutT*>(p.y);
  const int m = static_cast<int>(p.m);
  const int64_t warps = (p.n + kRows - 1) / kRows;
  if (variant == SmallMVariant::kSplitK2) {
    SmallMSplitKernel<T, M, kRows, OutT><<<static_cast<unsigned>(warps), kWarps * 32, 0, stream>>>(
        p.act, m, p.n, p.k, x, w, p.alpha, p.bias, res, y);
  } else if (variant == SmallMVariant::kSharedX) {
    constexpr int64_t V = 16 / sizeof(T);
    int64_t kt = static_cast<int64_t>(kSharedXBytes / (M * sizeof(T))) / (32 * V) * (32 * V);
    const int64_t k_round = (p.k + 32 * V - 1) / (32 * V) * (32 * V);
    kt = kt < k_round ? kt : k_round;
    const unsigned grid = static_cast<unsigned>((warps + kSharedWarps - 1) / kSharedWarps);
    SmallMSharedKernel<T, M, kRows, OutT><<<grid, kSharedWarps * 32, M * kt * sizeof(T), stream>>>(
        p.act, m, p.n, p.k, kt, x, w, p.alpha, p.bias, res, y);
  } else {
    const unsigned grid = static_cast<unsigned>((warps + kWarps - 1) / kWarps);
    SmallMKernel<T, M, kRows, OutT>
        <<<grid, kWarps * 32, 0, stream>>>(p.act, m, p.n, p.k, x, w, p.alpha, p.bias, res, y);
  }
}

// The kernel instantiated for the smallest M (1, 2, 4, 8, 16) that holds p.m rows.
template <typename T, int kRows, typename OutT>
void LaunchForM(SmallMVariant variant, const GemmProblem& p, cudaStream_t stream) {
  if (p.m <= 1)
    LaunchVariant<T, 1, kRows, OutT>(variant, p, stream);
  else if (p.m <= 2)
    LaunchVariant<T, 2, kRows, OutT>(variant, p, stream);
  else if (p.m <= 4)
    LaunchVariant<T, 4, kRows, OutT>(variant, p, stream);
  else if (p.m <= 8)
    LaunchVariant<T, 8, kRows, OutT>(variant, p, stream);
  else
    LaunchVariant<T, 16, kRows, OutT>(variant, p, stream);
}

// What each variant is: its name, the rows of w one block streams on the tensor cores (0: a
// CUDA-core variant), and over how many blocks of a cluster it splits k.
struct VariantTraits {
  SmallMVariant variant;
  const char* name;
  int tc_rows;
  int splits;
};
constexpr VariantTraits kVariantTraits[] = {
    {SmallMVariant::kWarpRows2, "warp-rows-2", 0, 1},
    {SmallMVariant::kWarpRows4, "warp-rows-4", 0, 1},
    {SmallMVariant::kSharedX, "shared-x", 0, 1},
    {SmallMVariant::kSplitK2, "split-k-2", 0, 1},
    {SmallMVariant::kTensorCore16, "tensor-core-16", 16, 1},
    {SmallMVariant::kTensorCore32, "tensor-core-32", 32, 1},
    {SmallMVariant::kTensorCore16K2, "tensor-core-16-k2", 16, 2},
    {SmallMVariant::kTensorCore16K4, "tensor-core-16-k4", 16, 4},
    {SmallMVariant::kTensorCore16K8, "tensor-core-16-k8", 16, 8},
    {SmallMVariant::kTensorCore32K2, "tensor-core-32-k2", 32, 2},
    {SmallMVariant::kTensorCore32K4, "tensor-core-32-k4", 32, 4},
    {SmallMVariant::kTensorCore32K8, "tensor-core-32-k8", 32, 8},
};
constexpr VariantTraits kUnknownVariant{SmallMVariant::kWarpRows2, "?", 0, 1};

const VariantTraits& Traits(SmallMVariant v) {
  for (const VariantTraits& t : kVariantTraits)
    if (t.variant == v) return t;
  return kUnknownVariant;
}

template <typename T, typename OutT>
cudaError_t LaunchSmallM(const GemmProblem& p, SmallMVariant variant, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, int8_t>) {  // the tensor-core variants only
    const int splits = SmallMClusterSplits(variant);
    const cudaError_t e = Traits(variant).tc_rows == 16
                              ? LaunchTensorCore<T, 1, OutT>(p, splits, stream)
                              : LaunchTensorCore<T, 2, OutT>(p, splits, stream);
    return e != cudaSuccess ? e : cudaGetLastError();
  } else if (SmallMTensorCore(variant)) {
    if constexpr (std::is_same_v<T, float>) {
      if (!p.tf32) return cudaErrorInvalidValue;  // exact fp32 stays on the CUDA cores
    }
    const int splits = SmallMClusterSplits(variant);
    const cudaError_t e = Traits(variant).tc_rows == 16
                              ? LaunchTensorCore<T, 1, OutT>(p, splits, stream)
                              : LaunchTensorCore<T, 2, OutT>(p, splits, stream);
    if (e != cudaSuccess) return e;
  } else if (variant == SmallMVariant::kWarpRows2 || variant == SmallMVariant::kSplitK2) {
    LaunchForM<T, 2, OutT>(variant, p, stream);
  } else {
    LaunchForM<T, 4, OutT>(variant, p, stream);
  }
  return cudaGetLastError();
}

// Outputs in fp32 or in the operands' own type (what the engine chains between layers).
// Int8 operands: outputs in fp32 or bf16 (the engine's int8 precision chains bf16).
template <typename T>
cudaError_t LaunchSmallMOut(const GemmProblem& p, SmallMVariant variant, cudaStream_t stream) {
  if (p.out_type == ElemType::kF32) return LaunchSmallM<T, float>(p, variant, stream);
  if constexpr (std::is_same_v<T, int8_t>) {
    if (p.out_type == ElemType::kBF16) return LaunchSmallM<T, __nv_bfloat16>(p, variant, stream);
  } else if constexpr (!std::is_same_v<T, float>) {
    if (p.out_type == p.ab_type) return LaunchSmallM<T, T>(p, variant, stream);
  }
  return cudaErrorInvalidValue;
}

cudaDataType_t CudaType(ElemType t) {
  switch (t) {
    case ElemType::kBF16:
      return CUDA_R_16BF;
    case ElemType::kF16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

std::string CublasError(const char* what, cublasStatus_t status) {
  return std::string(what) + ": " + cublasGetStatusString(status);
}

}  // namespace

// Whether the current device launches thread-block clusters (compute capability 9.0 and later),
// cached per device.
bool ClusterLaunch() {
#if !defined(NEREID_CUDA_SM90A)
  return false;  // the cluster path is compiled only into the sm_90a build
#endif
  static std::atomic<int> cache[kMaxDevices] = {};  // 0 unknown, 1 yes, -1 no
  return PerDevice(cache, [](int dev) {
           int supported = 0;
           const bool asked =
               cudaDeviceGetAttribute(&supported, cudaDevAttrClusterLaunch, dev) == cudaSuccess;
           return asked && supported != 0 ? 1 : -1;
         }) > 0;
}

bool SmallMSupported(const GemmProblem& p, SmallMVariant v) {
  const bool tensor_core = SmallMTensorCore(v);
  // Int8 runs on the tensor-core variants (m16n8k32), with both scales.
  const bool int8 = p.ab_type == ElemType::kI8;
  const bool float_types = p.ab_type == ElemType::kF32 || p.ab_type == ElemType::kBF16 ||
                           p.ab_type == ElemType::kF16 ||
                           (int8 && tensor_core && p.x_scale != nullptr && p.w_scale != nullptr);
  // Tensor-core chunks are four 16-byte vectors of k; the CUDA-core kernels step one vector.
  const int64_t vec = 16 / static_cast<int64_t>(ElemSize(p.ab_type)) * (tensor_core ? 4 : 1);
  const bool out_ok = p.out_type == ElemType::kF32 ||
                      (int8 ? p.out_type == ElemType::kBF16 : p.out_type == p.ab_type);
  const bool type_ok = tensor_core ? p.ab_type != ElemType::kF32 || p.tf32 : true;
  constexpr int64_t kIntMax = 0x7fffffff;
  return float_types && type_ok && out_ok && !Sm90Only(p) && p.m >= 1 &&
         p.m <= (tensor_core ? kSmallMMax : kSmallMCudaCoreMax) && p.n >= 1 && p.n <= kIntMax &&
         p.k >= vec && p.k <= kIntMax && p.k % vec == 0 && p.n * p.k <= (int64_t{1} << 62) &&
         Aligned16(p.x) && Aligned16(p.w) && (SmallMClusterSplits(v) == 1 || ClusterLaunch());
}

bool SmallMTensorCore(SmallMVariant v) { return Traits(v).tc_rows > 0; }

int SmallMClusterSplits(SmallMVariant v) { return Traits(v).splits; }

const char* SmallMVariantName(SmallMVariant v) { return Traits(v).name; }

cudaError_t GemmSmallM(const GemmProblem& p, cudaStream_t stream, SmallMVariant variant) {
  if (!SmallMSupported(p, variant)) return cudaErrorInvalidValue;
  switch (p.ab_type) {
    case ElemType::kF32:
      return LaunchSmallMOut<float>(p, variant, stream);
    case ElemType::kBF16:
      return LaunchSmallMOut<__nv_bfloat16>(p, variant, stream);
    case ElemType::kF16:
      return LaunchSmallMOut<__half>(p, variant, stream);
    case ElemType::kI8:
      return LaunchSmallMOut<int8_t>(p, variant, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

// ---- cuBLAS -------------------------------------------------------------------------------------

CublasGemm::~CublasGemm() {
  if (handle_ != nullptr) cublasDestroy(handle_);
  if (workspace_ != nullptr) cudaFree(workspace_);
}

std::string CublasGemm::Init(cudaStream_t stream) {
  // cuBLAS's recommended workspace on Hopper is 32 MiB; a workspace of our own keeps cuBLAS from
  // allocating during graph capture.
  constexpr size_t kWorkspace = 32u << 20;
  cublasStatus_t status = cublasCreate(&handle_);
  if (status != CUBLAS_STATUS_SUCCESS) return CublasError("cublasCreate", status);
  if (cudaError_t e = cudaMalloc(&workspace_, kWorkspace); e != cudaSuccess)
    return std::string("cudaMalloc (cuBLAS workspace): ") + cudaGetErrorString(e);
  if ((status = cublasSetStream(handle_, stream)) != CUBLAS_STATUS_SUCCESS)
    return CublasError("cublasSetStream", status);
  if ((status = cublasSetWorkspace(handle_, workspace_, kWorkspace)) != CUBLAS_STATUS_SUCCESS)
    return CublasError("cublasSetWorkspace", status);
  stream_ = stream;
  return "";
}

int64_t CublasGemm::AccumulatorFloats(const GemmProblem& p) {
  const bool direct = p.out_type == ElemType::kF32 && p.bias == nullptr && p.residual == nullptr &&
                      p.act == Activation::kNone;
  return direct ? 0 : p.m * p.n;
}

std::string CublasGemm::Run(const GemmProblem& p, float* acc) {
  if (handle_ == nullptr) return "cuBLAS handle not initialized";
  if (p.implicit) return "cuBLAS runs no implicit GEMM (a convolution's windows)";
  const bool direct = AccumulatorFloats(p) == 0;
  if (!direct && acc == nullptr) return "cuBLAS GEMM needs an accumulator buffer";
  void* out = direct ? p.y : acc;
  const float beta = 0.f;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (p.ab_type == ElemType::kF32)
    compute = p.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  // Row-major y (m x n) is column-major y^T (n x m) = w (n x k, i.e. column-major k x n,
  // transposed) times x^T (column-major k x m).
  cublasStatus_t status =
      cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(p.n), static_cast<int>(p.m),
                   static_cast<int>(p.k), &p.alpha, p.w, CudaType(p.ab_type), static_cast<int>(p.k),
                   p.x, CudaType(p.ab_type), static_cast<int>(p.k), &beta, out, CUDA_R_32F,
                   static_cast<int>(p.n), compute, CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS) return CublasError("cublasGemmEx", status);
  if (direct) return "";
  if (cudaError_t e = BiasActivation(acc, p.m, p.n, p.bias, p.act, p.residual, p.out_type, p.y,
                                     stream_, p.residual_first);
      e != cudaSuccess)
    return std::string("epilogue kernel: ") + cudaGetErrorString(e);
  return "";
}

}  // namespace nereid::kernels::cuda
