// The SGEMM's AArch64 part (gemm_isa.h): the NEON 6x16 micro-kernel.
#include <arm_neon.h>

#include <cstdint>
#include <utility>

#include "cpu/gemm_isa.h"

namespace nereid::kernels::sgemm {
namespace {

// One step of a NEON micro-kernel's row I: acc += A[I] * b, A[I] taken by lane from the two
// registers that hold the panel's six values (FMLA by element: no broadcast instruction).
template <int I>
inline float32x4_t FmaByLane(float32x4_t acc, float32x4_t b, float32x4_t a03, float32x2_t a45) {
  if constexpr (I < 4)
    return vfmaq_laneq_f32(acc, b, a03, I);
  else
    return vfmaq_lane_f32(acc, b, a45, I - 4);
}

// ROWS x 16 with NEON over A panels packed kMr (6) rows wide: per step four loads of B, one
// 4-wide and one 2-wide load of A (inside the panel whatever ROWS is) and 4 * ROWS FMLAs; the
// full tile keeps 24 accumulators, 4 B and 2 A registers in AArch64's 32.
template <int ROWS>
void MicroKernelNeon(int64_t kc, const float* a, const float* b, float alpha, float* c, int64_t ldc,
                     int64_t m, int64_t n) {
  float32x4_t acc[ROWS][4];
  for (auto& row : acc)
    for (auto& v : row) v = vdupq_n_f32(0.f);
  for (int64_t p = 0; p < kc; ++p) {
    const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8),
                      b3 = vld1q_f32(b + 12);
    const float32x4_t a03 = vld1q_f32(a);
    const float32x2_t a45 = vld1_f32(a + 4);
    [&]<int... I>(std::integer_sequence<int, I...>) {
      ((acc[I][0] = FmaByLane<I>(acc[I][0], b0, a03, a45),
        acc[I][1] = FmaByLane<I>(acc[I][1], b1, a03, a45),
        acc[I][2] = FmaByLane<I>(acc[I][2], b2, a03, a45),
        acc[I][3] = FmaByLane<I>(acc[I][3], b3, a03, a45)),
       ...);
    }
    (std::make_integer_sequence<int, ROWS>{});
    a += kMr;
    b += kNr;
  }
  if (m == ROWS && n == kNr) {
    for (int i = 0; i < ROWS; ++i) {
      float* ci = c + i * ldc;
      for (int v = 0; v < 4; ++v)
        vst1q_f32(ci + 4 * v, vfmaq_n_f32(vld1q_f32(ci + 4 * v), acc[i][v], alpha));
    }
    return;
  }
  float tile[ROWS][kNr];
  for (int i = 0; i < ROWS; ++i)
    for (int v = 0; v < 4; ++v) vst1q_f32(tile[i] + 4 * v, acc[i][v]);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += alpha * tile[i][j];
}

}  // namespace

const MicroKernel kNeonPartial[6] = {
    nullptr,
    MicroKernelNeon<1>,
    MicroKernelNeon<2>,
    MicroKernelNeon<3>,
    MicroKernelNeon<4>,
    MicroKernelNeon<5>,
};

void MicroKernelNeonFull(int64_t kc, const float* a, const float* b, float alpha, float* c,
                         int64_t ldc, int64_t m, int64_t n) {
  MicroKernelNeon<kMr>(kc, a, b, alpha, c, ldc, m, n);
}

}  // namespace nereid::kernels::sgemm
