#include "scheduler/adaptive_delay.h"

#include <algorithm>

namespace nereid {
namespace {
constexpr double kAlpha = 0.1;   // EWMA weight of a new sample
constexpr size_t kWindow = 256;  // completions per budget adjustment
constexpr double kMinFactor = 0.05, kMaxFactor = 0.9;
constexpr double kWaitWorthFraction = 0.5;
constexpr double kMinWaitGain = 1.1;  // a wait must lift the instance's rows/s by 10%, above the
                                      // noise of execution-time estimates on a shared host
// The energy objective waits to save at least 0.5% of all a row costs, floor included. (2% stopped
// recommend_model on an H200 at 2-3 rows at 10,000 requests/s, 6% above the best fixed delay; with
// the active energy alone it waited to the goal's edge for <1% more.)
constexpr double kMinEnergyGain = 0.005;
// The next arrival is overdue after this many mean gaps: 1.5 under the throughput objective (an
// idle instance is worth more than a late row), 4 under the energy one (with Poisson arrivals a
// gap that long comes once in 55; waiting through shorter lulls is what saves the batches).
constexpr double kOverdueGaps = 1.5, kEnergyOverdueGaps = 4;
// The energy objective waits to the budget's edge wherever that saves energy, so its observed
// percentile sits at its target: it steers to 85% of the goal, leaving the response path the
// server does not time (writing the response, the client's own stack) inside the goal.
constexpr double kEnergyGoalShare = 0.85;
}  // namespace

AdaptiveDelay::AdaptiveDelay(uint64_t goal_ns, double percentile, int64_t max_batch_size,
                             BatchingObjective objective, const BatchEnergyModel* energy)
    : goal_ns_(goal_ns),
      objective_(objective),
      energy_(energy),
      percentile_(std::clamp(percentile, 0.5, 0.9999)),
      max_batch_size_(std::max<int64_t>(max_batch_size, 1)),
      exec_ns_(static_cast<size_t>(max_batch_size_) + 1, 0.0) {}

void AdaptiveDelay::OnArrival(uint64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (last_arrival_ns_ != 0 && now_ns > last_arrival_ns_) {
    const double gap = static_cast<double>(now_ns - last_arrival_ns_);
    interarrival_ns_ = interarrival_ns_ == 0 ? gap : (1 - kAlpha) * interarrival_ns_ + kAlpha * gap;
  }
  last_arrival_ns_ = now_ns;
}

void AdaptiveDelay::OnExecution(int64_t batch_size, uint64_t exec_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t b = static_cast<size_t>(std::clamp<int64_t>(batch_size, 1, max_batch_size_));
  double& e = exec_ns_[b];
  e = e == 0 ? static_cast<double>(exec_ns)
             : (1 - kAlpha) * e + kAlpha * static_cast<double>(exec_ns);
}

void AdaptiveDelay::OnCompletion(uint64_t latency_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  window_.push_back(latency_ns);
  if (window_.size() >= kWindow) AdjustLocked();
}

void AdaptiveDelay::OnWaitOutcome(bool grew) {
  std::lock_guard<std::mutex> lock(mu_);
  backoff_ = grew ? 0 : std::min<uint32_t>(backoff_ * 2 + 1, 64);
  skip_ = backoff_;
}

void AdaptiveDelay::OnDispatch() {
  std::lock_guard<std::mutex> lock(mu_);
  if (skip_ > 0) --skip_;
}

void AdaptiveDelay::AdjustLocked() {
  std::vector<uint64_t> sorted(window_.begin(), window_.end());
  window_.clear();
  const size_t index =
      std::min(sorted.size() - 1, static_cast<size_t>(percentile_ * sorted.size()));
  std::nth_element(sorted.begin(), sorted.begin() + index, sorted.end());
  const double observed = static_cast<double>(sorted[index]);
  const double goal = static_cast<double>(goal_ns_) *
                      (objective_ == BatchingObjective::kEnergy ? kEnergyGoalShare : 1.0);
  // Multiplicative decrease when over the goal, slow increase with clear headroom.
  if (observed > goal)
    factor_ = std::max(kMinFactor, factor_ * std::max(0.5, goal / observed * 0.9));
  else if (observed < 0.8 * goal)
    factor_ = std::min(kMaxFactor, factor_ * 1.05);
}

uint64_t AdaptiveDelay::ExecEstimateLocked(int64_t batch_size) const {
  const int64_t b = std::clamp<int64_t>(batch_size, 1, max_batch_size_);
  // The nearest smaller size measured, scaled linearly upwards: an upper bound wherever execution
  // grows no faster than the batch. It also caps a size's own figure, which may hold a one-off
  // (the first batch of a size can include a CUDA graph capture of milliseconds) that nothing
  // would correct if the size, priced that high, were never waited for again.
  double scaled = 0;
  for (int64_t smaller = b - 1; smaller >= 1; --smaller) {
    if (exec_ns_[smaller] > 0) {
      scaled = exec_ns_[smaller] * static_cast<double>(b) / static_cast<double>(smaller);
      break;
    }
  }
  if (exec_ns_[b] > 0)
    return static_cast<uint64_t>(scaled > 0 ? std::min(exec_ns_[b], scaled) : exec_ns_[b]);
  if (scaled > 0) return static_cast<uint64_t>(scaled);
  // Only larger sizes measured: the nearest one's figure.
  for (int64_t larger = b + 1; larger <= max_batch_size_; ++larger)
    if (exec_ns_[larger] > 0) return static_cast<uint64_t>(exec_ns_[larger]);
  return 0;
}

uint64_t AdaptiveDelay::ExecEstimateNs(int64_t batch_size) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ExecEstimateLocked(batch_size);
}

