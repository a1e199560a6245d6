#include "scheduler/adaptive_delay.h"

#include <algorithm>

namespace nereid {
namespace {
constexpr double kAlpha = 0.1;   // EWMA weight of a new sample
constexpr size_t kWindow = 256;  // completions per budget adjustment
constexpr double kMinFactor = 0.05, kMaxFactor = 0.9;
}  // namespace

AdaptiveDelay::AdaptiveDelay(uint64_t goal_ns, double percentile, int64_t max_batch_size)
    : goal_ns_(goal_ns),
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

void AdaptiveDelay::AdjustLocked() {
  std::vector<uint64_t> sorted(window_.begin(), window_.end());
  window_.clear();
  const size_t index =
      std::min(sorted.size() - 1, static_cast<size_t>(percentile_ * sorted.size()));
  std::nth_element(sorted.begin(), sorted.begin() + index, sorted.end());
  const double observed = static_cast<double>(sorted[index]);
  const double goal = static_cast<double>(goal_ns_);
  // Multiplicative decrease when over the goal, slow increase with clear headroom.
  if (observed > goal)
    factor_ = std::max(kMinFactor, factor_ * std::max(0.5, goal / observed * 0.9));
  else if (observed < 0.8 * goal)
    factor_ = std::min(kMaxFactor, factor_ * 1.05);
}

uint64_t AdaptiveDelay::ExecEstimateLocked(int64_t batch_size) const {
  const int64_t b = std::clamp<int64_t>(batch_size, 1, max_batch_size_);
  if (exec_ns_[b] > 0) return static_cast<uint64_t>(exec_ns_[b]);
  // Nearest measured size; scale linearly upwards (conservative) and keep the value downwards.
  for (int64_t d = 1; d <= max_batch_size_; ++d) {
    if (b - d >= 1 && exec_ns_[b - d] > 0)
      return static_cast<uint64_t>(exec_ns_[b - d] * static_cast<double>(b) /
                                   static_cast<double>(b - d));
    if (b + d <= max_batch_size_ && exec_ns_[b + d] > 0)
      return static_cast<uint64_t>(exec_ns_[b + d]);
  }
  return 0;
}

uint64_t AdaptiveDelay::ExecEstimateNs(int64_t batch_size) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ExecEstimateLocked(batch_size);
}

uint64_t AdaptiveDelay::DelayNs(int64_t pending) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending >= max_batch_size_) return 0;
  const double budget = factor_ * static_cast<double>(goal_ns_);
  const double next_exec = static_cast<double>(ExecEstimateLocked(pending + 1));
  const double delay = budget - next_exec;
  // Waiting only pays when another request is likely to arrive within the delay.
  if (delay <= 0 || interarrival_ns_ == 0 || interarrival_ns_ > delay) return 0;
  return static_cast<uint64_t>(delay);
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
