#include "cpu/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace nereid::kernels {
namespace {

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float, AlignedFree>;

Buffer AllocAligned(size_t floats) {
  size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
  return Buffer(static_cast<float*>(std::aligned_alloc(64, bytes)));
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

// Each micro-kernel: acc[MR][NR] = sum_p a[p][:] (x) b[p][:]; then C[0..m, 0..n] += alpha * acc.
constexpr int64_t kMr = 6;
constexpr int64_t kNr = 16;

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

__attribute__((target("avx2,fma"))) void MicroKernelAvx2(int64_t kc, const float* a, const float* b,
                                                         float alpha, float* c, int64_t ldc,
                                                         int64_t m, int64_t n) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_load_ps(b);
    const __m256 b1 = _mm256_load_ps(b + 8);
    __m256 av = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(av, b0, c00);
    c01 = _mm256_fmadd_ps(av, b1, c01);
    av = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(av, b0, c10);
    c11 = _mm256_fmadd_ps(av, b1, c11);
    av = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(av, b0, c20);
    c21 = _mm256_fmadd_ps(av, b1, c21);
    av = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(av, b0, c30);
    c31 = _mm256_fmadd_ps(av, b1, c31);
    av = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(av, b0, c40);
    c41 = _mm256_fmadd_ps(av, b1, c41);
    av = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(av, b0, c50);
    c51 = _mm256_fmadd_ps(av, b1, c51);
    a += kMr;
    b += kNr;
  }
  const __m256 va = _mm256_set1_ps(alpha);
  __m256 rows[kMr][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  if (m == kMr && n == kNr) {
    for (int64_t i = 0; i < kMr; ++i) {
      float* ci = c + i * ldc;
      _mm256_storeu_ps(ci, _mm256_fmadd_ps(va, rows[i][0], _mm256_loadu_ps(ci)));
      _mm256_storeu_ps(ci + 8, _mm256_fmadd_ps(va, rows[i][1], _mm256_loadu_ps(ci + 8)));
    }
    return;
  }
  alignas(32) float tile[kMr][kNr];
  for (int64_t i = 0; i < kMr; ++i) {
    _mm256_store_ps(tile[i], rows[i][0]);
    _mm256_store_ps(tile[i] + 8, rows[i][1]);
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += alpha * tile[i][j];
}

using MicroKernel = void (*)(int64_t, const float*, const float*, float, float*, int64_t, int64_t,
                             int64_t);

// Blocking for one micro-kernel: B's KC x NR micro-panel stays in L1, A's MC x KC block in L2, the
// KC x NC panel of B in L3.
struct KernelConfig {
  const char* name;
  MicroKernel fn;
  int64_t mr, nr, kc, mc, nc;
};

bool HasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

const KernelConfig& SelectKernel() {
  static const KernelConfig avx2{"avx2-fma-6x16", MicroKernelAvx2, kMr, kNr, 256, 72, 3072};
  static const KernelConfig portable{"portable-6x16", MicroKernelPortable, kMr, kNr, 256, 72, 3072};
  // A 12x32 AVX-512 kernel measured 0.91x OpenBLAS (geometric mean) on Zen 4, which splits 512-bit
  // FMAs in two, against 1.05x for this one; see bench/RESULTS.md.
  return HasAvx2Fma() ? avx2 : portable;
}

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

// C[i, :] += alpha * sum_p A[i, p] * B[p, :], streaming each row of B once (B not transposed).
__attribute__((target("avx2,fma"))) void SmallMRowsAvx2(int64_t m, int64_t n, int64_t k,
                                                        float alpha, const float* a, int64_t lda,
                                                        bool trans_a, const float* b, int64_t ldb,
                                                        float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    for (int64_t p = 0; p < k; ++p) {
      const float s = alpha * (trans_a ? a[p * lda + i] : a[i * lda + p]);
      if (s == 0.f) continue;
      const __m256 vs = _mm256_set1_ps(s);
      const float* bp = b + p * ldb;
      int64_t j = 0;
      for (; j + 32 <= n; j += 32) {
        _mm256_storeu_ps(ci + j,
                         _mm256_fmadd_ps(vs, _mm256_loadu_ps(bp + j), _mm256_loadu_ps(ci + j)));
        _mm256_storeu_ps(ci + j + 8, _mm256_fmadd_ps(vs, _mm256_loadu_ps(bp + j + 8),
                                                     _mm256_loadu_ps(ci + j + 8)));
        _mm256_storeu_ps(ci + j + 16, _mm256_fmadd_ps(vs, _mm256_loadu_ps(bp + j + 16),
                                                      _mm256_loadu_ps(ci + j + 16)));
        _mm256_storeu_ps(ci + j + 24, _mm256_fmadd_ps(vs, _mm256_loadu_ps(bp + j + 24),
                                                      _mm256_loadu_ps(ci + j + 24)));
      }
      for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(ci + j,
                         _mm256_fmadd_ps(vs, _mm256_loadu_ps(bp + j), _mm256_loadu_ps(ci + j)));
      for (; j < n; ++j) ci[j] += s * bp[j];
    }
  }
}

__attribute__((target("avx2,fma"))) inline float HorizontalSum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Four dot products of A's rows i0 (and i1) against B rows b0..b3, added to C with alpha.
template <int kRows>
__attribute__((target("avx2,fma"))) inline void Dots4(int64_t k, float alpha, const float* a0,
                                                      const float* a1, const float* b0, int64_t ldb,
                                                      float* c0, float* c1) {
  const float* b1 = b0 + ldb;
  const float* b2 = b1 + ldb;
  const float* b3 = b2 + ldb;
  __m256 s[kRows][4];
  for (auto& row : s)
    for (auto& v : row) v = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 8 <= k; p += 8) {
    const __m256 v0 = _mm256_loadu_ps(b0 + p), v1 = _mm256_loadu_ps(b1 + p);
    const __m256 v2 = _mm256_loadu_ps(b2 + p), v3 = _mm256_loadu_ps(b3 + p);
    const __m256 x0 = _mm256_loadu_ps(a0 + p);
    s[0][0] = _mm256_fmadd_ps(x0, v0, s[0][0]);
    s[0][1] = _mm256_fmadd_ps(x0, v1, s[0][1]);
    s[0][2] = _mm256_fmadd_ps(x0, v2, s[0][2]);
    s[0][3] = _mm256_fmadd_ps(x0, v3, s[0][3]);
    if constexpr (kRows == 2) {
      const __m256 x1 = _mm256_loadu_ps(a1 + p);
      s[1][0] = _mm256_fmadd_ps(x1, v0, s[1][0]);
      s[1][1] = _mm256_fmadd_ps(x1, v1, s[1][1]);
      s[1][2] = _mm256_fmadd_ps(x1, v2, s[1][2]);
      s[1][3] = _mm256_fmadd_ps(x1, v3, s[1][3]);
    }
  }
  const float* bs[4] = {b0, b1, b2, b3};
  for (int r = 0; r < kRows; ++r) {
    const float* ar = r == 0 ? a0 : a1;
    float* cr = r == 0 ? c0 : c1;
    for (int q = 0; q < 4; ++q) {
      float d = HorizontalSum(s[r][q]);
      for (int64_t t = p; t < k; ++t) d += ar[t] * bs[q][t];
      cr[q] += alpha * d;
    }
  }
}

