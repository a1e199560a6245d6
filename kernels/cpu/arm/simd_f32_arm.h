// SimdF32 on AArch64: 4-wide NEON (cpu/simd_f32.h says what it is for).
#pragma once

#include <arm_neon.h>

#include "cpu/cpu_features.h"

#define SIMD_TARGET

namespace nereid::kernels {

struct SimdF32 {
  using V = float32x4_t;
  static constexpr int kWidth = 4;
  static V Zero() { return vdupq_n_f32(0.f); }
  static V Load(const float* p) { return vld1q_f32(p); }
  static V Set1(float x) { return vdupq_n_f32(x); }
  static V Fma(V x, V b, V acc) { return vfmaq_f32(acc, x, b); }
  static V Add(V x, V y) { return vaddq_f32(x, y); }
  static void Store(float* p, V v) { vst1q_f32(p, v); }
};

inline bool HasSmallMSimd() { return HasNeon(); }

}  // namespace nereid::kernels
