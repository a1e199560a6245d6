// The activation kernels (cpu/elementwise.h) against float64 references: Erf over its whole range
// and its special values (every instruction-set form this CPU runs, not only the one chosen),
// Softmax over contiguous rows (the vector path) and strided ones, with rows of NaN and infinity
// answered as the scalar form answers them.
#include "cpu/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/elementwise_isa.h"

namespace nereid::kernels {
namespace {

using ErfFn = void (*)(const float*, float*, int64_t);
// Erf as dispatched, and each vector form this CPU can run.
std::vector<std::pair<std::string, ErfFn>> ErfForms() {
  std::vector<std::pair<std::string, ErfFn>> forms = {{"dispatched", Erf}};
#if defined(__x86_64__)
  if (HasAvx2Fma()) forms.emplace_back("avx2", ErfAvx2);
  if (HasAvx512F()) forms.emplace_back("avx512", ErfAvx512);
#endif
  return forms;
}

TEST(CpuErf, WithinThreeTenthsOfAMillionthOfFloat64) {
  for (const auto& [form, erf] : ErfForms()) {
    SCOPED_TRACE(form);
    std::vector<float> x;
    for (float v = -10.f; v <= 10.f; v += 1.f / 1024) x.push_back(v);
    for (float v : {1e-30f, -1e-30f, 1e-40f, 0.4999999f, 0.5f, 0.5000001f, 3.9f, 4.1f, 9.5f})
      x.push_back(v);
    std::vector<float> y(x.size());
    erf(x.data(), y.data(), static_cast<int64_t>(x.size()));
    double worst_abs = 0, worst_rel = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = std::erf(static_cast<double>(x[i]));
      const double err = std::fabs(y[i] - want);
      worst_abs = std::max(worst_abs, err);
      if (std::fabs(want) > 1e-37) worst_rel = std::max(worst_rel, err / std::fabs(want));
      ASSERT_EQ(std::signbit(y[i]), std::signbit(x[i])) << x[i];
    }
    EXPECT_LT(worst_abs, 3e-7);  // Abramowitz and Stegun's 1.5e-7 and the rounding near 1
    EXPECT_LT(worst_rel, 5e-7);  // (normal floats: a subnormal result keeps fewer bits)
  }
}

TEST(CpuErf, SpecialValuesAsTheStandardLibrary) {
  for (const auto& [form, erf] : ErfForms()) {
    SCOPED_TRACE(form);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    // (Nine, then nine ones: the specials inside a 16-lane vector, and a tail.)
    std::vector<float> x = {nan, inf, -inf, 0.f, -0.f, 1.f, -1.f, 2.f, nan};
    x.resize(18, 1.f);
    std::vector<float> y(x.size());
    erf(x.data(), y.data(), static_cast<int64_t>(x.size()));
    EXPECT_TRUE(std::isnan(y[0]));
    EXPECT_EQ(y[1], 1.f);
    EXPECT_EQ(y[2], -1.f);
    EXPECT_EQ(y[3], 0.f);
    EXPECT_TRUE(std::signbit(y[4]));
    EXPECT_TRUE(std::isnan(y[8]));
  }
}

std::vector<double> SoftmaxReference(const std::vector<float>& x, int64_t begin, int64_t n,
                                     int64_t stride) {
  double max = -INFINITY;
  for (int64_t a = 0; a < n; ++a) max = std::max<double>(max, x[begin + a * stride]);
  std::vector<double> e(n);
  double sum = 0;
  for (int64_t a = 0; a < n; ++a) sum += e[a] = std::exp(x[begin + a * stride] - max);
  for (double& v : e) v /= sum;
  return e;
}

TEST(CpuSoftmax, RowsAndStridedSlicesMatchFloat64) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-30.f, 30.f);
  for (int64_t n : {1, 7, 8, 13, 128, 129}) {
    const int64_t outer = 5, inner_strided = 3;
    std::vector<float> x(outer * n * inner_strided);
    for (float& v : x) v = dist(rng);
    std::vector<float> rows(x.size()), strided(x.size());
    Softmax(x.data(), rows.data(), outer * inner_strided, n, 1);  // contiguous rows
    Softmax(x.data(), strided.data(), outer, n, inner_strided);
    for (int64_t o = 0; o < outer * inner_strided; ++o) {
      const auto want = SoftmaxReference(x, o * n, n, 1);
      for (int64_t a = 0; a < n; ++a)
        ASSERT_NEAR(rows[o * n + a], want[a], 1e-6 * want[a] + 1e-12) << n << " " << o;
    }
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner_strided; ++in) {
        const auto want = SoftmaxReference(x, o * n * inner_strided + in, n, inner_strided);
        for (int64_t a = 0; a < n; ++a)
          ASSERT_NEAR(strided[(o * n + a) * inner_strided + in], want[a], 1e-6 * want[a] + 1e-12);
      }
  }
}

TEST(CpuSoftmax, RowsWithNanOrInfinityAnswerAsTheScalarForm) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x(3 * 16, 1.f);
  x[5] = nan;         // row 0: NaN everywhere
  x[16 + 9] = inf;    // row 1: inf - inf is NaN, as std::exp gives
  x[32 + 15] = -inf;  // row 2: e^-inf is 0, the rest share the sum
  std::vector<float> y(x.size());
  Softmax(x.data(), y.data(), 3, 16, 1);
  for (int a = 0; a < 16; ++a) EXPECT_TRUE(std::isnan(y[a]));
  EXPECT_TRUE(std::isnan(y[16 + 9]));
  EXPECT_EQ(y[32 + 15], 0.f);
  EXPECT_NEAR(y[32], 1.f / 15, 1e-7);
}

}  // namespace
}  // namespace nereid::kernels
