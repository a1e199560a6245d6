#include "cpu/conv.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "cpu/conv_isa.h"
#include "cpu/cpu_features.h"
#include "cpu/parallel.h"

namespace nereid::kernels {

ConvWeights::ConvWeights(const float* w, int64_t c_out, int64_t c_in_per_group, int64_t kh,
                         int64_t kw, int64_t groups, bool int8, bool winograd,
                         const float* smooth) {
  const int64_t taps = kh * kw, cog = c_out / groups;
  depthwise_ = c_in_per_group == 1 && cog == 1 && groups > 1;
  if (depthwise_) {
    taps_.resize(static_cast<size_t>(taps * c_out));
    for (int64_t c = 0; c < c_out; ++c)
      for (int64_t t = 0; t < taps; ++t) taps_[t * c_out + c] = w[c * taps + t];
    return;
  }
  cig_ = c_in_per_group, cog_ = cog;
  // (AVX-512 only: the same in portable C++, its lanes gathered, ran the small CNN in 623 us
  // where the GEMM takes 393. From 16 inputs a group on, a permute for every product costs more
  // than the GEMM's 16-column tiles waste: 512 channels in 32 groups at 14x14, 1 thread, Zen 4,
  // 1,067 against 681 us.)
  if (!int8 && groups > 1 && c_in_per_group <= 8 && c_in_per_group <= cog && cog <= 16 &&
      HasAvx512F()) {
    // A block's lanes span at most (1 + 14 / cog) groups of cig <= 8 inputs (cig <= cog): 29.
    const int64_t blocks = (c_out + 15) / 16;
    lanes_.assign(static_cast<size_t>(blocks * c_in_per_group * 16), 0);
    for (int64_t k = 0; k < blocks; ++k)
      for (int64_t j = 0; j < c_in_per_group; ++j)
        for (int64_t l = 0; l < 16 && k * 16 + l < c_out; ++l)
          lanes_[static_cast<size_t>((k * c_in_per_group + j) * 16 + l)] =
              static_cast<int32_t>((k * 16 + l) / cog * c_in_per_group + j - BlockFirstInput(k));
    // [block][tap][j][16]: a block's weights contiguous (laid out [tap][j][c_out], 128
    // channels and more put every vector of a block in the same two L1 sets).
    taps_.assign(static_cast<size_t>(blocks * taps * c_in_per_group * 16), 0.f);
    for (int64_t co = 0; co < c_out; ++co)
      for (int64_t j = 0; j < c_in_per_group; ++j)
        for (int64_t t = 0; t < taps; ++t)
          taps_[((co / 16 * taps + t) * c_in_per_group + j) * 16 + co % 16] =
              w[(co * c_in_per_group + j) * taps + t];
    return;
  }
  const int64_t depth = taps * c_in_per_group;
  if (int8) {  // n x k per group (an output channel's weights in the depth order), then quantized
    std::vector<float> nk(static_cast<size_t>(cog * depth)), depth_smooth;
    if (smooth != nullptr) depth_smooth.resize(static_cast<size_t>(depth));
    for (int64_t g = 0; g < groups; ++g) {
      GroupRows(w, cog, c_in_per_group, taps, g, nk.data());
      if (smooth != nullptr)
        for (int64_t t = 0; t < taps; ++t)
          std::copy_n(smooth + g * c_in_per_group, c_in_per_group,
                      depth_smooth.begin() + t * c_in_per_group);
      int8_.push_back(std::make_unique<PackedInt8W>(
          nk.data(), cog, depth, depth, smooth != nullptr ? depth_smooth.data() : nullptr));
      if (taps > 1 && c_in_per_group >= kPixelChannels && c_in_per_group % 4 == 0)
        tap_offsets_.push_back(int8_.back()->TapOffsets(taps));
    }
    return;
  }
  if (winograd && kh == 3 && kw == 3 && groups == 1) {
    winograd_ = std::make_unique<WinogradWeights>(w, c_out, c_in_per_group);
    return;
  }
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

// The same in portable C++ (AArch64's compiler vectorizes it for NEON; the x86 baseline).
void DepthwiseRowPortable(const Conv2dGeometry& g, const float* x, const float* taps,
                          const float* bias, const float* residual, const GemmEpilogue& ep,
                          float* y, int64_t b, int64_t oy, int64_t c_lo, int64_t c_hi) {
  const int64_t c = g.c_out;
  std::vector<const float*> tap_src(static_cast<size_t>(g.kh * g.kw)), tap_w(tap_src.size());
  std::vector<int64_t> tap_index(tap_src.size());
  const float** src = tap_src.data();
  const float** w = tap_w.data();
  for (int64_t ox = 0; ox < g.ow; ++ox) {
    const int count = conv_isa::DepthwiseTaps(g, x, taps, b, oy, ox, src, w, tap_index.data());
    const int64_t pixel = (b * g.oh + oy) * g.ow + ox;
    float* __restrict out = y + pixel * c;
    for (int64_t ch = c_lo; ch < c_hi; ++ch)
      out[ch] = (bias ? bias[ch] : 0.f) + (residual ? residual[pixel * c + ch] : 0.f);
    for (int t = 0; t < count; ++t) {
      const float* __restrict s = src[t];
      const float* __restrict k = w[t];
      for (int64_t ch = c_lo; ch < c_hi; ++ch) out[ch] += s[ch] * k[ch];
    }
    const GemmEpilogue local = ep;
    for (int64_t ch = c_lo; ch < c_hi; ++ch) out[ch] = Activate(local, out[ch]);
  }
}

using DepthwiseRowFn = void (*)(const Conv2dGeometry&, const float*, const float*, const float*,
                                const float*, const GemmEpilogue&, float*, int64_t, int64_t,
                                int64_t, int64_t);

DepthwiseRowFn DepthwiseRow() {
#if defined(__x86_64__)
  if (HasAvx512F()) return conv_isa::DepthwiseRowAvx512;
#endif
  return DepthwiseRowPortable;
}

void DepthwiseNhwc(const Conv2dGeometry& g, const float* x, const float* taps, const float* bias,
                   const float* residual, const GemmEpilogue& ep, float* y) {
  const DepthwiseRowFn row = DepthwiseRow();
  // Rows over the team; where there are fewer than two a thread (a 7x7 or 14x14 image at batch 1
  // on 16 threads), each row's channels in parts of 32 or more as well.
  const int64_t rows = g.n * g.oh, c = g.c_out, threads = ParallelThreads();
  const int64_t parts = rows >= 2 * threads ? 1
                                            : std::clamp<int64_t>((2 * threads + rows - 1) / rows,
                                                                  1, std::max<int64_t>(c / 32, 1));
  const int64_t part = (c / parts + 31) / 32 * 32;  // channels a part, a multiple of 32
  const int64_t count = (c + part - 1) / part;
  ParallelForWork(rows * count, rows * g.ow * c * g.kh * g.kw, [&](int64_t item) {
    const int64_t r = item / count, c_lo = item % count * part;
    row(g, x, taps, bias, residual, ep, y, r / g.oh, r % g.oh, c_lo, std::min(c, c_lo + part));
  });
}

// Small groups (only where ConvWeights chose them: AVX-512), rows over the team.
void SmallGroupsNhwc(const Conv2dGeometry& g, const float* x, const ConvWeights& w,
                     const float* bias, const float* residual, const GemmEpilogue& ep, float* y) {
#if defined(__x86_64__)
  ParallelForWork(
      g.n * g.oh, g.n * g.oh * g.ow * g.c_in / g.groups * g.c_out * g.kh * g.kw, [&](int64_t r) {
        conv_isa::SmallGroupsRowAvx512(g, x, w, bias, residual, ep, y, r / g.oh, r % g.oh);
      });
#endif
}

}  // namespace

void ConvWeights::GroupRows(const float* w, int64_t cog, int64_t c_in_per_group, int64_t taps,
                            int64_t g, float* out) {
  const int64_t depth = taps * c_in_per_group;
  for (int64_t co = 0; co < cog; ++co)
    for (int64_t ci = 0; ci < c_in_per_group; ++ci)
      for (int64_t t = 0; t < taps; ++t)
        out[co * depth + t * c_in_per_group + ci] =
            w[((g * cog + co) * c_in_per_group + ci) * taps + t];
}

namespace {

// Rows i0 .. i0 + mc of the implicit GEMM's A (an output pixel's window, depth ordered (ky, kx,
// channel) within the group starting at xg), columns pc .. pc + kc, into 'scratch' (mc x kc, row
// stride kc), zeros where the window leaves the image.
void GatherWindows(const Conv2dGeometry& g, const float* xg, int64_t i0, int64_t mc, int64_t pc,
                   int64_t kc, float* scratch) {
  const int64_t cig = g.c_in / g.groups;
  const int64_t run = g.kw * g.c_in;  // a window row
  if (g.groups == 1 && g.dilation_w == 1 && pc == 0 && kc == g.kh * run) {
    // Whole windows (a stem's: 7x7 over 3 channels): per row its kh window rows, each the taps
    // inside the image between zeros, the position carried from row to row (no divisions per
    // piece; they cost more than the short copies).
    int64_t ox = i0 % g.ow, oy = i0 / g.ow % g.oh, b = i0 / (g.ow * g.oh);
    for (int64_t r = 0; r < mc; ++r) {
      const int64_t ix0 = ox * g.stride_w - g.pad_left;
      const int64_t lo = std::clamp<int64_t>(-ix0, 0, g.kw) * g.c_in;
      const int64_t hi = std::clamp<int64_t>(g.w - ix0, 0, g.kw) * g.c_in;
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        float* out = scratch + r * kc + ky * run;
        const int64_t iy = oy * g.stride_h - g.pad_top + ky * g.dilation_h;
        if (iy < 0 || iy >= g.h || hi <= lo) {
          std::fill(out, out + run, 0.f);
          continue;
        }
        const float* in = xg + ((b * g.h + iy) * g.w + ix0) * g.c_in;
        std::fill(out, out + lo, 0.f);
        for (int64_t t = lo; t < hi; ++t) out[t] = in[t];
        std::fill(out + hi, out + run, 0.f);
      }
      if (++ox == g.ow) {
        ox = 0;
        if (++oy == g.oh) oy = 0, ++b;
      }
    }
    return;
  }
  if (pc == 0 && kc == g.kh * g.kw * cig) {
    // Whole windows of a grouped or dilated convolution (its taps not one contiguous run):
    // per row each tap's cig channels or zeros, the position carried from row to row. The
    // division per piece below took a third of a small CNN's time on a 3x3 of 4 channels a
    // group (36 values a window: nine pieces of four).
    int64_t ox = i0 % g.ow, oy = i0 / g.ow % g.oh, b = i0 / (g.ow * g.oh);
    for (int64_t r = 0; r < mc; ++r) {
      float* out = scratch + r * kc;
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = oy * g.stride_h - g.pad_top + ky * g.dilation_h;
        for (int64_t kx = 0; kx < g.kw; ++kx, out += cig) {
          const int64_t ix = ox * g.stride_w - g.pad_left + kx * g.dilation_w;
          if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) {
            std::fill(out, out + cig, 0.f);
            continue;
          }
          const float* in = xg + ((b * g.h + iy) * g.w + ix) * g.c_in;
          for (int64_t t = 0; t < cig; ++t) out[t] = in[t];
        }
      }
      if (++ox == g.ow) {
        ox = 0;
        if (++oy == g.oh) oy = 0, ++b;
      }
    }
    return;
  }
  for (int64_t r = 0; r < mc; ++r) {
    const int64_t row = i0 + r;
    const int64_t ox = row % g.ow, rest = row / g.ow, oy = rest % g.oh, b = rest / g.oh;
    float* dst = scratch + r * kc - pc;
    for (int64_t p = pc; p < pc + kc;) {
      const int64_t tap = p / cig, ci = p - tap * cig;
      const int64_t ky = tap / g.kw, kx = tap - ky * g.kw;
      const int64_t iy = oy * g.stride_h - g.pad_top + ky * g.dilation_h;
      const int64_t ix = ox * g.stride_w - g.pad_left + kx * g.dilation_w;
      int64_t len = cig - ci;
      // The rest of a window row inside the image is one contiguous run (NHWC, no
      // dilation, ungrouped): its taps of all channels at once.
      if (g.dilation_w == 1 && g.groups == 1 && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
        len = std::min(g.kw - kx, g.w - ix) * cig - ci;
      len = std::min(len, pc + kc - p);
      float* out = dst + p;
      if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) {
        const float* in = xg + ((b * g.h + iy) * g.w + ix) * g.c_in + ci;
        if (len >= 16)
          std::memcpy(out, in, static_cast<size_t>(len) * sizeof(float));
        else
          for (int64_t t = 0; t < len; ++t) out[t] = in[t];
      } else {
        for (int64_t t = 0; t < len; ++t) out[t] = 0.f;
      }
      p += len;
    }
  }
}

}  // namespace

