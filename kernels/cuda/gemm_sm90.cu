// GemmSm90: Nereid's GEMM for Hopper (sm_90a) at shapes that fill the GPU.
//
// A persistent grid (one block per SM) walks the output tiles (BM x BN, BM 128 or 64) in groups of
// 8 tile-rows so that neighbouring blocks share operands in L2. Each block has 1 + BM / 64
// warpgroups:
//  - the producer (one thread) loads 128-byte-wide K blocks of x and w with TMA into a ring of
//    shared-memory stages, swizzled (128B) the way wgmma reads them, each stage guarded by a "full"
//    and an "empty" mbarrier;
//  - the consumers each own 64 rows of the tile and issue wgmma.mma_async (64 x BN x K-step) on the
//    staged operands, keeping one stage's MMAs in flight while releasing the stage before;
//  - after the tile's last K block the consumers apply the epilogue (alpha, bias, activation,
//    residual, conversion) from their accumulator registers straight to global memory, while the
//    producer already fills the stages for their next tile.
// Operands are K-major on both sides (x is m x k, w is n x k), which is what wgmma wants for every
// type, tf32 included; TMA zero-fills whatever lies past m, n or k, so edges need no special case.
//
// As an implicit GEMM (a convolution on a channels-last image, kGather), x's rows are gathered
// instead: every thread of the producer's warpgroup copies 16-byte pieces of the tile's windows
// with cp.async into the same swizzled layout (each piece 8 channels of one tap, side by side in
// the image; taps outside it and columns past k are zero-filled), and the stage's
// "full" barrier also waits on those copies (cp.async.mbarrier.arrive). w still comes by TMA.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <cstring>
#include <string>
#include <type_traits>

#include "cuda/device_math.cuh"
#include "cuda/epilogue.h"
#include "cuda/gemm.h"
#include "cuda/wgmma.cuh"

namespace nereid::kernels::cuda {
namespace {

constexpr int kRowBytes = 128;  // one K block of one row: the span of the 128-byte swizzle
constexpr int kGroupM = 8;      // tile-rows walked together (L2 reuse)

// Tile rows BM: one consumer warpgroup per 64 rows, after the producer's warpgroup.
template <int BM>
constexpr int Threads() {
  return 128 * (1 + BM / 64);
}
template <int BM>
constexpr int ConsumerWarps() {
  return BM / 16;
}
// As many stages as fit in 192 KiB, at most 8: 128 x 256 4, 128 x 128 6, 64 x 256 4, 64 x 128 8.
template <int BM, int BN>
constexpr int Stages() {
  const int fit = 192 * 1024 / ((BM + BN) * kRowBytes);
  return fit < 8 ? fit : 8;
}
// The epilogue passes each consumer warp's 16 x BN accumulators through shared memory in chunks of
// 16 x kEpiCols (rows padded to kEpiStride floats), so one rolled loop per chunk applies the
// epilogue with coalesced stores: unrolled per register, the epilogue's code (activations
// included) grew the kernel past 300 KiB and instruction fetch, not the tensor cores, set its pace.
constexpr int kEpiCols = 64;
constexpr int kEpiStride = kEpiCols + 2;
template <int BM>
constexpr size_t EpiBytes() {
  return size_t{ConsumerWarps<BM>()} * 16 * kEpiStride * sizeof(float);
}
template <int BM, int BN>
constexpr size_t SmemBytes() {
  // + 1024 to align the stages to the swizzle atom, + the epilogue buffer, + the barriers.
  return static_cast<size_t>(Stages<BM, BN>()) * (BM + BN) * kRowBytes + 1024 + EpiBytes<BM>() +
         2 * Stages<BM, BN>() * 8;
}
static_assert(SmemBytes<128, 256>() <= 232448 && SmemBytes<128, 128>() <= 232448 &&
                  SmemBytes<64, 256>() <= 232448 && SmemBytes<64, 128>() <= 232448 &&
                  SmemBytes<128, 64>() <= 232448,
              "over Hopper's 227 KiB of shared memory per block");

struct Sm90Args {
  int m, n, k;
  float alpha;
  const float* x_scale;  // int8 operands: per row of x and per column of y (null otherwise)
  const float* w_scale;
  const float* bias;
  const void* residual;
  void* y;
  Activation act;
  const void* image;  // kGather: the channels-last image (x's map is then unused)
  int h, w, c_in, ow, ohw, kw, stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left;
  bool residual_first;  // act(alpha * acc + bias + residual): a convolution's order
  int splits;      // K split this many ways: raw partial sums to 'partial', summed by SplitEpilogue
  float* partial;  // splits x m x n floats when splits > 1
};

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void BarInit(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SmemAddr(bar)), "r"(count));
}
__device__ __forceinline__ void BarExpectTx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SmemAddr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void BarArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(SmemAddr(bar)) : "memory");
}
// Waits until the barrier's phase with the given parity has completed.
__device__ __forceinline__ void BarWait(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(SmemAddr(bar)),
      "r"(parity)
      : "memory");
}

