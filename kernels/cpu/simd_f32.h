// The float vector operations the portable small-M SGEMM (gemm.cc) is written in, from the folder
// of the architecture: SimdF32 (V, kWidth, Zero, Load, Set1, Fma, Add, Store), SIMD_TARGET (what a
// function using them is compiled for) and HasSmallMSimd() (whether this CPU runs them). On other
// architectures SimdF32 is absent and HasSmallMSimd() is false.
#pragma once

#if defined(__x86_64__)
#include "cpu/x86/simd_f32_x86.h"
#elif defined(__aarch64__)
#include "cpu/arm/simd_f32_arm.h"
#else
namespace nereid::kernels {
inline bool HasSmallMSimd() { return false; }
}  // namespace nereid::kernels
#endif
