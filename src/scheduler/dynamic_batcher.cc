#include "scheduler/dynamic_batcher.h"

#include <algorithm>
#include <charconv>

#include "config/model_parameters.h"
#include "metrics/observers.h"
#include "request/response_path.h"

namespace nereid {

StatusOr<LatencyGoalConfig> ReadLatencyGoal(const inference::ModelConfig& config) {
  LatencyGoalConfig goal;
  // A goal of an hour at most; a percentile above 0 and below 100.
  double goal_us = 0, percentile = 99;
  RETURN_IF_ERROR(NumberParameter(config, "nereid.latency_goal_us", 1, 3.6e9, &goal_us));
  RETURN_IF_ERROR(
      NumberParameter(config, "nereid.latency_goal_percentile", 1e-6, 99.9999, &percentile));
  goal.goal_us = static_cast<uint64_t>(goal_us);
  goal.percentile = percentile / 100.0;
  if (auto it = config.parameters().find("nereid.batching_objective");
      it != config.parameters().end()) {
    const std::string& v = it->second.string_value();
    if (v == "energy")
      goal.objective = BatchingObjective::kEnergy;
    else if (v != "throughput")
      return InvalidArgument("model '" + config.name() +
                             "': parameter 'nereid.batching_objective' must be 'throughput' or "
                             "'energy', got '" +
                             v + "'");
    if (goal.goal_us == 0)
      return InvalidArgument("model '" + config.name() +
                             "': parameter 'nereid.batching_objective' needs a latency goal "
                             "('nereid.latency_goal_us')");
  }
  return goal;
}

DynamicBatcher::DynamicBatcher(const inference::ModelConfig& config,
                               std::vector<BatchExecutor*> instances, RequestObserver* requests,
                               const Clock* clock, LatencyGoalConfig goal,
                               const BatchEnergyModel* energy)
    : clock_(clock),
      requests_(requests),
      max_delay_ns_(config.dynamic_batching().max_queue_delay_microseconds() * 1000),
      preserve_ordering_(config.dynamic_batching().preserve_ordering()),
      queue_(config.dynamic_batching()) {
  limits_.max_batch_size = std::max(config.max_batch_size(), 1);
  for (const auto& input : config.input())
    if (input.allow_ragged_batch()) ragged_.insert(input.name());
  for (int32_t p : config.dynamic_batching().preferred_batch_size()) limits_.preferred.push_back(p);
  std::sort(limits_.preferred.begin(), limits_.preferred.end());
  if (goal.goal_us > 0)
    adaptive_ = std::make_unique<AdaptiveDelay>(goal.goal_us * 1000, goal.percentile,
                                                limits_.max_batch_size, goal.objective, energy);
  instance_count_ = instances.size();
  StartThreads(instances);
}

DynamicBatcher::~DynamicBatcher() { Stop(); }

Status DynamicBatcher::Enqueue(std::unique_ptr<InferenceRequest>& request) {
  const uint64_t now = clock_->NowNs();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Unavailable("model '" + request->model_name + "' is unloading");
    // preserve_ordering: the scheduler's stage holds each response until those of the requests
    // enqueued before it have gone.
    InferenceRequest& r = *request;
    if (preserve_ordering_)
      ResponsePath::Of(r).Set(
          ResponseStage::kScheduler,
          [this, seq = next_sequence_](std::unique_ptr<InferenceResponse>& response,
                                       ResponsePath& path) {
            ReleaseInOrder(seq, path.After(ResponseStage::kScheduler), std::move(response));
          });
    Status s = queue_.Enqueue(request, now);
    if (!s.ok()) {
      if (preserve_ordering_) r.path->Set(ResponseStage::kScheduler, nullptr);
      return s;
    }
    if (preserve_ordering_) ++next_sequence_;
  }
  if (adaptive_) adaptive_->OnArrival(now);
  cv_.notify_one();
  return Status::Ok();
}

bool DynamicBatcher::Candidates(std::vector<BatchCandidate>* out) const {
  out->clear();
  bool blocked = false;
  int64_t total = 0;
  const InferenceRequest* first = nullptr;
  queue_.Walk([&](const RequestQueue::Entry& e) {
    const InferenceRequest& r = *e.request;
    if (first != nullptr) {
      // Requests are merged only when every input has the same shape apart from the batch
      // dimension, or allows ragged batches (its elements joined end to end whatever the shape).
      bool same = r.inputs.size() == first->inputs.size();
      for (size_t i = 0; same && i < r.inputs.size(); ++i) {
        const InferInput* other = first->FindInput(r.inputs[i].name);
        same = other != nullptr &&
               ((other->shape.size() == r.inputs[i].shape.size() &&
                 std::equal(other->shape.begin() + 1, other->shape.end(),
                            r.inputs[i].shape.begin() + 1)) ||
                ragged_.count(r.inputs[i].name) > 0);  // (looked up only when shapes differ)
      }
      if (!same || total + r.batch_size > limits_.max_batch_size) {
        blocked = true;
        return false;
      }
    }
    first = first ? first : &r;
    total += r.batch_size;
    out->push_back({e.enqueue_ns, r.batch_size});
    return total < limits_.max_batch_size;
  });
  // A head that stopped because it is exactly full is "blocked" only if something else waits.
  if (!blocked && total >= limits_.max_batch_size && queue_.size() > out->size()) blocked = true;
  return blocked;
}

void DynamicBatcher::CompleteRejected(std::vector<std::unique_ptr<InferenceRequest>>& rejected) {
  const uint64_t now = clock_->NowNs();
  for (auto& r : rejected) {
    ReportEnd(requests_, RequestRecord::End::kFailure, FailureReason::kRejected, *r, now);
    CompleteWithError(std::move(r), Unavailable("Request timeout expired"));
  }
  rejected.clear();
}

