// The two products of one attention head, shaped for it: scores = Q Kt and context = P V, with
// Q s x d, Kt d x t, P s x t and V t x dv row-major, each small (a head: 128 x 32 x 128) and
// read whole from cache. Each output row is a sum of the other operand's rows weighted by the
// row's values (an outer-product form), in AVX-512 registers, several rows at a time sharing the
// loads: where the GEMM's packing and tile calls cost as much as the products (Sgemm reached 100
// and 77 GFLOP/s on these shapes here). False where this CPU has no AVX-512 (the caller then
// uses Sgemm).
#pragma once

#include <cstdint>

namespace nereid::kernels {

// y (rows x n) = x (rows x k) b (k x n), all row-major: Q Kt (rows s, k d, n t) or P V (rows s,
// k t, n dv).
bool AttentionHeadProduct(const float* x, int64_t rows, int64_t k, const float* b, int64_t n,
                          float* y);

}  // namespace nereid::kernels