// TMA: the box at (c0 = k offset, c1 = row offset) of 'map' into shared memory, completing 'bar'.
__device__ __forceinline__ void TmaLoad(void* dst, const CUtensorMap* map, uint64_t* bar, int c0,
                                        int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];" ::"r"(SmemAddr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(SmemAddr(bar))
      : "memory");
}

// wgmma's shared-memory matrix descriptor for a K-major operand in 128-byte-swizzled rows: start
// address, leading offset (unused with this swizzle), stride 1024 bytes between 8-row groups.
__device__ __forceinline__ uint64_t SmemDesc(const void* p) {
  const uint64_t addr = SmemAddr(p);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from touching accumulators across the asynchronous MMAs.
template <int R>
__device__ __forceinline__ void FenceOperands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int R>
__device__ __forceinline__ void FenceOperands(int (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

__device__ __forceinline__ void TileCoords(int tile, int tiles_m, int tiles_n, int* tm, int* tn) {
  const int per_group = kGroupM * tiles_n;
  const int first = tile / per_group * kGroupM;
  const int rows = min(tiles_m - first, kGroupM);
  const int in = tile % per_group;
  *tm = first + in % rows;
  *tn = in / rows;
}

// y[0], y[1] = v0, v1 in one store (y aligned to two elements).
template <typename OutT>
__device__ __forceinline__ void StoreTwo(OutT* y, float v0, float v1) {
  if constexpr (std::is_same_v<OutT, float>) {
    *reinterpret_cast<float2*>(y) = make_float2(v0, v1);
  } else {
    OutT pair[2] = {FromFloat<OutT>(v0), FromFloat<OutT>(v1)};
    *reinterpret_cast<uint32_t*>(y) = *reinterpret_cast<const uint32_t*>(pair);
  }
}

// A lane's two residual elements as loaded, converted only where used (kept narrow: the
// accumulators of a 128 x 256 tile leave few registers free). float: a float2; 16-bit types: both
// in one word.
template <typename OutT>
using RawPair = std::conditional_t<std::is_same_v<OutT, float>, float2, uint32_t>;
// The residual's elements at p and p + 1 (the second one only where 'second'): one 4- or 8-byte
// load where the pair is aligned ('paired').
template <typename OutT>
__device__ __forceinline__ RawPair<OutT> LoadPair(const OutT* p, bool second, bool paired) {
  if (paired) return *reinterpret_cast<const RawPair<OutT>*>(p);
  OutT pair[2] = {p[0], second ? p[1] : OutT{}};
  RawPair<OutT> raw;
  memcpy(&raw, pair, sizeof raw);
  return raw;
}
template <typename OutT>
__device__ __forceinline__ float2 PairToFloats(RawPair<OutT> raw) {
  if constexpr (std::is_same_v<OutT, float>) {
    return raw;
  } else {
    OutT pair[2];
    memcpy(pair, &raw, sizeof raw);
    return make_float2(ToFloat(pair[0]), ToFloat(pair[1]));
  }
}

// One lane's two columns (col, col + 1) down 'rows' rows of a parked chunk: y = act(alpha *
// col_scale * acc + bias) + residual, or act(alpha * col_scale * acc + bias + residual) with
// kResidualFirst (col_scale: int8 weights' per-channel scales, or null). The activation and the
// order are template parameters so the loop stays small and branch-free. The residual is read
// kResidualRows rows at a time, all loads issued before the first use: one row per step kept a
// warp's 128 bytes in flight, and a 1x1 convolution from 64 channels (one K block a tile) ran
// 3.4x its time without a residual.
template <typename OutT, Activation A, bool kResidualFirst = false, int kResidualRows = 8>
__device__ __forceinline__ void ChunkRows(const float* slice, int lane, int rows, int64_t row0,
                                          int col, int64_t n, float alpha, const float* col_scale,
                                          const float* bias, const OutT* residual, OutT* y) {
  if (col >= n) return;
  const bool second = col + 1 < n, paired = second && (n & 1) == 0;
  const float b0 = bias != nullptr ? bias[col] : 0.f;
  const float b1 = bias != nullptr && second ? bias[col + 1] : 0.f;
  const float a0 = col_scale != nullptr ? alpha * col_scale[col] : alpha;
  const float a1 = col_scale != nullptr && second ? alpha * col_scale[col + 1] : alpha;
#pragma unroll 1
  for (int r0 = 0; r0 < rows; r0 += kResidualRows) {
    RawPair<OutT> res[kResidualRows];
#pragma unroll
    for (int i = 0; i < kResidualRows; ++i)
      if (residual != nullptr && r0 + i < rows)
        res[i] = LoadPair(residual + (row0 + r0 + i) * n + col, second, paired);
#pragma unroll
    for (int i = 0; i < kResidualRows; ++i) {
      const int r = r0 + i;
      if (r >= rows) break;
      const float2 v = *reinterpret_cast<const float2*>(slice + r * kEpiStride + 2 * lane);
      const int64_t at = (row0 + r) * n + col;
      float e0 = fmaf(a0, v.x, b0), e1 = fmaf(a1, v.y, b1);
      if constexpr (kResidualFirst) {
        const float2 add = PairToFloats<OutT>(res[i]);
        e0 = Activate<A>(e0 + add.x), e1 = Activate<A>(e1 + add.y);
      } else {
        e0 = Activate<A>(e0), e1 = Activate<A>(e1);
        if (residual != nullptr) {
          const float2 add = PairToFloats<OutT>(res[i]);
          e0 += add.x, e1 += add.y;
        }
      }
      if (paired) {
        StoreTwo(y + at, e0, e1);
      } else {
        y[at] = FromFloat<OutT>(e0);
        if (second) y[at + 1] = FromFloat<OutT>(e1);
      }
    }
  }
}

// The residual rows [row0, row0 + 16) x [col0, col0 + cols) of an m x n output asked into L2 by
// the warp (prefetch: nothing waits on it). The epilogue reads the residual one row per lane-step;
// straight from DRAM those reads kept too few bytes in flight, and a layer of few K blocks (a 1x1
// convolution from 64 channels) ran 3-4x the time it took without a residual.
template <typename OutT>
__device__ __forceinline__ void PrefetchResidual(const OutT* residual, int64_t m, int64_t n,
                                                 int64_t row0, int64_t col0, int cols, int lane) {
  constexpr int kLine = 128 / static_cast<int>(sizeof(OutT));  // elements per 128-byte line
  const int lines = (cols + kLine - 1) / kLine;
  for (int i = lane; i < 16 * lines; i += 32) {
    const int64_t row = row0 + i / lines, col = col0 + static_cast<int64_t>(i % lines) * kLine;
    if (row < m && col < n)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(residual + row * n + col));
  }
}

// Where the producer thread 'lane' (of 128) gathers the rows r0 + 16 i of a tile starting at pixel
// 'first' (kGather): each row's window origin in the image (y0 and x0 far negative past m, so every
// tap falls outside) and its image's first pixel.
template <int BM>
struct GatherRows {
  static constexpr int kRows = BM / 16;
  int y0[kRows], x0[kRows], pix[kRows];
  __device__ __forceinline__ void Set(const Sm90Args& a, int first, int r0) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int m = first + r0 + 16 * i;
      if (m < a.m) {
        const int img = m / a.ohw, rest = m - img * a.ohw;
        const int oy = rest / a.ow, ox = rest - oy * a.ow;
        y0[i] = oy * a.stride_h - a.pad_top, x0[i] = ox * a.stride_w - a.pad_left;
        pix[i] = img * a.h * a.w;
      } else {
        y0[i] = x0[i] = -(1 << 30), pix[i] = 0;
      }
    }
  }
};