void DynamicBatcher::Run(BatchExecutor* instance) {
  std::vector<BatchCandidate> candidates;
  std::vector<std::unique_ptr<InferenceRequest>> rejected;
  std::unique_lock<std::mutex> lock(mu_);
  // A rate-limited instance takes its turn before it forms a batch (Triton forms it once the
  // instance may run, so the batch holds everything that queued meanwhile) and gives back a turn
  // that found nothing to run.
  bool turn_held = false;
  auto take_or_return_turn = [&](bool take) {
    lock.unlock();
    if (take)
      instance->AcquireTurn();
    else
      instance->ReturnTurn();
    turn_held = take;
    lock.lock();
  };
  for (;;) {
    const uint64_t now = clock_->NowNs();
    queue_.ExpireTimeouts(now, &rejected);
    if (!rejected.empty()) {
      lock.unlock();
      CompleteRejected(rejected);
      lock.lock();
      continue;
    }
    if (queue_.empty()) {
      if (turn_held) {
        take_or_return_turn(false);
        continue;
      }
      if (stopping_) return;
      cv_.wait(lock);
      continue;
    }
    if (hold_until_ > 0) {
      // One-shot gate: once N requests have been queued (or on stop), batching proceeds normally.
      if (queue_.size() < hold_until_ && !stopping_) {
        cv_.wait(lock);
        continue;
      }
      hold_until_ = 0;
    }
    const bool blocked = Candidates(&candidates);
    int64_t pending = 0;
    uint64_t oldest = now;
    for (const auto& c : candidates) {
      pending += c.batch_size;
      oldest = std::min(oldest, c.enqueue_ns);
    }
    // Adaptive mode for throughput waits only when no other instance is idle: an idle instance
    // beats a bigger batch. For energy it does not: two small batches cost more than one.
    const bool other_idle = busy_instances_ + 1 < instance_count_ &&
                            !(adaptive_ && adaptive_->objective() == BatchingObjective::kEnergy);
    const uint64_t delay = stopping_    ? 0
                           : !adaptive_ ? max_delay_ns_
                           : other_idle ? 0
                                        : adaptive_->DelayNs(pending, oldest);
    const BatchDecision decision = DecideBatch(limits_, candidates, blocked, now, delay);
    if (instance->RateLimited() && (decision.take > 0) != turn_held) {
      take_or_return_turn(decision.take > 0);
      continue;  // decide again with what queued meanwhile
    }
    if (adaptive_) {
      if (decision.take == 0 && wait_started_rows_ == 0) wait_started_rows_ = pending;
      if (decision.take > 0) {
        // A wait paid off if the batch grew and no other instance went idle meanwhile (an idle
        // instance could have taken those requests in parallel).
        if (wait_started_rows_ > 0)
          adaptive_->OnWaitOutcome(pending > wait_started_rows_ && !other_idle);
        wait_started_rows_ = 0;
        adaptive_->OnDispatch();
      }
    }
    if (decision.take == 0) {
      uint64_t wake = decision.wake_ns;
      const uint64_t deadline = queue_.NextDeadline();
      if (deadline != 0 && (wake == 0 || deadline < wake)) wake = deadline;
      if (wake == 0) {
        cv_.wait(lock);
      } else {
        // Sleep in real time for the clock's remaining span (capped, so a ManualClock test that
        // forgets to Poke still makes progress).
        const uint64_t span = wake > now ? wake - now : 0;
        cv_.wait_for(lock, std::chrono::nanoseconds(std::min<uint64_t>(span, 100'000'000)));
      }
      continue;
    }
    std::vector<std::unique_ptr<InferenceRequest>> batch = queue_.PopFront(decision.take);
    const size_t taken = batch.size();
    executing_ += taken;
    ++busy_instances_;
    const bool more = !queue_.empty();
    lock.unlock();
    if (more) cv_.notify_one();  // another idle instance may take what is left
    const ExecutionSummary summary = instance->Execute(batch);  // uses up the turn
    turn_held = false;
    if (adaptive_) {
      adaptive_->OnExecution(summary.rows, summary.exec_ns);
      for (uint64_t latency : summary.latencies_ns) adaptive_->OnCompletion(latency);
    }
    lock.lock();
    executing_ -= taken;
    --busy_instances_;
  }
}

void DynamicBatcher::ReleaseInOrder(uint64_t sequence, ResponseCallback callback,
                                    std::unique_ptr<InferenceResponse> response) {
  std::vector<std::pair<ResponseCallback, std::unique_ptr<InferenceResponse>>> ready;
  {
    std::lock_guard<std::mutex> lock(order_mu_);
    held_.emplace(sequence, std::make_pair(std::move(callback), std::move(response)));
    while (!held_.empty() && held_.begin()->first == next_release_) {
      ready.push_back(std::move(held_.begin()->second));
      held_.erase(held_.begin());
      ++next_release_;
    }
  }
  for (auto& [cb, r] : ready)
    if (cb) cb(std::move(r));
}

void DynamicBatcher::HoldUntilQueued(size_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    hold_until_ = n;
  }
  cv_.notify_all();
}

void DynamicBatcher::Poke() {
  // Taking the lock orders this wake-up after a batcher thread that read the clock and is about
  // to wait: without it the notification can land in between and be lost.
  { std::lock_guard<std::mutex> lock(mu_); }
  cv_.notify_all();
}

}  // namespace nereid
