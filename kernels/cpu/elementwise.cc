#include "cpu/elementwise.h"

#include <algorithm>
#include <cmath>

namespace nereid::kernels {

void Relu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

void Sigmoid(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    // Split by sign so exp never overflows.
    const float v = x[i];
    if (v >= 0.f) {
      y[i] = 1.f / (1.f + std::exp(-v));
    } else {
      const float e = std::exp(v);
      y[i] = e / (1.f + e);
    }
  }
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
