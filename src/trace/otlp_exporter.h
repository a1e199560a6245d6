// OtlpExporter: OpenTelemetry's batch span processor and OTLP/HTTP exporter, for the spans of
// traced requests (trace.h). Spans (each an encoded opentelemetry.proto.trace.v1.Span) wait in a
// bounded queue; a thread sends them as one ExportTraceServiceRequest (application/x-protobuf,
// POST to the configured URL) when bsp_max_export_batch_size are waiting or bsp_schedule_delay has
// passed, and whatever is left when the server stops, within the exit deadline. A full queue drops
// spans (counted, logged); an unreachable receiver costs the exporter's thread a bounded wait,
// never a request, and the server's exit at most the time left before its deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace nereid::trace {

struct TraceConfig;

class OtlpExporter {
 public:
  // Refuses a URL other than http://host[:port][/path] (no TLS here).
  static StatusOr<std::shared_ptr<OtlpExporter>> Create(const TraceConfig& config);
  ~OtlpExporter();  // Stop() with a 2 s budget, unless Stop was called
  // Sends what is queued until 'deadline' (at most 2 s from now), drops the rest, and joins the
  // thread: a receiver that accepts and never answers, or a queue of many batches, cannot hold
  // the server's exit past it. Idempotent.
  void Stop(std::chrono::steady_clock::time_point deadline);
  OtlpExporter(const OtlpExporter&) = delete;
  OtlpExporter& operator=(const OtlpExporter&) = delete;

  void Enqueue(std::vector<std::string> spans);
  uint64_t dropped() const;
  uint64_t exported() const;

 private:
  OtlpExporter() = default;
  void Run();
  // One request, for at most 'budget' and never past the stop deadline once Stop is called.
  Status Post(const std::string& body, std::chrono::milliseconds budget);
  bool PastStopDeadline() const;
  std::string Request(const std::vector<std::string>& spans) const;

  std::string host_, port_, target_;
  std::string resource_;  // the encoded Resource message
  size_t max_queue_ = 2048, max_batch_ = 512;
  uint64_t delay_ms_ = 5000;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::string> queue_;
  bool stop_ = false;
  // Stop's deadline, in steady-clock ns (0: not stopping); read by Post without the lock.
  std::atomic<int64_t> stop_deadline_ns_{0};
  uint64_t dropped_ = 0, exported_ = 0, failures_ = 0;
  std::thread thread_;
};

}  // namespace nereid::trace