template <typename T, int BM, int BN, typename OutT, bool kGather = false>
__global__ __launch_bounds__(Threads<BM>(),
                             1) void Sm90Kernel(const __grid_constant__ CUtensorMap map_x,
                                                const __grid_constant__ CUtensorMap map_w,
                                                const Sm90Args a) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Mma = sm90::Wgmma<T, BN>;
  using Acc = std::conditional_t<std::is_same_v<T, int8_t>, int, float>;
  constexpr int kStages = Stages<BM, BN>();
  constexpr int kBK = kRowBytes / static_cast<int>(sizeof(T));
  constexpr int kStepBytes = Mma::kStep * static_cast<int>(sizeof(T));
  constexpr uint32_t kStageBytes = (BM + BN) * kRowBytes;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* const smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                                   ~static_cast<uintptr_t>(1023));
  uint8_t* const a_tiles = smem;                             // kStages x BM rows
  uint8_t* const b_tiles = smem + kStages * BM * kRowBytes;  // kStages x BN rows
  float* const epi = reinterpret_cast<float*>(b_tiles + kStages * BN * kRowBytes);
  uint64_t* const full = reinterpret_cast<uint64_t*>(epi + EpiBytes<BM>() / sizeof(float));
  uint64_t* const empty = full + kStages;

  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      // Gathering: the TMA thread's arrival and one per producer thread when its copies land.
      BarInit(&full[s], kGather ? 129 : 1);
      BarInit(&empty[s], ConsumerWarps<BM>());  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const int tiles_m = (a.m + BM - 1) / BM, tiles_n = (a.n + BN - 1) / BN;
  const int tiles = tiles_m * tiles_n;
  const int kblocks = (a.k + kBK - 1) / kBK;
  // Work units: (tile, K split); a split past the end of k gets no blocks and writes zeros.
  const int units = tiles * a.splits;
  const int split_blocks = (kblocks + a.splits - 1) / a.splits;
  int stage = 0;
  unsigned phase = 0;

  if constexpr (kGather) {
    if (warpgroup == 0) {  // producer: all 128 threads gather x, thread 0 loads w
      const int t = threadIdx.x, piece = t % 8, r0 = t / 8;
      constexpr int kPiece = 16 / static_cast<int>(sizeof(T));
      const T* const image = static_cast<const T*>(a.image);
      if (t == 0)
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map_w))
                     : "memory");
      GatherRows<BM> rows;
      for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
        int tm, tn;
        TileCoords(unit / a.splits, tiles_m, tiles_n, &tm, &tn);
        rows.Set(a, tm * BM, r0);
        const int kb_end = min(kblocks, (unit % a.splits + 1) * split_blocks);
        for (int kb = unit % a.splits * split_blocks; kb < kb_end; ++kb) {
          BarWait(&empty[stage], phase ^ 1);
          if (t == 0) {
            BarExpectTx(&full[stage], BN * kRowBytes);
            TmaLoad(b_tiles + stage * BN * kRowBytes, &map_w, &full[stage], kb * kBK, tn * BN);
          }
          // This thread's piece of the K block: 8 (bf16/fp16) channels of one tap, past k zeros.
          const int kk = kb * kBK + piece * kPiece;
          const int tap = kk / a.c_in, c0 = kk - tap * a.c_in;
          const int ky = tap / a.kw, kx = tap - ky * a.kw;
          const bool k_ok = kk < a.k;
          uint8_t* const dst = a_tiles + stage * BM * kRowBytes;
#pragma unroll
          for (int i = 0; i < GatherRows<BM>::kRows; ++i) {
            const int r = r0 + 16 * i;
            const int iy = rows.y0[i] + ky * a.dilation_h, ix = rows.x0[i] + kx * a.dilation_w;
            const bool ok = k_ok && static_cast<unsigned>(iy) < static_cast<unsigned>(a.h) &&
                            static_cast<unsigned>(ix) < static_cast<unsigned>(a.w);
            const T* src =
                ok ? image + (static_cast<int64_t>(rows.pix[i] + iy * a.w + ix) * a.c_in + c0)
                   : image;
            // The 128B swizzle TMA writes and wgmma reads: piece p of row r at p ^ (r % 8).
            CopyAsync16(dst + r * kRowBytes + ((piece ^ (r & 7)) << 4), src, ok);
          }
          asm volatile(
              "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(SmemAddr(&full[stage]))
              : "memory");
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
      }
      return;
    }
  } else if (warpgroup == 0) {  // producer
    if (threadIdx.x != 0) return;
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map_x)) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map_w)) : "memory");
    for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
      int tm, tn;
      TileCoords(unit / a.splits, tiles_m, tiles_n, &tm, &tn);
      const int kb_end = min(kblocks, (unit % a.splits + 1) * split_blocks);
      for (int kb = unit % a.splits * split_blocks; kb < kb_end; ++kb) {
        BarWait(&empty[stage], phase ^ 1);
        BarExpectTx(&full[stage], kStageBytes);
        TmaLoad(a_tiles + stage * BM * kRowBytes, &map_x, &full[stage], kb * kBK, tm * BM);
        TmaLoad(b_tiles + stage * BN * kRowBytes, &map_w, &full[stage], kb * kBK, tn * BN);
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
    }
    return;
  }

  // Consumers.
  const int half = warpgroup - 1;  // which 64 rows of the tile
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  Acc d[BN / 2];
  const auto* const residual = a.splits == 1 ? static_cast<const OutT*>(a.residual) : nullptr;
  // This warp's 16 rows of a tile's residual into L2: the first tile's now, each next tile's while
  // this one runs.
  auto prefetch = [&](int unit) {
    if (residual == nullptr || unit >= units) return;
    int pm, pn;
    TileCoords(unit / a.splits, tiles_m, tiles_n, &pm, &pn);
    PrefetchResidual(residual, a.m, a.n, static_cast<int64_t>(pm) * BM + half * 64 + warp * 16,
                     static_cast<int64_t>(pn) * BN, BN, lane);
  };
  prefetch(blockIdx.x);
  for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
    prefetch(unit + gridDim.x);
    int tm, tn;
    TileCoords(unit / a.splits, tiles_m, tiles_n, &tm, &tn);
    const int split = unit % a.splits;
    const int kb_end = min(kblocks, (split + 1) * split_blocks);
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0;
    int previous = -1;
    for (int kb = split * split_blocks; kb < kb_end; ++kb) {
      BarWait(&full[stage], phase);
      // Gathered rows were written by cp.async (the generic proxy); wgmma reads through the async
      // proxy.
      if constexpr (kGather) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      const uint8_t* at = a_tiles + stage * BM * kRowBytes + half * 64 * kRowBytes;
      const uint8_t* bt = b_tiles + stage * BN * kRowBytes;
      WgmmaFence();
#pragma unroll
      for (int s = 0; s < kRowBytes / kStepBytes; ++s)
        Mma::Run(d, SmemDesc(at + s * kStepBytes), SmemDesc(bt + s * kStepBytes));
      WgmmaCommit();
      WgmmaWait<1>();  // the previous stage's MMAs are done: hand it back to the producer
      if (previous >= 0 && lane == 0) BarArrive(&empty[previous]);
      previous = stage;
      if (++stage == kStages) stage = 0, phase ^= 1;
    }
    WgmmaWait<0>();
    FenceOperands(d);
    if (previous >= 0 && lane == 0) BarArrive(&empty[previous]);

    // Accumulator layout of wgmma m64nN: warp w of the warpgroup holds rows 16w + lane/4 (+8);
    // register 4j + 2r + c is column 8j + 2(lane%4) + c of row + 8r. Per chunk of kEpiCols
    // columns, the warp parks its values in its slice of 'epi', then each lane takes two
    // neighbouring columns down the 16 rows.
    float* const slice = epi + (threadIdx.x / 32 - 4) * 16 * kEpiStride;
    const int64_t row0 = tm * BM + half * 64 + warp * 16;
    const int rows = static_cast<int>(min(static_cast<int64_t>(16), a.m - row0));
    const int g = lane / 4, t = lane % 4;
    // Int8: each of the lane's two rows scaled by its x_scale as the accumulators leave registers
    // (gathered: one scale per image, its rows the image's ohw output pixels).
    float row_scale[2] = {1.f, 1.f};
    if (a.x_scale != nullptr)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (const int64_t row = row0 + g + 8 * r; row < a.m)
          row_scale[r] = a.x_scale[kGather ? row / a.ohw : row];
