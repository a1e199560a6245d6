// Request tracing (Triton's trace extension): which requests are traced (rate, count, level per
// model, changed at run time through GET/POST v2[/models/m]/trace/setting), the timestamps a traced
// request collects as it moves, and where they go: Triton's JSON trace file, or OpenTelemetry spans
// exported over OTLP/HTTP (otlp_exporter.h) with the caller's W3C traceparent as their parent.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/data_type.h"
#include "common/status.h"

namespace nereid::trace {

enum class Mode { kTriton, kOpenTelemetry };
// Trace levels, a bit set (none: OFF).
inline constexpr uint32_t kTimestamps = 1, kTensors = 2;

class OtlpExporter;
struct Setting;

// The values of one trace setting (global, or a model's), and which of them a model set itself.
struct SettingValues {
  uint32_t level = 0, rate = 1000, log_frequency = 0;
  int32_t count = -1;
};
struct SettingSpecified {
  bool level = false, rate = false, count = false, log_frequency = false;
  bool any() const { return level || rate || count || log_frequency; }
  bool all() const { return level && rate && count && log_frequency; }
};

// A W3C trace context (the "traceparent" header or gRPC metadata).
struct SpanContext {
  std::array<uint8_t, 16> trace_id{};
  std::array<uint8_t, 8> span_id{};
  bool sampled = false;
  bool valid() const;
};
// "00-<32 hex>-<16 hex>-<2 hex>"; nullopt for anything else (a malformed header is ignored).
std::optional<SpanContext> ParseTraceparent(std::string_view header);

// One traced request: the model it ran on (or an ensemble step's, a child of the ensemble's), the
// named timestamps (steady clock, ns) recorded as it moved, and its span ids. Shared by the
// request and the frontend that answers it; written out when the last holder lets go, after every
// child (a child keeps its root alive).
class Trace : public std::enable_shared_from_this<Trace> {
 public:
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  uint64_t id() const { return id_; }
  // 'name': a string literal (kept as a pointer, not copied).
  void Record(const char* name, uint64_t steady_ns);
  // The model side's timestamps, from the request's own (0: not reached), once: REQUEST_START,
  // QUEUE_START, COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END, REQUEST_END.
  void EndRequest(uint64_t received, uint64_t queued, uint64_t compute_start,
                  uint64_t compute_input_end, uint64_t compute_output_start, uint64_t compute_end,
                  uint64_t end);
  void SetRequestId(std::string id);
  // The TENSORS level: a tensor's contents (host memory) as Triton's trace file shows them, under
  // 'activity' (TENSOR_QUEUE_INPUT, TENSOR_BACKEND_OUTPUT); at most kMaxTensorElements elements.
  bool tensors() const { return (level_ & kTensors) != 0; }
  void RecordTensor(const char* activity, const std::string& name, DataType type,
                    const std::vector<int64_t>& shape, const uint8_t* data, size_t bytes);
  static constexpr size_t kMaxTensorElements = 65536;
  // The version the request was routed to (an ensemble step's config may say -1: newest).
  void SetVersion(int64_t version);
  // The instance that ran the request and where it runs ("openvino:CPU", "gpu:0"): an ensemble
  // step's trace says where that step ran.
  void SetPlacement(const std::string& instance, const std::string& device);
  // A step of this (ensemble) request on 'model'.
  std::shared_ptr<Trace> Child(const std::string& model, int64_t version);
  // The W3C header naming this trace's model span, for a call this request makes.
  std::string Traceparent() const;

 private:
  friend class TraceManager;
  friend struct Setting;
  Trace() = default;
  void AppendTritonJson(std::string* out) const;
  void AppendSpans(std::vector<std::string>* spans) const;