void ConvWindow(const Conv2dGeometry& g, const float* x, int64_t group, int64_t i, float* out) {
  const int64_t cig = g.c_in / g.groups;
  GatherWindows(g, x + group * cig, i, 1, 0, g.kh * g.kw * cig, out);
}

namespace {

// Output pixels i0 .. i0 + mc's windows of group 'grp' from pixels quantized once (q: per pixel
// and group a row of 'stride' bytes, a multiple of 16; scale its scale): per window kh * kw
// pieces of cig bytes (0x80, q = 0, where the window leaves the image) into 'windows' (rows
// kh * kw * cig bytes, and 16 bytes of slack past the last) and their scales (0 there) into
// 'scales' (rows kh * kw). Each piece is copied 16 bytes at a time, its last copy running into
// the next piece's place before that is written (library calls of cig bytes each cost more than
// the copies).
void GatherPixelWindows(const Conv2dGeometry& g, const uint8_t* q, int64_t stride,
                        const float* scale, int64_t grp, int64_t i0, int64_t mc, uint8_t* windows,
                        float* scales) {
  const int64_t cig = g.c_in / g.groups, taps = g.kh * g.kw;
  alignas(16) uint8_t outside[16];
  std::memset(outside, 0x80, sizeof outside);
  int64_t ox = i0 % g.ow, oy = i0 / g.ow % g.oh, b = i0 / (g.ow * g.oh);
  for (int64_t r = 0; r < mc; ++r) {
    uint8_t* out = windows + r * taps * cig;
    float* s = scales + r * taps;
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      const int64_t iy = oy * g.stride_h - g.pad_top + ky * g.dilation_h;
      for (int64_t kx = 0; kx < g.kw; ++kx, out += cig, ++s) {
        const int64_t ix = ox * g.stride_w - g.pad_left + kx * g.dilation_w;
        if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) {
          for (int64_t l = 0; l < cig; l += 16) std::memcpy(out + l, outside, 16);
          *s = 0.f;
          continue;
        }
        const int64_t pixel = ((b * g.h + iy) * g.w + ix) * g.groups + grp;
        const uint8_t* in = q + pixel * stride;
        for (int64_t l = 0; l < cig; l += 16) std::memcpy(out + l, in + l, 16);
        *s = scale[pixel];
      }
    }
    if (++ox == g.ow) {
      ox = 0;
      if (++oy == g.oh) oy = 0, ++b;
    }
  }
}