// C += alpha * A * B^T for B stored N x K (PyTorch-style [out, in] weights) and few rows of A:
// no packing; each group of four B rows is read from memory once (it stays in L1) and meets every
// row of A, two rows at a time.
__attribute__((target("avx2,fma"))) void SmallMDotsAvx2(int64_t m, int64_t n, int64_t k,
                                                        float alpha, const float* a, int64_t lda,
                                                        const float* b, int64_t ldb, float* c,
                                                        int64_t ldc) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* bj = b + j * ldb;
    int64_t i = 0;
    for (; i + 2 <= m; i += 2)
      Dots4<2>(k, alpha, a + i * lda, a + (i + 1) * lda, bj, ldb, c + i * ldc + j,
               c + (i + 1) * ldc + j);
    if (i < m) Dots4<1>(k, alpha, a + i * lda, nullptr, bj, ldb, c + i * ldc + j, nullptr);
  }
  for (; j < n; ++j) {
    const float* bj = b + j * ldb;
    for (int64_t i = 0; i < m; ++i) {
      const float* ai = a + i * lda;
      __m256 s0 = _mm256_setzero_ps();
      int64_t p = 0;
      for (; p + 8 <= k; p += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(ai + p), _mm256_loadu_ps(bj + p), s0);
      float sum = HorizontalSum(s0);
      for (; p < k; ++p) sum += ai[p] * bj[p];
      c[i * ldc + j] += alpha * sum;
    }
  }
}

}  // namespace

const char* SgemmKernelName() { return SelectKernel().name; }

