// Single-precision GEMM for the native engine: C = alpha * op(A) * op(B) + beta * C, row-major.
// Cache-blocked (BLIS-style packing of A and B panels) with an AVX-512 12x32 or AVX2/FMA 6x16
// micro-kernel selected at run time (x86-64), a NEON 6x16 one (AArch64) and a portable fallback.
// Small-M products (batch-1 inference) take a streaming path that reads B once without packing.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace nereid::kernels {

// 'bytes' of memory for std::free, 64-byte aligned; from 2 MiB on 2 MiB aligned and on
// transparent huge pages where the kernel offers them (madvise mode): packed weights and large
// activations stream through once per inference, and on 4 KiB pages their panels walk page tables.
// Null when out of memory.
void* AllocLarge(size_t bytes);

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// B packed once into the micro-kernel's panel layout: for constant weights (ONNX initializers) the
// engine packs at load time, so execution never re-packs and transposed weights cost nothing extra.
// Immutable after construction; shared by every instance thread.
class PackedMatrixB {
 public:
  // Packs op(B), a k x n matrix (B is n x k when trans_b), for the selected micro-kernel.
  PackedMatrixB(bool trans_b, int64_t k, int64_t n, const float* b, int64_t ldb);
  // The same for the micro-kernel named (one of SgemmKernels(); else the selected one): what
  // SgemmPackedFused then runs, whichever is selected.
  PackedMatrixB(const std::string& kernel, bool trans_b, int64_t k, int64_t n, const float* b,
                int64_t ldb);
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int64_t nr() const { return nr_; }
  int64_t kc() const { return kc_; }
  int64_t nc() const { return nc_; }
  int kernel() const { return kernel_; }  // the micro-kernel it was packed for
  // The packed KC x NC block starting at column jc, depth pc.
  const float* Block(int64_t jc, int64_t pc) const;

 private:
  void Pack(int kernel, bool trans_b, const float* b, int64_t ldb);

  int64_t k_, n_, nr_, kc_, nc_;
  int kernel_ = 0;
  std::vector<size_t> offsets_;
  std::shared_ptr<float> data_;
};

// C = alpha * op(A) * B + beta * C with B pre-packed.
void SgemmPacked(bool trans_a, int64_t m, float alpha, const float* a, int64_t lda,
                 const PackedMatrixB& b, float beta, float* c, int64_t ldc);

// What a fused product does to C (m x n): C = act(A * B + bias[n] + residual), with bias one value
// per column and residual an m x n matrix; both optional.
struct GemmEpilogue {
  const float* bias = nullptr;
  const float* residual = nullptr;
  int64_t ld_residual = 0;
  enum Activation {
    kNone,
    kRelu,
    kClip,
    kLeakyRelu,
    kHardSigmoid,
    kHardSwish,
    kGelu
  } activation = kNone;
  // kClip's bounds; kLeakyRelu's alpha is lo; kHardSigmoid's alpha and beta are lo and hi;
  // kGelu's divisor (sqrt(2): v * (erf(v / lo) + 1) * 0.5) is lo.
  float lo = 0.f, hi = 0.f;
};

// The epilogue's activation of one value: the definition the vector paths follow. NaN stays NaN
// through every kind, as in ONNX's reference, ONNX Runtime and PyTorch (a NaN pixel yields NaN
// scores, not numbers).
inline float Activate(const GemmEpilogue& ep, float v) {
  switch (ep.activation) {
    case GemmEpilogue::kRelu:
      return v < 0.f ? 0.f : v;
    case GemmEpilogue::kClip: {
      const float t = v < ep.lo ? ep.lo : v;  // (NaN stays NaN)
      return t > ep.hi ? ep.hi : t;
    }
    case GemmEpilogue::kLeakyRelu:
      return v < 0.f ? v * ep.lo : v;
    case GemmEpilogue::kHardSigmoid: {
      const float t = ep.lo * v + ep.hi;
      return t < 0.f ? 0.f : (t > 1.f ? 1.f : t);
    }
    case GemmEpilogue::kHardSwish: {
      const float t = v * (1.f / 6.f) + 0.5f;
      return v * (t < 0.f ? 0.f : (t > 1.f ? 1.f : t));
    }
    case GemmEpilogue::kGelu:
      return v * (std::erf(v / ep.lo) + 1.f) * 0.5f;
    case GemmEpilogue::kNone:
      break;
  }
  return v;
}

// The larger of a running maximum and a value, NaN once either was NaN (ONNX's reference and
// PyTorch; std::max keeps its first operand against NaN, dropping a NaN value that came later).
inline float MaxKeepingNaN(float acc, float v) { return v > acc || v != v ? v : acc; }

// The epilogue's activation on a stored row of C (what a fused product does after its last
// depth block): one vector loop per kind, GELU by the vector erf.
void ActivateEpilogueRow(float* row, int64_t n, const GemmEpilogue& ep);

// Rows [i0, i0 + mc) x depth [pc, pc + kc) of an implicit A, row-major: a pointer into the
// caller's memory, or into 'scratch' (room for the kernel's MC x KC block) after filling it;
// '*lda' receives the row stride. Implicit-GEMM convolution gathers A from the image here
// (contiguous copies of each tap's channels) instead of materializing the im2col matrix, and
// 1x1 convolutions hand the image itself.
using RowsAFn = std::function<const float*(int64_t i0, int64_t mc, int64_t pc, int64_t kc,
                                           float* scratch, int64_t* lda)>;

// Rows i0 .. i0 + rows of A, depth pc .. pc + kc, read in place where they can be: the depth in
// segments of seg_len, each seg_stride floats on from the one before, rows lda apart (a
// convolution's windows within one output row, inside the image: the image itself, no gather).
// False where not (A's rows then come from 'rows_a').
struct RowsView {
  const float* a = nullptr;
  int64_t lda = 0, seg_len = 0, seg_stride = 0;
};
using RowsViewFn =
    std::function<bool(int64_t i0, int64_t rows, int64_t pc, int64_t kc, RowsView* view)>;

// C = epilogue(A * B) for an m-row A supplied by 'rows_a' and pre-packed B; the bias, residual
// and activation are applied to each block of C while it is in cache. The x86 micro-kernels read
// the rows directly (no packing of A); elsewhere A is packed from them. 'view' (optional): tiles
// of rows read in place, per depth block, where the AVX-512 kernel runs. [col_begin, col_end):
// only those columns of C (col_begin a multiple of b.nr(), col_end one or past n: all of them),
// for callers that split one product's columns, or several products, over the team themselves.
void SgemmPackedFused(int64_t m, const RowsAFn& rows_a, const PackedMatrixB& b, float* c,
                      int64_t ldc, const GemmEpilogue& epilogue, const RowsViewFn& view = {},
                      int64_t col_begin = 0, int64_t col_end = INT64_MAX);

// The micro-kernel Sgemm uses: the fastest this CPU supports, measured once at first use (a few
// milliseconds), unless NEREID_SGEMM_KERNEL names one ("avx512-12x32", "avx2-fma-6x16",
// "neon-6x16", "portable-6x16").
const char* SgemmKernelName();
// The micro-kernels this CPU supports.
std::vector<std::string> SgemmKernels();
// Makes 'name' the kernel for later calls (tests and benchmarks); false if not supported here.
// Matrices packed before keep the kernel they were packed for.
bool UseSgemmKernel(const std::string& name);

}  // namespace nereid::kernels
