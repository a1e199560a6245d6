// The convolution kernels' x86-64 parts (conv_isa.h): the AVX-512 depthwise and small-groups
// rows.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "cpu/conv_isa.h"

// GCC 12 at -O3 warns that its own _mm512_max_ps/_mm512_min_ps read an uninitialized '__Y'
// (the undefined passthrough of the unmasked forms): a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace nereid::kernels::conv_isa {
namespace {

// The first n of 16 lanes (none where n <= 0, all from 16 on): a block's channels inside the
// tensor.
inline __mmask16 FirstLanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff)
                 : static_cast<__mmask16>(n <= 0 ? 0u : (1u << n) - 1);
}

// Activate() on 16 lanes (NaN kept: max/min return their second operand where either is NaN).
__attribute__((target("avx512f"), always_inline)) inline __m512 Activate512(int activation,
                                                                            __m512 v, __m512 zero,
                                                                            __m512 lo, __m512 hi) {
  const __m512 one = _mm512_set1_ps(1.f);
  switch (activation) {
    case GemmEpilogue::kRelu:
      return _mm512_max_ps(zero, v);
    case GemmEpilogue::kClip:
      return _mm512_min_ps(hi, _mm512_max_ps(lo, v));
    case GemmEpilogue::kLeakyRelu:
      return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, lo);
    case GemmEpilogue::kHardSigmoid:
      return _mm512_min_ps(one, _mm512_max_ps(zero, _mm512_fmadd_ps(lo, v, hi)));
    case GemmEpilogue::kHardSwish: {
      const __m512 t = _mm512_fmadd_ps(v, _mm512_set1_ps(1.f / 6.f), _mm512_set1_ps(0.5f));
      return _mm512_mul_ps(v, _mm512_min_ps(one, _mm512_max_ps(zero, t)));
    }
    default:
      return v;
  }
}

// The interior pixels [0, count) of one output row for a 3x3 window wholly inside the image: the
// nine taps' rows at row_src (each pixel 'step' floats after the one before), their weights at
// row_w, channels [c0, c0 + 16 * NB) (NB blocks of 16, all inside c). Four pixels side by side,
// the taps unrolled and their weights held in registers (the loop over a variable tap count
// reloaded them from the stack).
template <int NB>
__attribute__((target("avx512f"))) void DepthwiseInterior3x3(
    const float* const* row_src, const float* const* row_w, int64_t step, int64_t c, int64_t c0,
    int64_t count, const float* bias, const float* residual, const GemmEpilogue& ep, float* y) {
  const __m512 zero = _mm512_setzero_ps(), lo = _mm512_set1_ps(ep.lo), hi = _mm512_set1_ps(ep.hi);
  __m512 wv[9][NB], bv[NB];
#pragma GCC unroll 9
  for (int t = 0; t < 9; ++t)
#pragma GCC unroll 2
    for (int k = 0; k < NB; ++k) wv[t][k] = _mm512_loadu_ps(row_w[t] + c0 + 16 * k);
#pragma GCC unroll 2
  for (int k = 0; k < NB; ++k) bv[k] = bias ? _mm512_loadu_ps(bias + c0 + 16 * k) : zero;
  auto group = [&](int64_t ox, auto lanes) __attribute__((target("avx512f"), always_inline)) {
    constexpr int U = decltype(lanes)::value;
    __m512 acc[U][NB];
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u)
#pragma GCC unroll 2
      for (int k = 0; k < NB; ++k) {
        acc[u][k] = bv[k];
        if (residual)
          acc[u][k] =
              _mm512_add_ps(acc[u][k], _mm512_loadu_ps(residual + (ox + u) * c + c0 + 16 * k));
      }
    const int64_t off = ox * step + c0;
#pragma GCC unroll 9
    for (int t = 0; t < 9; ++t)
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u)
#pragma GCC unroll 2
        for (int k = 0; k < NB; ++k)
          acc[u][k] = _mm512_fmadd_ps(_mm512_loadu_ps(row_src[t] + off + u * step + 16 * k),
                                      wv[t][k], acc[u][k]);
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u)
#pragma GCC unroll 2
      for (int k = 0; k < NB; ++k)
        _mm512_storeu_ps(y + (ox + u) * c + c0 + 16 * k,
                         Activate512(ep.activation, acc[u][k], zero, lo, hi));
  };
  int64_t ox = 0;
  for (; ox + 4 <= count; ox += 4) group(ox, std::integral_constant<int, 4>{});
  for (; ox < count; ++ox) group(ox, std::integral_constant<int, 1>{});
}

}  // namespace

