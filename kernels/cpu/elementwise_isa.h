// The instruction-set forms of the activations (elementwise.cc picks among them), each in the
// folder of its architecture (kernels/cpu/x86, kernels/cpu/arm), built only there, and the scalar
// forms every one ends its tail with. Internal to the kernels library.
#pragma once

#include <cmath>
#include <cstdint>

namespace nereid::kernels {

// Below the vectors: the scalar forms every path ends with.
inline float ReluScalar(float v) { return v > 0.f ? v : 0.f; }

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