// The int8 form: blocks of output pixels of every group over the team (one loop: a group at a
// time left most of a team idle on ResNeXt's 32 groups), each gathered (or read in place
// for a 1x1 stride-1 convolution) and run through GemmInt8Fused with the epilogue; or, where
// the weights take it (int8_pixels), every input pixel quantized first (split over the team)
// and its bytes gathered into the windows for GemmInt8FusedTaps: RapidOCR's detector's 3x3
// layers over 96 channels spent more in gathering each window's 864 floats and quantizing them
// (each pixel once per tap: nine times) than in the products.
void ConvNhwcInt8(const Conv2dGeometry& g, const float* x, const ConvWeights& w, const float* bias,
                  const float* residual, const GemmEpilogue& act, float* y, bool direct) {
  const int64_t m = g.n * g.oh * g.ow;
  const int64_t cig = g.c_in / g.groups, cog = g.c_out / g.groups;
  // Work items: blocks of 64 output pixels per group, or, where those are fewer than four a
  // thread (ResNet-50's 7x7 layers at batch 1: one block, one thread of sixteen busy), smaller
  // blocks and parts of the output channels (SplitInt8Work).
  const Int8Split split = SplitInt8Work(m, cog, g.groups, ParallelThreads());
  const int64_t block = split.block, blocks = split.blocks, part = split.part, parts = split.parts;
  const int64_t taps = g.kh * g.kw, depth = taps * cig;
  // (NEREID_INT8_PIXELS=0: the per-window form throughout, for comparisons.)
  static const bool allowed = [] {
    const char* env = std::getenv("NEREID_INT8_PIXELS");
    return env == nullptr || std::string(env) != "0";
  }();
  const bool pixels = allowed && !direct && w.int8_pixels() && GemmInt8TapsAvailable();
  // Quantized pixels (per pixel and group), in the calling thread's buffers, read by the team.
  const int64_t stride = (cig + 15) / 16 * 16, rows = g.n * g.h * g.w * g.groups;
  thread_local Scratch<uint8_t> pixel_bytes;
  thread_local Scratch<float> pixel_scales;
  uint8_t* const q = pixels ? pixel_bytes.Get(static_cast<size_t>(rows * stride)) : nullptr;
  float* const qs = pixels ? pixel_scales.Get(static_cast<size_t>(rows)) : nullptr;
  if (pixels) {
    constexpr int64_t kChunk = 256;  // rows per piece of work
    ParallelForWork((rows + kChunk - 1) / kChunk, rows * cig, [&](int64_t c) {
      const int64_t r0 = c * kChunk, count = std::min(kChunk, rows - r0);
      // (Per group its own smoothing: the first cig factors of its weights' multipliers.)
      for (int64_t r = r0; r < r0 + count;) {
        const int64_t grp = r % g.groups;
        const int64_t run = g.groups == 1 ? count : 1;
        QuantizePixelsInt8(x + r * cig, run, cig, cig, q + r * stride, stride,
                           w.int8_group(grp).x_multiplier(), qs + r);
        r += run;
      }
    });
  }
  ParallelForWork(g.groups * blocks * parts, m * g.c_out * depth / 4, [&](int64_t item) {
    const int64_t grp = item / (blocks * parts), first = item / parts % blocks * block;
    const int64_t end = std::min(first + block, m), j0 = item % parts * part;
    const int64_t j1 = std::min(cog, j0 + part);
    const float* xg = x + grp * cig;
    // An item's rows 64 at a time: their windows stay in cache (a team's items may be larger).
    for (int64_t i0 = first; i0 < end; i0 += 64) {
      const int64_t mc = std::min<int64_t>(64, end - i0);
      GemmEpilogue ep = act;
      ep.bias = bias != nullptr ? bias + grp * cog : nullptr;
      ep.residual = residual != nullptr ? residual + i0 * g.c_out + grp * cog : nullptr;
      ep.ld_residual = g.c_out;
      float* const yt = y + i0 * g.c_out + grp * cog;
      if (pixels) {
        thread_local Scratch<uint8_t> window_bytes;
        thread_local Scratch<float> window_scales;
        uint8_t* const windows = window_bytes.Get(static_cast<size_t>(mc * depth + 16));
        float* const scales = window_scales.Get(static_cast<size_t>(mc * taps));
        GatherPixelWindows(g, q, stride, qs, grp, i0, mc, windows, scales);
        GemmInt8FusedTaps(mc, windows, depth, scales, taps, w.int8_group(grp),
                          w.int8_tap_offsets(grp), yt, g.c_out, ep, j0, j1);
        continue;
      }
      thread_local Scratch<float> scratch;
      const float* a = xg + i0 * g.c_in;
      int64_t lda = g.c_in;
      if (!direct) {
        float* const windows = scratch.Get(static_cast<size_t>(mc * depth));
        GatherWindows(g, xg, i0, mc, 0, depth, windows);
        a = windows, lda = depth;
      }
      GemmInt8Fused(mc, a, lda, w.int8_group(grp), yt, g.c_out, ep, j0, j1);
    }
  });
}

}  // namespace

