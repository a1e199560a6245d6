// The CPU convolution and pooling kernels (kernels/cpu/conv.h) against direct loops, over the
// geometries the engine meets: plain, strided, padded, dilated, grouped and depthwise, with
// channel counts that leave tails for every vector width, and the fused bias, residual and
// activation. Each x86 kernel the CPU supports runs (depthwise AVX-512 and portable paths).
#include "cpu/conv.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/gemm_int8.h"
#include "cpu/parallel.h"

namespace nereid::kernels {
namespace {

struct Case {
  int64_t n, h, w, c_in, c_out, k, stride, pad, dilation, groups;
};

std::vector<float> Random(size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(count);
  for (float& x : v) x = u(rng);
  return v;
}

// Reference: NHWC direct convolution, ONNX weights [c_out][c_in/groups][k][k].
std::vector<float> Reference(const Case& c, const Conv2dGeometry& g, const std::vector<float>& x,
                             const std::vector<float>& w, const std::vector<float>& bias,
                             const std::vector<float>& residual, const GemmEpilogue& ep) {
  const int64_t cig = c.c_in / c.groups, cog = c.c_out / c.groups;
  std::vector<float> y(static_cast<size_t>(c.n * g.oh * g.ow * c.c_out));
  for (int64_t b = 0; b < c.n; ++b)
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox)
        for (int64_t co = 0; co < c.c_out; ++co) {
          const int64_t grp = co / cog;
          double acc = bias[co];
          for (int64_t ci = 0; ci < cig; ++ci)
            for (int64_t ky = 0; ky < c.k; ++ky)
              for (int64_t kx = 0; kx < c.k; ++kx) {
                const int64_t iy = oy * c.stride - c.pad + ky * c.dilation;
                const int64_t ix = ox * c.stride - c.pad + kx * c.dilation;
                if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
                acc +=
                    static_cast<double>(x[((b * c.h + iy) * c.w + ix) * c.c_in + grp * cig + ci]) *
                    w[((co * cig + ci) * c.k + ky) * c.k + kx];
              }
          const size_t at = static_cast<size_t>(((b * g.oh + oy) * g.ow + ox) * c.c_out + co);
          acc += residual[at];
          switch (ep.activation) {  // ONNX's definitions
            case GemmEpilogue::kRelu:
              acc = std::max(acc, 0.0);
              break;
            case GemmEpilogue::kClip:
              acc = std::min<double>(std::max<double>(acc, ep.lo), ep.hi);
              break;
            case GemmEpilogue::kLeakyRelu:
              acc = acc < 0 ? acc * ep.lo : acc;
              break;
            case GemmEpilogue::kHardSigmoid:
              acc = std::min(1.0, std::max(0.0, ep.lo * acc + ep.hi));
              break;
            case GemmEpilogue::kHardSwish:
              acc = acc * std::min(1.0, std::max(0.0, acc / 6 + 0.5));
              break;
            case GemmEpilogue::kGelu:
              acc = acc * 0.5 * (1 + std::erf(acc / ep.lo));
              break;
            case GemmEpilogue::kNone:
              break;
          }
          y[at] = static_cast<float>(acc);
        }
  return y;
}

// A case's geometry and random operands (x, ONNX-layout weights, bias, a residual of y's shape),
// drawn in that order from 'seed'.
struct Problem {
  Problem(const Case& c, unsigned seed) {
    std::mt19937 rng(seed);
    g.n = c.n, g.h = c.h, g.w = c.w, g.c_in = c.c_in, g.c_out = c.c_out;
    g.kh = g.kw = c.k;
    g.stride_h = g.stride_w = c.stride;
    g.dilation_h = g.dilation_w = c.dilation;
    g.pad_top = g.pad_left = c.pad;
    g.groups = c.groups;
    const int64_t span = c.dilation * (c.k - 1) + 1;
    g.oh = (c.h + 2 * c.pad - span) / c.stride + 1;
    g.ow = (c.w + 2 * c.pad - span) / c.stride + 1;
    x = Random(static_cast<size_t>(c.n * c.h * c.w * c.c_in), rng);
    w = Random(static_cast<size_t>(c.c_out * (c.c_in / c.groups) * c.k * c.k), rng);
    bias = Random(static_cast<size_t>(c.c_out), rng);
    residual = Random(static_cast<size_t>(c.n * g.oh * g.ow * c.c_out), rng);
  }
  Conv2dGeometry g;
  std::vector<float> x, w, bias, residual;
};

class ConvKernel : public ::testing::TestWithParam<Case> {};

// ConvNhwc with 'weights' against the direct loops, within 1e-4 (relative past 1), for each of
// 'activations' with and without the residual, alone and then with a team of three threads (rows
// or tiles split, or A gathered once and read by each part).
void ExpectMatchesDirectLoops(const Case& c, const Problem& pr, const ConvWeights& weights,
                              const std::vector<int>& activations, const std::string& label,
                              const std::vector<int>& teams = {1, 3}) {
  for (int threads : teams) {
    std::optional<ThreadTeam> team;
    if (threads > 1) team.emplace(threads);
    ParallelScope scope(team ? &*team : nullptr);
    for (int act : activations)
      for (bool with_residual : {false, true}) {
        GemmEpilogue ep;
        ep.activation = static_cast<GemmEpilogue::Activation>(act);
        ep.lo = -0.25f, ep.hi = 0.5f;  // Clip's bounds
        if (act == GemmEpilogue::kLeakyRelu) ep.lo = 0.1f;
        if (act == GemmEpilogue::kHardSigmoid) ep.lo = 0.2f;
        const std::vector<float> zeros(pr.residual.size(), 0.f);
        const auto want =
            Reference(c, pr.g, pr.x, pr.w, pr.bias, with_residual ? pr.residual : zeros, ep);
        std::vector<float> got(want.size(), NAN);
        ConvNhwc(pr.g, pr.x.data(), weights, pr.bias.data(),
                 with_residual ? pr.residual.data() : nullptr, ep, got.data());
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-4f * (1.f + std::abs(want[i])))
              << label << " element " << i << " activation " << act << " residual " << with_residual
              << " threads " << threads;
      }
  }
}

