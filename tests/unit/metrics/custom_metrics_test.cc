// CustomMetrics (src/metrics/custom_metrics.h): the registry behind backends' custom metrics.
// Each test uses family names of its own: the registry is process-wide.
#include "metrics/custom_metrics.h"

#include <gtest/gtest.h>

#include <limits>

namespace nereid {
namespace {

std::string Render() {
  std::ostringstream out;
  CustomMetrics::Get().Render(out);
  return out.str();
}

TEST(CustomMetrics, CounterGaugeAndHistogramRender) {
  auto& r = CustomMetrics::Get();
  auto counter = r.NewFamily(MetricKind::kCounter, "t_render_requests", "Requests\nseen");
  ASSERT_TRUE(counter.ok());
  auto c = r.NewMetric(**counter, {{"b", "2"}, {"a", "x\"y\\z"}}, std::nullopt);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(r.Increment(**c, 3).ok());
  auto hist = r.NewFamily(MetricKind::kHistogram, "t_render_latency", "Latency");
  ASSERT_TRUE(hist.ok());
  auto h = r.NewMetric(**hist, {}, std::vector<double>{0.1, 1, 2.5});
  ASSERT_TRUE(h.ok());
  for (double v : {0.05, 0.1, 1.5, 6.0}) ASSERT_TRUE(r.Observe(**h, v).ok());
  const std::string text = Render();
  EXPECT_NE(text.find("# HELP t_render_requests Requests\\nseen\n# TYPE t_render_requests counter\n"
                      "t_render_requests{a=\"x\\\"y\\\\z\",b=\"2\"} 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("t_render_latency_count 4\nt_render_latency_sum 7.65\n"
                      "t_render_latency_bucket{le=\"0.1\"} 2\n"  // le: 0.1 itself counts
                      "t_render_latency_bucket{le=\"1\"} 2\n"
                      "t_render_latency_bucket{le=\"2.5\"} 3\n"
                      "t_render_latency_bucket{le=\"+Inf\"} 4\n"),
            std::string::npos)
      << text;
  r.DeleteMetric(std::move(c).value());
  r.DeleteMetric(std::move(h).value());
  r.DeleteFamily(std::move(counter).value());
  r.DeleteFamily(std::move(hist).value());
  EXPECT_EQ(Render().find("t_render_"), std::string::npos);
}

TEST(CustomMetrics, KindsRefuseOtherOperations) {
  auto& r = CustomMetrics::Get();
  auto counter = r.NewFamily(MetricKind::kCounter, "t_kinds_c", "");
  auto gauge = r.NewFamily(MetricKind::kGauge, "t_kinds_g", "");
  auto hist = r.NewFamily(MetricKind::kHistogram, "t_kinds_h", "");
  auto c = r.NewMetric(**counter, {}, std::nullopt);
  auto g = r.NewMetric(**gauge, {}, std::nullopt);
  auto h = r.NewMetric(**hist, {}, std::vector<double>{});
  ASSERT_TRUE(c.ok() && g.ok() && h.ok());
  EXPECT_FALSE(r.Increment(**c, -1).ok());
  EXPECT_FALSE(r.Increment(**c, std::numeric_limits<double>::quiet_NaN()).ok());
  EXPECT_FALSE(r.Set(**c, 1).ok());
  EXPECT_FALSE(r.Observe(**c, 1).ok());
  EXPECT_TRUE(r.Increment(**g, -2.5).ok());
  EXPECT_TRUE(r.Set(**g, 7).ok());
  EXPECT_EQ(*r.Value(**g), 7);
  EXPECT_FALSE(r.Value(**h).ok());
  EXPECT_FALSE(r.Increment(**h, 1).ok());
  EXPECT_FALSE(r.Set(**h, 1).ok());
  EXPECT_TRUE(r.Observe(**h, 1).ok());
  EXPECT_FALSE(r.NewMetric(**hist, {{"x", "1"}}, std::nullopt).ok());  // buckets required
  EXPECT_FALSE(r.NewMetric(**hist, {{"x", "2"}}, std::vector<double>{1, 1}).ok());
  EXPECT_FALSE(r.NewMetric(**hist, {{"le", "2"}}, std::vector<double>{1}).ok());
  for (auto* m : {&c, &g, &h}) r.DeleteMetric(std::move(*m).value());
  for (auto* f : {&counter, &gauge, &hist}) r.DeleteFamily(std::move(*f).value());
}

TEST(CustomMetrics, NamesAndLabelsAreChecked) {
  auto& r = CustomMetrics::Get();
  EXPECT_FALSE(r.NewFamily(MetricKind::kGauge, "", "").ok());
  EXPECT_FALSE(r.NewFamily(MetricKind::kGauge, "9lives", "").ok());
  EXPECT_FALSE(r.NewFamily(MetricKind::kGauge, "a b", "").ok());
  EXPECT_FALSE(r.NewFamily(MetricKind::kGauge, "nv_inference_count", "").ok());
  EXPECT_FALSE(r.NewFamily(MetricKind::kGauge, std::string(300, 'a'), "").ok());
  EXPECT_FALSE(r.NewFamily(static_cast<MetricKind>(7), "t_names_kind", "").ok());
  auto f = r.NewFamily(MetricKind::kGauge, "t_names:ok_1", "");
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(r.NewMetric(**f, {{"bad-label", "x"}}, std::nullopt).ok());
  EXPECT_FALSE(r.NewMetric(**f, {{"__reserved", "x"}}, std::nullopt).ok());
  EXPECT_FALSE(r.NewMetric(**f, {{"a", "1"}, {"a", "2"}}, std::nullopt).ok());
  std::vector<std::pair<std::string, std::string>> many;
  for (int i = 0; i < 40; ++i) many.emplace_back("l" + std::to_string(i), "v");
  EXPECT_FALSE(r.NewMetric(**f, many, std::nullopt).ok());
  r.DeleteFamily(std::move(f).value());
}

TEST(CustomMetrics, OneNameOneFamilyAndLifetimes) {
  auto& r = CustomMetrics::Get();
  auto first = r.NewFamily(MetricKind::kGauge, "t_life", "first");
  auto second = r.NewFamily(MetricKind::kGauge, "t_life", "second");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_FALSE(r.NewFamily(MetricKind::kCounter, "t_life", "x").ok());  // another kind
  auto a = r.NewMetric(**first, {{"k", "v"}}, std::nullopt);
  auto b = r.NewMetric(**second, {{"k", "v"}}, std::nullopt);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(r.Set(**a, 5).ok());
  EXPECT_EQ(*r.Value(**b), 5);  // one family, one metric
  r.DeleteMetric(std::move(a).value());
  EXPECT_EQ(*r.Value(**b), 5);  // the other handle keeps it
  r.DeleteFamily(std::move(first).value());
  EXPECT_NE(Render().find("# HELP t_life first"), std::string::npos);  // still registered
  r.DeleteFamily(std::move(second).value());
  EXPECT_EQ(Render().find("t_life"), std::string::npos);
  const Status s = r.Set(**b, 1);  // its family is gone
  EXPECT_NE(s.message().find("has been deleted"), std::string::npos) << s.message();
  r.DeleteMetric(std::move(b).value());
  auto again = r.NewFamily(MetricKind::kCounter, "t_life", "a new kind once the old is gone");
  EXPECT_TRUE(again.ok());
  r.DeleteFamily(std::move(again).value());
}

}  // namespace
}  // namespace nereid