void DepthwiseBlockNhwc(const Conv2dGeometry& g, const float* x, const PointwiseStage& expand,
                        const float* taps, const float* bias, const GemmEpilogue& act,
                        const PointwiseStage& project, const float* residual, float* y) {
  const DepthwiseRowFn row = DepthwiseRow();
  const int64_t c = g.c_out, span = (g.kh - 1) * g.dilation_h + 1;  // input rows of a window
  const int64_t row_floats = g.w * c;
  const int64_t c2 = project.present() ? project.c_out() : c;  // y's channels
  // A 1x1 stage over m rows of a (lda floats apart, read in place) into y (ldy apart).
  auto pointwise = [](const PointwiseStage& stage, int64_t m, const float* a, int64_t lda,
                      float* out, int64_t ldy, const GemmEpilogue& ep) {
    if (stage.int8 != nullptr) return GemmInt8Fused(m, a, lda, *stage.int8, out, ldy, ep);
    SgemmPackedFused(
        m,
        [a, lda](int64_t i0, int64_t, int64_t pc, int64_t, float*, int64_t* ld) {
          *ld = lda;
          return a + i0 * lda + pc;
        },
        *stage.weights, out, ldy, ep);
  };
  // Bands of output rows whose input rows fit in about 256 KB (L2), one row at least.
  const int64_t band = std::max<int64_t>(
      1, ((int64_t{64} << 10) / std::max<int64_t>(row_floats, 1) - span) / g.stride_h + 1);
  // Each image's output rows in as many chunks as the team needs (a chunk's first band computes
  // the rows it shares with the chunk before again).
  const int threads = ParallelThreads();
  const int64_t chunks = std::min(g.oh, std::max<int64_t>(1, (threads + g.n - 1) / g.n));
  if (chunks > 1 && g.oh * g.stride_h < chunks * 2 * (span - g.stride_h)) {
    // Chunks of so few rows that the rows they share would be computed again more than half as
    // often as once (batch 1 on 16 threads from 56x56 on): the stages one after another, each
    // over the team, through this thread's scratch.
    thread_local Scratch<float> wide, deep;
    const float* in = x;
    if (expand.present()) {
      float* const e = wide.Get(static_cast<size_t>(g.n * g.h * row_floats));
      pointwise(expand, g.n * g.h * g.w, x, expand.c_in, e, c, expand.epilogue);
      in = e;
    }
    if (!project.present()) return DepthwiseNhwc(g, in, taps, bias, residual, act, y);
    float* const d = deep.Get(static_cast<size_t>(g.n * g.oh * g.ow * c));
    DepthwiseNhwc(g, in, taps, bias, nullptr, act, d);
    GemmEpilogue ep = project.epilogue;
    ep.residual = residual, ep.ld_residual = c2;
    pointwise(project, g.n * g.oh * g.ow, d, c, y, c2, ep);
    return;
  }
  const int64_t work = g.n * g.oh * g.ow * c * (g.kh * g.kw + expand.c_in + project.c_in);
  ParallelForWork(g.n * chunks, work, [&](int64_t item) {
    const int64_t b = item / chunks, chunk = item % chunks;
    const int64_t oy_end = g.oh * (chunk + 1) / chunks;
    thread_local Scratch<float> held_rows, mid_rows;
    float* const buf =
        expand.present()
            ? held_rows.Get(static_cast<size_t>(((band - 1) * g.stride_h + span) * row_floats))
            : nullptr;
    float* const mid =
        project.present() ? mid_rows.Get(static_cast<size_t>(band * g.ow * c)) : nullptr;
    int64_t lo = 0, hi = 0;  // the input rows buf holds, from its start
    for (int64_t oy0 = g.oh * chunk / chunks; oy0 < oy_end; oy0 += band) {
      const int64_t oy1 = std::min(oy_end, oy0 + band);
      const int64_t need_lo = std::clamp<int64_t>(oy0 * g.stride_h - g.pad_top, 0, g.h);
      const int64_t need_hi =
          std::clamp<int64_t>((oy1 - 1) * g.stride_h - g.pad_top + span, need_lo, g.h);
      const float* in = x + (b * g.h + need_lo) * row_floats;  // the depthwise's input rows
      if (expand.present()) {
        int64_t from = need_lo;               // the first row to compute
        if (need_lo >= lo && need_lo < hi) {  // rows the last band computed: to the front
          from = std::min(hi, need_hi);
          std::memmove(buf, buf + (need_lo - lo) * row_floats,
                       static_cast<size_t>((from - need_lo) * row_floats) * sizeof(float));
        }
        if (from < need_hi)
          pointwise(expand, (need_hi - from) * g.w, x + (b * g.h + from) * g.w * expand.c_in,
                    expand.c_in, buf + (from - need_lo) * row_floats, c, expand.epilogue);
        lo = need_lo, hi = need_hi;
        in = buf;
      }
      // The band as an image of its own: rows need_lo .. need_hi, output rows oy0 .. oy1.
      Conv2dGeometry bg = g;
      bg.n = 1, bg.h = need_hi - need_lo, bg.oh = oy1 - oy0;
      bg.pad_top = g.pad_top + need_lo - oy0 * g.stride_h;
      const int64_t first = (b * g.oh + oy0) * g.ow;  // the band's first output pixel
      if (!project.present()) {
        for (int64_t r = 0; r < bg.oh; ++r)
          row(bg, in, taps, bias, residual != nullptr ? residual + first * c : nullptr, act,
              y + first * c, 0, r, 0, c);
        continue;
      }
      for (int64_t r = 0; r < bg.oh; ++r) row(bg, in, taps, bias, nullptr, act, mid, 0, r, 0, c);
      GemmEpilogue ep = project.epilogue;
      ep.residual = residual != nullptr ? residual + first * c2 : nullptr, ep.ld_residual = c2;
      pointwise(project, bg.oh * g.ow, mid, c, y + first * c2, c2, ep);
    }
  });
}

