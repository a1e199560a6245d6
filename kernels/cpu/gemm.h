// Single-precision GEMM for the native engine: C = alpha * op(A) * op(B) + beta * C, row-major.
// Cache-blocked (BLIS-style packing of A and B panels) with an AVX2/FMA 6x16 micro-kernel selected
// at run time and a portable fallback. Small-M products (batch-1 inference) take a streaming path
// that reads B once without packing.
#pragma once

#include <cstdint>

namespace nereid::kernels {

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Which micro-kernel Sgemm uses on this CPU ("avx2-fma-6x16" or "portable").
const char* SgemmKernelName();

}  // namespace nereid::kernels
