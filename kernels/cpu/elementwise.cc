#include "cpu/elementwise.h"

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include <algorithm>
#include <cmath>

#include "cpu/cpu_features.h"

namespace nereid::kernels {
namespace {

// Below the vectors: the scalar forms every path ends with.
inline float ReluScalar(float v) { return v > 0.f ? v : 0.f; }

// Split by sign so exp never overflows.
inline float SigmoidScalar(float v) {
  const float e = std::exp(-std::fabs(v));
  return v >= 0.f ? 1.f / (1.f + e) : e / (1.f + e);
}

#if defined(__x86_64__)

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
__attribute__((target("avx2,fma"))) inline __m256 ExpNonPositive(__m256 v) {
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

#elif defined(__aarch64__)

// FMAXNM returns the number when the other operand is NaN: NaN -> 0, and -0 -> +0, as the scalar.
void ReluNeon(const float* x, float* y, int64_t n) {
  const float32x4_t zero = vdupq_n_f32(0.f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    vst1q_f32(y + i, vmaxnmq_f32(vld1q_f32(x + i), zero));
    vst1q_f32(y + i + 4, vmaxnmq_f32(vld1q_f32(x + i + 4), zero));
    vst1q_f32(y + i + 8, vmaxnmq_f32(vld1q_f32(x + i + 8), zero));
    vst1q_f32(y + i + 12, vmaxnmq_f32(vld1q_f32(x + i + 12), zero));
  }
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmaxnmq_f32(vld1q_f32(x + i), zero));
  for (; i < n; ++i) y[i] = ReluScalar(x[i]);
}

// The AVX2 form's exp(v) for v <= 0, in NEON: the same range reduction and polynomial.
inline float32x4_t ExpNonPositive(float32x4_t v) {
  v = vmaxq_f32(v, vdupq_n_f32(-87.3f));
  const float32x4_t k = vrndnq_f32(vmulq_n_f32(v, 1.44269504088896341f));
  float32x4_t r = vfmsq_n_f32(v, k, 0.693359375f);  // v - k ln2, ln2 split hi/lo
  r = vfmsq_n_f32(r, k, -2.12194440e-4f);
  float32x4_t p = vdupq_n_f32(1.0f / 720);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
  p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(k), vdupq_n_s32(127)), 23);
  return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

void SigmoidNeon(const float* x, float* y, int64_t n) {
  const float32x4_t one = vdupq_n_f32(1.f);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t v = vld1q_f32(x + i);
    const float32x4_t e = ExpNonPositive(vnegq_f32(vabsq_f32(v)));  // e^-|v|
    const float32x4_t inv = vdivq_f32(one, vaddq_f32(one, e));
    float32x4_t out = vbslq_f32(vcltzq_f32(v), vmulq_f32(e, inv), inv);
    out = vbslq_f32(vceqq_f32(v, v), out, v);  // NaN in, NaN out
    vst1q_f32(y + i, out);
  }
  for (; i < n; ++i) y[i] = SigmoidScalar(x[i]);
}

#endif

}  // namespace

void Relu(const float* x, float* y, int64_t n) {
#if defined(__x86_64__)
  if (HasAvx2Fma()) return ReluAvx2(x, y, n);
#elif defined(__aarch64__)
  return ReluNeon(x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = ReluScalar(x[i]);
}

void Sigmoid(const float* x, float* y, int64_t n) {
#if defined(__x86_64__)
  if (HasAvx2Fma()) return SigmoidAvx2(x, y, n);
#elif defined(__aarch64__)
  return SigmoidNeon(x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = SigmoidScalar(x[i]);
}

void Tanh(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

void Softmax(const float* x, float* y, int64_t outer, int64_t axis_size, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      const float* xs = x + o * axis_size * inner + in;
      float* ys = y + o * axis_size * inner + in;
      float max = -INFINITY;
      for (int64_t a = 0; a < axis_size; ++a) max = std::max(max, xs[a * inner]);
      double sum = 0;
      for (int64_t a = 0; a < axis_size; ++a) {
        const float e = std::exp(xs[a * inner] - max);
        ys[a * inner] = e;
        sum += e;
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t a = 0; a < axis_size; ++a) ys[a * inner] *= inv;
    }
  }
}

}  // namespace nereid::kernels
