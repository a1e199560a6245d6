// The SGEMM's x86-64 parts (gemm_isa.h): the AVX-512 12x32 and AVX2/FMA 6x16 micro-kernels and
// the AVX2 paths for few rows.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cpu/gemm_isa.h"

namespace nereid::kernels::sgemm {
namespace {

// ROWS x 16 with AVX2/FMA over A panels packed STRIDE rows wide: ROWS == STRIDE is the full 6x16
// tile; fewer rows serve the last, partial panel of a block without computing its zero padding.
// (It and the AVX-512 kernel below share their shape but not their code: one body written with
// GCC's vector extensions and inlined into both ISA wrappers compiled A's broadcasts to a scalar
// load plus a register shuffle, which halved this kernel on Zen 4 (49 vs 100 GF/s, bench_gemm) and
// cost the AVX-512 one 6%.)
template <int ROWS, int STRIDE = kMr>
__attribute__((target("avx2,fma"))) void MicroKernelAvx2(int64_t kc, const float* a, const float* b,
                                                         float alpha, float* c, int64_t ldc,
                                                         int64_t m, int64_t n) {
  __m256 acc[ROWS][2];
#pragma GCC unroll 16
  for (int i = 0; i < ROWS; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 16
    for (int i = 0; i < ROWS; ++i) {
      const __m256 av = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
    }
    a += STRIDE;
    b += kNr;
  }
  const __m256 va = _mm256_set1_ps(alpha);
  if (m == ROWS && n == kNr) {
#pragma GCC unroll 16
    for (int i = 0; i < ROWS; ++i) {
      float* ci = c + i * ldc;
      _mm256_storeu_ps(ci, _mm256_fmadd_ps(va, acc[i][0], _mm256_loadu_ps(ci)));
      _mm256_storeu_ps(ci + 8, _mm256_fmadd_ps(va, acc[i][1], _mm256_loadu_ps(ci + 8)));
    }
    return;
  }
  alignas(32) float tile[ROWS][kNr];
#pragma GCC unroll 16
  for (int i = 0; i < ROWS; ++i) {
    _mm256_store_ps(tile[i], acc[i][0]);
    _mm256_store_ps(tile[i] + 8, acc[i][1]);
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += alpha * tile[i][j];
}

// C[i][0..n) += alpha * acc for the first m of MR rows of a 32-wide tile, through masks.
template <int MR>
__attribute__((target("avx512f"), always_inline)) inline void StoreTileAvx512(
    const __m512 (&acc)[MR][2], __m512 va, float* c, int64_t ldc, int64_t m, int64_t n) {
  const __mmask16 m0 = n >= 16 ? 0xffff : static_cast<__mmask16>((1u << n) - 1);
  const __mmask16 m1 = n >= 32   ? 0xffff
                       : n <= 16 ? 0
                                 : static_cast<__mmask16>((1u << (n - 16)) - 1);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    if (i >= m) break;
    float* ci = c + i * ldc;
    _mm512_mask_storeu_ps(ci, m0, _mm512_fmadd_ps(va, acc[i][0], _mm512_maskz_loadu_ps(m0, ci)));
    _mm512_mask_storeu_ps(ci + 16, m1,
                          _mm512_fmadd_ps(va, acc[i][1], _mm512_maskz_loadu_ps(m1, ci + 16)));
  }
}

// MR x 32 with AVX-512: 2*MR zmm accumulators, each step two 16-wide loads of B and MR broadcasts
// of A folded into the FMAs; A panels packed STRIDE rows wide (MR < STRIDE: a partial panel).
// Partial tiles store through masks.
template <int MR, int STRIDE = MR>
__attribute__((target("avx512f"))) void MicroKernelAvx512(int64_t kc, const float* a,
                                                          const float* b, float alpha, float* c,
                                                          int64_t ldc, int64_t m, int64_t n) {
  __m512 acc[MR][2];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
    }
    a += STRIDE;
    b += 32;
  }
  const __m512 va = _mm512_set1_ps(alpha);
  if (m == MR && n == 32) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      float* ci = c + i * ldc;
      _mm512_storeu_ps(ci, _mm512_fmadd_ps(va, acc[i][0], _mm512_loadu_ps(ci)));
      _mm512_storeu_ps(ci + 16, _mm512_fmadd_ps(va, acc[i][1], _mm512_loadu_ps(ci + 16)));
    }
    return;
  }
  StoreTileAvx512<MR>(acc, va, c, ldc, m, n);
}

