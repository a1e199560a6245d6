// ModelStats: per model version counters behind the statistics extension and the Prometheus
// metrics. Updated from instance threads with relaxed atomics only (no locks, no allocation), read
// on demand.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace nereid {

struct DurationStat {
  std::atomic<uint64_t> count{0};
  std::atomic<uint64_t> ns{0};
  void Add(uint64_t duration_ns, uint64_t n = 1) {
    count.fetch_add(n, std::memory_order_relaxed);
    ns.fetch_add(duration_ns, std::memory_order_relaxed);
  }
};

// Request latency histogram with fixed bucket bounds (microseconds), cumulative on export.
class LatencyHistogram {
 public:
  static constexpr std::array<uint64_t, 18> kBoundsUs = {
      50,    100,    250,    500,    1000,    2000,    5000,    10000,    20000,
      50000, 100000, 200000, 500000, 1000000, 2000000, 5000000, 10000000, 30000000};
  void Observe(uint64_t us);
  // Per-bucket counts (not cumulative); the last entry is the +Inf overflow.
  std::array<uint64_t, kBoundsUs.size() + 1> Counts() const;
  uint64_t sum_us() const { return sum_us_.load(std::memory_order_relaxed); }

 private:
  std::array<std::atomic<uint64_t>, kBoundsUs.size() + 1> counts_{};
  std::atomic<uint64_t> sum_us_{0};
};

enum class FailureReason { kRejected, kCanceled, kBackend, kOther };

class ModelStats {
 public:
  explicit ModelStats(int64_t max_batch_size);

  // One backend execution of 'batch_size' rows made of 'requests' requests.
  void RecordExecution(int64_t batch_size, uint64_t input_ns, uint64_t infer_ns,
                       uint64_t output_ns);
  // One request finished successfully: whole duration (received to response), queue time, and its
  // share of the execution it ran in.
  void RecordSuccess(int64_t batch_size, uint64_t request_ns, uint64_t queue_ns, uint64_t input_ns,
                     uint64_t infer_ns, uint64_t output_ns, uint64_t now_ms);
  void RecordFailure(FailureReason reason, uint64_t request_ns);
  // A request answered from the response cache: a success (request time, no queue or compute
  // time, no inference counted) and a hit of 'lookup_ns'.
  void RecordCacheHit(uint64_t request_ns, uint64_t lookup_ns, uint64_t now_ms);

  DurationStat success, fail, queue, compute_input, compute_infer, compute_output;
  // The response cache's hits (lookup time) and misses (lookup + insert time).
  DurationStat cache_hit, cache_miss;
  bool cache_enabled = false;  // the model caches responses (its nv_cache_* series exist)
  std::atomic<uint64_t> inference_count{0};
  std::atomic<uint64_t> execution_count{0};
  std::atomic<uint64_t> last_inference_ms{0};
  std::array<std::atomic<uint64_t>, 4> failures{};  // by FailureReason
  LatencyHistogram latency;

  struct BatchStat {
    DurationStat compute_input, compute_infer, compute_output;
  };
  // Visits the batch sizes that have executed, ascending.
  void ForEachBatch(const std::function<void(int64_t, const BatchStat&)>& visit) const;

  // Batch sizes up to this have a preallocated, lock-free slot; larger ones (a config may allow
  // billions) are created on first use under a lock.
  static constexpr int64_t kDirectBatchSlots = 4096;

 private:
  BatchStat& Batch(int64_t batch_size);

  std::vector<std::unique_ptr<BatchStat>> batch_;  // index = batch size
  mutable std::mutex large_mu_;
  std::map<int64_t, std::unique_ptr<BatchStat>> large_batch_;
};

}  // namespace nereid