TEST_P(ConvKernel, MatchesDirectLoops) {
  const Case c = GetParam();
  const Problem pr(c, static_cast<unsigned>(c.c_in * 131 + c.c_out * 7 + c.k));
  const std::string chosen = SgemmKernelName();
  for (const std::string& kernel : SgemmKernels()) {  // every GEMM micro-kernel this CPU has
    ASSERT_TRUE(UseSgemmKernel(kernel));
    const ConvWeights weights(pr.w.data(), c.c_out, c.c_in / c.groups, c.k, c.k, c.groups);
    ASSERT_NO_FATAL_FAILURE(ExpectMatchesDirectLoops(
        c, pr, weights,
        {GemmEpilogue::kNone, GemmEpilogue::kRelu, GemmEpilogue::kClip, GemmEpilogue::kLeakyRelu,
         GemmEpilogue::kHardSigmoid, GemmEpilogue::kHardSwish},
        kernel));
  }
  UseSgemmKernel(chosen);
}

// Winograd's F(2x2, 3x3) where it fits (3x3, stride 1, one group): the same answers as the direct
// loops within fp32's error of its transforms, alone and with a team of three threads splitting
// the tiles (odd sizes leave tiles half outside the output: those pixels are not written), and of
// ten (few tiles: each position's product split into parts of its columns over the team).
TEST_P(ConvKernel, WinogradMatchesDirectLoops) {
  const Case c = GetParam();
  const Problem pr(c, static_cast<unsigned>(c.c_in * 29 + c.c_out * 3 + c.k));
  if (!WinogradFits(pr.g)) GTEST_SKIP() << "not a 3x3 stride-1 convolution of one group";
  const ConvWeights weights(pr.w.data(), c.c_out, c.c_in, 3, 3, 1, false, true);
  ASSERT_NE(weights.winograd(), nullptr);
  ExpectMatchesDirectLoops(c, pr, weights,
                           {GemmEpilogue::kNone, GemmEpilogue::kRelu, GemmEpilogue::kHardSwish},
                           "winograd", {1, 3, 10});
}