// The same tiles over a row-major A (lda apart) instead of a packed panel: implicit-GEMM
// convolution hands its gathered rows (or the image itself, for 1x1) without the transposing
// pack. Rows are addressed from one pointer per three rows (row + 0, + lda, + 2 lda fit x86's
// scaled index), all advanced one element per step.
constexpr int64_t kPrefetchB = 768;  // floats

// The depth in segments of seg_len steps, each seg_stride floats after the one before in every row
// (seg_len = kc: one run; a window of an image read in place: its rows).
// NH: the 16-column halves of B's 32-column panel the tile computes (1: a panel of 16 columns or
// fewer, the narrow tile, half the FMAs of the full one).
// 'next' (fused tiles): the next tile's rows of C and of the residual, one row's two lines of each
// fetched a step while there are rows left.
struct NextRows {
  char* c = nullptr;
  const char* residual = nullptr;
  int64_t ldc = 0, ld_residual = 0, rows = 0;  // (strides in bytes)
  // The next tile's A: 'a_left' lines, row after row at each offset of a segment (a_seg bytes,
  // a_seg_stride apart), then the next offset.
  const char* a = nullptr;
  const char* a_line = nullptr;
  int64_t a_lda = 0, a_rows = 0, a_seg = 0, a_seg_stride = 0, a_left = 0;
  int64_t a_row = 0, a_off = 0, a_seg_base = 0;
};

template <int MR, int NH = 2>
__attribute__((target("avx512f,prfchw"), always_inline)) inline void AccumulateRowsAvx512(
    int64_t kc, const float* a, int64_t lda, int64_t seg_len, int64_t seg_stride, const float* b,
    __m512 (&acc)[MR][2], NextRows next = {}) {
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t s0 = 0; s0 < kc; s0 += seg_len, a += seg_stride) {
    const float* base[4] = {a, a + 3 * lda, a + 6 * lda, a + 9 * lda};
    const int64_t len = std::min(seg_len, kc - s0);
    // (Four steps a loop iteration: the loop's own increments and branch cost ResNet-50 2-3% and
    // MobileNetV2 4% on one core at batch 1.)
#pragma GCC unroll 4
    for (int64_t p = 0; p < len; ++p) {
      const __m512 b0 = _mm512_load_ps(b);
      const __m512 b1 = NH == 2 ? _mm512_load_ps(b + 16) : b0;
      // B's panel, 24 steps (3 KiB, ~300 cycles) ahead: a layer's weights are cold (the network's
      // other layers evicted them; they come from L3) and a panel crosses pages the hardware
      // prefetcher stops at. ResNet-50 at batch 1: 6% faster on one core with 8 steps (its 7x7
      // layers, 4 MiB of weights for 49 output pixels), 3-4% more with 24 (L3's latency).
      _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchB), _MM_HINT_T0);
      if (NH == 2) _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchB + 16), _MM_HINT_T0);
      if (next.rows > 0) {
        // (For writing: the store's read for ownership done early.)
        __builtin_prefetch(next.c, 1, 3);
        __builtin_prefetch(next.c + 64, 1, 3);
        next.c += next.ldc;
        if (next.residual != nullptr) {
          _mm_prefetch(next.residual, _MM_HINT_T0);
          _mm_prefetch(next.residual + 64, _MM_HINT_T0);
          next.residual += next.ld_residual;
        }
        --next.rows;
      }
      if (next.a_left > 0) {
        _mm_prefetch(next.a_line, _MM_HINT_T0);
        next.a_line += next.a_lda;
        if (++next.a_row == next.a_rows) {
          next.a_row = 0;
          if ((next.a_off += 64) >= next.a_seg)
            next.a_off = 0, next.a_seg_base += next.a_seg_stride;
          next.a_line = next.a + next.a_seg_base + next.a_off;
        }
        --next.a_left;
      }
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const __m512 av = _mm512_set1_ps(base[i / 3][(i % 3) * lda]);
        acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
        if (NH == 2) acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
      }
