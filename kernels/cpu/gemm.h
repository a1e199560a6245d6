// Single-precision GEMM for the native engine: C = alpha * op(A) * op(B) + beta * C, row-major.
// Cache-blocked (BLIS-style packing of A and B panels) with an AVX2/FMA 6x16 micro-kernel selected
// at run time and a portable fallback. Small-M products (batch-1 inference) take a streaming path
// that reads B once without packing.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace nereid::kernels {

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// B packed once into the micro-kernel's panel layout: for constant weights (ONNX initializers) the
// engine packs at load time, so execution never re-packs and transposed weights cost nothing extra.
// Immutable after construction; shared by every instance thread.
class PackedMatrixB {
 public:
  // Packs op(B), a k x n matrix (B is n x k when trans_b).
  PackedMatrixB(bool trans_b, int64_t k, int64_t n, const float* b, int64_t ldb);
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int64_t nr() const { return nr_; }
  int64_t kc() const { return kc_; }
  int64_t nc() const { return nc_; }
  // The packed KC x NC block starting at column jc, depth pc.
  const float* Block(int64_t jc, int64_t pc) const;

 private:
  int64_t k_, n_, nr_, kc_, nc_;
  std::vector<size_t> offsets_;
  std::shared_ptr<float> data_;
};

// C = alpha * op(A) * B + beta * C with B pre-packed.
void SgemmPacked(bool trans_a, int64_t m, float alpha, const float* a, int64_t lda,
                 const PackedMatrixB& b, float beta, float* c, int64_t ldc);

// Which micro-kernel Sgemm uses on this CPU ("avx2-fma-6x16" or "portable").
const char* SgemmKernelName();

}  // namespace nereid::kernels
