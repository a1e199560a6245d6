// What sees a model version's work, as two kinds of observer attached to the model before it
// serves, with no change to what reports to them:
//   ExecutionObserver: every batch an instance executes (its device, when it ran, how many rows).
//   RequestObserver:   every request's end (success, a cache hit, or a failure and why, with the
//                      request's own timestamps) and, just before it goes, its final response.
// Statistics are one observer of both (StatsObserver, the only writer of ModelStats); energy
// attribution and pricing, the precision variants' feedback and the end of a request's trace are
// others. Instances, the request pipeline and the schedulers report; none of them counts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "metrics/model_stats.h"
#include "nereid/backend.h"
#include "request/inference_request.h"

namespace nereid {

struct ExecutionRecord {
  const std::string* instance = nullptr;  // the instance's name (valid during OnExecution only)
  NereidInstanceKind kind = NEREID_INSTANCE_CPU;
  int32_t device = 0;
  uint64_t start_ns = 0;  // the backend's Execute call began (SteadyNowNs)
  uint64_t end_ns = 0;  // it returned, or the batch's first request completed, whichever came first
  int64_t rows = 0;     // the requests' batch sizes summed
  size_t requests = 0;
  uint64_t device_busy_ns = 0;  // the backend's device time for the batch; 0: not reported

  // How long the batch held its device: the backend's device time where it reported one shorter
  // than the host's interval (which also holds staging, launch and waiting on other work), else
  // that interval.
  uint64_t BusyNs() const {
    const uint64_t host = end_ns > start_ns ? end_ns - start_ns : 0;
    return device_busy_ns > 0 && device_busy_ns < host ? device_busy_ns : host;
  }
};

class ExecutionObserver {
 public:
  virtual ~ExecutionObserver() = default;
  // Once per executed batch, on whichever thread ends it first (the instance's, or a backend's
  // completing a request before Execute returned). Must not block.
  virtual void OnExecution(const ExecutionRecord& record) = 0;
};

// The execution observers of one model version, in the order attached: what its instances (and
// an ensemble, for its own executions) report to. Attach before the model serves, or while
// nothing executes (no lock is taken).
class ExecutionObservers final : public ExecutionObserver {
 public:
  void Add(std::shared_ptr<ExecutionObserver> observer) {
    observers_.push_back(std::move(observer));
  }
  void OnExecution(const ExecutionRecord& record) override {
    for (const auto& o : observers_) o->OnExecution(record);
  }

 private:
  std::vector<std::shared_ptr<ExecutionObserver>> observers_;
};

// How one request ended. Its timestamps are the request's own (request->times: received, queued,
// compute start, the backend's reported window, compute end), recorded once as it moved.
struct RequestRecord {
  enum class End : uint8_t { kSuccess, kCacheHit, kFailure };
  End end = End::kSuccess;
  FailureReason reason = FailureReason::kOther;  // kFailure's
  const InferenceRequest* request = nullptr;     // valid during the call
  uint64_t end_ns = 0;                           // when it ended (SteadyNowNs)
  uint64_t cache_lookup_ns = 0;                  // kCacheHit: the lookup's time
  const ExecutionRecord* execution = nullptr;    // the batch it ran in, when it ran in one

  // Received to end (0 for a request that never had a receive time).
  uint64_t request_ns() const {
    const uint64_t received = request->times.received_ns;
    return received != 0 && end_ns > received ? end_ns - received : 0;
  }
};

class RequestObserver {
 public:
  virtual ~RequestObserver() = default;
  // Once per request that ends (a sequence batcher's padding rows are no requests), on whichever
  // thread ends it, before its last response goes. Must not block.
  virtual void OnRequestEnd(const RequestRecord& record) = 0;
  // The request's final successful response, just before it goes: an observer may add to it (the
  // energy a request asked for). 'record.end' is kSuccess and 'end_ns' now.
  virtual void OnFinalResponse(const RequestRecord& record, InferenceResponse& response) {}
  // A request that missed the response cache had its response stored: the lookup and the insert
  // took 'ns' together.
  virtual void OnCacheMiss(uint64_t ns) {}
};

// Tells 'observer' (none: nobody listens) how 'request' ended at 'end_ns'.
inline void ReportEnd(RequestObserver* observer, RequestRecord::End end, FailureReason reason,
                      const InferenceRequest& request, uint64_t end_ns,
                      const ExecutionRecord* execution = nullptr) {
  if (observer == nullptr) return;
  RequestRecord record;
  record.end = end;
  record.reason = reason;
  record.request = &request;
  record.end_ns = end_ns;
  record.execution = execution;
  observer->OnRequestEnd(record);
}

// The request observers of one model version, in the order attached: what instances, the request
// pipeline and schedulers report to. Attach before the model serves (no lock is taken).
class RequestObservers final : public RequestObserver {
 public:
  void Add(std::shared_ptr<RequestObserver> observer) { observers_.push_back(std::move(observer)); }
  void OnRequestEnd(const RequestRecord& record) override {
    for (const auto& o : observers_) o->OnRequestEnd(record);
  }
  void OnFinalResponse(const RequestRecord& record, InferenceResponse& response) override {
    for (const auto& o : observers_) o->OnFinalResponse(record, response);
  }
  void OnCacheMiss(uint64_t ns) override {
    for (const auto& o : observers_) o->OnCacheMiss(ns);
  }

 private:
  std::vector<std::shared_ptr<RequestObserver>> observers_;
};

// The statistics extension and the Prometheus metrics: per batch, the execution count and
// per-batch-size compute times; per request, success (with its queue and compute split), cache
// hit or failure. The one place ModelStats is written.
class StatsObserver final : public ExecutionObserver, public RequestObserver {
 public:
  explicit StatsObserver(ModelStats* stats) : stats_(stats) {}
  void OnExecution(const ExecutionRecord& r) override;
  void OnRequestEnd(const RequestRecord& record) override;
  void OnCacheMiss(uint64_t ns) override { stats_->cache_miss.Add(ns); }

 private:
  ModelStats* stats_;
};

// Ends a traced request's trace (REQUEST_START ... REQUEST_END) as the request ends, before its
// last response goes.
class TraceEndObserver final : public RequestObserver {
 public:
  void OnRequestEnd(const RequestRecord& record) override;
};

}  // namespace nereid
