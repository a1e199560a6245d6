#include "cpu/elementwise.h"

#include <algorithm>
#include <cmath>

#include "cpu/cpu_features.h"
#include "cpu/elementwise_isa.h"

namespace nereid::kernels {

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

void Erf(const float* x, float* y, int64_t n) {
#if defined(__x86_64__)
  if (HasAvx512F()) return ErfAvx512(x, y, n);
  if (HasAvx2Fma()) return ErfAvx2(x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = std::erf(x[i]);
}

void GeluErf(const float* x, float* y, int64_t n, float divisor) {
#if defined(__x86_64__)
  if (HasAvx512F()) return GeluErfAvx512(x, y, n, divisor);
  if (HasAvx2Fma()) return GeluErfAvx2(x, y, n, divisor);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = GeluScalar(x[i], divisor);
}

void Softmax(const float* x, float* y, int64_t outer, int64_t axis_size, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o) {
#if defined(__x86_64__)
    // Contiguous rows (the last axis: attention's scores) in vectors.
    if (inner == 1 && HasAvx2Fma() &&
        SoftmaxRowAvx2(x + o * axis_size, y + o * axis_size, axis_size))
      continue;
#endif
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

NEREID_VECTOR_CLONES void InterleavePairs(const float* __restrict a, const float* __restrict b,
                                          int64_t n, float add, float* __restrict out) {
  for (int64_t i = 0; i < n; ++i) {
    out[2 * i] = a[i] + add;
    out[2 * i + 1] = b[i] + add;
  }
}

}  // namespace nereid::kernels