// One output row (NHWC) with AVX-512. Pixels whose window leaves the image at the left or right:
// per pixel, channels in blocks of 64 (four accumulators kept in registers over the taps), then
// 16, then a masked tail. The pixels between: their window's pointers advance by stride * c from
// pixel to pixel (the rows inside the image are the same for the whole output row), and per
// block of 16 channels four pixels run side by side, the taps' weights held in registers (four
// independent sums where one pixel alone waits on each FMA: MobileNetV2's 32-channel layer), for
// windows of up to 5x5 (RapidOCR's recogniser's 5x5 over 240 channels at 12x80: 478 -> 200 us,
// per pixel before).
__attribute__((target("avx512f"))) void DepthwiseRowAvx512(const Conv2dGeometry& g, const float* x,
                                                           const float* taps, const float* bias,
                                                           const float* residual,
                                                           const GemmEpilogue& ep, float* y,
                                                           int64_t b, int64_t oy, int64_t c_lo,
                                                           int64_t c_hi) {
  const int64_t c = g.c_out;
  std::vector<const float*> tap_src(static_cast<size_t>(g.kh * g.kw)), tap_w(tap_src.size());
  std::vector<int64_t> tap_index(tap_src.size());
  const float** src = tap_src.data();
  const float** w = tap_w.data();
  const __m512 zero = _mm512_setzero_ps(), lo = _mm512_set1_ps(ep.lo), hi = _mm512_set1_ps(ep.hi);
  auto pixel = [&](int64_t ox) __attribute__((target("avx512f"))) {
    const int count = DepthwiseTaps(g, x, taps, b, oy, ox, src, w, tap_index.data());
    const int64_t at = (b * g.oh + oy) * g.ow + ox;
    const float* res = residual ? residual + at * c : nullptr;
    float* out = y + at * c;
    int64_t c0 = c_lo;
    for (; c0 + 64 <= c_hi; c0 += 64) {
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
    for (; c0 < c_hi; c0 += 16) {
      const __mmask16 m = FirstLanes(c_hi - c0);
      __m512 acc = bias ? _mm512_maskz_loadu_ps(m, bias + c0) : zero;
      if (res) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, res + c0));
      for (int t = 0; t < count; ++t)
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, src[t] + c0),
                              _mm512_maskz_loadu_ps(m, w[t] + c0), acc);
      _mm512_mask_storeu_ps(out + c0, m, Activate512(ep.activation, acc, zero, lo, hi));
    }
  };

  // The interior: ox * stride - pad_left >= 0 and its last tap < w.
  const int64_t sw = g.stride_w;
  const int64_t last_tap = g.w - 1 + g.pad_left - (g.kw - 1) * g.dilation_w;
  int64_t ox_hi = last_tap < 0 ? 0 : std::min<int64_t>(last_tap / sw + 1, g.ow);
  int64_t ox_lo = std::min<int64_t>((g.pad_left + sw - 1) / sw, ox_hi);
  constexpr int kMaxTaps = 25;  // up to 5x5 windows; larger ones per pixel
  if (g.kh * g.kw > kMaxTaps) ox_lo = ox_hi = g.ow;
  for (int64_t ox = 0; ox < ox_lo; ++ox) pixel(ox);
  if (ox_lo < ox_hi) {
    const float* row_src[kMaxTaps];
    const float* row_w[kMaxTaps];
    int count = 0;
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      const int64_t iy = oy * g.stride_h - g.pad_top + ky * g.dilation_h;
      if (iy < 0 || iy >= g.h) continue;
      for (int64_t kx = 0; kx < g.kw; ++kx, ++count) {
        const int64_t ix = ox_lo * sw - g.pad_left + kx * g.dilation_w;
        row_src[count] = x + ((b * g.h + iy) * g.w + ix) * c;
        row_w[count] = taps + (ky * g.kw + kx) * c;
      }
    }
    const int64_t step = sw * c;
    const int64_t first = (b * g.oh + oy) * g.ow;
    for (int64_t c0 = c_lo; c0 < c_hi; c0 += 16) {
      // 3x3 windows inside the image rows: the unrolled kernel, two channel blocks at a time.
      if (count == 9 && c0 + 16 <= c_hi) {
        const int nb = c0 + 32 <= c_hi ? 2 : 1;
        (nb == 2 ? DepthwiseInterior3x3<2>
                 : DepthwiseInterior3x3<1>)(row_src, row_w, step, c, c0, ox_hi - ox_lo, bias,
                                            residual ? residual + (first + ox_lo) * c : nullptr, ep,
                                            y + (first + ox_lo) * c);
        c0 += 16 * (nb - 1);
        continue;
      }
      const __mmask16 m = FirstLanes(c_hi - c0);
      __m512 wv[kMaxTaps];
      for (int t = 0; t < count; ++t) wv[t] = _mm512_maskz_loadu_ps(m, row_w[t] + c0);
      const __m512 bv = bias ? _mm512_maskz_loadu_ps(m, bias + c0) : zero;
      int64_t ox = ox_lo;
      for (; ox + 4 <= ox_hi; ox += 4) {
        __m512 acc[4];
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) {
          acc[u] = bv;
          if (residual)
            acc[u] = _mm512_add_ps(acc[u],
                                   _mm512_maskz_loadu_ps(m, residual + (first + ox + u) * c + c0));
        }
        const int64_t off = (ox - ox_lo) * step + c0;
        for (int t = 0; t < count; ++t)
#pragma GCC unroll 4
          for (int u = 0; u < 4; ++u)
            acc[u] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, row_src[t] + off + u * step), wv[t],
                                     acc[u]);
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u)
          _mm512_mask_storeu_ps(y + (first + ox + u) * c + c0, m,
                                Activate512(ep.activation, acc[u], zero, lo, hi));
      }
      for (; ox < ox_hi; ++ox) {
        __m512 acc = bv;
        if (residual)
          acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, residual + (first + ox) * c + c0));
        const int64_t off = (ox - ox_lo) * step + c0;
        for (int t = 0; t < count; ++t)
          acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, row_src[t] + off), wv[t], acc);
        _mm512_mask_storeu_ps(y + (first + ox) * c + c0, m,
                              Activate512(ep.activation, acc, zero, lo, hi));
      }
    }
  }
  for (int64_t ox = std::max(ox_hi, ox_lo); ox < g.ow; ++ox) pixel(ox);
}

