// GemmInt8 (the CPU path's int8 GEMM) with every micro-kernel this CPU has: against the exact
// integer products of the quantized operands, and against float64 of the operands before
// quantization (quantization's own error), at shapes that leave partial panels, row blocks and
// groups of 4 in k.
#include "cpu/gemm_int8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/gemm_int8_isa.h"
#include "cpu/parallel.h"

namespace nereid::kernels {
namespace {

using Shape = std::tuple<std::string, int, int, int>;

class GemmInt8Test : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override { ASSERT_TRUE(UseGemmInt8Kernel(std::get<0>(GetParam()))); }
  void TearDown() override { UseGemmInt8Kernel(default_kernel_); }
  std::string default_kernel_ = GemmInt8KernelName();
};

double RelativeError(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

TEST_P(GemmInt8Test, MatchesTheReferences) {
  const auto [kernel, m, n, k] = GetParam();
  ASSERT_STREQ(GemmInt8KernelName(), kernel.c_str());
  std::mt19937 rng(m * 131 + n * 17 + k);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  const int ldx = k + 3, ldy = n + 1;  // leading dimensions past the row
  std::vector<float> x(m * ldx), w(n * k), bias(n), y(m * ldy, NAN);
  for (auto* v : {&x, &w, &bias})
    for (float& e : *v) e = dist(rng);
  PackedInt8W packed(w.data(), n, k, k);
  GemmInt8(m, x.data(), ldx, packed, bias.data(), y.data(), ldy);
  std::vector<int8_t> xq(m * k);
  std::vector<float> xs(m);
  QuantizeRowsInt8(x.data(), m, k, ldx, xq.data(), xs.data());
  std::vector<float> got(m * n);
  std::vector<double> exact(m * n), real(m * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      int64_t dot = 0;
      double r = 0;
      for (int l = 0; l < k; ++l) {
        dot += int64_t{xq[i * k + l]} * packed.quantized()[j * k + l];
        r += double{x[i * ldx + l]} * w[j * k + l];
      }
      got[i * n + j] = y[i * ldy + j];
      exact[i * n + j] = static_cast<double>(dot) * xs[i] * packed.scale()[j] + bias[j];
      real[i * n + j] = r + bias[j];
    }
  EXPECT_LE(RelativeError(got, exact), 1e-6);
  EXPECT_LE(RelativeError(got, real), k < 8 ? 5e-2 : 3e-2);
  for (int i = 0; i < m; ++i) EXPECT_TRUE(std::isnan(y[i * ldy + n])) << "wrote past the row";
  // The fused form (a convolution's: the VNNI tiles of 8, 16, 24 or 32 columns finished in
  // registers, AMX's) gives the same exact products.
  std::vector<float> fused(m * ldy, NAN);
  GemmEpilogue ep;
  ep.bias = bias.data();
  GemmInt8Fused(m, x.data(), ldx, packed, fused.data(), ldy, ep);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) got[i * n + j] = fused[i * ldy + j];
  EXPECT_LE(RelativeError(got, exact), 1e-6);
  for (int i = 0; i < m; ++i) EXPECT_TRUE(std::isnan(fused[i * ldy + n])) << "wrote past the row";
}

std::vector<Shape> Shapes() {
  std::vector<Shape> out;
  for (const std::string& kernel : GemmInt8Kernels())
    for (auto [m, n, k] : std::vector<std::tuple<int, int, int>>{{1, 1, 1},
                                                                 {1, 1000, 1024},
                                                                 {3, 15, 7},
                                                                 {4, 16, 64},
                                                                 {5, 17, 131},
                                                                 {17, 33, 256},
                                                                 {64, 100, 512},
                                                                 {13, 8, 96},
                                                                 {13, 5, 40},
                                                                 {25, 24, 864},
                                                                 {12, 20, 72},
                                                                 {37, 56, 128}})
      out.emplace_back(kernel, m, n, k);
  return out;
}

std::string ShapeName(const ::testing::TestParamInfo<Shape>& info) {
  std::string name = std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "x" +
                     std::to_string(std::get<2>(info.param)) + "x" +
                     std::to_string(std::get<3>(info.param));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(EveryKernel, GemmInt8Test, ::testing::ValuesIn(Shapes()), ShapeName);

// Smoothing (PackedInt8W's 'smooth'): x's columns divided and w's multiplied by the factors. With
// powers of two both are exact, so GemmInt8 and GemmInt8Fused give what the unsmoothed kernels
// give on x / s and w * s, bit for bit, on every kernel; and where one channel of x is large on
// every row (a value near 50 among values within 1), smoothing by sqrt(range / w_max) takes the
// error against float64 down by more than half.
TEST(GemmInt8SmoothingTest, EveryKernelRunsTheSmoothedOperandsAndOutliersLoseTheirHold) {
  const int m = 37, n = 40, k = 96;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> x(m * k), w(n * k), s(k), xs(m * k), ws(n * k);
  for (float& v : w) v = dist(rng);
  for (int i = 0; i < m; ++i)
    for (int l = 0; l < k; ++l) x[i * k + l] = l == 3 ? 50.f + dist(rng) : dist(rng);
  for (int l = 0; l < k; ++l) s[l] = std::ldexp(1.f, l % 7 - 3);
  for (int i = 0; i < m; ++i)
    for (int l = 0; l < k; ++l) xs[i * k + l] = x[i * k + l] / s[l];
  for (int j = 0; j < n; ++j)
    for (int l = 0; l < k; ++l) ws[j * k + l] = w[j * k + l] * s[l];
  const std::string default_kernel = GemmInt8KernelName();
  for (const std::string& kernel : GemmInt8Kernels()) {
    SCOPED_TRACE(kernel);
    ASSERT_TRUE(UseGemmInt8Kernel(kernel));
    const PackedInt8W smoothed(w.data(), n, k, k, s.data()), plain(ws.data(), n, k, k);
    EXPECT_EQ(smoothed.quantized(), plain.quantized());
    std::vector<float> got(m * n), want(m * n);
    GemmInt8(m, x.data(), k, smoothed, nullptr, got.data(), n);
    GemmInt8(m, xs.data(), k, plain, nullptr, want.data(), n);
    EXPECT_EQ(got, want);
    GemmEpilogue ep;
    GemmInt8Fused(m, x.data(), k, smoothed, got.data(), n, ep);
    GemmInt8Fused(m, xs.data(), k, plain, want.data(), n, ep);
    EXPECT_EQ(got, want);
  }
  UseGemmInt8Kernel(default_kernel);
  // SmoothQuant's factors at alpha 0.5 against no smoothing.
  std::vector<float> sq(k);
  for (int l = 0; l < k; ++l) {
    float range = 0, w_max = 0;
    for (int i = 0; i < m; ++i) range = std::max(range, std::abs(x[i * k + l]));
    for (int j = 0; j < n; ++j) w_max = std::max(w_max, std::abs(w[j * k + l]));
    sq[l] = std::sqrt(range / w_max);
  }
  std::vector<double> real(m * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int l = 0; l < k; ++l) real[i * n + j] += double{x[i * k + l]} * w[j * k + l];
  std::vector<float> with(m * n), without(m * n);
  GemmInt8(m, x.data(), k, PackedInt8W(w.data(), n, k, k, sq.data()), nullptr, with.data(), n);
  GemmInt8(m, x.data(), k, PackedInt8W(w.data(), n, k, k), nullptr, without.data(), n);
  EXPECT_LT(RelativeError(with, real), 0.5 * RelativeError(without, real));
}

// SplitInt8Work: every row and column in exactly one piece, parts of whole 32-column tiles, no
// more blocks than of 8 rows; on one thread, or where they make four or more a thread, blocks of
// 64 rows in one part; else at least a piece a thread where there are enough, none over 64 rows
// (a 14x14 layer's 196 rows on two threads in 4 pieces or more, not 64, 64, 64, 4; a 7x7 layer's
// 49 rows in parts of its 512 channels).
TEST(GemmInt8SplitTest, PiecesCoverTheProductAndKeepTheTeamBusy) {
  if (GemmInt8KernelName() == std::string("amx-int8")) GTEST_SKIP() << "AMX: 32-row blocks";
  for (const int threads : {1, 2, 3, 16})
    for (const auto [m, n, groups] :
         std::vector<std::tuple<int64_t, int64_t, int64_t>>{{196, 256, 1},
                                                            {49, 512, 1},
                                                            {1, 1000, 1},
                                                            {9, 96, 1},
                                                            {3136, 64, 1},
                                                            {784, 128, 2},
                                                            {25088, 64, 1},
                                                            {49, 2048, 1},
                                                            {5, 20, 32}}) {
      SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n) + " groups " +
                   std::to_string(groups) + " threads " + std::to_string(threads));
      const Int8Split s = SplitInt8Work(m, n, groups, threads);
      EXPECT_GE(s.block * s.blocks, m);
      EXPECT_LT(s.block * (s.blocks - 1), m);
      EXPECT_GE(s.part * s.parts, n);
      EXPECT_LT(s.part * (s.parts - 1), n);
      EXPECT_TRUE(s.parts == 1 || s.part % 32 == 0) << s.part;
      EXPECT_LE(s.blocks, (m + 7) / 8);
      if (threads == 1) {
        EXPECT_EQ(s.block, 64);
        EXPECT_EQ(s.parts, 1);
      } else if (groups * ((m + 63) / 64) >= 4 * threads) {
        EXPECT_EQ(s.block, 64);
        EXPECT_EQ(s.parts, 1);
      } else if (groups * ((m + 7) / 8) * ((n + 31) / 32) >= threads) {
        EXPECT_GE(groups * s.blocks * s.parts, threads) << s.blocks << " x " << s.parts;
        EXPECT_LE(s.block, 64);
      }
    }
  Int8Split s = SplitInt8Work(196, 256, 1, 2);
  EXPECT_GE(s.blocks * s.parts, 4);
  EXPECT_LE(s.block, 49);
  s = SplitInt8Work(49, 512, 1, 2);
  EXPECT_EQ(s.blocks, 1);
  EXPECT_GE(s.parts, 2);
  s = SplitInt8Work(25088, 64, 1, 16);  // plenty of 64-row blocks: kept
  EXPECT_EQ(s.block, 64);
  EXPECT_EQ(s.parts, 1);
}