#pragma unroll
    for (int c = 0; c < BN / kEpiCols; ++c) {
#pragma unroll
      for (int jj = 0; jj < kEpiCols / 8; ++jj) {
        const int j = c * (kEpiCols / 8) + jj;
#pragma unroll
        for (int r = 0; r < 2; ++r)
          *reinterpret_cast<float2*>(slice + (g + 8 * r) * kEpiStride + 8 * jj + 2 * t) =
              make_float2(static_cast<float>(d[4 * j + 2 * r]) * row_scale[r],
                          static_cast<float>(d[4 * j + 2 * r + 1]) * row_scale[r]);
      }
      __syncwarp();
      const int col = tn * BN + c * kEpiCols + 2 * lane;
      // Residual rows loaded at once: fewer where 128 accumulators leave few registers.
      constexpr int kRR = BN < 256 ? 8 : sizeof(OutT) == 4 ? 2 : 4;
      if (a.splits > 1) {
        ChunkRows<float, Activation::kNone, false, kRR>(
            slice, lane, rows, row0, col, a.n, 1.f, a.w_scale, nullptr, nullptr,
            a.partial + static_cast<int64_t>(split) * a.m * a.n);
      } else {
        const auto* res = static_cast<const OutT*>(a.residual);
        auto* y = static_cast<OutT*>(a.y);
        const bool residual_first = a.residual_first && res != nullptr;
        switch (a.act) {
          case Activation::kRelu:
            if (residual_first) {  // a convolution's residual block: relu(conv + bias + x)
              ChunkRows<OutT, Activation::kRelu, true, kRR>(slice, lane, rows, row0, col, a.n,
                                                            a.alpha, a.w_scale, a.bias, res, y);
              break;
            }
            ChunkRows<OutT, Activation::kRelu, false, kRR>(slice, lane, rows, row0, col, a.n,
                                                           a.alpha, a.w_scale, a.bias, res, y);
            break;
          case Activation::kSigmoid:
            ChunkRows<OutT, Activation::kSigmoid, false, kRR>(slice, lane, rows, row0, col, a.n,
                                                              a.alpha, a.w_scale, a.bias, res, y);
            break;
          case Activation::kTanh:
            ChunkRows<OutT, Activation::kTanh, false, kRR>(slice, lane, rows, row0, col, a.n,
                                                           a.alpha, a.w_scale, a.bias, res, y);
            break;
          case Activation::kGelu:
            ChunkRows<OutT, Activation::kGelu, false, kRR>(slice, lane, rows, row0, col, a.n,
                                                           a.alpha, a.w_scale, a.bias, res, y);
            break;
          default:
            ChunkRows<OutT, Activation::kNone, false, kRR>(slice, lane, rows, row0, col, a.n,
                                                           a.alpha, a.w_scale, a.bias, res, y);
        }
      }
      __syncwarp();
    }
  }
