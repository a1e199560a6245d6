// The int8 GEMM's AArch64 parts (gemm_int8_isa.h): the SDOT and Armv8.0 (SMULL/SADALP)
// micro-kernels and the NEON row quantizer.
#include <arm_neon.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu/gemm_int8_isa.h"

namespace nereid::kernels::int8 {
namespace {

// acc[r][c] for rows r < R of x (signed bytes) against one panel with SDOT: each instruction adds
// four 4-byte dot products, one per channel of a quarter panel (the packing's 4 consecutive k of a
// channel are exactly SDOT's groups). x is read 16 bytes (four groups) at a time and used by lane.
template <int R, int Lane>
__attribute__((target("arch=armv8.2-a+dotprod"), always_inline)) inline void DotGroup(
    int32x4_t (*a)[4], const int8_t* w, const int8x16_t* xv) {
  const int8x16_t w0 = vld1q_s8(w), w1 = vld1q_s8(w + 16), w2 = vld1q_s8(w + 32),
                  w3 = vld1q_s8(w + 48);
  for (int r = 0; r < R; ++r) {
    a[r][0] = vdotq_laneq_s32(a[r][0], w0, xv[r], Lane);
    a[r][1] = vdotq_laneq_s32(a[r][1], w1, xv[r], Lane);
    a[r][2] = vdotq_laneq_s32(a[r][2], w2, xv[r], Lane);
    a[r][3] = vdotq_laneq_s32(a[r][3], w3, xv[r], Lane);
  }
}

template <int R>
__attribute__((target("arch=armv8.2-a+dotprod"))) void KernelNeonDot(const int8_t* x,
                                                                     int64_t stride, int64_t k4,
                                                                     const int8_t* p0,
                                                                     int32_t (*acc)[2 * kPanel]) {
  int32x4_t a[R][4];
  for (auto& row : a)
    for (auto& v : row) v = vdupq_n_s32(0);
  int8x16_t xv[R];
  int64_t g = 0;
  for (; g + 4 <= k4; g += 4) {
    for (int r = 0; r < R; ++r) xv[r] = vld1q_s8(x + r * stride + 4 * g);
    const int8_t* w = p0 + g * 64;
    DotGroup<R, 0>(a, w, xv);
    DotGroup<R, 1>(a, w + 64, xv);
    DotGroup<R, 2>(a, w + 128, xv);
    DotGroup<R, 3>(a, w + 192, xv);
  }
  for (; g < k4; ++g) {  // the last groups: x's four bytes in lane 0
    for (int r = 0; r < R; ++r)
      xv[r] = vreinterpretq_s8_s32(vdupq_n_s32(Load4(x + r * stride + 4 * g)));
    DotGroup<R, 0>(a, p0 + g * 64, xv);
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) vst1q_s32(acc[r] + 4 * v, a[r][v]);
}

// The same without SDOT (Armv8.0: Cortex-A53/A72): SMULL/SMULL2 multiply 8 bytes into int16
// products (|p| <= 127 * 127, no saturation) and SADALP adds neighbouring pairs into int32, so each
// accumulator holds two channels as two partial sums, paired up at the end. 8 accumulators a row:
// two rows at a time fit the registers.
template <int R>
void KernelNeon(const int8_t* x, int64_t stride, int64_t k4, const int8_t* p0,
                int32_t (*acc)[2 * kPanel]) {
  static_assert(R <= 2);
  int32x4_t a[R][8];
  for (auto& row : a)
    for (auto& v : row) v = vdupq_n_s32(0);
  for (int64_t g = 0; g < k4; ++g) {
    int8x16_t w[4];
    for (int v = 0; v < 4; ++v) w[v] = vld1q_s8(p0 + g * 64 + 16 * v);
    for (int r = 0; r < R; ++r) {
      const int8x16_t xb = vreinterpretq_s8_s32(vdupq_n_s32(Load4(x + r * stride + 4 * g)));
      for (int v = 0; v < 4; ++v) {
        a[r][2 * v] = vpadalq_s16(a[r][2 * v], vmull_s8(vget_low_s8(w[v]), vget_low_s8(xb)));
        a[r][2 * v + 1] = vpadalq_s16(a[r][2 * v + 1], vmull_high_s8(w[v], xb));
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) vst1q_s32(acc[r] + 4 * v, vpaddq_s32(a[r][2 * v], a[r][2 * v + 1]));
}

}  // namespace

void MicroNeonDot(int rows, const int8_t* x, int64_t stride, int64_t k4, const int8_t* p0,
                  int32_t (*acc)[2 * kPanel]) {
  ForRows(rows, [&](auto r) { KernelNeonDot<decltype(r)::value>(x, stride, k4, p0, acc); });
}

void MicroNeon(int rows, const int8_t* x, int64_t stride, int64_t k4, const int8_t* p0,
               int32_t (*acc)[2 * kPanel]) {
  // Two rows at a time (the registers): rows 0-1, then 2-3.
  for (int r0 = 0; r0 < rows; r0 += 2) {
    if (rows - r0 >= 2)
      KernelNeon<2>(x + r0 * stride, stride, k4, p0, acc + r0);
    else
      KernelNeon<1>(x + r0 * stride, stride, k4, p0, acc + r0);
  }
}

// FCVTNS rounds to nearest, ties to even: the scalar form's bits.
float QuantizeRowNeon(const float* row, int64_t k, int8_t* q) {
  float32x4_t vmax = vdupq_n_f32(0.f);
  int64_t l = 0;
  for (; l + 4 <= k; l += 4) vmax = vmaxq_f32(vmax, vabsq_f32(vld1q_f32(row + l)));
  float absmax = vmaxvq_f32(vmax);  // (FMAX and FMAXV return NaN where any lane is NaN)
  for (; l < k; ++l) absmax = AbsMaxKeepingNaN(absmax, row[l]);
  const float inv = absmax > 0.f ? 127.f / absmax : 0.f;
  const int32x4_t lo = vdupq_n_s32(-127), hi = vdupq_n_s32(127);
  for (l = 0; l + 8 <= k; l += 8) {
    const int32x4_t v0 =
        vminq_s32(vmaxq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(row + l), inv)), lo), hi);
    const int32x4_t v1 =
        vminq_s32(vmaxq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(row + l + 4), inv)), lo), hi);
    const int16x8_t w = vcombine_s16(vmovn_s32(v0), vmovn_s32(v1));
    vst1_s8(q + l, vmovn_s16(w));
  }
  for (; l < k; ++l) q[l] = QuantizeScalar(row[l], inv);
  return absmax / 127.f;
}

}  // namespace nereid::kernels::int8
