#include "scheduler/sequence_batcher.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/logging.h"
#include "config/model_files.h"
#include "metrics/observers.h"
#include "nereid/backend.h"
#include "nereid/backend_util.h"
#include "request/response_path.h"

namespace nereid {
namespace {

// Sequences that may wait for a slot (Triton sets no bound): past it a new START is refused with
// UNAVAILABLE, so clients that start sequences and never end them cannot grow memory without end.
constexpr size_t kMaxBackloggedSequences = size_t{1} << 20;

std::string IdText(const CorrelationId& id) {
  return id.is_text ? id.text : std::to_string(id.number);
}

}  // namespace

SequenceBatcher::SequenceBatcher(SequenceBatcherConfig config,
                                 std::vector<BatchExecutor*> instances, RequestObserver* requests)
    : config_(std::move(config)), requests_(requests) {
  for (const auto& c : config_.controls)
    if (c.kind == SequenceControl::Kind::kCorrelationId) correlation_control_ = &c;
  instances_.resize(instances.size());
  for (size_t i = 0; i < instances.size(); ++i) {
    instances_[i].executor = instances[i];
    instances_[i].slots.resize(config_.slots_per_instance);
    for (size_t s = 0; s < config_.slots_per_instance; ++s) free_.emplace(s, i);
  }
  holding_ = config_.hold_until_queued > 0;  // the backlog's hook acts only beside it
  StartThreads(instances);
}

SequenceBatcher::~SequenceBatcher() { Stop(); }

size_t SequenceBatcher::ActiveSequences() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& instance : instances_)
    for (const auto& slot : instance.slots) n += slot.sequence ? 1 : 0;
  return n;
}

size_t SequenceBatcher::BackloggedSequences() const {
  std::lock_guard<std::mutex> lock(mu_);
  return backlog_.size();
}

size_t SequenceBatcher::BackloggedRequestsLocked() const {
  size_t n = 0;
  for (const auto& s : backlog_) n += s->queue.size();
  return n;
}

Status SequenceBatcher::Enqueue(std::unique_ptr<InferenceRequest>& request) {
  const std::string& model = config_.model;
  const CorrelationId& id = request->correlation_id;
  if (!id.present || (id.is_text ? id.text.empty() : id.number == 0))
    return InvalidArgument("inference request to model '" + model +
                           "' must specify a non-zero or non-empty correlation ID");
  if (request->batch_size != 1)
    return InvalidArgument("inference request to model '" + model +
                           "' must specify batch-size 1 due to requirements of sequence batcher");
  if (correlation_control_ != nullptr &&
      id.is_text != (correlation_control_->type == DataType::kBytes))
    return InvalidArgument("sequence batching control '" + correlation_control_->name +
                           "' data-type is '" + (id.is_text ? "BYTES" : "UINT64") +
                           "', but model '" + model + "' expects '" +
                           std::string(DataTypeName(correlation_control_->type)) + "'");
  const bool start = (request->flags & NEREID_REQUEST_FLAG_SEQUENCE_START) != 0;
  const bool end = (request->flags & NEREID_REQUEST_FLAG_SEQUENCE_END) != 0;
  const std::string key = (id.is_text ? "s" : "n") + IdText(id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_)
      return Unavailable(
          "Server is stopping, scheduler for model has stopped accepting new inference requests");
    auto it = sequences_.find(key);
    if (it == sequences_.end()) {
      if (!start)
        return InvalidArgument(
            "inference request for sequence " + IdText(id) + " to model '" + model +
            "' must specify the START flag on the first request of the sequence");
      if (backlog_.size() >= kMaxBackloggedSequences)
        return Unavailable("model '" + model + "' has " + std::to_string(backlog_.size()) +
                           " sequences waiting for a slot; try again later");
      auto sequence = std::make_shared<Sequence>();
      sequence->key = key;
      sequence->id = id;
      it = sequences_.emplace(key, sequence).first;
      if (!free_.empty()) {
        const auto [slot, instance] = *free_.begin();
        free_.erase(free_.begin());
        instances_[instance].slots[slot].sequence = sequence;
      } else {
        backlog_.push_back(sequence);
      }
    } else if (start) {
      LOG_WARNING << "sequence " << IdText(id) << " for model '" << model
                  << "' has a conflict. The previous sequence did not end before this sequence "
                     "start. Previous sequence will be terminated early.";
    }
    const uint64_t now = SteadyNowNs();
    request->times.queued_ns = now;
    it->second->last_arrival_ns = now;
    it->second->queue.push_back(std::move(request));
    ++queued_;
    // As in Triton, the id is forgotten once its END request is queued: a START with the same id
    // from here on begins a new sequence (in a free slot or the backlog), and a request without
    // START is refused.
    if (end) sequences_.erase(it);
  }
  cv_.notify_all();
  return Status::Ok();
}

