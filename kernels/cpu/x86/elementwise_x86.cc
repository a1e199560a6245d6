// The activations in AVX2 (cpu/elementwise_isa.h).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "cpu/elementwise_isa.h"

namespace nereid::kernels {

// max(0, x) with NaN kept, as 'x < 0 ? 0 : x' gives (maxps returns its second operand on NaN).
__attribute__((target("avx2"))) void ReluAvx2(const float* x, float* y, int64_t n) {
  const __m256 zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm256_storeu_ps(y + i, _mm256_max_ps(zero, _mm256_loadu_ps(x + i)));
    _mm256_storeu_ps(y + i + 8, _mm256_max_ps(zero, _mm256_loadu_ps(x + i + 8)));
    _mm256_storeu_ps(y + i + 16, _mm256_max_ps(zero, _mm256_loadu_ps(x + i + 16)));
    _mm256_storeu_ps(y + i + 24, _mm256_max_ps(zero, _mm256_loadu_ps(x + i + 24)));
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_max_ps(zero, _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = ReluScalar(x[i]);
}

// exp(v) for v <= 0 (no overflow), clamped at kExpLowest (below, exp underflows to ~0 anyway):
// kExpSeries on the range-reduced r (cpu/elementwise_isa.h).
static __attribute__((target("avx2,fma"))) inline __m256 ExpNonPositive(__m256 v) {
  v = _mm256_max_ps(v, _mm256_set1_ps(kExpLowest));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Hi), v);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpSeries[0]);
  for (size_t i = 1; i < std::size(kExpSeries); ++i)
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpSeries[i]));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// sigmoid(x) = 1 / (1 + e^-|x|) for x >= 0 and e^-|x| / (1 + e^-|x|) below: exp never overflows.
__attribute__((target("avx2,fma"))) void SigmoidAvx2(const float* x, float* y, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.f);
  const __m256 sign = _mm256_set1_ps(-0.f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 e = ExpNonPositive(_mm256_or_ps(v, sign));  // e^-|v|
    const __m256 inv = _mm256_div_ps(one, _mm256_add_ps(one, e));
    const __m256 negative = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ);
    __m256 out = _mm256_blendv_ps(inv, _mm256_mul_ps(e, inv), negative);
    // NaN in, NaN out.
    out = _mm256_blendv_ps(out, v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    _mm256_storeu_ps(y + i, out);
  }
  for (; i < n; ++i) y[i] = SigmoidScalar(x[i]);
}

// erf(x) by kErfSeries below kErfSeriesBelow and Abramowitz and Stegun's 7.1.26 above
// (cpu/elementwise_isa.h), with x's sign. NaN in, NaN out. (A reciprocal estimate and a Newton
// step instead of the divide were tried: NaN at infinity, 3.2e-7.)
static __attribute__((target("avx2,fma"))) inline __m256 ErfVec(__m256 v) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  const __m256 one = _mm256_set1_ps(1.f);
  const __m256 a = _mm256_andnot_ps(sign, v);
  const __m256 z = _mm256_mul_ps(v, v);
  __m256 s = _mm256_set1_ps(kErfSeries[0]);
  for (size_t i = 1; i < std::size(kErfSeries); ++i)
    s = _mm256_fmadd_ps(s, z, _mm256_set1_ps(kErfSeries[i]));
  const __m256 small = _mm256_mul_ps(s, v);
  const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(kErfAsP), a, one));
  __m256 q = _mm256_set1_ps(kErfAs[0]);
  for (size_t i = 1; i < std::size(kErfAs); ++i)
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(kErfAs[i]));
  q = _mm256_mul_ps(q, t);
  const __m256 e = ExpNonPositive(_mm256_xor_ps(z, sign));  // e^(-x^2)
  __m256 large = _mm256_fnmadd_ps(q, e, one);
  large = _mm256_or_ps(large, _mm256_and_ps(v, sign));  // x's sign
  const __m256 out =
      _mm256_blendv_ps(large, small, _mm256_cmp_ps(a, _mm256_set1_ps(kErfSeriesBelow), _CMP_LT_OQ));
  return _mm256_blendv_ps(out, v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

__attribute__((target("avx2,fma"))) void ErfAvx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, ErfVec(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = std::erf(x[i]);
}

// x (erf(x / divisor) + 1) / 2 as the graph writes it (GeluScalar), x / divisor taken as
// x * (1 / divisor) (within an ulp; the erf approximation's error is larger).
__attribute__((target("avx2,fma"))) void GeluErfAvx2(const float* x, float* y, int64_t n,
                                                     float divisor) {
  const __m256 inv = _mm256_set1_ps(1.f / divisor);
  const __m256 one = _mm256_set1_ps(1.f);
  const __m256 half = _mm256_set1_ps(0.5f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 e = _mm256_add_ps(ErfVec(_mm256_mul_ps(v, inv)), one);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(v, e), half));
  }
  for (; i < n; ++i) y[i] = GeluScalar(x[i], divisor);
}