void ConvNhwc(const Conv2dGeometry& g, const float* x, const ConvWeights& w, const float* bias,
              const float* residual, const GemmEpilogue& act, float* y) {
  if (w.depthwise()) return DepthwiseNhwc(g, x, w.depthwise_taps(), bias, residual, act, y);
  if (w.small_groups()) return SmallGroupsNhwc(g, x, w, bias, residual, act, y);
  const int64_t m = g.n * g.oh * g.ow;
  const int64_t cig = g.c_in / g.groups, cog = g.c_out / g.groups;
  const bool direct = g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 &&
                      g.pad_top == 0 && g.pad_left == 0 && g.oh == g.h && g.ow == g.w;
  if (w.int8()) return ConvNhwcInt8(g, x, w, bias, residual, act, y, direct);
  // (Weights transformed for Winograd are not packed for the GEMM: the node's attributes that
  // chose it, stride and dilation 1, made this geometry.)
  if (w.winograd() != nullptr) return WinogradNhwc(g, x, *w.winograd(), bias, residual, act, y);
  auto run_group = [&](int64_t grp) {
    const float* xg = x + grp * cig;
    RowsAFn rows;
    if (direct) {
      rows = [&](int64_t i0, int64_t, int64_t pc, int64_t, float*, int64_t* lda) {
        *lda = g.c_in;
        return xg + i0 * g.c_in + pc;
      };
    } else {
      rows = [&](int64_t i0, int64_t mc, int64_t pc, int64_t kc, float* scratch, int64_t* lda) {
        *lda = kc;
        GatherWindows(g, xg, i0, mc, pc, kc, scratch);
        return static_cast<const float*>(scratch);
      };
    }
    GemmEpilogue ep = act;
    ep.bias = bias ? bias + grp * cog : nullptr;
    ep.residual = residual ? residual + grp * cog : nullptr;
    ep.ld_residual = g.c_out;
    // A tile of pixels in one output row whose windows' part in a depth block lies inside the
    // image is the image itself read in place, rows stride * c apart: a piece of one window row
    // (kw * c contiguous floats), or whole window rows, one segment each. ResNet-50's stem (7x7
    // over 3 channels, whole windows in one block) gathered 30% of its time; 3x3 layers of 64
    // channels (576 = three blocks of one window row) gathered every tile.
    RowsViewFn view;
    const int64_t run = g.kw * g.c_in;
    if (!direct && g.groups == 1 && g.dilation_w == 1) {
      view = [&g, xg, run](int64_t i0, int64_t rows, int64_t pc, int64_t kc, RowsView* v) {
        const int64_t ky0 = pc / run, off = pc - ky0 * run;
        int64_t segments = 1;
        if (off + kc > run) {
          if (off != 0 || kc % run != 0) return false;
          segments = kc / run;
        }
        // The taps (window columns kx0 .. kx1, window rows ky0 .. ky1) the block touches.
        const int64_t kx0 = off / g.c_in;
        const int64_t kx1 = segments > 1 ? g.kw - 1 : (off + kc - 1) / g.c_in;
        const int64_t ky1 = ky0 + segments - 1;
        const int64_t ox = i0 % g.ow, oy = i0 / g.ow % g.oh, b = i0 / (g.ow * g.oh);
        const int64_t ix = ox * g.stride_w - g.pad_left;
        const int64_t iy = oy * g.stride_h - g.pad_top + ky0 * g.dilation_h;
        if (ox + rows > g.ow || ix + kx0 < 0 ||
            (ox + rows - 1) * g.stride_w - g.pad_left + kx1 >= g.w || iy < 0 ||
            iy + (ky1 - ky0) * g.dilation_h >= g.h)
          return false;
        // (One offset, never negative: ix < 0 only where the block starts past the left edge.)
        *v = {xg + ((b * g.h + iy) * g.w + ix) * g.c_in + off, g.stride_w * g.c_in,
              segments > 1 ? run : kc, g.dilation_h * g.w * g.c_in};
        return true;
      };
    }
    SgemmPackedFused(m, rows, w.group(grp), y + grp * cog, g.c_out, ep, view);
  };
  // Many groups (ResNeXt's 32) go whole to the team's threads, each group's GEMM on one: split
  // over the team one after another, a group of 196 rows x 16 columns left most threads idle.
  const int64_t threads = ParallelThreads();
  if (threads > 1 && g.groups >= threads && (g.groups % threads == 0 || g.groups >= 4 * threads))
    return ParallelForWork(g.groups, m * g.c_out * g.kh * g.kw * cig, run_group);
  for (int64_t grp = 0; grp < g.groups; ++grp) run_group(grp);
}