#endif
}

// ---- host side ----------------------------------------------------------------------------------

using EncodeTiledFn = PFN_cuTensorMapEncodeTiled_v12000;

// cuTensorMapEncodeTiled from the driver, found through the runtime (no link-time libcuda): null
// where there is no driver.
EncodeTiledFn Encoder() {
  static const EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      return EncodeTiledFn{nullptr};
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

// Per device: compute capability 9.0 and the SM count (0: not a Hopper GPU we can use).
int HopperSmCount() {
  static std::atomic<int> cache[kMaxDevices] = {};  // 0 unknown, -1 not Hopper, else SMs
  const int v = PerDevice(cache, [](int dev) {
    int major = 0, minor = 0, sms = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    return major == 9 && minor == 0 && sms > 0 ? sms : -1;
  });
  return v > 0 ? v : 0;
}

CUtensorMapDataType TmaType(ElemType t) {
  switch (t) {
    case ElemType::kBF16:
      return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case ElemType::kF16:
      return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case ElemType::kI8:
      return CU_TENSOR_MAP_DATA_TYPE_UINT8;  // bytes moved as they are
    default:
      return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  }
}

// A rows x k row-major operand read in boxes of box_rows x (128 bytes of k), 128B-swizzled.
bool MakeMap(CUtensorMap* map, const void* base, ElemType t, int64_t rows, int64_t k,
             int box_rows) {
  const auto elem = static_cast<cuuint64_t>(ElemSize(t));
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * elem};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kRowBytes / elem),
                             static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  return Encoder()(map, TmaType(t), 2, const_cast<void*>(base), dims, strides, box, element_strides,
                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <typename T, int BM, int BN, typename OutT, bool kGather = false>
cudaError_t Launch(const GemmProblem& p, int splits, int sms, cudaStream_t stream) {
  CUtensorMap map_x, map_w;
  if (!MakeMap(&map_w, p.w, p.ab_type, p.n, p.k, BN)) return cudaErrorInvalidValue;
  if (kGather)
    map_x = map_w;  // unused
  else if (!MakeMap(&map_x, p.x, p.ab_type, p.m, p.k, BM))
    return cudaErrorInvalidValue;
  auto* kernel = &Sm90Kernel<T, BM, BN, OutT, kGather>;
  constexpr size_t kSmem = SmemBytes<BM, BN>();
  // Per device: the attribute belongs to the function in the current context.
  static std::atomic<bool> configured[kMaxDevices] = {};
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  if (!configured[dev].load(std::memory_order_acquire)) {
    if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(kSmem));
        e != cudaSuccess)
      return e;
    configured[dev].store(true, std::memory_order_release);
  }
  const int64_t units = ((p.m + BM - 1) / BM) * ((p.n + BN - 1) / BN) * splits;
  const unsigned grid = static_cast<unsigned>(units < sms ? units : sms);
  Sm90Args args{};
  args.m = static_cast<int>(p.m), args.n = static_cast<int>(p.n), args.k = static_cast<int>(p.k);
  args.alpha = p.alpha, args.bias = p.bias, args.residual = p.residual, args.y = p.y;
  args.x_scale = p.x_scale, args.w_scale = p.w_scale;
  args.act = p.act, args.splits = splits, args.partial = p.workspace;
  args.residual_first = p.residual_first;
  if (kGather) {
    const Conv2dGeometry& g = p.image;
    args.image = p.x;
    args.h = static_cast<int>(g.h), args.w = static_cast<int>(g.w);
    args.c_in = static_cast<int>(g.c_in), args.ow = static_cast<int>(g.ow);
    args.ohw = static_cast<int>(g.oh * g.ow), args.kw = static_cast<int>(g.kw);
    args.stride_h = static_cast<int>(g.stride_h), args.stride_w = static_cast<int>(g.stride_w);
    args.dilation_h = static_cast<int>(g.dilation_h);
    args.dilation_w = static_cast<int>(g.dilation_w);
    args.pad_top = static_cast<int>(g.pad_top), args.pad_left = static_cast<int>(g.pad_left);
  }
  kernel<<<grid, Threads<BM>(), kSmem, stream>>>(map_x, map_w, args);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess || splits == 1) return e;
  return SplitEpilogue(p.workspace, splits, p.alpha, p.m, p.n, p.bias, p.act, p.residual,
                       p.out_type, p.y, stream, p.residual_first);
}