// The int8 form (weights per output channel, each window per row, or each input pixel where
// int8_pixels(): windows of more than one tap over at least 32 channels a group, a multiple of 4,
// on avx512-vnni): every int8 micro-kernel this CPU has against the same fp32 reference, within
// the quantization's error. Depthwise weights stay fp32 (exact).
TEST_P(ConvKernel, Int8MatchesDirectLoopsWithinQuantization) {
  const Case c = GetParam();
  const Problem pr(c, static_cast<unsigned>(c.c_in * 17 + c.c_out * 5 + c.k));
  const Conv2dGeometry& g = pr.g;
  const auto &x = pr.x, &w = pr.w, &bias = pr.bias, &residual = pr.residual;
  const ConvWeights weights(w.data(), c.c_out, c.c_in / c.groups, c.k, c.k, c.groups, true);
  EXPECT_EQ(weights.int8(), !weights.depthwise());
  const int64_t cig = c.c_in / c.groups;
  EXPECT_EQ(weights.int8_pixels(),
            weights.int8() && c.k > 1 && cig >= ConvWeights::kPixelChannels && cig % 4 == 0);
  const std::string chosen = GemmInt8KernelName();
  // Over a team of three (SplitInt8Work): the 7x7 over 300 channels at 36 pixels in 3 blocks of
  // 12; the 3x3 at 3x3 pixels one block in 3 parts of 32 channels; 200 pixels in blocks of 67.
  ThreadTeam team(3);
  ParallelScope scope(&team);
  for (const std::string& kernel : GemmInt8Kernels()) {
    ASSERT_TRUE(UseGemmInt8Kernel(kernel));
    for (int act : {GemmEpilogue::kNone, GemmEpilogue::kRelu, GemmEpilogue::kClip,
                    GemmEpilogue::kHardSwish, GemmEpilogue::kHardSigmoid, GemmEpilogue::kLeakyRelu})
      for (bool with_residual : {false, true}) {
        GemmEpilogue ep;
        ep.activation = static_cast<GemmEpilogue::Activation>(act);
        ep.lo = -0.25f, ep.hi = 0.5f;
        if (act == GemmEpilogue::kHardSigmoid) ep.lo = 0.2f;  // (alpha, beta)
        if (act == GemmEpilogue::kLeakyRelu) ep.lo = 0.1f;
        const std::vector<float> zeros(residual.size(), 0.f);
        const auto want = Reference(c, g, x, w, bias, with_residual ? residual : zeros, ep);
        std::vector<float> got(want.size(), NAN);
        ConvNhwc(g, x.data(), weights, bias.data(), with_residual ? residual.data() : nullptr, ep,
                 got.data());
        // Each operand is off by up to half a step of 1/127 of its row's largest value (here 1):
        // about 0.0019 standard deviation per product, growing with the square root of the
        // depth; the bound is six and a half of those (a lost residual or bias is off by ~1, a
        // wrong window by the output's own size).
        const double depth = static_cast<double>(c.k * c.k * (c.c_in / c.groups));
        const double bound = weights.int8() ? 0.012 * std::sqrt(depth) + 1e-4 : 1e-4;
        double worst = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_FALSE(std::isnan(got[i])) << kernel << " element " << i;
          worst = std::max(worst, static_cast<double>(std::abs(got[i] - want[i])));
        }
        EXPECT_LE(worst, bound) << kernel << " activation " << act << " residual " << with_residual;
      }
  }
  UseGemmInt8Kernel(chosen);
}