// Over a team of three (SplitInt8Work: a row of 1,000 columns in parts of 32 and more, 50 rows
// in blocks, 200 rows of 64 columns in blocks of 64): every element as on one thread, bit for bit,
// for GemmInt8 (alpha, accumulating) and GemmInt8Fused (bias, residual, Relu), on every kernel.
TEST(GemmInt8TeamTest, SplitProductsGiveTheOneThreadAnswer) {
  const std::string default_kernel = GemmInt8KernelName();
  ThreadTeam team(3);
  for (const std::string& kernel : GemmInt8Kernels())
    for (const auto [m, n, k] :
         std::vector<std::tuple<int, int, int>>{{1, 1000, 2048}, {50, 300, 512}, {200, 64, 256}}) {
      SCOPED_TRACE(kernel + " " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                   std::to_string(k));
      ASSERT_TRUE(UseGemmInt8Kernel(kernel));
      std::mt19937 rng(m + n + k);
      std::uniform_real_distribution<float> dist(-1.f, 1.f);
      std::vector<float> x(m * k), w(n * k), bias(n), residual(m * n);
      for (auto* v : {&x, &w, &bias, &residual})
        for (float& e : *v) e = dist(rng);
      const PackedInt8W packed(w.data(), n, k, k);
      GemmEpilogue ep;
      ep.bias = bias.data();
      ep.residual = residual.data();
      ep.ld_residual = n;
      ep.activation = GemmEpilogue::kRelu;
      std::vector<float> alone(m * n, 1.f), split(m * n, 1.f), fused_alone(m * n),
          fused_split(m * n);
      GemmInt8(m, x.data(), k, packed, bias.data(), alone.data(), n, 0.5f, true);
      GemmInt8Fused(m, x.data(), k, packed, fused_alone.data(), n, ep);
      {
        ParallelScope scope(&team);
        ASSERT_EQ(ParallelThreads(), 3);
        GemmInt8(m, x.data(), k, packed, bias.data(), split.data(), n, 0.5f, true);
        GemmInt8Fused(m, x.data(), k, packed, fused_split.data(), n, ep);
      }
      EXPECT_EQ(split, alone);
      EXPECT_EQ(fused_split, fused_alone);
    }
  UseGemmInt8Kernel(default_kernel);
}