  uint64_t id_ = 0, parent_id_ = 0;
  std::string model_;
  int64_t version_ = -1;
  std::string request_id_;
  std::string instance_, device_;         // SetPlacement
  SpanContext context_;                   // trace id; span_id: the frontend's span
  std::array<uint8_t, 8> model_span_{};   // this request's model span
  std::array<uint8_t, 8> parent_span_{};  // the caller's span (root) or the ensemble's model span
  bool has_parent_span_ = false;
  bool ended_ = false;
  uint32_t level_ = 0;
  std::string tensors_json_;  // TENSORS level entries
  mutable std::mutex mu_;
  std::vector<std::pair<std::string_view, uint64_t>> timestamps_;  // names: literals
  std::string children_json_;                // finished children (Triton mode)
  std::vector<std::string> children_spans_;  // finished children (OpenTelemetry mode)
  std::shared_ptr<Trace> root_;              // a child's root (null at the root)
  std::shared_ptr<Setting> setting_;         // where it is written
};

// --trace-config values, Triton's syntax: "[mode,]key=value".
struct TraceConfig {
  Mode mode = Mode::kTriton;
  uint32_t level = 0;
  uint32_t rate = 1000;
  int32_t count = -1;
  uint32_t log_frequency = 0;
  std::string file;
  std::string url = "http://localhost:4318/v1/traces";
  std::vector<std::pair<std::string, std::string>> resource;  // resource attributes
  uint32_t bsp_max_queue_size = 2048, bsp_schedule_delay_ms = 5000, bsp_max_export_batch_size = 512;
};
StatusOr<TraceConfig> ParseTraceConfig(const std::vector<std::string>& values);

// The settings one model (or the server) has: Triton's trace setting keys, values as strings.
using SettingMap = std::vector<std::pair<std::string, std::vector<std::string>>>;
// An update: a key to a new value, or to null (nullopt: back to the global, or start-up, value).
using SettingUpdate = std::vector<std::pair<std::string, std::optional<std::vector<std::string>>>>;

class TraceManager {
 public:
  // Refuses an OpenTelemetry URL it cannot send to.
  static StatusOr<std::shared_ptr<TraceManager>> Create(TraceConfig config);
  TraceManager(TraceConfig config, std::shared_ptr<OtlpExporter> exporter);
  ~TraceManager();  // writes what is still buffered
  TraceManager(const TraceManager&) = delete;
  TraceManager& operator=(const TraceManager&) = delete;

  // A trace for a request to 'model', or null when it is not sampled. A request that carries a
  // trace context is traced whatever the rate and count (OpenTelemetry mode).
  std::shared_ptr<Trace> Start(const std::string& model, int64_t version,
                               const std::optional<SpanContext>& caller);
  // Model "" is the global setting.
  SettingMap Get(const std::string& model) const;
  StatusOr<SettingMap> Update(const std::string& model, const SettingUpdate& update);
  Mode mode() const { return config_.mode; }
  // At shutdown: the OpenTelemetry exporter sends what it holds until 'deadline' (the exit
  // timeout's, at most 2 s away), then its thread ends.
  void Stop(std::chrono::steady_clock::time_point deadline);

 private:
  std::shared_ptr<Setting> Make(const SettingValues& v, const SettingSpecified& s) const;
  Status Rebuild(const std::string& model, const SettingUpdate& update);
  std::shared_ptr<Setting> For(const std::string& model) const;
  SettingMap Render(const Setting& s) const;

  TraceConfig config_;
  SettingValues startup_;  // the global setting's values before any update (config_'s)
  std::shared_ptr<OtlpExporter> exporter_;
  std::shared_ptr<struct TraceFile> file_;
  mutable std::mutex mu_;
  std::shared_ptr<Setting> global_;
  std::map<std::string, std::shared_ptr<Setting>> models_;
};

// Wall-clock nanoseconds for a steady-clock time (OpenTelemetry's timestamps are wall clock).
uint64_t WallNs(uint64_t steady_ns);
std::string Hex(const uint8_t* bytes, size_t n);

}  // namespace nereid::trace