INSTANTIATE_TEST_SUITE_P(
    Geometries, ConvKernel,
    ::testing::Values(
        Case{1, 7, 9, 3, 16, 3, 1, 1, 1, 1},   // first layer, 3 channels
        Case{2, 8, 8, 17, 33, 1, 1, 0, 1, 1},  // 1x1 (direct rows), odd sizes
        Case{1, 9, 7, 16, 24, 3, 2, 1, 1, 1},  // strided
        Case{1, 10, 10, 8, 8, 3, 1, 2, 2, 1},  // dilated
        Case{1, 6, 6, 12, 18, 3, 1, 1, 1, 3},  // grouped (4 -> 6 a group)
        // Small groups (the direct kernel): 4 -> 4 a group as the small CNN's, as
        // ResNeXt's strided (four blocks of 16), a channel multiplier (1 -> 3), 6
        // a group (blocks reading past 16 input channels, a tail of 14), dilated;
        // 6 -> 4 a group (more inputs than outputs) stays on the GEMM.
        Case{1, 8, 10, 16, 16, 3, 1, 1, 1, 4}, Case{2, 7, 9, 64, 64, 3, 2, 1, 1, 16},
        Case{1, 6, 7, 8, 24, 3, 1, 1, 1, 8}, Case{1, 5, 6, 30, 30, 3, 1, 1, 1, 5},
        Case{1, 9, 9, 24, 24, 3, 1, 2, 2, 4}, Case{1, 6, 6, 18, 12, 3, 1, 1, 1, 3},
        Case{1, 9, 9, 70, 70, 3, 1, 1, 1, 70},  // depthwise, 64 + tail
        // Depthwise with fewer rows than two a thread of the team of three: each
        // row's channels in parts too (64 + 36; 96 + 64).
        Case{1, 3, 5, 100, 100, 3, 1, 1, 1, 100}, Case{1, 4, 4, 160, 160, 3, 1, 1, 1, 160},
        Case{2, 8, 8, 96, 96, 3, 2, 1, 1, 96},    // depthwise strided
        Case{1, 11, 13, 40, 40, 3, 1, 2, 2, 40},  // depthwise dilated, 16 + tail
        Case{1, 5, 5, 5, 5, 5, 1, 2, 1, 5},       // depthwise 5x5, tiny channels
        // Depthwise 5x5 rows wide enough for the interior's pixels four at a time
        // (its 25 taps' weights held), stride 1 and 2; 7x7 per pixel throughout.
        Case{1, 6, 24, 40, 40, 5, 1, 2, 1, 40}, Case{2, 7, 30, 20, 20, 5, 2, 2, 1, 20},
        Case{1, 9, 20, 16, 16, 7, 1, 3, 1, 16},
        // Depthwise rows wide enough for groups of 8 interior pixels and a few
        // left over, stride 1 and 2, channels 16 x 2 + a tail of 5.
        Case{1, 5, 21, 37, 37, 3, 1, 1, 1, 37}, Case{2, 6, 40, 37, 37, 3, 2, 1, 1, 37},
        Case{1, 12, 12, 7, 300, 7, 2, 3, 1, 1},  // 7x7, many outputs (N blocks)
        Case{2, 13, 11, 3, 20, 7, 2, 3, 1, 1},   // a stem: whole windows, 2 images
        // Wide enough for tiles of 12 pixels inside the image, read in place (the
        // rest gathered): a 7x7 stem, a 3x3 stride-1, a dilated-in-height-only one
        // is not (dilation applies to both axes here: gathered throughout).
        Case{2, 30, 64, 3, 40, 7, 2, 3, 1, 1}, Case{1, 9, 50, 16, 24, 3, 1, 1, 1, 1},
        Case{1, 9, 50, 8, 8, 3, 1, 2, 2, 1},
        Case{1, 4, 4, 640, 20, 3, 1, 1, 1, 1},  // depth past one K block
        // Stride 1 on wide images: depth blocks starting inside a window row (360 =
        // 2 blocks, 3 rows of 120), two images, a 5x5 window, no pads.
        Case{2, 6, 30, 40, 20, 3, 1, 1, 1, 1}, Case{1, 8, 26, 16, 8, 5, 1, 2, 1, 1},
        Case{1, 7, 28, 32, 48, 3, 1, 0, 1, 1},
        // Depth blocks read in place one by one: 3x3 over 64 channels (576 = three
        // blocks of one window row), over 256 (2,304 = nine of one tap: the edge
        // pixels' inner taps in place too), over 128 at stride 2 (blocks across
        // window rows, gathered), a 1x1 at stride 2 over 300 (160 + 140).
        Case{1, 5, 40, 64, 16, 3, 1, 1, 1, 1}, Case{1, 4, 30, 256, 8, 3, 1, 1, 1, 1},
        Case{1, 5, 31, 128, 8, 3, 2, 1, 1, 1}, Case{2, 6, 40, 300, 8, 1, 2, 0, 1, 1},
        // int8 per pixel: two groups of 32 channels, and 36 channels dilated (pieces
        // copied 16 bytes at a time past their 36).
        Case{1, 6, 7, 64, 48, 3, 1, 1, 1, 2}, Case{1, 9, 11, 36, 20, 3, 1, 2, 2, 1},
        Case{1, 3, 3, 64, 96, 3, 1, 1, 1, 1},  // 9 pixels: parts of 32 channels
        // Three odd-sized images (Winograd's tiles: 3 x 2 per image, the last row
        // and column half outside).
        Case{3, 5, 3, 20, 36, 3, 1, 1, 1, 1},
        // Winograd's 144 tiles: blocks of tiles per thread with a team of three
        // (fewer tiles go through the three phases in turn, the team splitting
        // each).
        Case{1, 24, 24, 32, 40, 3, 1, 1, 1, 1},
        // 16 tiles deep enough for the team to split the transforms (2^18
        // multiply-adds' worth), as a 7x7 layer's.
        Case{1, 8, 8, 256, 64, 3, 1, 1, 1, 1},
        // A 1x1 over 1,024 channels: rows 4 KB apart, copied rather than read in
        // place (four depth blocks).
        Case{1, 3, 5, 1024, 40, 1, 1, 0, 1, 1}));