template <typename T, typename OutT>
cudaError_t LaunchTile(const GemmProblem& p, const Sm90Config& c, int sms, cudaStream_t stream) {
  if constexpr (((std::is_same_v<T, __nv_bfloat16> ||
                  std::is_same_v<T, __half>)&&std::is_same_v<OutT, T>) ||
                (std::is_same_v<T, int8_t> && std::is_same_v<OutT, __nv_bfloat16>)) {
    if (p.implicit) {  // (Sm90Supported: 128-row tiles, y in the operands' type or int8 -> bf16)
      if (c.tile == Sm90Tile::k128x256)
        return Launch<T, 128, 256, OutT, true>(p, c.splits, sms, stream);
      if (c.tile == Sm90Tile::k128x64)
        return Launch<T, 128, 64, OutT, true>(p, c.splits, sms, stream);
      return Launch<T, 128, 128, OutT, true>(p, c.splits, sms, stream);
    }
  }
  switch (c.tile) {
    case Sm90Tile::k128x256:
      return Launch<T, 128, 256, OutT>(p, c.splits, sms, stream);
    case Sm90Tile::k128x128:
      return Launch<T, 128, 128, OutT>(p, c.splits, sms, stream);
    case Sm90Tile::k128x64:
      return Launch<T, 128, 64, OutT>(p, c.splits, sms, stream);
    case Sm90Tile::k64x256:
      return Launch<T, 64, 256, OutT>(p, c.splits, sms, stream);
    default:
      return Launch<T, 64, 128, OutT>(p, c.splits, sms, stream);
  }
}

