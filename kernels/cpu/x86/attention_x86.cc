// AVX-512 forms of cpu/attention.h: y (rows x n) = x (rows x k) b (k x n), each y row the sum of
// b's rows weighted by x's row, R rows at a time (b's loads shared by R rows' FMAs), n in
// vectors of 16 (the last masked), in the order of k (the FMA chain a GEMM's has).
#include <immintrin.h>

#include <algorithm>

#include "cpu/attention.h"

namespace nereid::kernels {
namespace {

// Columns [j0, j0 + 16 * V) of R rows (V vectors each; the last vector masked by 'tail').
template <int R, int V>
__attribute__((target("avx512f"))) void WeightedRows(const float* x, int64_t k, const float* b,
                                                     int64_t n, int64_t j0, __mmask16 tail,
                                                     float* y) {
  // Every loop over R and V unrolled, so that the accumulators live in registers: without it GCC
  // kept them in memory too and stored all R x V of them each step (2.5x the time).
  __m512 acc[R][V];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t e = 0; e < k; ++e) {
    __m512 row[V];
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v)
      row[v] = _mm512_maskz_loadu_ps(v + 1 == V ? tail : 0xffff, b + e * n + j0 + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 w = _mm512_set1_ps(x[r * k + e]);
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(w, row[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v)
      _mm512_mask_storeu_ps(y + r * n + j0 + 16 * v, v + 1 == V ? tail : 0xffff, acc[r][v]);
}

// All of y: columns in groups of up to four vectors, rows four (then one) at a time.
template <int V>
__attribute__((target("avx512f"))) void Group(const float* x, int64_t rows, int64_t k,
                                              const float* b, int64_t n, int64_t j0, __mmask16 tail,
                                              float* y) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) WeightedRows<4, V>(x + r * k, k, b, n, j0, tail, y + r * n);
  for (; r < rows; ++r) WeightedRows<1, V>(x + r * k, k, b, n, j0, tail, y + r * n);
}

__attribute__((target("avx512f"))) void Product(const float* x, int64_t rows, int64_t k,
                                                const float* b, int64_t n, float* y) {
  for (int64_t j0 = 0; j0 < n; j0 += 64) {
    const int64_t width = std::min<int64_t>(64, n - j0);
    const int vectors = static_cast<int>((width + 15) / 16);
    const int rest = static_cast<int>(width - 16 * (vectors - 1));
    const __mmask16 tail = static_cast<__mmask16>(rest == 16 ? 0xffff : (1u << rest) - 1);
    switch (vectors) {
      case 1:
        Group<1>(x, rows, k, b, n, j0, tail, y);
        break;
      case 2:
        Group<2>(x, rows, k, b, n, j0, tail, y);
        break;
      case 3:
        Group<3>(x, rows, k, b, n, j0, tail, y);
        break;
      default:
        Group<4>(x, rows, k, b, n, j0, tail, y);
        break;
    }
  }
}

}  // namespace

void AttentionProductAvx512(const float* x, int64_t rows, int64_t k, const float* b, int64_t n,
                            float* y) {
  Product(x, rows, k, b, n, y);
}

}  // namespace nereid::kernels