// DepthwiseBlockNhwc with the stages in every combination, with and without a residual, alone
// and over teams, against the three convolutions in turn: Reference's loops in fp32 (w1 and w3
// null), ConvNhwc with the int8 weights w1 and w3 otherwise.
void CheckDepthwiseBlock(const Case& pw, const Problem& p1, const Case& dw, const Problem& p2,
                         const Case& pj, const Problem& p3, const ConvWeights* w1,
                         const ConvWeights& w2, const ConvWeights* w3, const PointwiseStage& expand,
                         const PointwiseStage& project, const GemmEpilogue& ep1,
                         const GemmEpilogue& ep2, const GemmEpilogue& ep3,
                         const std::string& label) {
  const bool int8 = w1 != nullptr;
  const std::vector<float> none1(p1.residual.size(), 0.f), none2(p2.residual.size(), 0.f),
      none3(p3.residual.size(), 0.f);
  auto conv = [](const Problem& p, const ConvWeights& w, const std::vector<float>& x,
                 const float* residual, const GemmEpilogue& ep) {
    std::vector<float> y(static_cast<size_t>(p.g.n * p.g.oh * p.g.ow * p.g.c_out));
    ConvNhwc(p.g, x.data(), w, p.bias.data(), residual, ep, y.data());
    return y;
  };
  const std::vector<float> mid = int8 ? conv(p1, *w1, p1.x, nullptr, ep1)
                                      : Reference(pw, p1.g, p1.x, p1.w, p1.bias, none1, ep1);
  // Expand and project, expand only, project only (x the depthwise's input).
  for (int stages : {3, 1, 2}) {
    const bool with_expand = stages & 1, with_project = stages & 2;
    const std::vector<float>& dw_in = with_expand ? mid : p2.x;
    for (bool with_residual : {false, true}) {
      const float* residual = !with_residual ? nullptr
                              : with_project ? p3.residual.data()
                                             : p2.residual.data();
      std::vector<float> want;
      if (with_project) {
        // (int8: the depthwise's own kernel, so that the projection quantizes the same rows.)
        const std::vector<float> d = int8 ? conv(p2, w2, dw_in, nullptr, ep2)
                                          : Reference(dw, p2.g, dw_in, p2.w, p2.bias, none2, ep2);
        want =
            int8 ? conv(p3, *w3, d, residual, ep3)
                 : Reference(pj, p3.g, d, p3.w, p3.bias, with_residual ? p3.residual : none3, ep3);
      } else {
        want = Reference(dw, p2.g, dw_in, p2.w, p2.bias, with_residual ? p2.residual : none2, ep2);
      }
      for (int threads : {1, 3, 10}) {
        std::optional<ThreadTeam> team;
        if (threads > 1) team.emplace(threads);
        ParallelScope scope(team ? &*team : nullptr);
        std::vector<float> got(want.size(), NAN);
        DepthwiseBlockNhwc(p2.g, with_expand ? p1.x.data() : p2.x.data(),
                           with_expand ? expand : PointwiseStage{}, w2.depthwise_taps(),
                           p2.bias.data(), ep2, with_project ? project : PointwiseStage{}, residual,
                           got.data());
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-4f * (1.f + std::abs(want[i])))
              << label << " stages " << stages << " element " << i << " residual " << with_residual
              << " threads " << threads;
      }
    }
  }
}

