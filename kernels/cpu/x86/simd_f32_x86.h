// SimdF32 on x86: 8-wide AVX2 with FMA (cpu/simd_f32.h says what it is for).
#pragma once

#include <immintrin.h>

#include "cpu/cpu_features.h"

#define SIMD_TARGET __attribute__((target("avx2,fma")))

namespace nereid::kernels {

struct SimdF32 {
  using V = __m256;
  static constexpr int kWidth = 8;
  [[gnu::always_inline]] SIMD_TARGET static inline V Zero() { return _mm256_setzero_ps(); }
  [[gnu::always_inline]] SIMD_TARGET static inline V Load(const float* p) {
    return _mm256_load_ps(p);
  }
  [[gnu::always_inline]] SIMD_TARGET static inline V Set1(float x) { return _mm256_set1_ps(x); }
  [[gnu::always_inline]] SIMD_TARGET static inline V Fma(V x, V b, V acc) {
    return _mm256_fmadd_ps(x, b, acc);
  }
  [[gnu::always_inline]] SIMD_TARGET static inline V Add(V x, V y) { return _mm256_add_ps(x, y); }
  [[gnu::always_inline]] SIMD_TARGET static inline void Store(float* p, V v) {
    _mm256_store_ps(p, v);
  }
};

inline bool HasSmallMSimd() { return HasAvx2Fma(); }

}  // namespace nereid::kernels