namespace {

// A group of fewer than 16 values per input pixel (taps x channels: a head's one-channel map) for
// input pixels p0 .. p0 + count: each pixel's values as one 16-lane sum over its channels (w16:
// [cig][16], zeros past the group's values), four pixels at a time (four chains of FMAs, not one
// waiting on each), then to their places.
NEREID_VECTOR_CLONES void FewTapValues(const Conv2dGeometry& g, const float* x, const float* w16,
                                       const float* bias, const GemmEpilogue& act, int64_t grp,
                                       int64_t p0, int64_t count, float* y) {
  // (A vector of 16 in the compiler's vector extension: one register in the AVX-512 clone, four
  // or two in the others. Plain loops over the 16 were vectorized along the channels instead,
  // with shuffles and spills.)
  using Floats16 = float __attribute__((vector_size(64)));
  constexpr int kPixels = 4;
  const int64_t cig = g.c_in / g.groups, cog = g.c_out / g.groups;
  const int64_t taps = g.kh * g.kw;
  Floats16 bias16 = {};  // the group's bias in the values' order
  for (int64_t v = 0; v < taps * cog && bias != nullptr; ++v) bias16[v] = bias[grp * cog + v % cog];
  int64_t tap_offset[16];  // each tap's place from the pixel's first
  for (int64_t t = 0; t < taps; ++t) tap_offset[t] = ((t / g.kw) * g.ow + t % g.kw) * g.c_out;
  int64_t ix = p0 % g.w, iy = p0 / g.w % g.h, image = p0 / (g.w * g.h);
  for (int64_t pixel = p0; pixel < p0 + count; pixel += kPixels) {
    const int pixels = static_cast<int>(std::min<int64_t>(kPixels, p0 + count - pixel));
    Floats16 sum[kPixels] = {};
    const float* __restrict px = x + pixel * g.c_in + grp * cig;
    for (int64_t ci = 0; ci < cig; ++ci) {
      Floats16 wr;
      std::memcpy(&wr, w16 + ci * 16, sizeof wr);
      for (int p = 0; p < kPixels; ++p)  // (past the last pixel: the first one's channels again)
        sum[p] += px[(p < pixels ? p : 0) * g.c_in + ci] * wr;
    }
    for (int p = 0; p < pixels; ++p) {
      alignas(64) float values[16];
      const Floats16 v = sum[p] + bias16;
      std::memcpy(values, &v, sizeof values);
      if (act.activation != GemmEpilogue::kNone) ActivateEpilogueRow(values, 16, act);
      // (The pixel's first output pixel, then each tap's place from there.)
      float* const out = y + ((image * g.oh + iy * g.kh) * g.ow + ix * g.kw) * g.c_out + grp * cog;
      for (int64_t t = 0; t < taps; ++t)
        for (int64_t co = 0; co < cog; ++co) out[tap_offset[t] + co] = values[t * cog + co];
      if (++ix == g.w) {
        ix = 0;
        if (++iy == g.h) iy = 0, ++image;
      }
    }
  }
}

}  // namespace