// A depthwise convolution with a 1x1 before it, after it or both as one (DepthwiseBlockNhwc)
// against the direct loops in turn: strides 1 and 2, 3x3, 5x5 and a dilated 3x3, padded and not,
// odd sizes, rows wide enough that a band is one output row (its input rows moved to the front each
// step), bands of two rows and whole images; the residual on the block's output; alone and with
// teams of 3 and 10 (each image's rows in chunks, a chunk's first band computing its shared rows
// again, or, where chunks would be too short, the stages in turn over the team). In int8 (the
// 1x1s' weights quantized, each row of their input on its own) against the same three
// convolutions through ConvNhwc: the same rows quantized the same way, so the same values.
TEST(DepthwiseBlock, MatchesItsConvolutionsInTurn) {
  struct Fused {
    int64_t n, h, w, c_in, c, k, stride, pad, dilation, c_out;
  };
  const Fused cases[] = {
      {1, 9, 7, 8, 24, 3, 1, 1, 1, 8},
      {2, 13, 11, 5, 32, 3, 2, 1, 1, 16},
      {3, 6, 5, 16, 20, 5, 1, 2, 1, 7},
      {1, 10, 12, 4, 36, 3, 1, 2, 2, 12},
      {1, 8, 7, 3, 17, 3, 1, 0, 1, 5},
      {2, 6, 120, 8, 700, 3, 1, 1, 1, 24},
      {1, 7, 110, 16, 640, 3, 2, 1, 1, 40},
      {1, 5, 5, 8, 40, 5, 2, 2, 1, 33},
      // Bands of two output rows: 16,000 and 12,000 floats a row.
      {1, 9, 40, 8, 400, 3, 1, 1, 1, 16},
      {2, 11, 30, 8, 400, 3, 2, 1, 1, 24},
      // Tall enough for chunks of rows with 3 and 10 threads (the short ones above run the
      // stages one after another there), and for 3 threads only.
      {1, 40, 9, 8, 24, 3, 1, 1, 1, 8},
      {1, 30, 40, 8, 400, 3, 1, 1, 1, 16},
  };
  for (const Fused& f : cases) {
    const Case pw{f.n, f.h, f.w, f.c_in, f.c, 1, 1, 0, 1, 1};
    const Case dw{f.n, f.h, f.w, f.c, f.c, f.k, f.stride, f.pad, f.dilation, f.c};
    const Problem p1(pw, static_cast<unsigned>(f.c * 7 + f.k)), p2(dw, static_cast<unsigned>(f.h));
    const Case pj{f.n, p2.g.oh, p2.g.ow, f.c, f.c_out, 1, 1, 0, 1, 1};
    const Problem p3(pj, static_cast<unsigned>(f.c_out));
    GemmEpilogue ep1, ep2, ep3;
    ep1.activation = GemmEpilogue::kClip, ep1.lo = 0.f, ep1.hi = 0.75f;
    ep2.activation = GemmEpilogue::kRelu;
    ep3.activation = GemmEpilogue::kHardSwish;
    const ConvWeights w2(p2.w.data(), f.c, 1, f.k, f.k, f.c);
    ASSERT_TRUE(w2.depthwise());
    for (bool int8 : {false, true}) {
      const ConvWeights w1(p1.w.data(), f.c, f.c_in, 1, 1, 1, int8),
          w3(p3.w.data(), f.c_out, f.c, 1, 1, 1, int8);
      PointwiseStage expand, project;
      if (int8)
        expand.int8 = &w1.int8_group(0), project.int8 = &w3.int8_group(0);
      else
        expand.weights = &w1.group(0), project.weights = &w3.group(0);
      expand.c_in = f.c_in, expand.epilogue = ep1, expand.epilogue.bias = p1.bias.data();
      project.c_in = f.c, project.epilogue = ep3, project.epilogue.bias = p3.bias.data();
      CheckDepthwiseBlock(pw, p1, dw, p2, pj, p3, int8 ? &w1 : nullptr, w2, int8 ? &w3 : nullptr,
                          expand, project, ep1, ep2, ep3,
                          "case " + std::to_string(&f - cases) + (int8 ? " int8" : " fp32"));
    }
  }
}
// Which convolutions take the small-groups kernel: groups of at most 8 inputs and 16 outputs, no
// more inputs than outputs a group, fp32, AVX-512.
TEST(ConvWeights, SmallGroupsOfAtMost8InputsAnd16Outputs) {
  if (!HasAvx512F()) GTEST_SKIP() << "the small-groups kernel is AVX-512's";
  auto small = [](int64_t c_out, int64_t cig, int64_t groups, bool int8 = false) {
    const std::vector<float> w(static_cast<size_t>(c_out * cig * 9), 0.5f);
    return ConvWeights(w.data(), c_out, cig, 3, 3, groups, int8).small_groups();
  };
  EXPECT_TRUE(small(16, 4, 4));
  EXPECT_TRUE(small(18, 4, 3));
  EXPECT_TRUE(small(24, 1, 8));      // a channel multiplier
  EXPECT_TRUE(small(128, 4, 32));    // ResNeXt-50's first stage
  EXPECT_TRUE(small(256, 8, 32));    // and its second
  EXPECT_TRUE(small(55, 5, 5));      // 11 outputs a group: blocks across three groups
  EXPECT_FALSE(small(12, 6, 3));     // more inputs than outputs a group
  EXPECT_FALSE(small(512, 16, 32));  // 16 inputs a group: the GEMM's
  EXPECT_FALSE(small(64, 32, 2));
  EXPECT_FALSE(small(16, 1, 16));  // depthwise: its own kernel
  EXPECT_FALSE(small(16, 16, 1));  // one group
  EXPECT_FALSE(small(16, 4, 4, true));
}

