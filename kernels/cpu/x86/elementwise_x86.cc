// The activations in AVX2 (cpu/elementwise_isa.h).
#include <immintrin.h>

#include "cpu/elementwise_isa.h"

namespace nereid::kernels {

// max(x, 0) with NaN -> 0, as 'x > 0 ? x : 0' gives (maxps returns its second operand on NaN).
__attribute__((target("avx2"))) void ReluAvx2(const float* x, float* y, int64_t n) {
  const __m256 zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm256_storeu_ps(y + i, _mm256_max_ps(_mm256_loadu_ps(x + i), zero));
    _mm256_storeu_ps(y + i + 8, _mm256_max_ps(_mm256_loadu_ps(x + i + 8), zero));
    _mm256_storeu_ps(y + i + 16, _mm256_max_ps(_mm256_loadu_ps(x + i + 16), zero));
    _mm256_storeu_ps(y + i + 24, _mm256_max_ps(_mm256_loadu_ps(x + i + 24), zero));
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_max_ps(_mm256_loadu_ps(x + i), zero));
  for (; i < n; ++i) y[i] = ReluScalar(x[i]);
}

// exp(v) for v <= 0 (no overflow), v >= -87.3 clamped (below, exp underflows to ~0 anyway):
// 2^k * p(r) with v = k ln2 + r, |r| <= ln2/2, p a degree-6 polynomial (relative error ~2e-7).
static __attribute__((target("avx2,fma"))) inline __m256 ExpNonPositive(__m256 v) {
  v = _mm256_max_ps(v, _mm256_set1_ps(-87.3f));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), v);  // ln2 split hi/lo
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
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

}  // namespace nereid::kernels