void SequenceBatcher::ForgetLocked(const Sequence& sequence) {
  auto it = sequences_.find(sequence.key);
  if (it != sequences_.end() && it->second.get() == &sequence) sequences_.erase(it);
}

void SequenceBatcher::ReleaseSlotLocked(size_t instance, size_t slot) {
  Slot& s = instances_[instance].slots[slot];
  s.sequence.reset();
  s.state = SequenceState();
  if (backlog_.empty()) {
    free_.emplace(slot, instance);
    return;
  }
  std::shared_ptr<Sequence> next = std::move(backlog_.front());
  backlog_.pop_front();
  s.sequence = std::move(next);
  cv_.notify_all();  // another instance's thread may own the slot
}

uint64_t SequenceBatcher::ExpireLocked(size_t instance, uint64_t now) {
  uint64_t next = 0;
  auto sooner = [&next](uint64_t t) { next = next == 0 ? t : std::min(next, t); };
  // A sequence holding a slot with nothing queued, idle past the limit, gives the slot up; its
  // next request without START is refused.
  auto& slots = instances_[instance].slots;
  for (size_t s = 0; s < slots.size(); ++s) {
    Slot& slot = slots[s];
    if (!slot.sequence || !slot.sequence->queue.empty()) continue;
    const uint64_t expiry = slot.sequence->last_arrival_ns + config_.idle_ns;
    if (expiry > now && !stopping_) {
      sooner(expiry);
      continue;
    }
    if (!stopping_)
      LOG_VERBOSE(1) << "model '" << config_.model << "': sequence " << IdText(slot.sequence->id)
                     << " idle for " << config_.idle_ns / 1000 << " us: slot " << s
                     << " of instance " << instance << " released";
    ForgetLocked(*slot.sequence);
    ReleaseSlotLocked(instance, s);
  }
  // A backlogged sequence whose requests have waited past their timeout fails as a whole.
  for (auto it = backlog_.begin(); it != backlog_.end();) {
    Sequence& seq = **it;
    uint64_t expiry = 0;
    for (const auto& r : seq.queue)
      if (r->timeout_us > 0) {
        const uint64_t t = r->times.queued_ns + r->timeout_us * 1000;
        expiry = expiry == 0 ? t : std::min(expiry, t);
      }
    if (expiry == 0 || expiry > now) {
      if (expiry != 0) sooner(expiry);
      ++it;
      continue;
    }
    // Answered by Run once the lock is released (a client's callback may do anything).
    for (auto& r : seq.queue) {
      ReportEnd(requests_, RequestRecord::End::kFailure, FailureReason::kRejected, *r, now);
      expired_.push_back(std::move(r));
      --queued_;
    }
    ForgetLocked(seq);
    it = backlog_.erase(it);
  }
  return next;
}