namespace {

// One block of 16 output channels of one output pixel of a small-groups convolution: the window
// pixels' input channels from the block's first loaded once as 32 lanes (masked at the image's
// last channel), then per input channel j of a group each output lane's own channel picked
// (vpermt2ps by the block's lanes) and multiplied by its weight ('taps': the block's, [tap][j]
// [16]), four sums taking the products in turn (one sum waited on each FMA). CIG > 0: that many
// input channels a group, unrolled, the lanes in registers; 0: 'cig' of them.
template <int CIG>
__attribute__((target("avx512f"), always_inline)) inline __m512 SmallGroupsBlock(
    const float* const* src, const int64_t* tap, int count, int64_t first, __mmask16 m_lo,
    __mmask16 m_hi, const int32_t* lanes, const float* taps, int64_t cig, __m512 init) {
  const __m512 zero = _mm512_setzero_ps();
  __m512 acc[4] = {init, zero, zero, zero};
  __m512i index[CIG > 0 ? CIG : 1];
  if constexpr (CIG > 0)
#pragma GCC unroll 16
    for (int j = 0; j < CIG; ++j) index[j] = _mm512_loadu_si512(lanes + j * 16);
  for (int t = 0; t < count; ++t) {
    const __m512 in_lo = _mm512_maskz_loadu_ps(m_lo, src[t] + first);
    const __m512 in_hi = _mm512_maskz_loadu_ps(m_hi, src[t] + first + 16);
    const float* k = taps + tap[t] * cig * 16;
    if constexpr (CIG > 0) {
#pragma GCC unroll 16
      for (int j = 0; j < CIG; ++j)
        acc[(t * CIG + j) & 3] =
            _mm512_fmadd_ps(_mm512_permutex2var_ps(in_lo, index[j], in_hi),
                            _mm512_loadu_ps(k + j * 16), acc[(t * CIG + j) & 3]);
    } else {
      auto product = [&](int64_t j, __m512 sum) __attribute__((target("avx512f"), always_inline)) {
        return _mm512_fmadd_ps(
            _mm512_permutex2var_ps(in_lo, _mm512_loadu_si512(lanes + j * 16), in_hi),
            _mm512_loadu_ps(k + j * 16), sum);
      };
      int64_t j = 0;
      for (; j + 4 <= cig; j += 4)
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) acc[u] = product(j + u, acc[u]);
      for (; j < cig; ++j) acc[0] = product(j, acc[0]);
    }
  }
  return _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
}

}  // namespace

