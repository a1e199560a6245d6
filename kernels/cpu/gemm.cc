#include "cpu/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace nereid::kernels {
namespace {

constexpr int64_t kMr = 6;
constexpr int64_t kNr = 16;
constexpr int64_t kKc = 256;
constexpr int64_t kMc = 72;    // kMr multiple; A block ~72 KiB stays in L2
constexpr int64_t kNc = 3072;  // kNr multiple; B panel ~3 MiB stays in L3

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float, AlignedFree>;

Buffer AllocAligned(size_t floats) {
  size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
  return Buffer(static_cast<float*>(std::aligned_alloc(64, bytes)));
}

// Packs rows [0, mc) x depth [0, kc) of op(A) into kMr-row panels laid out [panel][k][kMr].
void PackA(bool trans, const float* a, int64_t lda, int64_t mc, int64_t kc, float* out) {
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
void PackB(bool trans, const float* b, int64_t ldb, int64_t kc, int64_t nc, float* out) {
  for (int64_t j0 = 0; j0 < nc; j0 += kNr) {
    const int64_t cols = std::min(kNr, nc - j0);
    for (int64_t p = 0; p < kc; ++p) {
      if (!trans && cols == kNr) {
        std::memcpy(out, b + p * ldb + j0, kNr * sizeof(float));
      } else {
        for (int64_t j = 0; j < cols; ++j) out[j] = trans ? b[(j0 + j) * ldb + p] : b[p * ldb + j0 + j];
        for (int64_t j = cols; j < kNr; ++j) out[j] = 0.f;
      }
      out += kNr;
    }
  }
}

// acc[kMr][kNr] = sum_p a[p][:] (x) b[p][:]; then C[0..m, 0..n] += alpha * acc.
void MicroKernelPortable(int64_t kc, const float* a, const float* b, float alpha, float* c, int64_t ldc,
                         int64_t m, int64_t n) {
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
                                                         float alpha, float* c, int64_t ldc, int64_t m,
                                                         int64_t n) {
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

using MicroKernel = void (*)(int64_t, const float*, const float*, float, float*, int64_t, int64_t, int64_t);

bool HasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

MicroKernel SelectKernel() { return HasAvx2Fma() ? MicroKernelAvx2 : MicroKernelPortable; }

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
__attribute__((target("avx2,fma"))) void SmallMRowsAvx2(int64_t m, int64_t n, int64_t k, float alpha,
                                                        const float* a, int64_t lda, bool trans_a,
                                                        const float* b, int64_t ldb, float* c,
                                                        int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    for (int64_t p = 0; p < k; ++p) {
      const float s = alpha * (trans_a ? a[p * lda + i] : a[i * lda + p]);
      if (s == 0.f) continue;
      const __m256 vs = _mm256_set1_ps(s);
      const float* bp = b + p * ldb;
      int64_t j = 0;
      for (; j + 32 <= n; j += 32) {
        _mm256_storeu_ps(ci + j, _mm256_fmadd_ps(vs, _mm256_loadu_ps(bp + j), _mm256_loadu_ps(ci + j)));
        _mm256_storeu_ps(ci + j + 8,
                         _mm256_fmadd_ps(vs, _mm256_loadu_ps(bp + j + 8), _mm256_loadu_ps(ci + j + 8)));
        _mm256_storeu_ps(ci + j + 16,
                         _mm256_fmadd_ps(vs, _mm256_loadu_ps(bp + j + 16), _mm256_loadu_ps(ci + j + 16)));
        _mm256_storeu_ps(ci + j + 24,
                         _mm256_fmadd_ps(vs, _mm256_loadu_ps(bp + j + 24), _mm256_loadu_ps(ci + j + 24)));
      }
      for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(ci + j, _mm256_fmadd_ps(vs, _mm256_loadu_ps(bp + j), _mm256_loadu_ps(ci + j)));
      for (; j < n; ++j) ci[j] += s * bp[j];
    }
  }
}

// C[i, j] += alpha * dot(A[i, :], B[j, :]) for transposed B (B stored N x K): contiguous dots.
__attribute__((target("avx2,fma"))) void SmallMDotsAvx2(int64_t m, int64_t n, int64_t k, float alpha,
                                                        const float* a, int64_t lda, const float* b,
                                                        int64_t ldb, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    const float* ai = a + i * lda;
    for (int64_t j = 0; j < n; ++j) {
      const float* bj = b + j * ldb;
      __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
      int64_t p = 0;
      for (; p + 16 <= k; p += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(ai + p), _mm256_loadu_ps(bj + p), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(ai + p + 8), _mm256_loadu_ps(bj + p + 8), s1);
      }
      s0 = _mm256_add_ps(s0, s1);
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, s0);
      float sum = lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
      for (; p < k; ++p) sum += ai[p] * bj[p];
      c[i * ldc + j] += alpha * sum;
    }
  }
}

}  // namespace

const char* SgemmKernelName() { return HasAvx2Fma() ? "avx2-fma-6x16" : "portable"; }

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  ScaleC(m, n, beta, c, ldc);
  if (k <= 0 || alpha == 0.f) return;

  if (m <= 4 && HasAvx2Fma()) {
    if (!trans_b) {
      SmallMRowsAvx2(m, n, k, alpha, a, lda, trans_a, b, ldb, c, ldc);
      return;
    }
    if (!trans_a) {
      SmallMDotsAvx2(m, n, k, alpha, a, lda, b, ldb, c, ldc);
      return;
    }
  }

  const MicroKernel kernel = SelectKernel();
  thread_local Buffer packed_a, packed_b;
  thread_local size_t packed_a_size = 0, packed_b_size = 0;
  const size_t need_a = static_cast<size_t>(kMc) * kKc;
  const size_t need_b = static_cast<size_t>((std::min(n, kNc) + kNr - 1) / kNr * kNr) * kKc;
  if (packed_a_size < need_a) packed_a = AllocAligned(packed_a_size = need_a);
  if (packed_b_size < need_b) packed_b = AllocAligned(packed_b_size = need_b);

  for (int64_t jc = 0; jc < n; jc += kNc) {
    const int64_t nc = std::min(kNc, n - jc);
    for (int64_t pc = 0; pc < k; pc += kKc) {
      const int64_t kc = std::min(kKc, k - pc);
      const float* b_block = trans_b ? b + jc * ldb + pc : b + pc * ldb + jc;
      PackB(trans_b, b_block, ldb, kc, nc, packed_b.get());
      for (int64_t ic = 0; ic < m; ic += kMc) {
        const int64_t mc = std::min(kMc, m - ic);
        const float* a_block = trans_a ? a + pc * lda + ic : a + ic * lda + pc;
        PackA(trans_a, a_block, lda, mc, kc, packed_a.get());
        for (int64_t jr = 0; jr < nc; jr += kNr) {
          const int64_t nr = std::min(kNr, nc - jr);
          const float* bp = packed_b.get() + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += kMr) {
            const int64_t mr = std::min(kMr, mc - ir);
            kernel(kc, packed_a.get() + ir * kc, bp, alpha, c + (ic + ir) * ldc + jc + jr, ldc, mr, nr);
          }
        }
      }
    }
  }
}

}  // namespace nereid::kernels
