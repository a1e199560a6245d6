#include "cpu/conv.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "cpu/cpu_features.h"

namespace nereid::kernels {

ConvWeights::ConvWeights(const float* w, int64_t c_out, int64_t c_in_per_group, int64_t kh,
                         int64_t kw, int64_t groups) {
  const int64_t taps = kh * kw, cog = c_out / groups;
  depthwise_ = c_in_per_group == 1 && cog == 1 && groups > 1;
  if (depthwise_) {
    taps_.resize(static_cast<size_t>(taps * c_out));
    for (int64_t c = 0; c < c_out; ++c)
      for (int64_t t = 0; t < taps; ++t) taps_[t * c_out + c] = w[c * taps + t];
    return;
  }
  const int64_t depth = taps * c_in_per_group;
  std::vector<float> b(static_cast<size_t>(depth * cog));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t co = 0; co < cog; ++co)
      for (int64_t ci = 0; ci < c_in_per_group; ++ci)
        for (int64_t t = 0; t < taps; ++t)
          b[(t * c_in_per_group + ci) * cog + co] =
              w[((g * cog + co) * c_in_per_group + ci) * taps + t];
    packed_.push_back(std::make_unique<PackedMatrixB>(false, depth, cog, b.data(), cog));
  }
}

namespace {

// One output pixel of a depthwise convolution: the taps inside the image are listed first, then
// each block of kBlock channels accumulates over them in registers.
constexpr int64_t kBlock = 64;

NEREID_VECTOR_CLONES void DepthwisePixel(int64_t c, int taps, const float* const* src,
                                         const float* const* weights, const float* bias,
                                         const float* residual, const GemmEpilogue& ep,
                                         float* __restrict out) {
  const bool relu = ep.activation == GemmEpilogue::kRelu;
  const bool clip = ep.activation == GemmEpilogue::kClip;
  const float lo = ep.lo, hi = ep.hi;
  int64_t c0 = 0;
  for (; c0 + kBlock <= c; c0 += kBlock) {
    float acc[kBlock];
    for (int64_t j = 0; j < kBlock; ++j) acc[j] = bias ? bias[c0 + j] : 0.f;
    if (residual)
      for (int64_t j = 0; j < kBlock; ++j) acc[j] += residual[c0 + j];
    for (int t = 0; t < taps; ++t) {
      const float* __restrict x = src[t] + c0;
      const float* __restrict w = weights[t] + c0;
      for (int64_t j = 0; j < kBlock; ++j) acc[j] += x[j] * w[j];
    }
    if (relu)
      for (int64_t j = 0; j < kBlock; ++j) acc[j] = acc[j] > 0.f ? acc[j] : 0.f;
    if (clip)
      for (int64_t j = 0; j < kBlock; ++j) {
        const float v = acc[j] < lo ? lo : acc[j];
        acc[j] = v > hi ? hi : v;
      }
    for (int64_t j = 0; j < kBlock; ++j) out[c0 + j] = acc[j];
  }
  for (; c0 < c; ++c0) {
    float acc = (bias ? bias[c0] : 0.f) + (residual ? residual[c0] : 0.f);
    for (int t = 0; t < taps; ++t) acc += src[t][c0] * weights[t][c0];
    if (relu) acc = acc > 0.f ? acc : 0.f;
    if (clip) acc = acc > hi ? hi : (acc < lo ? lo : acc);
    out[c0] = acc;
  }
}

void DepthwiseNhwc(const Conv2dGeometry& g, const float* x, const float* taps, const float* bias,
                   const float* residual, const GemmEpilogue& ep, float* y) {
  const int64_t c = g.c_out;
  std::vector<const float*> src(static_cast<size_t>(g.kh * g.kw)), w(src.size());
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const int64_t pixel = (b * g.oh + oy) * g.ow + ox;
        int count = 0;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          const int64_t iy = oy * g.stride_h - g.pad_top + ky * g.dilation_h;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t ix = ox * g.stride_w - g.pad_left + kx * g.dilation_w;
            if (ix < 0 || ix >= g.w) continue;
            src[count] = x + ((b * g.h + iy) * g.w + ix) * c;
            w[count++] = taps + (ky * g.kw + kx) * c;
          }
        }
        DepthwisePixel(c, count, src.data(), w.data(), bias,
                       residual ? residual + pixel * c : nullptr, ep, y + pixel * c);
      }
}

}  // namespace

