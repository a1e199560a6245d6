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
#include <cuda.h>
#include <cudaTypedefs.h>

#include <atomic>
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
                  SmemBytes<64, 256>() <= 232448 && SmemBytes<64, 128>() <= 232448,
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

// One lane's two columns (col, col + 1) down 'rows' rows of a parked chunk: y = act(alpha *
// col_scale * acc + bias) + residual (col_scale: int8 weights' per-channel scales, or null). The
// activation is a template parameter so the loop stays small and branch-free.
template <typename OutT, Activation A>
__device__ __forceinline__ void ChunkRows(const float* slice, int lane, int rows, int64_t row0,
                                          int col, int64_t n, float alpha, const float* col_scale,
                                          const float* bias, const OutT* residual, OutT* y) {
  if (col >= n) return;
  const bool second = col + 1 < n, paired = second && (n & 1) == 0;
  const float b0 = bias != nullptr ? bias[col] : 0.f;
  const float b1 = bias != nullptr && second ? bias[col + 1] : 0.f;
  const float a0 = col_scale != nullptr ? alpha * col_scale[col] : alpha;
  const float a1 = col_scale != nullptr && second ? alpha * col_scale[col + 1] : alpha;
#pragma unroll 2
  for (int r = 0; r < rows; ++r) {
    const float2 v = *reinterpret_cast<const float2*>(slice + r * kEpiStride + 2 * lane);
    const int64_t at = (row0 + r) * n + col;
    float e0 = Activate<A>(fmaf(a0, v.x, b0)), e1 = Activate<A>(fmaf(a1, v.y, b1));
    if (residual != nullptr) {
      e0 += ToFloat(residual[at]);
      if (second) e1 += ToFloat(residual[at + 1]);
    }
    if (paired) {
      StoreTwo(y + at, e0, e1);
    } else {
      y[at] = FromFloat<OutT>(e0);
      if (second) y[at + 1] = FromFloat<OutT>(e1);
    }
  }
}

template <typename T, int BM, int BN, typename OutT>
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
      BarInit(&full[s], 1);
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

  if (warpgroup == 0) {  // producer
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
  for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
    int tm, tn;
    TileCoords(unit / a.splits, tiles_m, tiles_n, &tm, &tn);
    const int split = unit % a.splits;
    const int kb_end = min(kblocks, (split + 1) * split_blocks);
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0;
    int previous = -1;
    for (int kb = split * split_blocks; kb < kb_end; ++kb) {
      BarWait(&full[stage], phase);
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
    // Int8: each of the lane's two rows scaled by its x_scale as the accumulators leave registers.
    float row_scale[2] = {1.f, 1.f};
    if (a.x_scale != nullptr)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (row0 + g + 8 * r < a.m) row_scale[r] = a.x_scale[row0 + g + 8 * r];
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
      if (a.splits > 1) {
        ChunkRows<float, Activation::kNone>(slice, lane, rows, row0, col, a.n, 1.f, a.w_scale,
                                            nullptr, nullptr,
                                            a.partial + static_cast<int64_t>(split) * a.m * a.n);
      } else {
        const auto* res = static_cast<const OutT*>(a.residual);
        auto* y = static_cast<OutT*>(a.y);
        switch (a.act) {
          case Activation::kRelu:
            ChunkRows<OutT, Activation::kRelu>(slice, lane, rows, row0, col, a.n, a.alpha,
                                               a.w_scale, a.bias, res, y);
            break;
          case Activation::kSigmoid:
            ChunkRows<OutT, Activation::kSigmoid>(slice, lane, rows, row0, col, a.n, a.alpha,
                                                  a.w_scale, a.bias, res, y);
            break;
          case Activation::kTanh:
            ChunkRows<OutT, Activation::kTanh>(slice, lane, rows, row0, col, a.n, a.alpha,
                                               a.w_scale, a.bias, res, y);
            break;
          case Activation::kGelu:
            ChunkRows<OutT, Activation::kGelu>(slice, lane, rows, row0, col, a.n, a.alpha,
                                               a.w_scale, a.bias, res, y);
            break;
          default:
            ChunkRows<OutT, Activation::kNone>(slice, lane, rows, row0, col, a.n, a.alpha,
                                               a.w_scale, a.bias, res, y);
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

template <typename T, int BM, int BN, typename OutT>
cudaError_t Launch(const GemmProblem& p, int splits, int sms, cudaStream_t stream) {
  CUtensorMap map_x, map_w;
  if (!MakeMap(&map_x, p.x, p.ab_type, p.m, p.k, BM) ||
      !MakeMap(&map_w, p.w, p.ab_type, p.n, p.k, BN))
    return cudaErrorInvalidValue;
  auto* kernel = &Sm90Kernel<T, BM, BN, OutT>;
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
  kernel<<<grid, Threads<BM>(), kSmem, stream>>>(map_x, map_w, args);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess || splits == 1) return e;
  return SplitEpilogue(p.workspace, splits, p.alpha, p.m, p.n, p.bias, p.act, p.residual,
                       p.out_type, p.y, stream);
}

template <typename T, typename OutT>
cudaError_t LaunchTile(const GemmProblem& p, const Sm90Config& c, int sms, cudaStream_t stream) {
  switch (c.tile) {
    case Sm90Tile::k128x256:
      return Launch<T, 128, 256, OutT>(p, c.splits, sms, stream);
    case Sm90Tile::k128x128:
      return Launch<T, 128, 128, OutT>(p, c.splits, sms, stream);
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

}  // namespace

std::string Sm90Config::Name() const {
  static constexpr const char* kNames[] = {"sm90-128x256", "sm90-128x128", "sm90-64x256",
                                           "sm90-64x128"};
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
  return types && out_ok && split_ok && p.m >= 1 && p.n >= 1 && p.k >= 1 && p.m < kMax &&
         p.n < kMax && p.k < kMax && (p.k * elem) % 16 == 0 && Aligned16(p.x) && Aligned16(p.w) &&
         Encoder() != nullptr && HopperSmCount() > 0;
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