template <typename T>
cudaError_t LaunchOut(const GemmProblem& p, const Sm90Config& c, int sms, cudaStream_t stream) {
  if (p.out_type == ElemType::kF32) return LaunchTile<T, float>(p, c, sms, stream);
  if constexpr (std::is_same_v<T, int8_t>) {
    if (p.out_type == ElemType::kBF16) return LaunchTile<T, __nv_bfloat16>(p, c, sms, stream);
  } else if constexpr (!std::is_same_v<T, float>) {
    if (p.out_type == p.ab_type) return LaunchTile<T, T>(p, c, sms, stream);
  }
  return cudaErrorInvalidValue;
}

// What the gathering kernel takes (GemmProblem::implicit): bf16/fp16 with y in the same type, or
// int8 (the image quantized per image: x_scale holds one scale per image) with y in bf16; one
// group, c_in a multiple of a 16-byte piece (8 bf16/fp16 or 16 int8 channels, within one tap),
// 128-row tiles, the sizes matching the image's, and every pixel index in int.
bool ImplicitSupported(const GemmProblem& p, const Sm90Config& c) {
  const Conv2dGeometry& g = p.image;
  constexpr int64_t kMax = int64_t{1} << 30;
  const int64_t piece = 16 / static_cast<int64_t>(ElemSize(p.ab_type));
  const bool sizes = g.n >= 1 && g.h >= 1 && g.w >= 1 && g.kh >= 1 && g.kw >= 1 && g.oh >= 1 &&
                     g.ow >= 1 && g.stride_h >= 1 && g.stride_w >= 1 && g.dilation_h >= 1 &&
                     g.dilation_w >= 1 && g.h < kMax && g.w < kMax && g.kh < kMax && g.kw < kMax &&
                     g.pad_top >= 0 && g.pad_left >= 0 && g.pad_top < kMax && g.pad_left < kMax &&
                     g.stride_h < kMax && g.stride_w < kMax && g.dilation_h < kMax &&
                     g.dilation_w < kMax && g.n * g.h * g.w < kMax && g.n * g.oh * g.ow < kMax &&
                     g.c_in >= 1 && g.c_in < kMax;
  const bool types =
      ((p.ab_type == ElemType::kBF16 || p.ab_type == ElemType::kF16) && p.out_type == p.ab_type) ||
      (p.ab_type == ElemType::kI8 && p.out_type == ElemType::kBF16);
  return types && sizes && g.groups == 1 && g.c_in % piece == 0 && p.k == g.kh * g.kw * g.c_in &&
         p.m == g.n * g.oh * g.ow && p.n == g.c_out &&
         (c.tile == Sm90Tile::k128x256 || c.tile == Sm90Tile::k128x128 ||
          c.tile == Sm90Tile::k128x64) &&
         Aligned16(p.x);
}

}  // namespace