#pragma GCC unroll 4
      for (int g = 0; g < (MR + 2) / 3; ++g) ++base[g];
      b += 32;
    }
  }
}

template <int MR>
__attribute__((target("avx512f,prfchw"))) void MicroKernelAvx512Rows(int64_t kc, const float* a,
                                                                     int64_t lda, const float* b,
                                                                     float alpha, float* c,
                                                                     int64_t ldc, int64_t m,
                                                                     int64_t n) {
  __m512 acc[MR][2];
  AccumulateRowsAvx512<MR>(kc, a, lda, kc, 0, b, acc);
  const __m512 va = _mm512_set1_ps(alpha);
  StoreTileAvx512<MR>(acc, va, c, ldc, m, n);
}

// The epilogue's activation ACT (GemmEpilogue::Activation) on 16 values, as Activate (cpu/gemm.h)
// defines it (NaN kept by every kind): max/min return their second operand where either is NaN,
// so the value goes second. A compile-time kind: a switch per vector cost every tile 24 dispatches.
template <int ACT>
__attribute__((target("avx512f"), always_inline)) inline __m512 ActivateAvx512(__m512 v, __m512 lo,
                                                                               __m512 hi) {
  // (maskz forms: the plain ones read _mm512_undefined_ps, which GCC 12 warns about inlined.)
  constexpr __mmask16 kAll = 0xffff;
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.f);
  if constexpr (ACT == 1) {  // Relu
    return _mm512_maskz_max_ps(kAll, zero, v);
  } else if constexpr (ACT == 2) {  // Clip
    return _mm512_maskz_min_ps(kAll, hi, _mm512_maskz_max_ps(kAll, lo, v));
  } else if constexpr (ACT == 3) {  // LeakyRelu
    return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, lo);
  } else if constexpr (ACT == 4) {  // HardSigmoid
    const __m512 t = _mm512_fmadd_ps(lo, v, hi);
    return _mm512_maskz_min_ps(kAll, one, _mm512_maskz_max_ps(kAll, zero, t));
  } else if constexpr (ACT == 5) {  // HardSwish
    const __m512 t = _mm512_fmadd_ps(v, _mm512_set1_ps(1.f / 6.f), _mm512_set1_ps(0.5f));
    return _mm512_mul_ps(v, _mm512_maskz_min_ps(kAll, one, _mm512_maskz_max_ps(kAll, zero, t)));
  } else {
    return v;
  }
}