namespace {

// The blocked loop nest. 'packed_block(jc, pc, nc, kc)' returns B's packed KC x NC block: packed on
// the fly into a scratch buffer, or taken from a PackedMatrixB.
template <typename BlockOfB>
void BlockedGemm(const KernelConfig& k_cfg, bool trans_a, int64_t m, int64_t n, int64_t k,
                 float alpha, const float* a, int64_t lda, float* c, int64_t ldc,
                 BlockOfB&& packed_block) {
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
        const float* a_block = trans_a ? a + pc * lda + ic : a + ic * lda + pc;
        PackA(mr, trans_a, a_block, lda, mc, kc, packed_a.get());
        for (int64_t jr = 0; jr < nc; jr += nr) {
          const float* bp = b_block + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += mr) {
            k_cfg.fn(kc, packed_a.get() + ir * kc, bp, alpha, c + (ic + ir) * ldc + jc + jr, ldc,
                     std::min(mr, mc - ir), std::min(nr, nc - jr));
          }
        }
      }
    }
  }
}

// C[0..M) += alpha * A * B for few rows of A, streaming B's packed panels once: each panel is
// [k][16] contiguous, so this is a sequential read of the whole matrix (a GEMV at memory speed).
template <int M>
__attribute__((target("avx2,fma"))) void SmallMPackedAvx2(const PackedMatrixB& b, float alpha,
                                                          const float* a, int64_t lda, bool trans_a,
                                                          float* c, int64_t ldc) {
  constexpr int64_t nr = 16;
  for (int64_t jc = 0; jc < b.n(); jc += b.nc()) {
    const int64_t nc = std::min(b.nc(), b.n() - jc);
    for (int64_t pc = 0; pc < b.k(); pc += b.kc()) {
      const int64_t kc = std::min(b.kc(), b.k() - pc);
      const float* block = b.Block(jc, pc);
      for (int64_t jr = 0; jr < nc; jr += nr) {
        const float* panel = block + jr * kc;
        __m256 acc[M][2];
#pragma GCC unroll 4
        for (int i = 0; i < M; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
        for (int64_t p = 0; p < kc; ++p) {
          const __m256 b0 = _mm256_load_ps(panel + p * nr), b1 = _mm256_load_ps(panel + p * nr + 8);
#pragma GCC unroll 4
          for (int i = 0; i < M; ++i) {
            const __m256 x = _mm256_set1_ps(trans_a ? a[(pc + p) * lda + i] : a[i * lda + pc + p]);
            acc[i][0] = _mm256_fmadd_ps(x, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(x, b1, acc[i][1]);
          }
        }
        const int64_t cols = std::min(nr, nc - jr);
        for (int i = 0; i < M; ++i) {
          alignas(32) float out[16];
          _mm256_store_ps(out, acc[i][0]);
          _mm256_store_ps(out + 8, acc[i][1]);
          float* ci = c + i * ldc + jc + jr;
          for (int64_t j = 0; j < cols; ++j) ci[j] += alpha * out[j];
        }
      }
    }
  }
}

}  // namespace

PackedMatrixB::PackedMatrixB(bool trans_b, int64_t k, int64_t n, const float* b, int64_t ldb)
    : k_(k), n_(n) {
  const KernelConfig& cfg = SelectKernel();
  nr_ = cfg.nr;
  kc_ = cfg.kc;
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
  const KernelConfig& cfg = SelectKernel();
  if (m <= 4 && HasAvx2Fma() && b.nr() == 16) {
    switch (m) {
      case 1:
        return SmallMPackedAvx2<1>(b, alpha, a, lda, trans_a, c, ldc);
      case 2:
        return SmallMPackedAvx2<2>(b, alpha, a, lda, trans_a, c, ldc);
      case 3:
        return SmallMPackedAvx2<3>(b, alpha, a, lda, trans_a, c, ldc);
      default:
        return SmallMPackedAvx2<4>(b, alpha, a, lda, trans_a, c, ldc);
    }
  }
  BlockedGemm(cfg, trans_a, m, n, k, alpha, a, lda, c, ldc,
              [&](int64_t jc, int64_t pc, int64_t, int64_t) { return b.Block(jc, pc); });
}

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  ScaleC(m, n, beta, c, ldc);
  if (k <= 0 || alpha == 0.f) return;

  if (HasAvx2Fma()) {
    if (m <= 4 && !trans_b) {
      SmallMRowsAvx2(m, n, k, alpha, a, lda, trans_a, b, ldb, c, ldc);
      return;
    }
    // Transposed B makes packing costly (a strided gather); below this many rows, dots win.
    if (m <= kSmallMDotsRows && trans_b && !trans_a) {
      SmallMDotsAvx2(m, n, k, alpha, a, lda, b, ldb, c, ldc);
      return;
    }
  }

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

}  // namespace nereid::kernels
