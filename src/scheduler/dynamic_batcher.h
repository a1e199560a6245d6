// DynamicBatcher: Triton's dynamic batching for one model version. Requests wait in a RequestQueue
// (priority levels, timeouts, queue limits); whenever an instance is idle its thread forms the next
// batch with DecideBatch and executes it. A batch is only formed when an instance can take it, so
// it keeps absorbing requests while every instance is busy. With preserve_ordering, responses are
// released in arrival order. With a latency goal (Nereid's extension) the queue delay comes from
// AdaptiveDelay instead of max_queue_delay_microseconds.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "common/clock.h"
#include "config/model_config.h"
#include "scheduler/adaptive_delay.h"
#include "scheduler/batch_policy.h"
#include "scheduler/request_queue.h"
#include "scheduler/scheduler.h"

namespace nereid {

class RequestObserver;

struct LatencyGoalConfig {
  uint64_t goal_us = 0;  // 0: off
  double percentile = 0.99;
  BatchingObjective objective = BatchingObjective::kThroughput;
};
// Reads Nereid's latency-goal parameters from a config ("nereid.latency_goal_us",
// "nereid.latency_goal_percentile", "nereid.batching_objective"); errors name the bad value.
StatusOr<LatencyGoalConfig> ReadLatencyGoal(const inference::ModelConfig& config);

class DynamicBatcher : public InstanceThreadsScheduler {
 public:
  DynamicBatcher(const inference::ModelConfig& config, std::vector<BatchExecutor*> instances,
                 RequestObserver* requests, const Clock* clock, LatencyGoalConfig goal = {},
                 const BatchEnergyModel* energy = nullptr);
  ~DynamicBatcher() override;

  Status Enqueue(std::unique_ptr<InferenceRequest>& request) override;

  // Test hook: form no batch until 'n' requests are queued at once; then the gate opens for good.
  // 0 opens it now.
  void HoldUntilQueued(size_t n);
  // Re-evaluates waiting instances now (tests that move a ManualClock call it).
  void Poke();
  const AdaptiveDelay* adaptive() const { return adaptive_.get(); }

 private:
  void Run(BatchExecutor* instance) override;
  size_t QueuedLocked() const override { return queue_.size(); }
  // Collects the batchable head of the queue; true if a further request could not join.
  bool Candidates(std::vector<BatchCandidate>* out) const;
  void CompleteRejected(std::vector<std::unique_ptr<InferenceRequest>>& rejected);
  void ReleaseInOrder(uint64_t sequence, ResponseCallback callback,
                      std::unique_ptr<InferenceResponse> r);

  const Clock* clock_;
  RequestObserver* requests_;
  BatchLimits limits_;
  std::set<std::string> ragged_;  // inputs with allow_ragged_batch
  uint64_t max_delay_ns_;
  bool preserve_ordering_;
  std::unique_ptr<AdaptiveDelay> adaptive_;

  RequestQueue queue_;
  size_t instance_count_ = 0;
  size_t busy_instances_ = 0;      // instances executing a batch
  int64_t wait_started_rows_ = 0;  // adaptive mode: pending rows when the current wait began
  size_t hold_until_ = 0;

  // preserve_ordering: responses completed out of order wait here for their predecessors.
  std::mutex order_mu_;
  uint64_t next_sequence_ = 0;  // assigned at enqueue (under mu_)
  uint64_t next_release_ = 0;
  std::map<uint64_t, std::pair<ResponseCallback, std::unique_ptr<InferenceResponse>>> held_;
};

}  // namespace nereid