uint64_t SequenceBatcher::HoldUntilLocked(const std::vector<size_t>& ready, size_t instance,
                                          uint64_t now) const {
  if (config_.max_queue_delay_ns == 0) return 0;
  const auto& slots = instances_[instance].slots;
  uint64_t oldest = now;
  for (size_t s : ready)
    oldest = std::min(oldest, slots[s].sequence->queue.front()->times.queued_ns);
  const uint64_t due = oldest + config_.max_queue_delay_ns;
  if (due <= now) return 0;
  if (config_.oldest) {
    // Full enough at the largest preferred size (which is max_batch_size unless set).
    const int64_t target = std::min<int64_t>(config_.preferred_batch_sizes.back(),
                                             std::max<int64_t>(1, config_.max_batch_size));
    return static_cast<int64_t>(ready.size()) >= target ? 0 : due;
  }
  // Direct waits only when both the delay and a minimum utilization are set.
  if (config_.minimum_slot_utilization <= 0) return 0;
  const double used = static_cast<double>(ready.size()) /
                      static_cast<double>(std::max<int64_t>(1, config_.max_batch_size));
  return used >= config_.minimum_slot_utilization ? 0 : due;
}

std::unique_ptr<InferenceRequest> SequenceBatcher::TakeLocked(size_t instance, size_t slot) {
  Slot& s = instances_[instance].slots[slot];
  std::shared_ptr<Sequence> sequence = s.sequence;
  std::unique_ptr<InferenceRequest> request = std::move(sequence->queue.front());
  sequence->queue.pop_front();
  --queued_;
  const bool start = (request->flags & NEREID_REQUEST_FLAG_SEQUENCE_START) != 0;
  const bool end = (request->flags & NEREID_REQUEST_FLAG_SEQUENCE_END) != 0;
  AddControls(config_, *request, start, end, /*ready=*/true, &sequence->id);
  // State outputs the client did not ask for are dropped from its response.
  std::vector<std::string> added = AddState(config_, *request, s.state, start);
  ++s.in_flight;
  ResponsePath::Of(*request).Set(
      ResponseStage::kScheduler, [this, instance, slot, added = std::move(added)](
                                     std::unique_ptr<InferenceResponse>& response, ResponsePath&) {
        OnComplete(instance, slot, *response);
        if (!added.empty())
          response->outputs.erase(std::remove_if(response->outputs.begin(), response->outputs.end(),
                                                 [&](const InferOutput& o) {
                                                   return std::find(added.begin(), added.end(),
                                                                    o.name) != added.end();
                                                 }),
                                  response->outputs.end());
      });
  if (end && sequence->queue.empty()) {
    // The sequence is over once its END request runs: its slot goes to the backlog's oldest (whose
    // START waits for this request to complete: one request of a slot in flight at a time).
    ForgetLocked(*sequence);
    ReleaseSlotLocked(instance, slot);
  }
  return request;
}

void SequenceBatcher::OnComplete(size_t instance, size_t slot, const InferenceResponse& response) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Slot& s = instances_[instance].slots[slot];
    if (response.status.ok() && s.sequence) KeepState(config_, response, &s.state);
    if (response.final && s.in_flight > 0) --s.in_flight;
  }
  cv_.notify_all();
}