TEST(ThreadTeam, RunsEveryIndexOnceAndNestedLoopsFinish) {
  ThreadTeam team(4);
  for (int64_t count : {0, 1, 3, 1000}) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(count));
    team.Run(count, [&](int64_t i) {
      // A ParallelFor inside the team's work runs inline on that thread (no deadlock); inside a
      // one-item Run, which runs inline itself, it may use the idle team.
      ParallelScope scope(&team);
      std::atomic<int64_t> inner{0};
      ParallelFor(3, [&](int64_t) { ++inner; });
      EXPECT_EQ(inner.load(), 3);
      seen[i]++;
    });
    for (auto& s : seen) EXPECT_EQ(s.load(), 1);
  }
}

TEST(ThreadTeam, BackToBackJobsRunEachIndexOnce) {
  // Many short jobs in a row: a worker late from one job must not claim an index of the next
  // (nor of the old one under the next's count). More threads than this machine's cores, so
  // workers are preempted mid-claim.
  ThreadTeam team(5);
  std::vector<std::atomic<int>> hits(16);
  for (int job = 0; job < 50000; ++job) {
    const int count = 2 + job % 12;
    for (int i = 0; i < count; ++i) hits[i] = 0;
    team.Run(count, [&](int64_t i) { hits[i].fetch_add(1); });
    for (int i = 0; i < count; ++i) ASSERT_EQ(hits[i].load(), 1) << "job " << job << " index " << i;
  }
}