void ConvNhwc(const Conv2dGeometry& g, const float* x, const ConvWeights& w, const float* bias,
              const float* residual, const GemmEpilogue& act, float* y) {
  if (w.depthwise()) return DepthwiseNhwc(g, x, w.depthwise_taps(), bias, residual, act, y);
  const int64_t m = g.n * g.oh * g.ow;
  const int64_t cig = g.c_in / g.groups, cog = g.c_out / g.groups;
  const bool direct = g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 &&
                      g.pad_top == 0 && g.pad_left == 0 && g.oh == g.h && g.ow == g.w;
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    const float* xg = x + grp * cig;
    PackAFn pack;
    if (direct) {
      pack = [&](int64_t mr, int64_t i0, int64_t mc, int64_t pc, int64_t kc, float* out) {
        PackRowsA(mr, xg + i0 * g.c_in + pc, g.c_in, mc, kc, out);
      };
    } else {
      pack = [&](int64_t mr, int64_t i0, int64_t mc, int64_t pc, int64_t kc, float* out) {
        for (int64_t r0 = 0; r0 < mc; r0 += mr, out += mr * kc) {
          const int64_t rows = std::min(mr, mc - r0);
          for (int64_t r = 0; r < mr; ++r) {
            float* dst = out + r;
            if (r >= rows) {
              for (int64_t p = 0; p < kc; ++p) dst[p * mr] = 0.f;
              continue;
            }
            const int64_t row = i0 + r0 + r;
            const int64_t ox = row % g.ow, rest = row / g.ow, oy = rest % g.oh, b = rest / g.oh;
            for (int64_t p = pc; p < pc + kc;) {
              const int64_t tap = p / cig, ci = p - tap * cig;
              const int64_t ky = tap / g.kw, kx = tap - ky * g.kw;
              const int64_t len = std::min(cig - ci, pc + kc - p);
              const int64_t iy = oy * g.stride_h - g.pad_top + ky * g.dilation_h;
              const int64_t ix = ox * g.stride_w - g.pad_left + kx * g.dilation_w;
              float* d = dst + (p - pc) * mr;
              if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) {
                const float* src = xg + ((b * g.h + iy) * g.w + ix) * g.c_in + ci;
                for (int64_t t = 0; t < len; ++t) d[t * mr] = src[t];
              } else {
                for (int64_t t = 0; t < len; ++t) d[t * mr] = 0.f;
              }
              p += len;
            }
          }
        }
      };
    }
    GemmEpilogue ep = act;
    ep.bias = bias ? bias + grp * cog : nullptr;
    ep.residual = residual ? residual + grp * cog : nullptr;
    ep.ld_residual = g.c_out;
    SgemmPackedFused(m, pack, w.group(grp), y + grp * cog, g.c_out, ep);
  }
}

NEREID_VECTOR_CLONES void MaxPoolNhwc(const Conv2dGeometry& g, const float* x, float* y) {
  const int64_t c = g.c_in;
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        float* __restrict out = y + ((b * g.oh + oy) * g.ow + ox) * c;
        std::fill(out, out + c, -std::numeric_limits<float>::infinity());
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          const int64_t iy = oy * g.stride_h - g.pad_top + ky * g.dilation_h;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t ix = ox * g.stride_w - g.pad_left + kx * g.dilation_w;
            if (ix < 0 || ix >= g.w) continue;
            const float* __restrict src = x + ((b * g.h + iy) * g.w + ix) * c;
            for (int64_t ch = 0; ch < c; ++ch) out[ch] = std::max(out[ch], src[ch]);
          }
        }
      }
}

NEREID_VECTOR_CLONES void AveragePoolNhwc(const Conv2dGeometry& g, bool count_include_pad,
                                          int64_t pad_bottom, int64_t pad_right, const float* x,
                                          float* y) {
  const int64_t c = g.c_in;
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const int64_t y0 = oy * g.stride_h - g.pad_top, x0 = ox * g.stride_w - g.pad_left;
        const int64_t y1 = std::min(y0 + g.kh, g.h + pad_bottom);
        const int64_t x1 = std::min(x0 + g.kw, g.w + pad_right);
        const int64_t ys = std::max<int64_t>(y0, 0), ye = std::min(y1, g.h);
        const int64_t xs = std::max<int64_t>(x0, 0), xe = std::min(x1, g.w);
        const int64_t count = count_include_pad
                                  ? (y1 - y0) * (x1 - x0)
                                  : std::max<int64_t>(ye - ys, 0) * std::max<int64_t>(xe - xs, 0);
        float* __restrict out = y + ((b * g.oh + oy) * g.ow + ox) * c;
        std::fill(out, out + c, 0.f);
        for (int64_t iy = ys; iy < ye; ++iy)
          for (int64_t ix = xs; ix < xe; ++ix) {
            const float* __restrict src = x + ((b * g.h + iy) * g.w + ix) * c;
            for (int64_t ch = 0; ch < c; ++ch) out[ch] += src[ch];
          }
        const float scale = count > 0 ? 1.f / static_cast<float>(count) : 0.f;
        for (int64_t ch = 0; ch < c; ++ch) out[ch] *= scale;
      }
}

NEREID_VECTOR_CLONES void GlobalAveragePoolNhwc(int64_t n, int64_t hw, int64_t c, const float* x,
                                                float* y) {
  for (int64_t b = 0; b < n; ++b) {
    float* __restrict out = y + b * c;
    std::fill(out, out + c, 0.f);
    for (int64_t p = 0; p < hw; ++p) {
      const float* __restrict src = x + (b * hw + p) * c;
      for (int64_t ch = 0; ch < c; ++ch) out[ch] += src[ch];
    }
    const float scale = hw > 0 ? 1.f / static_cast<float>(hw) : 0.f;
    for (int64_t ch = 0; ch < c; ++ch) out[ch] *= scale;
  }
}

NEREID_VECTOR_CLONES void GlobalMaxPoolNhwc(int64_t n, int64_t hw, int64_t c, const float* x,
                                            float* y) {
  for (int64_t b = 0; b < n; ++b) {
    float* __restrict out = y + b * c;
    std::fill(out, out + c, -std::numeric_limits<float>::infinity());
    for (int64_t p = 0; p < hw; ++p) {
      const float* __restrict src = x + (b * hw + p) * c;
      for (int64_t ch = 0; ch < c; ++ch) out[ch] = std::max(out[ch], src[ch]);
    }
  }
}

}  // namespace nereid::kernels