std::vector<std::unique_ptr<InferenceRequest>> SequenceBatcher::FormBatchLocked(
    size_t instance, std::vector<size_t> ready) {
  auto& slots = instances_[instance].slots;
  // Rows batch only when their inputs' shapes agree with the first's.
  const InferenceRequest& first = *slots[ready.front()].sequence->queue.front();
  auto same_shapes = [&](const InferenceRequest& r) {
    if (r.inputs.size() != first.inputs.size()) return false;
    for (size_t i = 0; i < r.inputs.size(); ++i)
      if (r.inputs[i].name != first.inputs[i].name || r.inputs[i].shape != first.inputs[i].shape)
        return false;
    return true;
  };
  std::vector<std::unique_ptr<InferenceRequest>> batch;
  if (config_.max_batch_size <= 0) {
    batch.push_back(TakeLocked(instance, ready.front()));
    return batch;
  }
  if (config_.oldest) {
    std::sort(ready.begin(), ready.end(), [&](size_t a, size_t b) {
      return slots[a].sequence->queue.front()->times.queued_ns <
             slots[b].sequence->queue.front()->times.queued_ns;
    });
    std::vector<size_t> rows;
    for (size_t s : ready)
      if (static_cast<int64_t>(rows.size()) < config_.max_batch_size &&
          same_shapes(*slots[s].sequence->queue.front()))
        rows.push_back(s);
    // The largest preferred size the rows fill, else all of them (the delay has passed).
    size_t take = rows.size();
    for (auto p = config_.preferred_batch_sizes.rbegin(); p != config_.preferred_batch_sizes.rend();
         ++p)
      if (static_cast<size_t>(*p) <= rows.size()) {
        take = static_cast<size_t>(*p);
        break;
      }
    for (size_t i = 0; i < take; ++i) batch.push_back(TakeLocked(instance, rows[i]));
    return batch;
  }
  // Direct: row i is slot i, up to the highest slot with a request; rows with nothing to run, or
  // whose request's shapes differ from the lowest slot's, get padding (Triton's null requests).
  std::vector<bool> take(slots.size(), false);
  const size_t top = ready.back();
  for (size_t s : ready) take[s] = same_shapes(*slots[s].sequence->queue.front());
  std::vector<std::unique_ptr<InferenceRequest>> rows(top + 1);
  for (size_t s = 0; s <= top; ++s)
    if (take[s]) rows[s] = TakeLocked(instance, s);
  const InferenceRequest& like = *rows[ready.front()];
  for (size_t s = 0; s <= top; ++s)
    if (!rows[s]) rows[s] = PaddingRow(config_, like);
  return rows;
}

void SequenceBatcher::Run(BatchExecutor* executor) {
  size_t me = 0;
  while (me < instances_.size() && instances_[me].executor != executor) ++me;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    const uint64_t now = SteadyNowNs();
    uint64_t wake = ExpireLocked(me, now);
    if (!expired_.empty()) {
      std::vector<std::unique_ptr<InferenceRequest>> expired = std::move(expired_);
      expired_.clear();
      lock.unlock();
      for (auto& r : expired)
        CompleteWithError(std::move(r),
                          Unavailable("timeout of the corresponding sequence has been expired"));
      lock.lock();
      continue;
    }
    if (holding_) {
      // As Triton counts: requests in the slots' queues (not the backlog's), then, when that
      // hook is set too, requests in the backlog.
      const size_t backlogged = BackloggedRequestsLocked();
      if (queued_ - backlogged >= config_.hold_until_queued &&
          backlogged >= config_.hold_until_backlogged)
        holding_ = false;
    }
    std::vector<size_t> ready;
    auto& slots = instances_[me].slots;
    for (size_t s = 0; s < slots.size(); ++s)
      if (ReadyLocked(slots[s])) ready.push_back(s);
    if (!ready.empty() && (!holding_ || stopping_)) {
      const uint64_t hold = stopping_ ? 0 : HoldUntilLocked(ready, me, now);
      if (hold == 0) {
        std::vector<std::unique_ptr<InferenceRequest>> batch =
            FormBatchLocked(me, std::move(ready));
        size_t real = 0;
        for (const auto& r : batch) real += r->padding ? 0 : 1;
        executing_ += real;
        lock.unlock();
        (void)executor->Execute(batch);
        batch.clear();
        lock.lock();
        executing_ -= real;
        continue;
      }
      wake = wake == 0 ? hold : std::min(wake, hold);
    }
    if (stopping_) {
      // Drained: nothing of this instance's sequences is left to run (slots without requests were
      // released above, so the backlog has moved into slots).
      bool left = false;
      for (const auto& s : slots) left = left || (s.sequence && !s.sequence->queue.empty());
      if (!left) return;
    }
    if (wake == 0) {
      cv_.wait(lock);
    } else {
      const auto at = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(wake));
      cv_.wait_until(lock, at);
    }
  }
}

}  // namespace nereid
