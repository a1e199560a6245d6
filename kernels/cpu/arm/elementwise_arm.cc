// The activations in NEON (cpu/elementwise_isa.h).
#include <arm_neon.h>

#include <iterator>

#include "cpu/elementwise_isa.h"

namespace nereid::kernels {

// FMAX returns NaN when either operand is: NaN kept, as the scalar (-0 -> +0, where the scalar
// keeps -0: equal as numbers).
void ReluNeon(const float* x, float* y, int64_t n) {
  const float32x4_t zero = vdupq_n_f32(0.f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    vst1q_f32(y + i, vmaxq_f32(vld1q_f32(x + i), zero));
    vst1q_f32(y + i + 4, vmaxq_f32(vld1q_f32(x + i + 4), zero));
    vst1q_f32(y + i + 8, vmaxq_f32(vld1q_f32(x + i + 8), zero));
    vst1q_f32(y + i + 12, vmaxq_f32(vld1q_f32(x + i + 12), zero));
  }
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmaxq_f32(vld1q_f32(x + i), zero));
  for (; i < n; ++i) y[i] = ReluScalar(x[i]);
}

// The AVX2 form's exp(v) for v <= 0, in NEON: the same range reduction and polynomial
// (cpu/elementwise_isa.h).
static inline float32x4_t ExpNonPositive(float32x4_t v) {
  v = vmaxq_f32(v, vdupq_n_f32(kExpLowest));
  const float32x4_t k = vrndnq_f32(vmulq_n_f32(v, kLog2e));
  float32x4_t r = vfmsq_n_f32(v, k, kLn2Hi);  // v - k ln2, ln2 split hi/lo
  r = vfmsq_n_f32(r, k, kLn2Lo);
  float32x4_t p = vdupq_n_f32(kExpSeries[0]);
  for (size_t i = 1; i < std::size(kExpSeries); ++i)
    p = vfmaq_f32(vdupq_n_f32(kExpSeries[i]), p, r);
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

}  // namespace nereid::kernels
