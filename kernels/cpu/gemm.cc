#include "cpu/gemm.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <utility>

#include "cpu/cpu_features.h"
#include "cpu/elementwise.h"
#include "cpu/gemm_isa.h"
#include "cpu/parallel.h"
#include "cpu/simd_f32.h"

namespace nereid::kernels {

void* AllocLarge(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  bytes = (bytes + 63) / 64 * 64;
  if (bytes < kHuge) return std::aligned_alloc(64, bytes);
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
#if defined(MADV_HUGEPAGE)
  if (p != nullptr) madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return p;
}

namespace {

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float, AlignedFree>;

Buffer AllocAligned(size_t floats) {
  return Buffer(static_cast<float*>(AllocLarge(floats * sizeof(float))));
}

// Packs rows [0, mc) x depth [0, kc) of op(A) into kMr-row panels laid out [panel][k][kMr].
void PackA(int64_t kMr, bool trans, const float* a, int64_t lda, int64_t mc, int64_t kc,
           float* out) {
  for (int64_t i0 = 0; i0 < mc; i0 += kMr) {
    const int64_t rows = std::min(kMr, mc - i0);
    for (int64_t p = 0; p < kc; ++p) {
      for (int64_t i = 0; i < rows; ++i)
        out[i] = trans ? a[p * lda + (i0 + i)] : a[(i0 + i) * lda + p];
      for (int64_t i = rows; i < kMr; ++i) out[i] = 0.f;
      out += kMr;
    }
  }
}

// Packs depth [0, kc) x columns [0, nc) of op(B) into kNr-column panels laid out [panel][k][kNr].
void PackB(int64_t kNr, bool trans, const float* b, int64_t ldb, int64_t kc, int64_t nc,
           float* out) {
  for (int64_t j0 = 0; j0 < nc; j0 += kNr) {
    const int64_t cols = std::min(kNr, nc - j0);
    if (trans) {
      // op(B)[p][j] = B[j][p]: read each source row contiguously, scatter into the L1-resident
      // panel.
      for (int64_t j = 0; j < cols; ++j) {
        const float* src = b + (j0 + j) * ldb;
        for (int64_t p = 0; p < kc; ++p) out[p * kNr + j] = src[p];
      }
      for (int64_t j = cols; j < kNr; ++j)
        for (int64_t p = 0; p < kc; ++p) out[p * kNr + j] = 0.f;
      out += kc * kNr;
      continue;
    }
    for (int64_t p = 0; p < kc; ++p) {
      if (cols == kNr) {
        std::memcpy(out, b + p * ldb + j0, kNr * sizeof(float));
      } else {
        for (int64_t j = 0; j < cols; ++j) out[j] = b[p * ldb + j0 + j];
        for (int64_t j = cols; j < kNr; ++j) out[j] = 0.f;
      }
      out += kNr;
    }
  }
}

constexpr int64_t kSmallMDotsRows = 16;

using sgemm::kMr;
using sgemm::kNr;
using sgemm::MicroKernel;
using sgemm::RowsKernel;

void MicroKernelPortable(int64_t kc, const float* a, const float* b, float alpha, float* c,
                         int64_t ldc, int64_t m, int64_t n) {
  float acc[kMr][kNr] = {};
  for (int64_t p = 0; p < kc; ++p) {
    for (int64_t i = 0; i < kMr; ++i) {
      const float av = a[p * kMr + i];
      for (int64_t j = 0; j < kNr; ++j) acc[i][j] += av * b[p * kNr + j];
    }
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += alpha * acc[i][j];
}

// Blocking for one micro-kernel: B's KC x NR micro-panel stays in L1, A's MC x KC block in L2, the
// KC x NC panel of B in L3.
struct KernelConfig {
  const char* name;
  MicroKernel fn;
  int64_t mr, nr, kc, mc, nc;
  bool (*supported)();
  // partial[r]: the kernel for a last panel of r < mr rows (null: 'fn' on the zero-padded panel).
  const MicroKernel* partial = nullptr;
  // rows[r], r in 1..mr: the kernel over r rows of a row-major A (null: A is packed instead).
  const RowsKernel* rows = nullptr;
  // rows_fused[r]: the same with the fused GEMM's epilogue in its stores (null: separate passes).
  const sgemm::RowsFusedKernel* rows_fused = nullptr;
  // rows_fused_narrow[r]: rows_fused for a panel of nr / 2 columns or fewer (null: rows_fused).
  const sgemm::RowsFusedKernel* rows_fused_narrow = nullptr;
};

bool Always() { return true; }

// Fastest first where one CPU runs several; Calibrate() decides between them.
const KernelConfig kKernels[] = {
#if defined(__x86_64__)
    {"avx512-12x32", sgemm::MicroKernelAvx512Full, 12, 32, 256, 144, 3072, HasAvx512F,
     sgemm::kAvx512Partial, sgemm::kAvx512Rows, sgemm::kAvx512RowsFused,
     sgemm::kAvx512RowsFusedNarrow},
    {"avx2-fma-6x16", sgemm::MicroKernelAvx2Full, kMr, kNr, 256, 72, 3072, HasAvx2Fma,
     sgemm::kAvx2Partial, sgemm::kAvx2Rows},
#elif defined(__aarch64__)
    {"neon-6x16", sgemm::MicroKernelNeonFull, kMr, kNr, 256, 72, 3072, HasNeon,
     sgemm::kNeonPartial},
#endif
    {"portable-6x16", MicroKernelPortable, kMr, kNr, 256, 72, 3072, Always},
};

template <typename BlockOfB>
void BlockedGemm(const KernelConfig& k_cfg, bool trans_a, int64_t m, int64_t n, int64_t k,
                 float alpha, const float* a, int64_t lda, float* c, int64_t ldc,
                 BlockOfB&& packed_block);

// NEREID_SGEMM_KERNEL names one; otherwise the fastest of the kernels this CPU supports, measured
// on what the server runs: the fused product (SgemmPackedFused: rows of A read in place, B packed
// at load, bias and ReLU applied as C is written), 96 x 512 x 256, best of five rounds,
// interleaved (about two milliseconds in all). AVX-512 wins where the CPU has two 512-bit FMA
// ports; on CPUs that split 512-bit FMAs (Zen 4) the bare products are close, but only the AVX-512
// kernel fuses the epilogue into its stores: timed as a plain blocked product with A packed, AVX2
// won about half the time on Zen 4, where whole models then ran 10-17% slower (ResNet-50 72.3 vs
// 64.9 ms, MobileNetV2 8.2 vs 7.4 ms, RapidOCR's classifier 1.08 vs 0.93 ms, one thread).
// (Timing the micro-kernel alone on L1-resident panels picked AVX2 on Zen 4 as well.)
const KernelConfig* Calibrate() {
  if (const char* want = std::getenv("NEREID_SGEMM_KERNEL"))
    for (const KernelConfig& k : kKernels)
      if (std::strcmp(k.name, want) == 0 && k.supported()) return &k;
  std::vector<const KernelConfig*> candidates;
  for (const KernelConfig& k : kKernels)
    if (k.supported() && k.supported != Always) candidates.push_back(&k);
  if (candidates.empty()) return &kKernels[std::size(kKernels) - 1];
  if (candidates.size() == 1) return candidates[0];
  constexpr int64_t m = 96, n = 512, depth = 256;
  Buffer a = AllocAligned(m * depth), b = AllocAligned(depth * n), c = AllocAligned(m * n);
  std::vector<float> bias(n);
  for (int64_t i = 0; i < m * depth; ++i) a.get()[i] = static_cast<float>(i % 13) * 0.125f - 0.5f;
  for (int64_t i = 0; i < depth * n; ++i) b.get()[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
  for (int64_t j = 0; j < n; ++j) bias[j] = static_cast<float>(j % 5) * 0.5f;
  std::vector<PackedMatrixB> packed;
  for (const KernelConfig* k : candidates)
    packed.emplace_back(k->name, false, depth, n, b.get(), n);
  const float* rows = a.get();
  const RowsAFn rows_a = [rows](int64_t i0, int64_t, int64_t pc, int64_t, float*, int64_t* lda) {
    *lda = depth;
    return rows + i0 * depth + pc;
  };
  GemmEpilogue ep;
  ep.bias = bias.data(), ep.activation = GemmEpilogue::kRelu;
  std::vector<double> best(candidates.size(), 1e30);
  for (int round = 0; round < 5; ++round)
    for (size_t i = 0; i < candidates.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      SgemmPackedFused(m, rows_a, packed[i], c.get(), n, ep);
      best[i] = std::min(
          best[i], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  return candidates[std::min_element(best.begin(), best.end()) - best.begin()];
}

std::atomic<const KernelConfig*> g_kernel{nullptr};

const KernelConfig& SelectKernel() {
  const KernelConfig* k = g_kernel.load(std::memory_order_acquire);
  if (k != nullptr) return *k;
  static const KernelConfig* calibrated = Calibrate();  // once, thread-safe
  const KernelConfig* expected = nullptr;
  g_kernel.compare_exchange_strong(expected, calibrated, std::memory_order_acq_rel);
  return *g_kernel.load(std::memory_order_acquire);
}

const KernelConfig& KernelByIndex(int index) { return kKernels[index]; }
int KernelIndex(const KernelConfig& k) { return static_cast<int>(&k - kKernels); }

void ScaleC(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  if (beta == 1.f) return;
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.f)
      std::fill(row, row + n, 0.f);  // beta == 0 ignores C, even NaN, as BLAS does
    else
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
  }
}

}  // namespace

const char* SgemmKernelName() { return SelectKernel().name; }

std::vector<std::string> SgemmKernels() {
  std::vector<std::string> names;
  for (const KernelConfig& k : kKernels)
    if (k.supported()) names.push_back(k.name);
  return names;
}

bool UseSgemmKernel(const std::string& name) {
  for (const KernelConfig& k : kKernels)
    if (name == k.name && k.supported()) {
      g_kernel.store(&k, std::memory_order_release);
      return true;
    }
  return false;
}

namespace {

// The blocked loop nest. 'packed_block(jc, pc, nc, kc)' returns B's packed KC x NC block: packed on
// the fly into a scratch buffer, or taken from a PackedMatrixB. 'pack_a(i0, mc, pc, kc, out)' packs
// A's MC x KC block into MR-row panels (PackA's layout). 'init(ic, jc, mc, nc)' prepares C's block
// before its first product, 'finish(ic, jc, mc, nc)' runs after its last, while it is in cache.
template <typename PackABlock, typename BlockOfB, typename InitC, typename FinishC>
void BlockedGemmCore(const KernelConfig& k_cfg, int64_t m, int64_t n, int64_t k, float alpha,
                     PackABlock&& pack_a, float* c, int64_t ldc, BlockOfB&& packed_block,
                     InitC&& init, FinishC&& finish) {
  const int64_t mr = k_cfg.mr, nr = k_cfg.nr, kKc = k_cfg.kc, kMc = k_cfg.mc, kNc = k_cfg.nc;
  thread_local Buffer packed_a;
  thread_local size_t packed_a_size = 0;
  const size_t need_a = static_cast<size_t>(kMc) * kKc;
  if (packed_a_size < need_a) packed_a = AllocAligned(packed_a_size = need_a);
  for (int64_t jc = 0; jc < n; jc += kNc) {
    const int64_t nc = std::min(kNc, n - jc);
    for (int64_t pc = 0; pc < k; pc += kKc) {
      const int64_t kc = std::min(kKc, k - pc);
      const float* b_block = packed_block(jc, pc, nc, kc);
      for (int64_t ic = 0; ic < m; ic += kMc) {
        const int64_t mc = std::min(kMc, m - ic);
        if (pc == 0) init(ic, jc, mc, nc);
        pack_a(ic, mc, pc, kc, packed_a.get());
        for (int64_t jr = 0; jr < nc; jr += nr) {
          const float* bp = b_block + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += mr) {
            const int64_t rows = std::min(mr, mc - ir);
            const MicroKernel fn = rows < mr && k_cfg.partial ? k_cfg.partial[rows] : k_cfg.fn;
            fn(kc, packed_a.get() + ir * kc, bp, alpha, c + (ic + ir) * ldc + jc + jr, ldc, rows,
               std::min(nr, nc - jr));
          }
        }
        if (pc + kc >= k) finish(ic, jc, mc, nc);
      }
    }
  }
}

template <typename BlockOfB>
void BlockedGemm(const KernelConfig& k_cfg, bool trans_a, int64_t m, int64_t n, int64_t k,
                 float alpha, const float* a, int64_t lda, float* c, int64_t ldc,
                 BlockOfB&& packed_block) {
  const int64_t mr = k_cfg.mr;
  auto nothing = [](int64_t, int64_t, int64_t, int64_t) {};
  BlockedGemmCore(
      k_cfg, m, n, k, alpha,
      [&](int64_t ic, int64_t mc, int64_t pc, int64_t kc, float* out) {
        PackA(mr, trans_a, trans_a ? a + pc * lda + ic : a + ic * lda + pc, lda, mc, kc, out);
      },
      c, ldc, packed_block, nothing, nothing);
}

#if defined(__x86_64__) || defined(__aarch64__)

// C[0..M) += alpha * A * B for few rows of A, streaming B's packed panels once: each panel is
// [k][nr] contiguous, so this is a sequential read of the whole matrix (a GEMV at memory speed).
// Groups of panels (their columns of C) go to the thread team: memory-bound, and one core draws
// a fraction of the socket's bandwidth (ResNet-50's 2048x1000 classifier: 543 us on one thread
// of two, ONNX Runtime 345 on both).
template <int M, int64_t nr>
SIMD_TARGET void SmallMPackedSimd(const PackedMatrixB& b, float alpha, const float* a, int64_t lda,
                                  bool trans_a, float* c, int64_t ldc) {
  using S = SimdF32;
  constexpr int kVecs = nr / S::kWidth;
  constexpr int kU = M * kVecs >= 8 ? 1 : 8 / (M * kVecs);  // 8 accumulators in all
  for (int64_t jc = 0; jc < b.n(); jc += b.nc()) {
    const int64_t nc = std::min(b.nc(), b.n() - jc);
    const int64_t panels = (nc + nr - 1) / nr;
    const int64_t groups = std::min<int64_t>(panels, 4 * ParallelThreads());
    ParallelForWork(groups, M * nc * b.k(), [&](int64_t group) SIMD_TARGET {
      const int64_t jr0 = panels * group / groups * nr, jr1 = panels * (group + 1) / groups * nr;
      for (int64_t pc = 0; pc < b.k(); pc += b.kc()) {
        const int64_t kc = std::min(b.kc(), b.k() - pc);
        const float* block = b.Block(jc, pc);
        for (int64_t jr = jr0; jr < std::min(jr1, nc); jr += nr) {
          const float* panel = block + jr * kc;
          // kU independent accumulator sets over interleaved steps of p: with one or two rows, a
          // single set would be bound by the FMA latency (two chains), not by reading B.
          typename S::V acc[kU][M][kVecs];
#pragma GCC unroll 4
          for (int u = 0; u < kU; ++u)
#pragma GCC unroll 4
            for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
              for (int v = 0; v < kVecs; ++v) acc[u][i][v] = S::Zero();
          int64_t p = 0;
          auto step = [&](int u, int64_t q) __attribute__((always_inline)) SIMD_TARGET {
            typename S::V bv[kVecs];
#pragma GCC unroll 8
            for (int v = 0; v < kVecs; ++v) bv[v] = S::Load(panel + q * nr + S::kWidth * v);
#pragma GCC unroll 4
            for (int i = 0; i < M; ++i) {
              const typename S::V x =
                  S::Set1(trans_a ? a[(pc + q) * lda + i] : a[i * lda + pc + q]);
#pragma GCC unroll 8
              for (int v = 0; v < kVecs; ++v) acc[u][i][v] = S::Fma(x, bv[v], acc[u][i][v]);
            }
          };
          for (; p + kU <= kc; p += kU)
#pragma GCC unroll 4
            for (int u = 0; u < kU; ++u) step(u, p + u);
          for (; p < kc; ++p) step(0, p);
#pragma GCC unroll 4
          for (int u = 1; u < kU; ++u)
#pragma GCC unroll 4
            for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
              for (int v = 0; v < kVecs; ++v) acc[0][i][v] = S::Add(acc[0][i][v], acc[u][i][v]);
          const int64_t cols = std::min(nr, nc - jr);
          for (int i = 0; i < M; ++i) {
            alignas(32) float out[nr];
#pragma GCC unroll 8
            for (int v = 0; v < kVecs; ++v) S::Store(out + S::kWidth * v, acc[0][i][v]);
            float* ci = c + i * ldc + jc + jr;
            for (int64_t j = 0; j < cols; ++j) ci[j] += alpha * out[j];
          }
        }
      }
    });
  }
}

// Up to 4 rows on packed B, one pass over it. (With 32-column panels, 4 rows need 16 accumulators
// and spill a few registers; two passes of 2 rows measured faster in bench_gemm, where B stays in
// L3, but slower in the server, where B streams: 293 against 222-236 us per row at batch 4, dev.)
template <int64_t nr>
void SmallMPacked(int64_t m, const PackedMatrixB& b, float alpha, const float* a, int64_t lda,
                  bool trans_a, float* c, int64_t ldc) {
  switch (m) {
    case 1:
      return SmallMPackedSimd<1, nr>(b, alpha, a, lda, trans_a, c, ldc);
    case 2:
      return SmallMPackedSimd<2, nr>(b, alpha, a, lda, trans_a, c, ldc);
    case 3:
      return SmallMPackedSimd<3, nr>(b, alpha, a, lda, trans_a, c, ldc);
    default:
      return SmallMPackedSimd<4, nr>(b, alpha, a, lda, trans_a, c, ldc);
  }
}

#else
template <int64_t nr>
void SmallMPacked(int64_t, const PackedMatrixB&, float, const float*, int64_t, bool, float*,
                  int64_t) {}
#endif

}  // namespace

PackedMatrixB::PackedMatrixB(bool trans_b, int64_t k, int64_t n, const float* b, int64_t ldb)
    : k_(k), n_(n) {
  Pack(KernelIndex(SelectKernel()), trans_b, b, ldb);
}

PackedMatrixB::PackedMatrixB(const std::string& kernel, bool trans_b, int64_t k, int64_t n,
                             const float* b, int64_t ldb)
    : k_(k), n_(n) {
  for (const KernelConfig& cfg : kKernels)
    if (kernel == cfg.name && cfg.supported()) {
      Pack(KernelIndex(cfg), trans_b, b, ldb);
      return;
    }
  Pack(KernelIndex(SelectKernel()), trans_b, b, ldb);
}

// Packed for kernel 'kernel': SgemmPackedFused runs it even if another is chosen later.
void PackedMatrixB::Pack(int kernel, bool trans_b, const float* b, int64_t ldb) {
  const int64_t k = k_, n = n_;
  const KernelConfig& cfg = KernelByIndex(kernel);
  kernel_ = kernel;
  nr_ = cfg.nr;
  // A last depth block under half the kernel's KC evens the blocks out instead (multiples of 16):
  // 576 (a 3x3 layer of 64 channels) as 3 x 192 rather than 256 + 256 + 64, whose short block
  // paid a tile's fixed costs for a quarter of its products (that layer alone, one thread: 1.70
  // -> 1.58 ms). Evened out to 231s, 1152's 256 x 4 + 128 ran 4% slower: kept.
  kc_ = cfg.kc;
  if (const int64_t rest = k % cfg.kc; k > cfg.kc && rest != 0 && rest < cfg.kc / 2) {
    const int64_t blocks = (k + cfg.kc - 1) / cfg.kc;
    kc_ = std::min(cfg.kc, ((k + blocks - 1) / blocks + 15) / 16 * 16);
  }
  nc_ = cfg.nc;
  size_t total = 0;
  for (int64_t jc = 0; jc < n; jc += nc_)
    for (int64_t pc = 0; pc < k; pc += kc_) {
      offsets_.push_back(total);
      total += static_cast<size_t>((std::min(nc_, n - jc) + nr_ - 1) / nr_ * nr_) *
               static_cast<size_t>(std::min(kc_, k - pc));
    }
  data_ = std::shared_ptr<float>(AllocAligned(std::max<size_t>(total, 1)).release(),
                                 [](float* p) { std::free(p); });
  size_t index = 0;
  for (int64_t jc = 0; jc < n; jc += nc_)
    for (int64_t pc = 0; pc < k; pc += kc_) {
      const float* src = trans_b ? b + jc * ldb + pc : b + pc * ldb + jc;
      PackB(nr_, trans_b, src, ldb, std::min(kc_, k - pc), std::min(nc_, n - jc),
            data_.get() + offsets_[index++]);
    }
}

const float* PackedMatrixB::Block(int64_t jc, int64_t pc) const {
  const int64_t blocks_per_column = (k_ + kc_ - 1) / kc_;
  return data_.get() + offsets_[static_cast<size_t>((jc / nc_) * blocks_per_column + pc / kc_)];
}

void SgemmPacked(bool trans_a, int64_t m, float alpha, const float* a, int64_t lda,
                 const PackedMatrixB& b, float beta, float* c, int64_t ldc) {
  const int64_t n = b.n(), k = b.k();
  if (m <= 0 || n <= 0) return;
  ScaleC(m, n, beta, c, ldc);
  if (k <= 0 || alpha == 0.f) return;
  if (m <= 4 && HasSmallMSimd() && (b.nr() == 16 || b.nr() == 32)) {
    if (b.nr() == 16) return SmallMPacked<16>(m, b, alpha, a, lda, trans_a, c, ldc);
    return SmallMPacked<32>(m, b, alpha, a, lda, trans_a, c, ldc);
  }
  KernelConfig cfg = KernelByIndex(b.kernel());
  cfg.kc = b.kc();  // the depth blocks B was packed in (at most the kernel's)
  BlockedGemm(cfg, trans_a, m, n, k, alpha, a, lda, c, ldc,
              [&](int64_t jc, int64_t pc, int64_t, int64_t) { return b.Block(jc, pc); });
}

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  ScaleC(m, n, beta, c, ldc);
  if (k <= 0 || alpha == 0.f) return;

#if defined(__x86_64__)
  if (HasAvx2Fma()) {
    if (m <= 4 && !trans_b) {
      sgemm::SmallMRowsAvx2(m, n, k, alpha, a, lda, trans_a, b, ldb, c, ldc);
      return;
    }
    // Transposed B makes packing costly (a strided gather); below this many rows, dots win.
    if (m <= kSmallMDotsRows && trans_b && !trans_a) {
      sgemm::SmallMDotsAvx2(m, n, k, alpha, a, lda, b, ldb, c, ldc);
      return;
    }
  }
#endif