// Per group and window row ky (and tap kx where there are several groups), one GEMM per input
// image row: its pixels' channels of the group by the taps' weights, written straight into output
// row iy * kh + ky (pixel ix's taps kw pixels apart: ldc kw * c_out). A group of fewer than 16
// values per input pixel would fill a sliver of the GEMM's tiles: FewTapValues instead.
// RapidOCR's detector's head at batch 8, 2 threads (Zen 4): its 24 -> 24 2x2 on NCHW (a GEMM per
// image, the taps interleaved after) 797 -> 210 us.
void ConvTransposeTiledNhwc(const Conv2dGeometry& g, const float* x, const float* w,
                            const float* bias, const GemmEpilogue& act, float* y) {
  const int64_t cig = g.c_in / g.groups, cog = g.c_out / g.groups, kh = g.kh, kw = g.kw;
  const int64_t taps = kh * kw, per_pixel = taps * cog;  // a group's values per input pixel
  // w's value for input channel ci of group grp, output channel co of the group, tap (ky, kx).
  auto weight = [&](int64_t grp, int64_t ci, int64_t co, int64_t ky, int64_t kx) {
    return w[(((grp * cig + ci) * cog + co) * kh + ky) * kw + kx];
  };
  const int64_t work = g.n * g.h * g.w * cig * g.c_out * taps;
  if (per_pixel < 16) {
    std::vector<float> w16(static_cast<size_t>(g.groups * cig * 16), 0.f);
    for (int64_t grp = 0; grp < g.groups; ++grp)
      for (int64_t ci = 0; ci < cig; ++ci)
        for (int64_t t = 0; t < taps; ++t)
          for (int64_t co = 0; co < cog; ++co)
            w16[(grp * cig + ci) * 16 + t * cog + co] = weight(grp, ci, co, t / kw, t % kw);
    constexpr int64_t kBlock = 256;  // input pixels per piece of work
    const int64_t pixels = g.n * g.h * g.w;
    ParallelForWork((pixels + kBlock - 1) / kBlock, work, [&](int64_t item) {
      for (int64_t grp = 0; grp < g.groups; ++grp)
        FewTapValues(g, x, w16.data() + grp * cig * 16, bias, act, grp, item * kBlock,
                     std::min(kBlock, pixels - item * kBlock), y);
    });
    return;
  }
  const int64_t run = g.groups == 1 ? kw : 1;  // taps of a window row per GEMM
  // B per (group, ky, first kx of the run): cig x (run * cog), columns (tap, channel); the bias
  // of a group's columns in their order.
  std::vector<std::unique_ptr<PackedMatrixB>> b;
  std::vector<float> panel(static_cast<size_t>(cig * run * cog));
  std::vector<float> run_bias(static_cast<size_t>(g.groups * run * cog), 0.f);
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    for (int64_t r = 0; r < run * cog && bias != nullptr; ++r)
      run_bias[grp * run * cog + r] = bias[grp * cog + r % cog];
    for (int64_t ky = 0; ky < kh; ++ky)
      for (int64_t kx0 = 0; kx0 < kw; kx0 += run) {
        for (int64_t ci = 0; ci < cig; ++ci)
          for (int64_t r = 0; r < run; ++r)
            for (int64_t co = 0; co < cog; ++co)
              panel[(ci * run + r) * cog + co] = weight(grp, ci, co, ky, kx0 + r);
        b.push_back(
            std::make_unique<PackedMatrixB>(false, cig, run * cog, panel.data(), run * cog));
      }
  }
  const int64_t gemms_per_group = kh * (kw / run);
  ParallelForWork(g.n * g.h, work, [&](int64_t row) {
    const int64_t image = row / g.h, iy = row % g.h;
    const float* xr = x + row * g.w * g.c_in;
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      GemmEpilogue ep = act;
      ep.bias = run_bias.data() + grp * run * cog;
      for (int64_t ky = 0; ky < kh; ++ky)
        for (int64_t kx0 = 0; kx0 < kw; kx0 += run) {
          float* out = y + ((image * g.oh + iy * kh + ky) * g.ow + kx0) * g.c_out + grp * cog;
          SgemmPackedFused(
              g.w,
              [xr, grp, cig, &g](int64_t i0, int64_t, int64_t pc, int64_t, float*, int64_t* ld) {
                *ld = g.c_in;
                return xr + i0 * g.c_in + grp * cig + pc;
              },
              *b[grp * gemms_per_group + ky * (kw / run) + kx0 / run], out, kw * g.c_out, ep);
        }
    }
  });
}

