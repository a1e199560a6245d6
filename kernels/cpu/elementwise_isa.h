// The instruction-set forms of the activations (elementwise.cc picks among them), each in the
// folder of its architecture (kernels/cpu/x86, kernels/cpu/arm), built only there, and the scalar
// forms every one ends its tail with. Internal to the kernels library.
#pragma once

#include <cmath>
#include <cstdint>

namespace nereid::kernels {

// The coefficients every vector form of exp and erf evaluates (x86's AVX2 and AVX-512, Arm's
// NEON), highest power first, for Horner's rule.
// exp(v), v <= 0 (clamped at kExpLowest): 2^k * p(r) with v = k ln2 + r (ln2 split hi + lo),
// |r| <= ln2/2, p the degree-6 Taylor polynomial (relative error ~2e-7).
constexpr float kExpLowest = -87.3f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kExpSeries[] = {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
// erf(x): below |x| = kErfSeriesBelow, x times 2/sqrt(pi) (1 - z/3 + z^2/10 - z^3/42 + z^4/216
// - z^5/1320 + z^6/9360), z = x^2 (the Taylor series to x^13, error under 1e-9); above it
// Abramowitz and Stegun's 7.1.26, 1 - t(a1 + t(a2 + t(a3 + t(a4 + t a5)))) e^(-x^2),
// t = 1 / (1 + p|x|) (absolute error under 1.5e-7, where erf >= 0.52).
constexpr float kErfSeriesBelow = 0.5f;
constexpr float kTwoOverSqrtPi = 1.128379167f;
constexpr float kErfSeries[] = {kTwoOverSqrtPi / 9360, -kTwoOverSqrtPi / 1320, kTwoOverSqrtPi / 216,
                                -kTwoOverSqrtPi / 42,  kTwoOverSqrtPi / 10,    -kTwoOverSqrtPi / 3,
                                kTwoOverSqrtPi};
constexpr float kErfAsP = 0.3275911f;
constexpr float kErfAs[] = {1.061405429f, -1.453152027f, 1.421413741f, -0.284496736f,
                            0.254829592f};  // a5 .. a1

// Below the vectors: the scalar forms every path ends with.
inline float ReluScalar(float v) { return v < 0.f ? 0.f : v; }  // (NaN kept)

// Split by sign so exp never overflows.
inline float SigmoidScalar(float v) {
  const float e = std::exp(-std::fabs(v));
  return v >= 0.f ? 1.f / (1.f + e) : e / (1.f + e);
}

// GELU as exporters write it out: x * (erf(x / divisor) + 1) * 0.5 (divisor sqrt(2)).
inline float GeluScalar(float v, float divisor) { return v * (std::erf(v / divisor) + 1.f) * 0.5f; }

#if defined(__x86_64__)
void ReluAvx2(const float* x, float* y, int64_t n);                      // AVX2
void SigmoidAvx2(const float* x, float* y, int64_t n);                   // AVX2 and FMA
void ErfAvx2(const float* x, float* y, int64_t n);                       // AVX2 and FMA
void GeluErfAvx2(const float* x, float* y, int64_t n, float divisor);    // AVX2 and FMA
void ErfAvx512(const float* x, float* y, int64_t n);                     // AVX-512F
void GeluErfAvx512(const float* x, float* y, int64_t n, float divisor);  // AVX-512F
// One contiguous row; false (nothing written that counts) when it holds NaN or infinity.
bool SoftmaxRowAvx2(const float* x, float* y, int64_t n);  // AVX2 and FMA
#elif defined(__aarch64__)
void ReluNeon(const float* x, float* y, int64_t n);
void SigmoidNeon(const float* x, float* y, int64_t n);
#endif

}  // namespace nereid::kernels
