// AdaptiveDelay: Nereid's latency-goal batching (an opt-in extension; see docs/scheduling.md).
// Given a latency goal it chooses the queue delay itself from what it measures: the execution time
// per batch size, the arrival rate, and the latency requests actually see, which steers a budget
// factor so the chosen percentile stays under the goal as load changes. Thread-safe.
// Its objective is throughput (wait only where a larger batch raises the instance's rows per
// second) or energy (wait wherever the measured joules per row of the larger batch are lower, as
// long as the goal allows: on a device whose floor power is paid anyway, idling costs nothing and
// every batch saved saves its fixed cost).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "scheduler/energy_model.h"

namespace nereid {

enum class BatchingObjective { kThroughput, kEnergy };

class AdaptiveDelay {
 public:
  // 'energy': the measured joules per row by batch size (the energy objective; null: the
  // execution time per row stands in for it, as on a device drawing constant power while busy).
  AdaptiveDelay(uint64_t goal_ns, double percentile, int64_t max_batch_size,
                BatchingObjective objective = BatchingObjective::kThroughput,
                const BatchEnergyModel* energy = nullptr);

  void OnArrival(uint64_t now_ns);
  void OnExecution(int64_t batch_size, uint64_t exec_ns);
  void OnCompletion(uint64_t latency_ns);
  // After a wait ended: did the batch grow while it waited? Waits that gather nobody (closed-loop
  // clients all waiting on us, or the load went away) make the next ones rarer: after n fruitless
  // waits in a row, the next 2^n - 1 batches go without waiting.
  void OnWaitOutcome(bool grew);
  void OnDispatch();

  // Queue delay, counted from the oldest pending request (enqueued at 'oldest_ns'), for a pending
  // batch of 'pending' rows. Zero unless the next request is expected within half an execution;
  // then the time left in the latency budget after executing one more row, cut short when the next
  // arrival is overdue (closed-loop clients all waiting, or the load went away).
  uint64_t DelayNs(int64_t pending, uint64_t oldest_ns) const;

  // Introspection for tests, logs and the stats endpoint.
  double budget_factor() const;
  uint64_t ExecEstimateNs(int64_t batch_size) const;
  double ArrivalsPerSecond() const;
  uint64_t goal_ns() const { return goal_ns_; }
  BatchingObjective objective() const { return objective_; }

 private:
  uint64_t ExecEstimateLocked(int64_t batch_size) const;
  // Joules per row of a batch of 'rows' (or its stand-in); < 0 when not measured.
  double CostPerRowLocked(int64_t rows) const;
  void AdjustLocked();

  const uint64_t goal_ns_;
  const BatchingObjective objective_;
  const BatchEnergyModel* energy_;
  const double percentile_;
  const int64_t max_batch_size_;
  mutable std::mutex mu_;
  std::vector<double> exec_ns_;  // EWMA per batch size; 0 = never measured
  double interarrival_ns_ = 0;   // EWMA
  uint64_t last_arrival_ns_ = 0;
  double factor_ = 0.5;          // share of the goal the queue delay + execution may use
  uint32_t backoff_ = 0;         // batches to skip waiting after the last fruitless wait
  uint32_t skip_ = 0;            // batches still to send without waiting
  std::deque<uint64_t> window_;  // recent latencies
};

}  // namespace nereid
