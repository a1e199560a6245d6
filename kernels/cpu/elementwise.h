// Float activation kernels of the native engine: AVX2 or NEON where the CPU has it (Relu and
// Sigmoid; Softmax over contiguous rows in AVX2; Erf and GELU in AVX-512 or AVX2), a portable
// loop otherwise. y may equal x
// (in place).
#pragma once

#include <cstdint>

namespace nereid::kernels {

void Relu(const float* x, float* y, int64_t n);
void Sigmoid(const float* x, float* y, int64_t n);
void Tanh(const float* x, float* y, int64_t n);
void Erf(const float* x, float* y, int64_t n);
// GELU, x * (erf(x / divisor) + 1) * 0.5, in the order exporters write it (divisor sqrt(2)).
void GeluErf(const float* x, float* y, int64_t n, float divisor);
// Softmax over 'axis_size' elements with stride 'inner', for each of 'outer' x 'inner' slices.
void Softmax(const float* x, float* y, int64_t outer, int64_t axis_size, int64_t inner);
// out[2i] = a[i] + add, out[2i + 1] = b[i] + add for i < n (a 2-wide transposed convolution's
// taps into its output row).
void InterleavePairs(const float* a, const float* b, int64_t n, float add, float* out);

}  // namespace nereid::kernels