// The row's windows first (per output pixel its pixels inside the image), then per block of 16
// output channels every pixel, the block's weights (9 KB for a 3x3 of 16 channels a group)
// staying in L1 across the row.
__attribute__((target("avx512f"))) void SmallGroupsRowAvx512(
    const Conv2dGeometry& g, const float* x, const ConvWeights& w, const float* bias,
    const float* residual, const GemmEpilogue& ep, float* y, int64_t b, int64_t oy) {
  const int64_t c = g.c_out, cig = g.c_in / g.groups, taps = g.kh * g.kw;
  thread_local std::vector<const float*> src;
  thread_local std::vector<int64_t> tap;
  thread_local std::vector<int> count;
  src.resize(static_cast<size_t>(g.ow * taps));
  tap.resize(src.size());
  count.resize(static_cast<size_t>(g.ow));
  for (int64_t ox = 0; ox < g.ow; ++ox)
    count[ox] = WindowPixels(g, x, g.c_in, b, oy, ox, &src[ox * taps], &tap[ox * taps]);
  const __m512 zero = _mm512_setzero_ps(), lo = _mm512_set1_ps(ep.lo), hi = _mm512_set1_ps(ep.hi);
  auto block_fn = cig == 1   ? SmallGroupsBlock<1>
                  : cig == 2 ? SmallGroupsBlock<2>
                  : cig == 4 ? SmallGroupsBlock<4>
                  : cig == 8 ? SmallGroupsBlock<8>
                             : SmallGroupsBlock<0>;
  const int64_t first_pixel = (b * g.oh + oy) * g.ow;
  for (int64_t c0 = 0, block = 0; c0 < c; c0 += 16, ++block) {
    const __mmask16 m = FirstLanes(c - c0);
    const int64_t first = w.BlockFirstInput(block);
    const __mmask16 m_lo = FirstLanes(g.c_in - first), m_hi = FirstLanes(g.c_in - first - 16);
    const int32_t* lanes = w.group_lanes() + block * cig * 16;
    const float* block_taps = w.group_taps() + block * taps * cig * 16;
    const __m512 bv = bias ? _mm512_maskz_loadu_ps(m, bias + c0) : zero;
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t at = (first_pixel + ox) * c + c0;
      const __m512 init =
          residual ? _mm512_add_ps(bv, _mm512_maskz_loadu_ps(m, residual + at)) : bv;
      const __m512 sum = block_fn(&src[ox * taps], &tap[ox * taps], count[ox], first, m_lo, m_hi,
                                  lanes, block_taps, cig, init);
      _mm512_mask_storeu_ps(y + at, m, Activate512(ep.activation, sum, zero, lo, hi));
    }
  }
}

}  // namespace nereid::kernels::conv_isa
