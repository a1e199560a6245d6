// The instruction-set parts of the SGEMM (gemm.cc picks among them at run time), each in the
// folder of its architecture (kernels/cpu/x86, kernels/cpu/arm), built only there. Internal to
// the kernels library.
#pragma once

#include <cstdint>

namespace nereid::kernels::sgemm {

// Each micro-kernel: acc[MR][NR] = sum_p a[p][:] (x) b[p][:]; then C[0..m, 0..n] += alpha * acc,
// over A packed in MR-row panels and B in NR-column panels.
using MicroKernel = void (*)(int64_t kc, const float* a, const float* b, float alpha, float* c,
                             int64_t ldc, int64_t m, int64_t n);
// The same over 'rows' of a row-major A (lda), no packing of A.
using RowsKernel = void (*)(int64_t kc, const float* a, int64_t lda, const float* b, float alpha,
                            float* c, int64_t ldc, int64_t m, int64_t n);
// What a fused rows kernel does with its tile instead of C += acc: on the depth's first block
// C = acc + bias + residual (C not read), on the others C += acc, and on its last the
// activation after the sum (kinds and bounds as GemmEpilogue's, cpu/gemm.h). Pointers at the
// tile's first row and column; null where absent.
struct TileEpilogue {
  bool first = false, last = false;
  const float* bias = nullptr;
  const float* residual = nullptr;
  int64_t ld_residual = 0;
  int activation = 0;  // GemmEpilogue::Activation
  float lo = 0.f, hi = 0.f;
  // The rows of C (ldc apart) and of the residual (ld_residual apart) the caller's next tile
  // stores and reads, nr floats from these pointers: fetched while this tile multiplies, one row
  // a depth step (null: none).
  float* next_c = nullptr;
  const float* next_residual = nullptr;
  int64_t next_rows = 0;
  // Where the next call starts a new tile: that tile's rows of A (as the kernel's a, lda, seg_len
  // and seg_stride give them, over the same depth), one line fetched a step.
  const float* next_a = nullptr;
  int64_t next_a_rows = 0, next_a_lda = 0, next_a_seg_len = 0, next_a_seg_stride = 0;
};
// Its depth runs in segments of seg_len steps, each seg_stride floats on from the one before in
// every row (seg_len = kc: A's rows as they are; a convolution's windows read in place from the
// image: one segment per window row).
using RowsFusedKernel = void (*)(int64_t kc, const float* a, int64_t lda, int64_t seg_len,
                                 int64_t seg_stride, const float* b, float* c, int64_t ldc,
                                 int64_t m, int64_t n, const TileEpilogue& ep);
constexpr int64_t kMr = 6;  // the 6x16 kernels' tile
constexpr int64_t kNr = 16;

#if defined(__x86_64__)
// x86-64 (x86/gemm_x86.cc): AVX-512 12x32 and AVX2/FMA 6x16. [r]: the kernel for a last panel of
// r rows (Partial, r < MR) or over r rows of a row-major A (Rows, r in 1..MR); [0] is null.
__attribute__((target("avx512f"))) void MicroKernelAvx512Full(int64_t kc, const float* a,
                                                              const float* b, float alpha, float* c,
                                                              int64_t ldc, int64_t m, int64_t n);
__attribute__((target("avx2,fma"))) void MicroKernelAvx2Full(int64_t kc, const float* a,
                                                             const float* b, float alpha, float* c,
                                                             int64_t ldc, int64_t m, int64_t n);
extern const MicroKernel kAvx512Partial[12];
extern const RowsKernel kAvx512Rows[13];
extern const RowsFusedKernel kAvx512RowsFused[13];  // the same tiles, the epilogue in the stores
// The same for a last panel of 16 columns or fewer (B's panel still 32 wide): half the FMAs.
extern const RowsFusedKernel kAvx512RowsFusedNarrow[13];
extern const MicroKernel kAvx2Partial[6];
extern const RowsKernel kAvx2Rows[7];
// C[i, :] += alpha * A[i, :] B for few rows, streaming each row of B once (B not transposed).
__attribute__((target("avx2,fma"))) void SmallMRowsAvx2(int64_t m, int64_t n, int64_t k,
                                                        float alpha, const float* a, int64_t lda,
                                                        bool trans_a, const float* b, int64_t ldb,
                                                        float* c, int64_t ldc);
// C += alpha * A * B^T for B stored N x K and few rows of A.
__attribute__((target("avx2,fma"))) void SmallMDotsAvx2(int64_t m, int64_t n, int64_t k,
                                                        float alpha, const float* a, int64_t lda,
                                                        const float* b, int64_t ldb, float* c,
                                                        int64_t ldc);

#elif defined(__aarch64__)
// AArch64 (arm/gemm_arm.cc): NEON 6x16.
void MicroKernelNeonFull(int64_t kc, const float* a, const float* b, float alpha, float* c,
                         int64_t ldc, int64_t m, int64_t n);
extern const MicroKernel kNeonPartial[6];
#endif

}  // namespace nereid::kernels::sgemm