int Sm90SmCount() {
#if !defined(NEREID_CUDA_SM90A)
  return 0;
#else
  return Encoder() != nullptr ? HopperSmCount() : 0;
#endif
}

std::string Sm90Config::Name() const {
  static constexpr const char* kNames[] = {"sm90-128x256", "sm90-128x128", "sm90-64x256",
                                           "sm90-64x128", "sm90-128x64"};
  std::string name = kNames[static_cast<int>(tile)];
  if (splits > 1) name += "-k" + std::to_string(splits);
  return name;
}

int64_t Sm90WorkspaceFloats(const GemmProblem& p, const Sm90Config& c) {
  return c.splits > 1 ? c.splits * p.m * p.n : 0;
}

bool Sm90Supported(const GemmProblem& p, const Sm90Config& c) {
#if !defined(NEREID_CUDA_SM90A)
  return false;  // the kernel is compiled only for sm_90a (NEREID_CUDA_ARCHITECTURES)
#endif
  const bool int8 = p.ab_type == ElemType::kI8;
  const bool types = p.ab_type == ElemType::kBF16 || p.ab_type == ElemType::kF16 ||
                     (p.ab_type == ElemType::kF32 && p.tf32) ||
                     (int8 && p.x_scale != nullptr && p.w_scale != nullptr);
  const bool out_ok = p.out_type == ElemType::kF32 ||
                      (int8 ? p.out_type == ElemType::kBF16 : p.out_type == p.ab_type);
  const int64_t elem = static_cast<int64_t>(ElemSize(p.ab_type));
  constexpr int64_t kMax = int64_t{1} << 30;
  const bool split_ok =
      c.splits == 1 || (c.splits >= 2 && c.splits <= kSm90MaxSplits && p.workspace != nullptr &&
                        p.workspace_floats >= Sm90WorkspaceFloats(p, c));
  // The residual before an activation: Relu only (a convolution's residual block).
  const bool order_ok = !ResidualBeforeActivation(p) || p.act == Activation::kRelu;
  if (p.implicit && !ImplicitSupported(p, c)) return false;
  if (c.tile == Sm90Tile::k128x64 && p.n > 64) return false;  // 128 x 128 covers those
  return types && out_ok && split_ok && order_ok && p.m >= 1 && p.n >= 1 && p.k >= 1 &&
         p.m < kMax && p.n < kMax && p.k < kMax && (p.k * elem) % 16 == 0 && Aligned16(p.x) &&
         Aligned16(p.w) && Encoder() != nullptr && HopperSmCount() > 0;
}

cudaError_t GemmSm90(const GemmProblem& p, cudaStream_t stream, const Sm90Config& c) {
  if (!Sm90Supported(p, c)) return cudaErrorInvalidValue;
  const int sms = HopperSmCount();
  switch (p.ab_type) {
    case ElemType::kBF16:
      return LaunchOut<__nv_bfloat16>(p, c, sms, stream);
    case ElemType::kF16:
      return LaunchOut<__half>(p, c, sms, stream);
    case ElemType::kF32:
      return LaunchOut<float>(p, c, sms, stream);
    case ElemType::kI8:
      return LaunchOut<int8_t>(p, c, sms, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace nereid::kernels::cuda
