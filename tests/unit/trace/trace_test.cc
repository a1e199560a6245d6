// Tracing (src/trace): the W3C header, --trace-config, the setting rules of Triton's trace
// extension, sampling by rate and count, and the trace file.
#include "trace/trace.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_repository.h"

namespace nereid::trace {
namespace {

std::string Value(const SettingMap& m, const std::string& key) {
  for (const auto& [k, v] : m)
    if (k == key) return v.empty() ? "" : v.front();
  return "<missing>";
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  return text.str();
}

std::shared_ptr<TraceManager> Manager(TraceConfig c) {
  auto m = TraceManager::Create(std::move(c));
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? *m : nullptr;
}

TEST(TraceTest, TraceparentAcceptsOnlyTheW3CForm) {
  auto c = ParseTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(Hex(c->trace_id.data(), 16), "0af7651916cd43dd8448eb211c80319c");
  EXPECT_EQ(Hex(c->span_id.data(), 8), "b7ad6b7169203331");
  EXPECT_TRUE(c->sampled);
  for (const char* bad : {"", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
                          "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                          "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
                          "00-00000000000000000000000000000000-b7ad6b7169203331-01",
                          "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
                          "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333z-01"})
    EXPECT_FALSE(ParseTraceparent(bad).has_value()) << bad;
}

TEST(TraceTest, ConfigReadsTritonsSyntaxAndRefusesTheRest) {
  auto c = ParseTraceConfig({"triton,file=t.json", "level=TIMESTAMPS", "level=TENSORS", "rate=6",
                             "count=10", "triton,log-frequency=2"});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->file, "t.json");
  EXPECT_EQ(c->level, kTimestamps | kTensors);
  EXPECT_EQ(c->rate, 6u);
  EXPECT_EQ(c->count, 10);
  EXPECT_EQ(c->log_frequency, 2u);
  auto otel = ParseTraceConfig({"mode=opentelemetry", "opentelemetry,url=http://c:4318/v1/traces",
                                "opentelemetry,resource=service.name=x=y"});
  ASSERT_TRUE(otel.ok());
  EXPECT_EQ(otel->mode, Mode::kOpenTelemetry);
  ASSERT_EQ(otel->resource.size(), 1u);
  EXPECT_EQ(otel->resource[0].second, "x=y");
  for (const char* bad : {"rate", "rate=-1", "rate=4294967296", "count=-2", "level=LOUD",
                          "mode=zipkin", "jaeger,url=x", "triton,url=x", "file=x",
                          "opentelemetry,resource=novalue", "opentelemetry,bsp_max_queue_size=1"})
    EXPECT_FALSE(ParseTraceConfig({bad}).ok()) << bad;
  EXPECT_FALSE(TraceManager::Create(
                   *ParseTraceConfig({"mode=opentelemetry", "opentelemetry,url=https://c/x"}))
                   .ok());
}

TEST(TraceTest, ModelSettingsFollowTheGlobalOnesTheyDoNotSet) {
  TraceConfig c;
  c.file = "unused.json";
  c.level = kTimestamps;
  c.rate = 1;
  auto m = Manager(c);
  ASSERT_TRUE(m->Update("m", {{"trace_rate", std::vector<std::string>{"12"}}}).ok());
  ASSERT_TRUE(m->Update("", {{"trace_rate", std::vector<std::string>{"56"}},
                             {"trace_count", std::vector<std::string>{"78"}}})
                  .ok());
  EXPECT_EQ(Value(m->Get("m"), "trace_rate"), "12");
  EXPECT_EQ(Value(m->Get("m"), "trace_count"), "78");
  EXPECT_EQ(Value(m->Get("other"), "trace_rate"), "56");
  ASSERT_TRUE(m->Update("", {{"trace_count", std::nullopt}}).ok());
  EXPECT_EQ(Value(m->Get("m"), "trace_count"), "-1");
  ASSERT_TRUE(m->Update("m", {{"trace_rate", std::nullopt}}).ok());
  EXPECT_EQ(Value(m->Get("m"), "trace_rate"), "56");
  auto file = m->Update("m", {{"trace_file", std::vector<std::string>{"elsewhere"}}});
  EXPECT_FALSE(file.ok());
  EXPECT_EQ(file.status().message(),
            "trace file location can not be updated through network protocol");
  auto zero = m->Update("", {{"trace_rate", std::vector<std::string>{"0"}}});
  EXPECT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("sample rate must be non-zero"), std::string::npos);
}