// The rows tile with the epilogue in its stores (TileEpilogue): a layer of one depth block writes
// C once, where the separate passes wrote it three times.
template <int MR, int NH = 2>
__attribute__((target("avx512f,prfchw"))) void MicroKernelAvx512RowsFused(
    int64_t kc, const float* a, int64_t lda, int64_t seg_len, int64_t seg_stride, const float* b,
    float* c, int64_t ldc, int64_t m, int64_t n, const TileEpilogue& ep) {
  __m512 acc[MR][2];
  NextRows next{reinterpret_cast<char*>(ep.next_c), reinterpret_cast<const char*>(ep.next_residual),
                ldc * 4, ep.ld_residual * 4, ep.next_c != nullptr ? ep.next_rows : 0};
  if (ep.next_a != nullptr && ep.next_a_rows > 0) {
    const int64_t seg_len = std::min(ep.next_a_seg_len, kc);  // (kc: one run, the whole depth)
    next.a = next.a_line = reinterpret_cast<const char*>(ep.next_a);
    next.a_lda = ep.next_a_lda * 4, next.a_rows = ep.next_a_rows;
    next.a_seg = seg_len * 4, next.a_seg_stride = ep.next_a_seg_stride * 4;
    next.a_left = ep.next_a_rows * ((kc + seg_len - 1) / seg_len) * ((seg_len * 4 + 63) / 64);
  }
  AccumulateRowsAvx512<MR, NH>(kc, a, lda, seg_len, seg_stride, b, acc, next);
  const __mmask16 masks[2] = {
      n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1),
      n >= 32   ? static_cast<__mmask16>(0xffff)
      : n <= 16 ? static_cast<__mmask16>(0)
                : static_cast<__mmask16>((1u << (n - 16)) - 1)};
  __m512 bias[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  if (ep.first && ep.bias != nullptr)
    for (int h = 0; h < 2; ++h) bias[h] = _mm512_maskz_loadu_ps(masks[h], ep.bias + 16 * h);
  const __m512 lo = _mm512_set1_ps(ep.lo), hi = _mm512_set1_ps(ep.hi);
  // (Locals: read through 'ep', each field would be reloaded after every store to C, which may
  // alias it as far as the compiler knows.)
  const bool first = ep.first;
  const float* residual = ep.residual;
  const int64_t ld_residual = ep.ld_residual;
  auto store = [&](auto act) __attribute__((target("avx512f"), always_inline)) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      if (i >= m) break;
      float* ci = c + i * ldc;
      for (int h = 0; h < NH; ++h) {
        __m512 v = acc[i][h];
        if (first) {
          v = _mm512_add_ps(v, bias[h]);
          if (residual != nullptr)
            v = _mm512_add_ps(v,
                              _mm512_maskz_loadu_ps(masks[h], residual + i * ld_residual + 16 * h));
        } else {
          v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(masks[h], ci + 16 * h));
        }
        v = ActivateAvx512<decltype(act)::value>(v, lo, hi);
        _mm512_mask_storeu_ps(ci + 16 * h, masks[h], v);
      }
    }
  };
  switch (ep.last ? ep.activation : 0) {
    case 1:
      return store(std::integral_constant<int, 1>{});
    case 2:
      return store(std::integral_constant<int, 2>{});
    case 3:
      return store(std::integral_constant<int, 3>{});
    case 4:
      return store(std::integral_constant<int, 4>{});
    case 5:
      return store(std::integral_constant<int, 5>{});
    default:
      return store(std::integral_constant<int, 0>{});
  }
}
template <int ROWS>
__attribute__((target("avx2,fma"))) void MicroKernelAvx2Rows(int64_t kc, const float* a,
                                                             int64_t lda, const float* b,
                                                             float alpha, float* c, int64_t ldc,
                                                             int64_t m, int64_t n) {
  __m256 acc[ROWS][2];
#pragma GCC unroll 16
  for (int i = 0; i < ROWS; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const float* base[2] = {a, a + 3 * lda};
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 16
    for (int i = 0; i < ROWS; ++i) {
      const __m256 av = _mm256_broadcast_ss(base[i / 3] + (i % 3) * lda);
      acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
    }
    ++base[0];
    ++base[1];
    b += kNr;
  }
  const __m256 va = _mm256_set1_ps(alpha);
  alignas(32) float tile[ROWS][kNr];
#pragma GCC unroll 16
  for (int i = 0; i < ROWS; ++i) {
    _mm256_store_ps(tile[i], _mm256_mul_ps(va, acc[i][0]));
    _mm256_store_ps(tile[i] + 8, _mm256_mul_ps(va, acc[i][1]));
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += tile[i][j];
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
}  // namespace

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

const MicroKernel kAvx512Partial[12] = {
    nullptr,
    MicroKernelAvx512<1, 12>,
    MicroKernelAvx512<2, 12>,
    MicroKernelAvx512<3, 12>,
    MicroKernelAvx512<4, 12>,
    MicroKernelAvx512<5, 12>,
    MicroKernelAvx512<6, 12>,
    MicroKernelAvx512<7, 12>,
    MicroKernelAvx512<8, 12>,
    MicroKernelAvx512<9, 12>,
    MicroKernelAvx512<10, 12>,
    MicroKernelAvx512<11, 12>,
};
const RowsKernel kAvx512Rows[13] = {
    nullptr,
    MicroKernelAvx512Rows<1>,
    MicroKernelAvx512Rows<2>,
    MicroKernelAvx512Rows<3>,
    MicroKernelAvx512Rows<4>,
    MicroKernelAvx512Rows<5>,
    MicroKernelAvx512Rows<6>,
    MicroKernelAvx512Rows<7>,
    MicroKernelAvx512Rows<8>,
    MicroKernelAvx512Rows<9>,
    MicroKernelAvx512Rows<10>,
    MicroKernelAvx512Rows<11>,
    MicroKernelAvx512Rows<12>,
};
const RowsFusedKernel kAvx512RowsFusedNarrow[13] = {
    nullptr,
    MicroKernelAvx512RowsFused<1, 1>,
    MicroKernelAvx512RowsFused<2, 1>,
    MicroKernelAvx512RowsFused<3, 1>,
    MicroKernelAvx512RowsFused<4, 1>,
    MicroKernelAvx512RowsFused<5, 1>,
    MicroKernelAvx512RowsFused<6, 1>,
    MicroKernelAvx512RowsFused<7, 1>,
    MicroKernelAvx512RowsFused<8, 1>,
    MicroKernelAvx512RowsFused<9, 1>,
    MicroKernelAvx512RowsFused<10, 1>,
    MicroKernelAvx512RowsFused<11, 1>,
    MicroKernelAvx512RowsFused<12, 1>,
};
const RowsFusedKernel kAvx512RowsFused[13] = {
    nullptr,
    MicroKernelAvx512RowsFused<1>,
    MicroKernelAvx512RowsFused<2>,
    MicroKernelAvx512RowsFused<3>,
    MicroKernelAvx512RowsFused<4>,
    MicroKernelAvx512RowsFused<5>,
    MicroKernelAvx512RowsFused<6>,
    MicroKernelAvx512RowsFused<7>,
    MicroKernelAvx512RowsFused<8>,
    MicroKernelAvx512RowsFused<9>,
    MicroKernelAvx512RowsFused<10>,
    MicroKernelAvx512RowsFused<11>,
    MicroKernelAvx512RowsFused<12>,
};
const RowsKernel kAvx2Rows[7] = {
    nullptr,
    MicroKernelAvx2Rows<1>,
    MicroKernelAvx2Rows<2>,
    MicroKernelAvx2Rows<3>,
    MicroKernelAvx2Rows<4>,
    MicroKernelAvx2Rows<5>,
    MicroKernelAvx2Rows<6>,
};
const MicroKernel kAvx2Partial[6] = {
    nullptr,
    MicroKernelAvx2<1>,
    MicroKernelAvx2<2>,
    MicroKernelAvx2<3>,
    MicroKernelAvx2<4>,
    MicroKernelAvx2<5>,
};

__attribute__((target("avx512f"))) void MicroKernelAvx512Full(int64_t kc, const float* a,
                                                              const float* b, float alpha, float* c,
                                                              int64_t ldc, int64_t m, int64_t n) {
  MicroKernelAvx512<12>(kc, a, b, alpha, c, ldc, m, n);
}

__attribute__((target("avx2,fma"))) void MicroKernelAvx2Full(int64_t kc, const float* a,
                                                             const float* b, float alpha, float* c,
                                                             int64_t ldc, int64_t m, int64_t n) {
  MicroKernelAvx2<kMr>(kc, a, b, alpha, c, ldc, m, n);
}

}  // namespace nereid::kernels::sgemm