// GemmInt8FusedTaps (a convolution's windows of pixels quantized each on its own): every piece's
// exact integer products times its own scale, summed, times the weights' scale, plus bias and
// residual, then Relu, against float64 of the same integers, for tiles of 8 to 32 columns and a
// partial tile, rows past a multiple of 12, pieces of 32, 36 and 96 bytes, and pieces outside
// the image (bytes 0x80, scale 0); on avx512-vnni its tiles, elsewhere the portable loops.
TEST(GemmInt8TapsTest, EachPieceScaledByItsOwnScale) {
  const std::string default_kernel = GemmInt8KernelName();
  for (const std::string& kernel : GemmInt8Kernels())
    for (const auto [m, n, taps, piece] : std::vector<std::tuple<int, int, int, int>>{
             {13, 24, 9, 96}, {25, 8, 9, 32}, {12, 32, 4, 36}, {7, 20, 9, 64}, {30, 56, 3, 32}}) {
      SCOPED_TRACE(kernel + " " + std::to_string(m) + "x" + std::to_string(n) + " taps " +
                   std::to_string(taps) + " x " + std::to_string(piece));
      ASSERT_TRUE(UseGemmInt8Kernel(kernel));
      std::mt19937 rng(m * 7 + n * 3 + piece);
      std::uniform_real_distribution<float> dist(-1.f, 1.f);
      const int k = taps * piece, ldy = n + 1;
      std::vector<float> w(n * k), bias(n), residual(m * n), xs(m * taps);
      for (auto* v : {&w, &bias, &residual})
        for (float& e : *v) e = dist(rng);
      std::vector<uint8_t> xq(m * k);
      std::uniform_int_distribution<int> byte(-127, 127);
      for (int i = 0; i < m; ++i)
        for (int t = 0; t < taps; ++t) {
          const bool outside = (i + t) % 5 == 0;
          xs[i * taps + t] = outside ? 0.f : (1.f + dist(rng)) / 127.f;
          for (int l = 0; l < piece; ++l)
            xq[i * k + t * piece + l] = static_cast<uint8_t>((outside ? 0 : byte(rng)) + 128);
        }
      const PackedInt8W packed(w.data(), n, k, k);
      const std::vector<int32_t> offsets = packed.TapOffsets(taps);
      GemmEpilogue ep;
      ep.bias = bias.data();
      ep.residual = residual.data();
      ep.ld_residual = n;
      ep.activation = GemmEpilogue::kRelu;
      std::vector<float> y(m * ldy, NAN), got(m * n);
      GemmInt8FusedTaps(m, xq.data(), k, xs.data(), taps, packed, offsets.data(), y.data(), ldy,
                        ep);
      std::vector<double> want(m * n);
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double sum = 0;
          for (int t = 0; t < taps; ++t) {
            int64_t dot = 0;
            for (int l = t * piece; l < (t + 1) * piece; ++l)
              dot += (int64_t{xq[i * k + l]} - 128) * packed.quantized()[j * k + l];
            sum += static_cast<double>(dot) * xs[i * taps + t];
          }
          want[i * n + j] = std::max(0.0, sum * packed.scale()[j] + bias[j] + residual[i * n + j]);
          got[i * n + j] = y[i * ldy + j];
        }
        EXPECT_TRUE(std::isnan(y[i * ldy + n])) << "wrote past row " << i;
      }
      EXPECT_LE(RelativeError(got, want), 1e-6);
    }
  UseGemmInt8Kernel(default_kernel);
}

