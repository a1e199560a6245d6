// The convolution kernels' x86-64 parts (conv_isa.h): the AVX-512 depthwise row.
#include <immintrin.h>

#include <cstdint>
#include <vector>

#include "cpu/conv_isa.h"

// GCC 12 at -O3 warns that its own _mm512_max_ps/_mm512_min_ps read an uninitialized '__Y'
// (the undefined passthrough of the unmasked forms): a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace nereid::kernels::conv_isa {
namespace {

// Activate() on 16 lanes.
__attribute__((target("avx512f"), always_inline)) inline __m512 Activate512(int activation,
                                                                            __m512 v, __m512 zero,
                                                                            __m512 lo, __m512 hi) {
  const __m512 one = _mm512_set1_ps(1.f);
  switch (activation) {
    case GemmEpilogue::kRelu:
      return _mm512_max_ps(v, zero);
    case GemmEpilogue::kClip:
      return _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    case GemmEpilogue::kLeakyRelu:
      return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, lo);
    case GemmEpilogue::kHardSigmoid:
      return _mm512_min_ps(_mm512_max_ps(_mm512_fmadd_ps(lo, v, hi), zero), one);
    case GemmEpilogue::kHardSwish: {
      const __m512 t = _mm512_fmadd_ps(v, _mm512_set1_ps(1.f / 6.f), _mm512_set1_ps(0.5f));
      return _mm512_mul_ps(v, _mm512_min_ps(_mm512_max_ps(t, zero), one));
    }
    default:
      return v;
  }
}

}  // namespace

// One output row (NHWC) with AVX-512: per pixel, channels in blocks of 64 (four accumulators kept
// in registers over the taps), then 16, then a masked tail.
__attribute__((target("avx512f"))) void DepthwiseRowAvx512(const Conv2dGeometry& g, const float* x,
                                                           const float* taps, const float* bias,
                                                           const float* residual,
                                                           const GemmEpilogue& ep, float* y,
                                                           int64_t b, int64_t oy) {
  const int64_t c = g.c_out;
  std::vector<const float*> tap_src(static_cast<size_t>(g.kh * g.kw)), tap_w(tap_src.size());
  std::vector<int64_t> tap_index(tap_src.size());
  const float** src = tap_src.data();
  const float** w = tap_w.data();
  const __m512 zero = _mm512_setzero_ps(), lo = _mm512_set1_ps(ep.lo), hi = _mm512_set1_ps(ep.hi);

  for (int64_t ox = 0; ox < g.ow; ++ox) {
    const int count = DepthwiseTaps(g, x, taps, b, oy, ox, src, w, tap_index.data());
    const int64_t pixel = (b * g.oh + oy) * g.ow + ox;
    const float* res = residual ? residual + pixel * c : nullptr;
    float* out = y + pixel * c;
    int64_t c0 = 0;
    for (; c0 + 64 <= c; c0 += 64) {
      __m512 acc[4];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        acc[v] = bias ? _mm512_loadu_ps(bias + c0 + 16 * v) : zero;
        if (res) acc[v] = _mm512_add_ps(acc[v], _mm512_loadu_ps(res + c0 + 16 * v));
      }
      for (int t = 0; t < count; ++t)
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v)
          acc[v] = _mm512_fmadd_ps(_mm512_loadu_ps(src[t] + c0 + 16 * v),
                                   _mm512_loadu_ps(w[t] + c0 + 16 * v), acc[v]);
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v)
        _mm512_storeu_ps(out + c0 + 16 * v, Activate512(ep.activation, acc[v], zero, lo, hi));
    }
    for (; c0 < c; c0 += 16) {
      const __mmask16 m = c - c0 >= 16 ? 0xffff : static_cast<__mmask16>((1u << (c - c0)) - 1);
      __m512 acc = bias ? _mm512_maskz_loadu_ps(m, bias + c0) : zero;
      if (res) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, res + c0));
      for (int t = 0; t < count; ++t)
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, src[t] + c0),
                              _mm512_maskz_loadu_ps(m, w[t] + c0), acc);
      _mm512_mask_storeu_ps(out + c0, m, Activate512(ep.activation, acc, zero, lo, hi));
    }
  }
}

}  // namespace nereid::kernels::conv_isa