  const KernelConfig& k_cfg = SelectKernel();
  thread_local Buffer packed_b;
  thread_local size_t packed_b_size = 0;
  const size_t need_b =
      static_cast<size_t>((std::min(n, k_cfg.nc) + k_cfg.nr - 1) / k_cfg.nr * k_cfg.nr) * k_cfg.kc;
  if (packed_b_size < need_b) packed_b = AllocAligned(packed_b_size = need_b);
  BlockedGemm(k_cfg, trans_a, m, n, k, alpha, a, lda, c, ldc,
              [&](int64_t jc, int64_t pc, int64_t nc, int64_t kc) {
                const float* b_block = trans_b ? b + jc * ldb + pc : b + pc * ldb + jc;
                PackB(k_cfg.nr, trans_b, b_block, ldb, kc, nc, packed_b.get());
                return static_cast<const float*>(packed_b.get());
              });
}

namespace {

// A row of C before its first product: bias + residual (either may be absent).
NEREID_VECTOR_CLONES void EpilogueInit(float* __restrict row, const float* __restrict bias,
                                       const float* __restrict res, int64_t n) {
  if (bias && res)
    for (int64_t j = 0; j < n; ++j) row[j] = bias[j] + res[j];
  else if (bias)
    for (int64_t j = 0; j < n; ++j) row[j] = bias[j];
  else if (res)
    for (int64_t j = 0; j < n; ++j) row[j] = res[j];
  else
    for (int64_t j = 0; j < n; ++j) row[j] = 0.f;
}

// ... and after its last: the activation, one loop per kind (each vectorizes; a switch inside the
// loop would keep it scalar).
template <GemmEpilogue::Activation kAct>
[[gnu::always_inline]] inline void ActivateRow(float* __restrict row, int64_t n, float lo,
                                               float hi) {
  GemmEpilogue ep;
  ep.activation = kAct, ep.lo = lo, ep.hi = hi;
  for (int64_t j = 0; j < n; ++j) row[j] = Activate(ep, row[j]);
}

}  // namespace

NEREID_VECTOR_CLONES void ActivateEpilogueRow(float* __restrict row, int64_t n,
                                              const GemmEpilogue& ep) {
  const float lo = ep.lo, hi = ep.hi;
  switch (ep.activation) {
    case GemmEpilogue::kRelu:
      return ActivateRow<GemmEpilogue::kRelu>(row, n, lo, hi);
    case GemmEpilogue::kClip:
      return ActivateRow<GemmEpilogue::kClip>(row, n, lo, hi);
    case GemmEpilogue::kLeakyRelu:
      return ActivateRow<GemmEpilogue::kLeakyRelu>(row, n, lo, hi);
    case GemmEpilogue::kHardSigmoid:
      return ActivateRow<GemmEpilogue::kHardSigmoid>(row, n, lo, hi);
    case GemmEpilogue::kHardSwish:
      return ActivateRow<GemmEpilogue::kHardSwish>(row, n, lo, hi);
    case GemmEpilogue::kGelu:
      return GeluErf(row, row, n, lo);  // (vector erf)
    case GemmEpilogue::kNone:
      return;
  }
}

namespace {

// Per thread: the gathered rows of A and (without row kernels) their packed panels.
thread_local Buffer t_scratch, t_packed_a;
thread_local size_t t_scratch_size = 0, t_packed_a_size = 0;

// The row tiles of an MC block: MR rows each, except that a last tile of 1-3 rows would wait on
// its few FMA chains (a 1-row tile takes a third of a full one's time for a twelfth of its
// work): the rows kernels split the last two tiles evenly instead (49 rows: 12, 12, 12, 7, 6).
// Each tile's A: a row-major block (lda, one segment) or a view of the caller's memory.
struct TileA {
  int64_t ir = 0, rows = 0;
  RowsView a;
};

// Rows a multiple of 4 KB apart fall into the same L1 sets, where a rows kernel's tile evicts its
// own rows (a 1x1 convolution over 1,024 channels, read in place: 1,131 us where 1,040 channels
// took 941): such rows of the caller's are copied into 'scratch', kc apart, first.
bool SharesL1Sets(int64_t lda) { return lda % 1024 == 0; }
const float* UnaliasedRows(const float* a, int64_t* lda, int64_t rows, int64_t kc, float* scratch) {
  if (a == scratch || !SharesL1Sets(*lda)) return a;
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(scratch + r * kc, a + r * *lda, static_cast<size_t>(kc) * sizeof(float));
  *lda = kc;
  return scratch;
}

// One MC-row block of C against columns [col0, col0 + cols) (NR-aligned) of one KC x NC block of
// B: 'init' before the first K block, 'finish' after the last. 'view' (fused rows kernels):
// tiles read in place where it gives them, the others gathered.
template <typename Init, typename Finish>
void FusedBlock(const KernelConfig& cfg, const RowsAFn& rows_a, const RowsViewFn& view,
                const float* b_block, float* c, int64_t ldc, int64_t ic, int64_t mc, int64_t jc,
                int64_t col0, int64_t cols, int64_t pc, int64_t kc, bool last,
                const GemmEpilogue& ep, const Init& init, const Finish& finish) {
  const size_t need = static_cast<size_t>(cfg.mc) * cfg.kc;
  if (t_scratch_size < need) t_scratch = AllocAligned(t_scratch_size = need);
  if (cfg.rows == nullptr && t_packed_a_size < need)
    t_packed_a = AllocAligned(t_packed_a_size = need);
  // A fused rows kernel applies the epilogue in its stores; the others get passes over C. GELU
  // (a vector erf) is no tile kernel's: the tiles store the sums with bias and residual, and a
  // pass over the block, still in cache, applies it.
  const bool fused = cfg.rows != nullptr && cfg.rows_fused != nullptr;
  const bool tile_activation = ep.activation != GemmEpilogue::kGelu;
  if (pc == 0 && !fused) init(ic, jc + col0, mc, cols);
  TileA tiles[64];  // (MC / MR + 1 at most)
  int count = 0;
  for (int64_t ir = 0, rows = 0; ir < mc; ir += rows) {
    rows = std::min(cfg.mr, mc - ir);
    if (const int64_t rest = mc - ir - rows; cfg.rows != nullptr && rest > 0 && rest < 4)
      rows = (rows + rest + 1) / 2;
    tiles[count++] = TileA{ir, rows, {}};
  }
  if (fused && view) {
    for (int t = 0; t < count; ++t) {
      TileA& tile = tiles[t];
      if (view(ic + tile.ir, tile.rows, pc, kc, &tile.a)) continue;
      int64_t ld = 0;
      float* scratch = t_scratch.get() + tile.ir * kc;
      const float* rows = rows_a(ic + tile.ir, tile.rows, pc, kc, scratch, &ld);
      tile.a = {UnaliasedRows(rows, &ld, tile.rows, kc, scratch), ld, kc, 0};
    }
  } else {
    int64_t lda = 0;
    const float* a_block = rows_a(ic, mc, pc, kc, t_scratch.get(), &lda);
    if (cfg.rows == nullptr)
      PackA(cfg.mr, false, a_block, lda, mc, kc, t_packed_a.get());
    else
      a_block = UnaliasedRows(a_block, &lda, mc, kc, t_scratch.get());
    for (int t = 0; t < count; ++t) tiles[t].a = {a_block + tiles[t].ir * lda, lda, kc, 0};
  }
  // Each row tile against every column panel in turn: the tile's A stays in L1 and its rows of C
  // (and of the residual) are written (read) whole, one after another, which the prefetchers
  // follow; panels outside, each C row was touched nr floats at a time, a stride apart. A
  // 64 -> 256 1x1 layer at 56x56 with its residual, one thread: 1,074 -> 745 us.
  for (int t = 0; t < count; ++t) {
    for (int64_t jr = col0; jr < col0 + cols; jr += cfg.nr) {
      const float* bp = b_block + jr * kc;
      const int64_t width = std::min(cfg.nr, col0 + cols - jr);
      const int64_t ir = tiles[t].ir, rows = tiles[t].rows;
      const RowsView& a = tiles[t].a;
      float* ct = c + (ic + ir) * ldc + jc + jr;
      if (fused) {
        sgemm::TileEpilogue te;
        te.first = pc == 0, te.last = last;
        te.bias = ep.bias != nullptr ? ep.bias + jc + jr : nullptr;
        te.residual =
            ep.residual != nullptr ? ep.residual + (ic + ir) * ep.ld_residual + jc + jr : nullptr;
        te.ld_residual = ep.ld_residual;
        te.activation = tile_activation ? ep.activation : GemmEpilogue::kNone;
        te.lo = ep.lo, te.hi = ep.hi;
        // The next call's tile: this tile's next panel, or the next tile's first.
        int64_t next_row = ic + ir, next_col = jr + cfg.nr;
        te.next_rows = rows;
        if (next_col >= col0 + cols) {
          next_col = col0, next_row += rows;
          te.next_rows = t + 1 < count ? tiles[t + 1].rows : 0;
          if (t + 1 < count) {
            const RowsView& na = tiles[t + 1].a;
            te.next_a = na.a, te.next_a_rows = tiles[t + 1].rows, te.next_a_lda = na.lda;
            te.next_a_seg_len = na.seg_len, te.next_a_seg_stride = na.seg_stride;
          }
        }
        if (te.next_rows > 0) {
          te.next_c = c + next_row * ldc + jc + next_col;
          if (ep.residual != nullptr)
            te.next_residual = ep.residual + next_row * ep.ld_residual + jc + next_col;
        }
        const sgemm::RowsFusedKernel* kernels =
            width <= cfg.nr / 2 && cfg.rows_fused_narrow != nullptr ? cfg.rows_fused_narrow
                                                                    : cfg.rows_fused;
        kernels[rows](kc, a.a, a.lda, a.seg_len, a.seg_stride, bp, ct, ldc, rows, width, te);
      } else if (cfg.rows != nullptr) {
        cfg.rows[rows](kc, a.a, a.lda, bp, 1.f, ct, ldc, rows, width);
      } else {
        const MicroKernel fn = rows < cfg.mr && cfg.partial ? cfg.partial[rows] : cfg.fn;
        fn(kc, t_packed_a.get() + ir * kc, bp, 1.f, ct, ldc, rows, width);
      }
    }
  }
  if (last && (!fused || !tile_activation)) finish(ic, jc + col0, mc, cols);
}

}  // namespace

void SgemmPackedFused(int64_t m, const RowsAFn& rows_a, const PackedMatrixB& b, float* c,
                      int64_t ldc, const GemmEpilogue& ep, const RowsViewFn& view,
                      int64_t col_begin, int64_t col_end) {
  const int64_t n = std::min(b.n(), col_end), k = b.k();
  if (m <= 0 || n <= col_begin) return;
  const KernelConfig& cfg = KernelByIndex(b.kernel());
  col_begin = std::max<int64_t>(col_begin, 0) / cfg.nr * cfg.nr;
  auto init = [&](int64_t ic, int64_t jc, int64_t mc, int64_t nc) {
    for (int64_t i = ic; i < ic + mc; ++i)
      EpilogueInit(c + i * ldc + jc, ep.bias ? ep.bias + jc : nullptr,
                   ep.residual ? ep.residual + i * ep.ld_residual + jc : nullptr, nc);
  };
  auto finish = [&](int64_t ic, int64_t jc, int64_t mc, int64_t nc) {
    if (ep.activation == GemmEpilogue::kNone) return;
    for (int64_t i = ic; i < ic + mc; ++i) ActivateEpilogueRow(c + i * ldc + jc, nc, ep);
  };
  const int64_t kKc = b.kc(), kMc = cfg.mc, kNc = cfg.nc;  // (b.kc() <= cfg.kc: scratch sizes)
  if (k <= 0) {                                            // no products: C is the epilogue of zero
    for (int64_t ic = 0; ic < m; ic += kMc) {
      init(ic, col_begin, std::min(kMc, m - ic), n - col_begin);
      finish(ic, col_begin, std::min(kMc, m - ic), n - col_begin);
    }
    return;
  }
  // Work items: row blocks of C times column parts, each through all of K (one ParallelFor per
  // NC block, no barrier per K block). Few row blocks (late layers, batch 1) split the columns
  // too, in NR-wide parts, so every thread of the team has work.
  // (Blocks of whole MR-row tiles, MC / MR of them at most.)
  const int64_t tiles = (m + cfg.mr - 1) / cfg.mr, tiles_per_block = kMc / cfg.mr;
  const int64_t row_blocks = (tiles + tiles_per_block - 1) / tiles_per_block;
  const int threads = ParallelThreads();
  // With column parts, each part would gather the same rows of A again: when A is gathered (not
  // a view of the caller's memory), it is gathered once, whole (M x K, small when M is), and the
  // parts read it.
  RowsAFn shared_rows;
  Buffer gathered;
  // A convolution's windows, read in place where they can be ('view'), with tiles enough for two
  // per thread: the rows split into more blocks instead of the columns into parts, each thread
  // gathering (or viewing) only its own rows.
  const bool few_blocks = threads > 1 && row_blocks < 2 * threads;
  const bool rows_split = few_blocks && view && tiles >= 2 * int64_t{threads};
  if (few_blocks && !rows_split) {
    thread_local Buffer probe;
    thread_local size_t probe_size = 0;
    const size_t need = static_cast<size_t>(kMc) * kKc;
    if (probe_size < need) probe = AllocAligned(probe_size = need);
    int64_t lda = 0;
    // (Rows of the caller's that share L1 sets are gathered too, padded.)
    if (rows_a(0, std::min(kMc, m), 0, std::min(kKc, k), probe.get(), &lda) == probe.get() ||
        SharesL1Sets(lda)) {
      const int64_t ld_all = SharesL1Sets(k) ? k + 16 : k;
      gathered = AllocAligned(static_cast<size_t>(m * ld_all));
      float* all = gathered.get();
      const int64_t k_blocks = (k + kKc - 1) / kKc;
      ParallelForWork(row_blocks * k_blocks, m * k, [&](int64_t item) {
        const int64_t ic = (item / k_blocks) * kMc, pc = (item % k_blocks) * kKc;
        const int64_t mc = std::min(kMc, m - ic), kc = std::min(kKc, k - pc);
        thread_local Buffer block;
        thread_local size_t block_size = 0;
        if (block_size < need) block = AllocAligned(block_size = need);
        int64_t ld = 0;
        const float* rows = rows_a(ic, mc, pc, kc, block.get(), &ld);
        for (int64_t r = 0; r < mc; ++r)
          std::memcpy(all + (ic + r) * ld_all + pc, rows + r * ld, static_cast<size_t>(kc) * 4);
      });
      shared_rows = [all, ld_all](int64_t i0, int64_t, int64_t pc, int64_t, float*, int64_t* ld) {
        *ld = ld_all;
        return static_cast<const float*>(all + i0 * ld_all + pc);
      };
    }
  }
  const RowsAFn& rows = shared_rows ? shared_rows : rows_a;
  for (int64_t jc = col_begin / kNc * kNc; jc < n; jc += kNc) {
    const int64_t nc = std::min(kNc, n - jc);
    // The block's panels from the first asked for (col_begin within the first block).
    const int64_t first = std::max<int64_t>(col_begin - jc, 0) / cfg.nr;
    const int64_t panels = (nc + cfg.nr - 1) / cfg.nr - first;
    // Fewer row blocks x panels than 4 per thread (a 7x7 layer at batch 1: 1 x 5 on 2 threads,
    // 3:2 at best): the rows split evenly into more, smaller blocks (MR rows at least), so the
    // items come out even. Then the columns split into even groups of panels. Otherwise the
    // blocks come in a multiple of the threads, whole tiles split evenly among them: MC-sized
    // blocks would leave a short last one (128 rows: 96 + 32; 1,024 rows on two threads: seven
    // of 144 and one of 16, one thread idle for a block's time at the end).
    const bool few = threads > 1 && row_blocks * panels < 4 * threads && !rows_split;
    int64_t blocks = 0;
    if (rows_split)
      blocks = std::max(row_blocks, std::min(tiles, 2 * int64_t{threads}));
    else if (few)
      blocks = std::max(row_blocks, std::min(m / cfg.mr, (4 * threads + panels - 1) / panels));
    else
      blocks =
          std::max(row_blocks, std::min(tiles, (row_blocks + threads - 1) / threads * threads));
    const int64_t parts =
        blocks >= 2 * threads ? 1 : std::min(panels, (2 * threads + blocks - 1) / blocks);
    ParallelForWork(blocks * parts, m * nc * k, [&](int64_t item) {
      const int64_t r = item / parts, part = item % parts;
      const int64_t i0 = few ? m * r / blocks : std::min(m, tiles * r / blocks * cfg.mr);
      const int64_t i1 =
          few ? m * (r + 1) / blocks : std::min(m, tiles * (r + 1) / blocks * cfg.mr);
      const int64_t p0 = panels * part / parts, p1 = panels * (part + 1) / parts;
      if (p0 == p1 || i0 == i1) return;
      const int64_t col0 = (first + p0) * cfg.nr, cols = std::min((first + p1) * cfg.nr, nc) - col0;
      for (int64_t pc = 0; pc < k; pc += kKc) {
        const int64_t kc = std::min(kKc, k - pc);
        FusedBlock(cfg, rows, shared_rows ? RowsViewFn() : view, b.Block(jc, pc), c, ldc, i0,
                   i1 - i0, jc, col0, cols, pc, kc, pc + kc >= k, ep, init, finish);
      }
    });
  }
}

}  // namespace nereid::kernels