TEST(GemmInt8QuantizeTest, SymmetricPerRowWithRoundingHalfToEven) {
  // The first row's absmax is 127 (scale 1), so each value is rounded half to even as it is; a
  // row of zeros gets scale 0 and zeros.
  const float in[2][4] = {{127.f, -127.f, 2.5f, 3.5f}, {0.f, 0.f, 0.f, 0.f}};
  int8_t q[8];
  float scale[2];
  QuantizeRowsInt8(&in[0][0], 2, 4, 4, q, scale);
  EXPECT_EQ(scale[0], 1.f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[2], 2);  // 2.5 -> 2
  EXPECT_EQ(q[3], 4);  // 3.5 -> 4
  EXPECT_EQ(scale[1], 0.f);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(q[i], 0);
}

// The vectorized quantizer against the arithmetic the GPU uses, element by element, with values
// that land on halves.
TEST(GemmInt8QuantizeTest, EveryElementAsTheScalarArithmetic) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  const int k = 1003;
  std::vector<float> row(k);
  for (float& v : row) v = dist(rng);
  row[0] = 1.f;  // absmax 1: inv 127
  for (int l = 1; l < 40; ++l) row[l] = (static_cast<float>(l) - 20.5f) / 127.f;
  std::vector<int8_t> q(k);
  float scale;
  QuantizeRowsInt8(row.data(), 1, k, k, q.data(), &scale);
  EXPECT_EQ(scale, 1.f / 127.f);
  for (int l = 0; l < k; ++l) {
    const float want = std::clamp(std::nearbyint(row[l] * 127.f), -127.f, 127.f);
    ASSERT_EQ(q[l], static_cast<int8_t>(want)) << l;
  }
}