namespace {

NEREID_VECTOR_CLONES void MaxPoolRow(const Conv2dGeometry& g, const float* x, float* y, int64_t b,
                                     int64_t oy) {
  const int64_t c = g.c_in;
  std::vector<const float*> pixels(static_cast<size_t>(g.kh * g.kw));
  std::vector<int64_t> taps(pixels.size());
  for (int64_t ox = 0; ox < g.ow; ++ox) {
    float* __restrict out = y + ((b * g.oh + oy) * g.ow + ox) * c;
    std::fill(out, out + c, -std::numeric_limits<float>::infinity());
    const int count = conv_isa::WindowPixels(g, x, c, b, oy, ox, pixels.data(), taps.data());
    for (int t = 0; t < count; ++t) {
      const float* __restrict src = pixels[t];
      for (int64_t ch = 0; ch < c; ++ch) out[ch] = MaxKeepingNaN(out[ch], src[ch]);
    }
  }
}

NEREID_VECTOR_CLONES void AveragePoolRow(const Conv2dGeometry& g, bool count_include_pad,
                                         int64_t pad_bottom, int64_t pad_right, const float* x,
                                         float* y, int64_t b, int64_t oy) {
  const int64_t c = g.c_in;
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

}  // namespace

void MaxPoolNhwc(const Conv2dGeometry& g, const float* x, float* y) {
  ParallelForWork(g.n * g.oh, g.n * g.oh * g.ow * g.c_in * g.kh * g.kw,
                  [&](int64_t r) { MaxPoolRow(g, x, y, r / g.oh, r % g.oh); });
}

void AveragePoolNhwc(const Conv2dGeometry& g, bool count_include_pad, int64_t pad_bottom,
                     int64_t pad_right, const float* x, float* y) {
  ParallelForWork(g.n * g.oh, g.n * g.oh * g.ow * g.c_in * g.kh * g.kw, [&](int64_t r) {
    AveragePoolRow(g, count_include_pad, pad_bottom, pad_right, x, y, r / g.oh, r % g.oh);
  });
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
      for (int64_t ch = 0; ch < c; ++ch) out[ch] = MaxKeepingNaN(out[ch], src[ch]);
    }
  }
}

}  // namespace nereid::kernels