TEST(TraceTest, RateAndCountPickWhichRequestsAreTraced) {
  testing::TempRepository dir;  // a directory of its own, removed at the end
  TraceConfig c;
  c.file = (dir.root() / "t.json").string();
  c.level = kTimestamps;
  c.rate = 3;
  c.count = 2;
  {
    auto m = Manager(c);
    std::vector<int> traced;
    for (int i = 1; i <= 12; ++i) {
      auto t = m->Start("m", 1, std::nullopt);
      if (t) {
        traced.push_back(i);
        t->EndRequest(10, 20, 30, 0, 0, 40, 50);
      }
    }
    EXPECT_EQ(traced, (std::vector<int>{3, 6}));  // every third, two in all
    EXPECT_EQ(Value(m->Get("m"), "trace_count"), "0");
    // A context from a caller does not force a trace in Triton's mode.
    SpanContext caller;
    caller.trace_id[0] = caller.span_id[0] = 1;
    EXPECT_EQ(m->Start("m", 1, caller), nullptr);
  }
  // The count reached: both traces in t.json.0, as one JSON array.
  const std::string text = ReadFile(dir.root() / "t.json.0");
  EXPECT_EQ(text.front(), '[');
  EXPECT_NE(text.find("\"name\":\"COMPUTE_END\",\"ns\":40"), std::string::npos);
  EXPECT_EQ(text.find("COMPUTE_INPUT_END"), std::string::npos);  // 0: not recorded
}

TEST(TraceTest, TensorsLevelWritesTensorContentsAsTritonDoes) {
  testing::TempRepository dir;  // a directory of its own, removed at the end
  TraceConfig c;
  c.file = (dir.root() / "t.json").string();
  c.level = kTimestamps | kTensors;
  c.rate = 1;
  {
    auto m = Manager(c);
    auto t = m->Start("m", 1, std::nullopt);
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(t->tensors());
    const float f[3] = {1.5f, -2.0f, 3.0f};
    t->RecordTensor("TENSOR_QUEUE_INPUT", "X", DataType::kFp32, {1, 3},
                    reinterpret_cast<const uint8_t*>(f), sizeof f);
    // BYTES: length-prefixed; a length running past the end stops the listing.
    const uint8_t b[] = {2, 0, 0, 0, 'h', 'i', 1, 0, 0, 0, '"', 99, 0, 0, 0};
    t->RecordTensor("TENSOR_BACKEND_OUTPUT", "S", DataType::kBytes, {2}, b, sizeof b);
  }
  const std::string text = ReadFile(dir.root() / "t.json");
  EXPECT_NE(text.find("\"activity\":\"TENSOR_QUEUE_INPUT\",\"tensor\":{\"name\":\"X\","
                      "\"data\":\"1.5,-2,3\",\"shape\":\"1,3\",\"dtype\":\"FP32\"}"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\"data\":\"hi,\\\"\""), std::string::npos) << text;
}

TEST(TraceTest, OpenTelemetryTracesEveryRequestWithAContextEvenAtRateZero) {
  TraceConfig c;
  c.mode = Mode::kOpenTelemetry;
  c.url = "http://127.0.0.1:9/v1/traces";  // discard: nothing listens
  c.level = kTimestamps;
  c.rate = 0;
  c.bsp_schedule_delay_ms = 3'600'000;
  auto m = Manager(c);
  EXPECT_EQ(m->Start("m", 1, std::nullopt), nullptr);
  auto caller = ParseTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  auto t = m->Start("m", 1, caller);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Traceparent().substr(0, 36), "00-0af7651916cd43dd8448eb211c80319c-");
  auto child = t->Child("step", 2);
  EXPECT_NE(child->id(), t->id());
  EXPECT_EQ(child->Traceparent().substr(0, 36), t->Traceparent().substr(0, 36));
}

}  // namespace
}  // namespace nereid::trace
