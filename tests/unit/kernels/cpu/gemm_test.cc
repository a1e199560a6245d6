// Sgemm against a float64 reference: every transpose combination, alpha/beta, edge sizes that
// exercise partial micro-tiles, blocking boundaries and the small-M streaming paths.
#include "cpu/gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cpu/attention.h"
#include "cpu/parallel.h"

namespace nereid::kernels {
namespace {

// Every micro-kernel this CPU supports runs every shape.
using Shape = std::tuple<std::string, int, int, int, bool, bool>;

class SgemmTest : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override { ASSERT_TRUE(UseSgemmKernel(std::get<0>(GetParam()))); }
  void TearDown() override { UseSgemmKernel(default_kernel_); }
  std::string default_kernel_ = SgemmKernelName();
};

TEST_P(SgemmTest, MatchesFloat64Reference) {
  const auto [kernel, m, n, k, ta, tb] = GetParam();
  ASSERT_STREQ(SgemmKernelName(), kernel.c_str());
  std::mt19937 rng(m * 131 + n * 17 + k);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> a(m * k), b(k * n), c(m * n);
  for (auto* v : {&a, &b, &c})
    for (float& x : *v) x = dist(rng);
  const float alpha = 0.75f, beta = 0.5f;
  const int lda = ta ? m : k, ldb = tb ? k : n;
  std::vector<double> ref(m * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p)
        s += static_cast<double>(ta ? a[p * lda + i] : a[i * lda + p]) *
             (tb ? b[j * ldb + p] : b[p * ldb + j]);
      ref[i * n + j] = alpha * s + beta * c[i * n + j];
    }
  std::vector<float> c_packed = c;
  Sgemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), n);
  const PackedMatrixB packed(tb, k, n, b.data(), ldb);  // constant weights: packed once
  SgemmPacked(ta, m, alpha, a.data(), lda, packed, beta, c_packed.data(), n);
  for (int i = 0; i < m * n; ++i) {
    ASSERT_NEAR(c[i], ref[i], 1e-4 * std::sqrt(static_cast<double>(k)) + 1e-5) << "at " << i;
    ASSERT_NEAR(c_packed[i], ref[i], 1e-4 * std::sqrt(static_cast<double>(k)) + 1e-5)
        << "packed, at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SgemmTest,
                         ::testing::Combine(::testing::ValuesIn(SgemmKernels()),
                                            ::testing::Values(1, 3, 6, 7, 11, 13, 20, 73),
                                            ::testing::Values(1, 16, 17, 33, 100),
                                            ::testing::Values(1, 9, 257, 300), ::testing::Bool(),
                                            ::testing::Bool()));

TEST(SgemmEdgeTest, BetaZeroIgnoresNaNInC) {
  std::vector<float> a(4, 1.f), b(4, 1.f), c(4, NAN);
  Sgemm(false, false, 2, 2, 2, 1.f, a.data(), 2, b.data(), 2, 0.f, c.data(), 2);
  for (float v : c) EXPECT_EQ(v, 2.f);
}

TEST(SgemmEdgeTest, LargeBlockedProduct) {
  const std::string default_kernel = SgemmKernelName();
  for (const std::string& kernel : SgemmKernels()) {
    ASSERT_TRUE(UseSgemmKernel(kernel));
    const int m = 150, n = 3100, k = 520;  // crosses kMc, kNc and kKc block edges
    std::vector<float> a(m * k, 0.5f), b(k * n, 0.25f), c(m * n, 0.f);
    Sgemm(false, false, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, c.data(), n);
    for (int i = 0; i < m * n; i += 997) ASSERT_FLOAT_EQ(c[i], 0.125f * k) << kernel;
  }
  UseSgemmKernel(default_kernel);
}

TEST(SgemmKernelTest, EveryCpuHasThePortableKernelAndUnknownNamesAreRefused) {
  const auto kernels = SgemmKernels();
  EXPECT_NE(std::find(kernels.begin(), kernels.end(), "portable-6x16"), kernels.end());
  EXPECT_FALSE(UseSgemmKernel("no-such-kernel"));
  EXPECT_NE(std::find(kernels.begin(), kernels.end(), SgemmKernelName()), kernels.end());
}