#if defined(__x86_64__)
// The AVX-512 quantizer of whole rows into padded strides (the int8 GEMMs' and convolutions'),
// 64 values at a time through saturating packs and 16 at a time after: every byte as the scalar
// arithmetic, q or q + 128, the padding 0 (0x80), a NaN row's scale NaN, for lengths around the
// 64-value blocks.
TEST(GemmInt8QuantizeTest, StridedRowsAsTheScalarArithmetic) {
  if (!HasAvx512F()) GTEST_SKIP() << "no AVX-512";
  std::mt19937 rng(19);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  for (const int64_t k : {16, 63, 64, 65, 200, 864, 867})
    for (const bool offset : {false, true}) {
      const int64_t m = 3, ldx = k + 5, stride = (k + 15) / 16 * 16 + 16;
      std::vector<float> x(static_cast<size_t>(m * ldx));
      for (float& v : x) v = dist(rng);
      x[0] = 3.f;  // row 0: absmax 3, halves below it
      for (int64_t l = 1; l < std::min<int64_t>(k, 60); ++l) x[l] = (l - 30.5f) * 3.f / 127.f;
      x[ldx + k - 1] = -7.f;     // row 1: its scale set by its last value
      x[2 * ldx + k / 2] = NAN;  // row 2: NaN
      std::vector<int8_t> q(static_cast<size_t>(m * stride), 0x55);
      std::vector<float> scale(m);
      int8::QuantizeRowsStridedAvx512(x.data(), m, ldx, k, q.data(), stride, scale.data(), offset);
      for (int64_t i = 0; i < 2; ++i) {
        float absmax = 0.f;
        for (int64_t l = 0; l < k; ++l) absmax = std::max(absmax, std::fabs(x[i * ldx + l]));
        ASSERT_EQ(scale[i], absmax / 127.f) << k;
        for (int64_t l = 0; l < stride; ++l) {
          const float v =
              l < k ? std::clamp(std::nearbyint(x[i * ldx + l] * (127.f / absmax)), -127.f, 127.f)
                    : 0.f;
          const int want = static_cast<int>(v) + (offset ? 128 : 0);
          ASSERT_EQ(static_cast<uint8_t>(q[i * stride + l]), static_cast<uint8_t>(want))
              << "k " << k << " offset " << offset << " row " << i << " column " << l;
        }
      }
      EXPECT_TRUE(std::isnan(scale[2])) << k;
    }
}
#endif

TEST(GemmInt8KernelTest, EveryCpuHasThePortableKernelAndUnknownNamesAreRefused) {
  const auto kernels = GemmInt8Kernels();
  EXPECT_NE(std::find(kernels.begin(), kernels.end(), "portable"), kernels.end());
  EXPECT_FALSE(UseGemmInt8Kernel("avx9000"));
}

}  // namespace
}  // namespace nereid::kernels