double AdaptiveDelay::CostPerRowLocked(int64_t rows) const {
  if (energy_ != nullptr) return energy_->JoulesPerRow(rows);
  const int64_t b = std::clamp<int64_t>(rows, 1, max_batch_size_);
  return exec_ns_[b] > 0 ? static_cast<double>(ExecEstimateLocked(b)) / static_cast<double>(b) : -1;
}

uint64_t AdaptiveDelay::DelayNs(int64_t pending, uint64_t oldest_ns) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending >= max_batch_size_ || interarrival_ns_ == 0 || skip_ > 0) return 0;
  const bool energy = objective_ == BatchingObjective::kEnergy;
  const double budget = factor_ * static_cast<double>(goal_ns_);
  const double next_exec = static_cast<double>(ExecEstimateLocked(pending + 1));
  const double room = budget - next_exec;
  if (room <= 0) return 0;
  // Waiting pays in throughput only when the next request is expected well within one execution;
  // otherwise the idle instance is worth more now (and with closed-loop clients nobody comes until
  // a response goes out).
  if (!energy && interarrival_ns_ > kWaitWorthFraction * next_exec) return 0;
  // Some inter-arrival gaps after the last arrival, another one is overdue.
  const double last = static_cast<double>(last_arrival_ns_);
  const double expected_next =
      last + (energy ? kEnergyOverdueGaps : kOverdueGaps) * interarrival_ns_;
  const double deadline = std::min(static_cast<double>(oldest_ns) + room, expected_next);
  if (deadline <= static_cast<double>(oldest_ns)) return 0;
  const uint64_t delay = static_cast<uint64_t>(deadline - static_cast<double>(oldest_ns));
  const double wait = deadline - last;  // the batcher asks at an arrival or when an instance frees
  if (wait <= 0) return delay;          // already due
  const int64_t rows_now = std::max<int64_t>(pending, 1);
  const int64_t rows_then =
      std::min<int64_t>(rows_now + static_cast<int64_t>(wait / interarrival_ns_), max_batch_size_);
  if (rows_then <= rows_now) return 0;
  if (energy) {
    // The rows expected by the deadline must cost less each than the pending rows now, by 0.5% of
    // all a row costs (floor included: once the fixed cost per batch is spread thin, waiting
    // longer saves too little to be worth the latency). A size not measured yet is waited for:
    // that is how it gets measured.
    const double now_cost = CostPerRowLocked(rows_now), then_cost = CostPerRowLocked(rows_then);
    if (now_cost < 0 || then_cost < 0) return delay;
    return then_cost < (1 - kMinEnergyGain) * now_cost ? delay : 0;
  }
  // Throughput: the rows expected by the deadline, executed after the wait, must complete faster
  // per unit of time than the pending rows executed now. (Where execution time grows in step with
  // the batch, as for compute-bound models at larger batches, waiting only idles the instance.)
  const double rate_now =
      static_cast<double>(rows_now) / static_cast<double>(ExecEstimateLocked(rows_now));
  const double rate_then =
      static_cast<double>(rows_then) / (wait + static_cast<double>(ExecEstimateLocked(rows_then)));
  return rate_then > kMinWaitGain * rate_now ? delay : 0;
}

double AdaptiveDelay::budget_factor() const {
  std::lock_guard<std::mutex> lock(mu_);
  return factor_;
}

double AdaptiveDelay::ArrivalsPerSecond() const {
  std::lock_guard<std::mutex> lock(mu_);
  return interarrival_ns_ > 0 ? 1e9 / interarrival_ns_ : 0;
}

}  // namespace nereid
