#include "metrics/model_stats.h"

#include <algorithm>

namespace nereid {

void LatencyHistogram::Observe(uint64_t us) {
  const auto it = std::lower_bound(kBoundsUs.begin(), kBoundsUs.end(), us);
  counts_[static_cast<size_t>(it - kBoundsUs.begin())].fetch_add(1, std::memory_order_relaxed);
  sum_us_.fetch_add(us, std::memory_order_relaxed);
}

std::array<uint64_t, LatencyHistogram::kBoundsUs.size() + 1> LatencyHistogram::Counts() const {
  std::array<uint64_t, kBoundsUs.size() + 1> out{};
  for (size_t i = 0; i < out.size(); ++i) out[i] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

ModelStats::ModelStats(int64_t max_batch_size) {
  const size_t slots =
      static_cast<size_t>(std::clamp<int64_t>(max_batch_size, 1, kDirectBatchSlots)) + 1;
  batch_.reserve(slots);
  for (size_t i = 0; i < slots; ++i) batch_.push_back(std::make_unique<BatchStat>());
}

ModelStats::BatchStat& ModelStats::Batch(int64_t batch_size) {
  batch_size = std::max<int64_t>(batch_size, 1);
  if (batch_size < static_cast<int64_t>(batch_.size())) return *batch_[batch_size];
  std::lock_guard<std::mutex> lock(large_mu_);
  auto& slot = large_batch_[batch_size];
  if (!slot) slot = std::make_unique<BatchStat>();
  return *slot;
}

void ModelStats::ForEachBatch(const std::function<void(int64_t, const BatchStat&)>& visit) const {
  for (size_t b = 1; b < batch_.size(); ++b)
    if (batch_[b]->compute_infer.count.load(std::memory_order_relaxed) > 0) visit(b, *batch_[b]);
  std::lock_guard<std::mutex> lock(large_mu_);
  for (const auto& [b, stat] : large_batch_) visit(b, *stat);
}

void ModelStats::RecordExecution(int64_t batch_size, uint64_t input_ns, uint64_t infer_ns,
                                 uint64_t output_ns) {
  execution_count.fetch_add(1, std::memory_order_relaxed);
  BatchStat& stat = Batch(batch_size);
  stat.compute_input.Add(input_ns);
  stat.compute_infer.Add(infer_ns);
  stat.compute_output.Add(output_ns);
}

void ModelStats::RecordSuccess(int64_t batch_size, uint64_t request_ns, uint64_t queue_ns,
                               uint64_t input_ns, uint64_t infer_ns, uint64_t output_ns,
                               uint64_t now_ms) {
  success.Add(request_ns);
  queue.Add(queue_ns);
  compute_input.Add(input_ns);
  compute_infer.Add(infer_ns);
  compute_output.Add(output_ns);
  inference_count.fetch_add(static_cast<uint64_t>(batch_size), std::memory_order_relaxed);
  last_inference_ms.store(now_ms, std::memory_order_relaxed);
  latency.Observe(request_ns / 1000);
}

void ModelStats::RecordCacheHit(uint64_t request_ns, uint64_t lookup_ns, uint64_t now_ms) {
  success.Add(request_ns);
  cache_hit.Add(lookup_ns);
  last_inference_ms.store(now_ms, std::memory_order_relaxed);
  latency.Observe(request_ns / 1000);
}

void ModelStats::RecordFailure(FailureReason reason, uint64_t request_ns) {
  fail.Add(request_ns);
  failures[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace nereid