// Softmax over each of 'rows' contiguous rows of 'n': the row's maximum, e^(x - max) and its
// sum, then the scale. A row holding NaN or infinity goes the scalar way (NaN out, as std::exp
// gives).
__attribute__((target("avx2,fma"))) bool SoftmaxRowAvx2(const float* x, float* y, int64_t n) {
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  __m256 bad = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    vmax = _mm256_max_ps(vmax, v);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float max = lanes[0];
  for (int l = 1; l < 8; ++l) max = std::max(max, lanes[l]);
  for (int64_t j = i; j < n; ++j) {
    if (std::isnan(x[j])) return false;
    max = std::max(max, x[j]);
  }
  if (_mm256_movemask_ps(bad) != 0 || !std::isfinite(max)) return false;
  const __m256 m = _mm256_set1_ps(max);
  __m256 vsum = _mm256_setzero_ps();
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), m);
    // Below -87.3 (a mask's -inf or -1e4) e^d is 0, not the clamp's 8e-39.
    const __m256 e =
        _mm256_and_ps(ExpNonPositive(d), _mm256_cmp_ps(d, _mm256_set1_ps(kExpLowest), _CMP_GE_OQ));
    vsum = _mm256_add_ps(vsum, e);
    _mm256_storeu_ps(y + i, e);
  }
  _mm256_store_ps(lanes, vsum);
  double sum = 0;
  for (float l : lanes) sum += l;
  for (int64_t j = i; j < n; ++j) {
    y[j] = std::exp(x[j] - max);
    sum += y[j];
  }
  const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / sum));
  for (i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), inv));
  for (int64_t j = i; j < n; ++j) y[j] *= static_cast<float>(1.0 / sum);
  return true;
}

// ---- AVX-512: the same exp, erf and GELU on 16 lanes ----

// (maskz forms, all lanes: the plain ones read _mm512_undefined_ps, which GCC 12 warns about
// inlined, as gemm_x86.cc notes.)
static __attribute__((target("avx512f"))) inline __m512 ExpNonPositive512(__m512 v) {
  constexpr __mmask16 kAll = 0xffff;
  v = _mm512_maskz_max_ps(kAll, v, _mm512_set1_ps(kExpLowest));
  const __m512 k = _mm512_maskz_roundscale_ps(kAll, _mm512_mul_ps(v, _mm512_set1_ps(kLog2e)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Hi), v);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpSeries[0]);
  for (size_t i = 1; i < std::size(kExpSeries); ++i)
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpSeries[i]));
  const __m512i e = _mm512_maskz_slli_epi32(
      kAll, _mm512_add_epi32(_mm512_maskz_cvtps_epi32(kAll, k), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

// ErfVec's method on 16 lanes (sign and NaN by mask).
static __attribute__((target("avx512f"))) inline __m512 ErfVec512(__m512 v) {
  const __m512 one = _mm512_set1_ps(1.f);
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512 a = _mm512_abs_ps(v);
  const __m512 z = _mm512_mul_ps(v, v);
  __m512 s = _mm512_set1_ps(kErfSeries[0]);
  for (size_t i = 1; i < std::size(kErfSeries); ++i)
    s = _mm512_fmadd_ps(s, z, _mm512_set1_ps(kErfSeries[i]));
  const __m512 small = _mm512_mul_ps(s, v);
  const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(kErfAsP), a, one));
  __m512 q = _mm512_set1_ps(kErfAs[0]);
  for (size_t i = 1; i < std::size(kErfAs); ++i)
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(kErfAs[i]));
  q = _mm512_mul_ps(q, t);
  const __m512 e = ExpNonPositive512(_mm512_sub_ps(_mm512_setzero_ps(), z));
  __m512 large = _mm512_fnmadd_ps(q, e, one);
  large = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(large),
                                              _mm512_and_si512(_mm512_castps_si512(v), sign_bit)));
  const __m512 out = _mm512_mask_blend_ps(
      _mm512_cmp_ps_mask(a, _mm512_set1_ps(kErfSeriesBelow), _CMP_LT_OQ), large, small);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), out, v);
}

__attribute__((target("avx512f"))) void ErfAvx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, ErfVec512(_mm512_loadu_ps(x + i)));
  if (i < n) ErfAvx2(x + i, y + i, n - i);
}

__attribute__((target("avx512f"))) void GeluErfAvx512(const float* x, float* y, int64_t n,
                                                      float divisor) {
  const __m512 inv = _mm512_set1_ps(1.f / divisor);
  const __m512 one = _mm512_set1_ps(1.f), half = _mm512_set1_ps(0.5f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 e = _mm512_add_ps(ErfVec512(_mm512_mul_ps(v, inv)), one);
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(v, e), half));
  }
  if (i < n) GeluErfAvx2(x + i, y + i, n - i, divisor);
}

}  // namespace nereid::kernels