TEST(SgemmKernelTest, PackedMatrixKeepsTheKernelItWasPackedFor) {
  const std::string default_kernel = SgemmKernelName();
  const auto kernels = SgemmKernels();
  const int m = 20, n = 70, k = 40;
  std::vector<float> a(m * k), b(k * n), expected(m * n), got(m * n);
  for (int i = 0; i < m * k; ++i) a[i] = static_cast<float>(i % 7) - 3.f;
  for (int i = 0; i < k * n; ++i) b[i] = static_cast<float>(i % 5) - 2.f;
  for (const std::string& packed_with : kernels) {
    ASSERT_TRUE(UseSgemmKernel(packed_with));
    const PackedMatrixB packed(false, k, n, b.data(), n);
    Sgemm(false, false, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, expected.data(), n);
    for (const std::string& run_with : kernels) {  // switching kernels later must not misread it
      ASSERT_TRUE(UseSgemmKernel(run_with));
      SgemmPacked(false, m, 1.f, a.data(), k, packed, 0.f, got.data(), n);
      ASSERT_EQ(got, expected) << packed_with << " then " << run_with;
    }
  }
  UseSgemmKernel(default_kernel);
}

TEST(SgemmKernelTest, PackedForANamedKernelRunsThatKernel) {
  // What the calibration times: each kernel's fused product, whichever kernel is selected. Every
  // kernel's packing gives the same sums (small integers: exact in FP32); an unknown name packs
  // for the selected kernel.
  const int m = 20, n = 70, k = 40;
  std::vector<float> a(m * k), b(k * n), bias(n), expected(m * n), got(m * n);
  for (int i = 0; i < m * k; ++i) a[i] = static_cast<float>(i % 7) - 3.f;
  for (int i = 0; i < k * n; ++i) b[i] = static_cast<float>(i % 5) - 2.f;
  for (int j = 0; j < n; ++j) bias[j] = static_cast<float>(j % 3);
  Sgemm(false, false, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, expected.data(), n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) expected[i * n + j] = std::max(0.f, expected[i * n + j] + bias[j]);
  const RowsAFn rows = [&](int64_t i0, int64_t, int64_t pc, int64_t, float*, int64_t* lda) {
    *lda = k;
    return static_cast<const float*>(a.data() + i0 * k + pc);
  };
  GemmEpilogue ep;
  ep.bias = bias.data(), ep.activation = GemmEpilogue::kRelu;
  auto names = SgemmKernels();
  names.push_back("no-such-kernel");
  for (const std::string& name : names) {
    const PackedMatrixB packed(name, false, k, n, b.data(), n);
    const std::string packed_for = name == "no-such-kernel" ? SgemmKernelName() : name;
    EXPECT_EQ(packed.nr(), packed_for == "avx512-12x32" ? 32 : 16) << name;
    std::fill(got.begin(), got.end(), -1.f);
    SgemmPackedFused(m, rows, packed, got.data(), n, ep);
    ASSERT_EQ(got, expected) << name;
  }
}

TEST(SgemmPackedTest, AColumnRangeWritesThoseColumnsAsTheWholeProductDoes) {
  // [col_begin, col_end): the columns of the whole product, bit for bit, with bias and Relu;
  // columns outside the range untouched. Ranges of whole panels (nr), across the kernels' NC
  // blocks (n past them), starting inside a block, ending past n; an empty range writes nothing.
  const int m = 13, n = 3300, k = 37;  // (NC: 3,072 columns for every kernel)
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> a(m * k), b(k * n), bias(n);
  for (auto* v : {&a, &b, &bias})
    for (float& x : *v) x = u(rng);
  const RowsAFn rows = [&](int64_t i0, int64_t, int64_t pc, int64_t, float*, int64_t* lda) {
    *lda = k;
    return static_cast<const float*>(a.data() + i0 * k + pc);
  };
  GemmEpilogue ep;
  ep.bias = bias.data(), ep.activation = GemmEpilogue::kRelu;
  for (const std::string& name : SgemmKernels()) {
    const PackedMatrixB packed(name, false, k, n, b.data(), n);
    const int64_t nr = packed.nr();
    std::vector<float> whole(m * n);
    SgemmPackedFused(m, rows, packed, whole.data(), n, ep);
    const int64_t ranges[][2] = {
        {0, nr},          {nr, 3 * nr},  {5 * nr, 40 * nr},    {3072 - 2 * nr, 3072 + 3 * nr},
        {3072, n},        {16 * nr, n},  {38 * nr, INT64_MAX}, {0, n},
        {7 * nr, 7 * nr}, {n, INT64_MAX}};
    for (const auto& r : ranges) {
      std::vector<float> got(m * n, -7.f);
      SgemmPackedFused(m, rows, packed, got.data(), n, ep, {}, r[0], r[1]);
      for (int i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const bool inside = j >= r[0] && j < r[1];
          ASSERT_EQ(got[i * n + j], inside ? whole[i * n + j] : -7.f)
              << name << " columns [" << r[0] << ", " << r[1] << ") at " << i << ", " << j;
        }
    }
  }
}

