// The instruction-set parts of the convolution kernels (conv.cc picks among them at run time), in
// the folder of their architecture (kernels/cpu/x86), and the window helpers they share with the
// portable code. Internal to the kernels library.
#pragma once

#include <cstdint>

#include "conv_geometry.h"
#include "cpu/conv.h"
#include "cpu/gemm.h"

namespace nereid::kernels::conv_isa {

// The window positions of output pixel (b, oy, ox) inside the image (an NHWC image of 'channels'):
// each one's input pixel and its tap index (ky * kw + kx). Returns how many.
inline int WindowPixels(const Conv2dGeometry& g, const float* x, int64_t channels, int64_t b,
                        int64_t oy, int64_t ox, const float** src, int64_t* tap) {
  int count = 0;
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    const int64_t iy = oy * g.stride_h - g.pad_top + ky * g.dilation_h;
    if (iy < 0 || iy >= g.h) continue;
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      const int64_t ix = ox * g.stride_w - g.pad_left + kx * g.dilation_w;
      if (ix < 0 || ix >= g.w) continue;
      src[count] = x + ((b * g.h + iy) * g.w + ix) * channels;
      tap[count++] = ky * g.kw + kx;
    }
  }
  return count;
}

// The same for a depthwise convolution: input pixels and the weights of their taps.
inline int DepthwiseTaps(const Conv2dGeometry& g, const float* x, const float* taps, int64_t b,
                         int64_t oy, int64_t ox, const float** src, const float** w, int64_t* tap) {
  const int count = WindowPixels(g, x, g.c_out, b, oy, ox, src, tap);
  for (int t = 0; t < count; ++t) w[t] = taps + tap[t] * g.c_out;
  return count;
}

#if defined(__x86_64__)
// Channels [c_lo, c_hi) of one output row (NHWC) of a depthwise convolution with AVX-512
// (x86/conv_x86.cc): taps as [kh * kw][channels].
__attribute__((target("avx512f"))) void DepthwiseRowAvx512(const Conv2dGeometry& g, const float* x,
                                                           const float* taps, const float* bias,
                                                           const float* residual,
                                                           const GemmEpilogue& ep, float* y,
                                                           int64_t b, int64_t oy, int64_t c_lo,
                                                           int64_t c_hi);
// One output row of a convolution of small groups (ConvWeights::small_groups) with AVX-512.
__attribute__((target("avx512f"))) void SmallGroupsRowAvx512(
    const Conv2dGeometry& g, const float* x, const ConvWeights& w, const float* bias,
    const float* residual, const GemmEpilogue& ep, float* y, int64_t b, int64_t oy);
#endif

}  // namespace nereid::kernels::conv_isa