TEST(ThreadTeam, ConvolutionsAgreeWithOneThread) {
  std::mt19937 rng(9);
  Conv2dGeometry g;
  g.n = 2, g.h = g.w = 14, g.c_in = 32, g.c_out = 48, g.kh = g.kw = 3;
  g.pad_top = g.pad_left = 1, g.oh = g.ow = 14;
  const auto x = Random(static_cast<size_t>(g.n * g.h * g.w * g.c_in), rng);
  const auto w = Random(static_cast<size_t>(g.c_out * g.c_in * 9), rng);
  const ConvWeights weights(w.data(), g.c_out, g.c_in, 3, 3, 1);
  std::vector<float> one(static_cast<size_t>(g.n * g.oh * g.ow * g.c_out)), four(one.size());
  ConvNhwc(g, x.data(), weights, nullptr, nullptr, GemmEpilogue{}, one.data());
  ThreadTeam team(4);
  {
    ParallelScope scope(&team);
    EXPECT_EQ(ParallelThreads(), 4);
    ConvNhwc(g, x.data(), weights, nullptr, nullptr, GemmEpilogue{}, four.data());
  }
  EXPECT_EQ(ParallelThreads(), 1);
  EXPECT_EQ(one, four);  // the same blocks in the same order per element: bit-identical
}

void PoolMatchesDirectLoops(int64_t channels, bool nans) {
  std::mt19937 rng(5);
  Conv2dGeometry g;
  g.n = 2, g.h = 7, g.w = 6, g.c_in = g.c_out = channels, g.kh = g.kw = 3;
  g.stride_h = g.stride_w = 2;
  g.pad_top = g.pad_left = 1, g.oh = 4, g.ow = 3;
  auto x = Random(static_cast<size_t>(g.n * g.h * g.w * g.c_in), rng);
  if (nans)
    for (size_t i = 0; i < x.size(); i += 7) x[i] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> max(static_cast<size_t>(g.n * g.oh * g.ow * g.c_in)), avg(max.size());
  MaxPoolNhwc(g, x.data(), max.data());
  AveragePoolNhwc(g, false, 1, 1, x.data(), avg.data());
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox)
        for (int64_t ch = 0; ch < g.c_in; ++ch) {
          float m = -INFINITY;
          double sum = 0;
          int count = 0;
          for (int64_t ky = 0; ky < 3; ++ky)
            for (int64_t kx = 0; kx < 3; ++kx) {
              const int64_t iy = oy * 2 - 1 + ky, ix = ox * 2 - 1 + kx;
              if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
              const float v = x[((b * g.h + iy) * g.w + ix) * g.c_in + ch];
              m = v > m || std::isnan(v) ? v : m;  // (NaN once any is: ONNX's reference)
              sum += v;
              ++count;
            }
          const size_t at = static_cast<size_t>(((b * g.oh + oy) * g.ow + ox) * g.c_in + ch);
          if (std::isnan(m)) {
            ASSERT_TRUE(std::isnan(max[at])) << at;
          } else {
            ASSERT_EQ(max[at], m) << at;
          }
          if (!nans) {
            ASSERT_NEAR(avg[at], sum / count, 1e-5) << at;
          }
        }
}

// 19 channels (a masked tail only) and 83 (a block of 64, then the tail); every 7th input NaN,
// which makes every window holding it NaN (ONNX's reference, PyTorch), wherever in the window.
TEST(Pool, MaxAndAverageMatchDirectLoops) {
  for (int64_t channels : {19, 83}) {
    for (bool nans : {false, true}) {
      SCOPED_TRACE(testing::Message() << channels << " channels" << (nans ? ", NaNs" : ""));
      PoolMatchesDirectLoops(channels, nans);
    }
  }
}

}  // namespace
}  // namespace nereid::kernels