TEST(SgemmPackedTest, FewRowsOverATeamMatchOneThread) {
  // The few-row path hands groups of B's panels to the team: the same sums per column.
  const int n = 1000, k = 2048;  // ResNet-50's classifier
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> a(4 * k), b(k * n);
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng);
  const PackedMatrixB packed(false, k, n, b.data(), n);
  ThreadTeam team(3);
  for (int m = 1; m <= 4; ++m) {
    std::vector<float> one(m * n), three(m * n, 7.f);
    SgemmPacked(false, m, 1.f, a.data(), k, packed, 0.f, one.data(), n);
    {
      ParallelScope scope(&team);
      SgemmPacked(false, m, 1.f, a.data(), k, packed, 0.f, three.data(), n);
    }
    ASSERT_EQ(one, three) << m << " rows";
    double worst = 0;
    for (int j = 0; j < n; ++j) {
      double want = 0;
      for (int p = 0; p < k; ++p) want += double(a[(m - 1) * k + p]) * b[p * n + j];
      worst = std::max(worst, std::abs(want - one[(m - 1) * n + j]));
    }
    EXPECT_LT(worst, 1e-3) << m << " rows";
  }
}

TEST(SgemmPackedTest, FusedRowBlocksOverATeamMatchOneThreadAndFloat64) {
  // A MatMul by a weight with its bias and residual: the rows split into blocks of whole tiles
  // (one thread) or into a multiple of the team's threads (three); every row count around the
  // tile and block edges gives the same sums either way, within float64's.
  const int n = 200, k = 300;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int max_m = 1100;
  std::vector<float> a(static_cast<size_t>(max_m) * k), b(k * n), bias(n),
      residual(static_cast<size_t>(max_m) * n);
  for (auto* v : {&a, &b, &bias, &residual})
    for (float& x : *v) x = u(rng);
  const PackedMatrixB packed(false, k, n, b.data(), n);
  GemmEpilogue ep;
  ep.bias = bias.data(), ep.residual = residual.data(), ep.ld_residual = n;
  const RowsAFn rows = [&](int64_t i0, int64_t, int64_t p0, int64_t, float*, int64_t* lda) {
    *lda = k;
    return static_cast<const float*>(a.data() + i0 * k + p0);
  };
  ThreadTeam team(3);
  for (int m : {1, 11, 12, 13, 128, 143, 144, 145, 300, 1024, max_m}) {
    std::vector<float> one(static_cast<size_t>(m) * n), three(one.size(), 7.f);
    SgemmPackedFused(m, rows, packed, one.data(), n, ep);
    {
      ParallelScope scope(&team);
      SgemmPackedFused(m, rows, packed, three.data(), n, ep);
    }
    ASSERT_EQ(one, three) << m << " rows";
    double worst = 0;
    for (int i = 0; i < m; i += std::max(1, m / 7))
      for (int j = 0; j < n; ++j) {
        double want = double(bias[j]) + residual[size_t(i) * n + j];
        for (int p = 0; p < k; ++p) want += double(a[size_t(i) * k + p]) * b[p * n + j];
        worst = std::max(worst, std::abs(want - one[size_t(i) * n + j]));
      }
    EXPECT_LT(worst, 1e-3) << m << " rows";
  }
}

}  // namespace
}  // namespace nereid::kernels

// The attention head's products (cpu/attention.h) against float64: a head's shapes and ragged
// ones (columns and rows not whole vectors or row groups). Where the CPU has no AVX-512 they
// answer false and the caller uses Sgemm.
namespace nereid::kernels {
namespace {

TEST(AttentionProducts, MatchFloat64) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto [rows, k, n] : {std::tuple{128, 32, 128}, {128, 128, 32}, {7, 3, 70}, {1, 5, 17}}) {
    std::vector<float> x(rows * k), b(k * n), y(rows * n, -7.f);
    for (float& v : x) v = u(rng);
    for (float& v : b) v = u(rng);
    if (!AttentionHeadProduct(x.data(), rows, k, b.data(), n, y.data()))
      GTEST_SKIP() << "no AVX-512";
    std::vector<float> y2(rows * n, -7.f);  // a second call: the same bits (no state carried)
    ASSERT_TRUE(AttentionHeadProduct(x.data(), rows, k, b.data(), n, y2.data()));
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < n; ++j) {
        double want = 0;
        for (int e = 0; e < k; ++e) want += double(x[i * k + e]) * b[e * n + j];
        ASSERT_NEAR(y[i * n + j], want, 1e-5) << rows << "x" << k << "x" << n;
        ASSERT_EQ(y[i * n + j], y2[i * n + j]);
      }
  }
}

}  // namespace
}  // namespace nereid::kernels
