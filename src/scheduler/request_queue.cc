#include "scheduler/request_queue.h"

#include <algorithm>

namespace nereid {

RequestQueue::RequestQueue(const inference::ModelDynamicBatching& config)
    : config_(config), level_count_(std::max<uint64_t>(config.priority_levels(), 1)) {
  default_level_ = config.priority_levels() > 0 && config.default_priority_level() > 0
                       ? config.default_priority_level()
                       : 1;
}

Status RequestQueue::Enqueue(std::unique_ptr<InferenceRequest>& request, uint64_t now_ns) {
  uint64_t level = request->priority == 0 ? default_level_ : request->priority;
  if (level > level_count_) {
    if (level_count_ == 1) {
      level = 1;  // no priority levels configured: priorities are ignored, as in Triton
    } else {
      return InvalidArgument("priority " + std::to_string(request->priority) +
                             " is out of range for model '" + request->model_name +
                             "' (priority levels 1.." + std::to_string(level_count_) + ")");
    }
  }
  Level& l = levels_[level];
  if (l.policy == nullptr) {
    auto it = config_.priority_queue_policy().find(level);
    l.policy =
        it != config_.priority_queue_policy().end() ? &it->second : &config_.default_queue_policy();
  }
  const auto& policy = *l.policy;
  if (policy.max_queue_size() > 0 && l.queue.size() + l.delayed.size() >= policy.max_queue_size())
    return Unavailable("Exceeds maximum queue size: model '" + request->model_name +
                       "' already queues " + std::to_string(policy.max_queue_size()) +
                       " requests at priority level " + std::to_string(level));
  uint64_t timeout_us = policy.default_timeout_microseconds();
  if (request->timeout_us > 0 && policy.allow_timeout_override() &&
      (timeout_us == 0 || request->timeout_us < timeout_us))
    timeout_us = request->timeout_us;
  Entry entry;
  entry.enqueue_ns = now_ns;
  entry.deadline_ns = timeout_us > 0 ? now_ns + timeout_us * 1000 : 0;
  request->times.queued_ns = now_ns;
  entry.request = std::move(request);
  l.queue.push_back(std::move(entry));
  ++size_;
  return Status::Ok();
}

void RequestQueue::ExpireTimeouts(uint64_t now_ns,
                                  std::vector<std::unique_ptr<InferenceRequest>>* rejected) {
  for (auto level = levels_.begin(); level != levels_.end();) {
    Level& l = level->second;
    const bool delay = l.policy->timeout_action() == inference::ModelQueuePolicy::DELAY;
    for (auto it = l.queue.begin(); it != l.queue.end();) {
      if (it->deadline_ns == 0 || it->deadline_ns > now_ns) {
        ++it;
        continue;
      }
      if (delay) {
        it->deadline_ns = 0;  // a delayed request is never rejected later
        l.delayed.push_back(std::move(*it));
      } else {
        rejected->push_back(std::move(it->request));
        --size_;
      }
      it = l.queue.erase(it);
    }
    level = l.queue.empty() && l.delayed.empty() ? levels_.erase(level) : std::next(level);
  }
}

uint64_t RequestQueue::NextDeadline() const {
  uint64_t next = 0;
  for (const auto& [level, l] : levels_)
    for (const Entry& e : l.queue)
      if (e.deadline_ns != 0 && (next == 0 || e.deadline_ns < next)) next = e.deadline_ns;
  return next;
}

void RequestQueue::Walk(const std::function<bool(const Entry&)>& visit) const {
  for (const auto& [level, l] : levels_) {
    for (const Entry& e : l.queue)
      if (!visit(e)) return;
    for (const Entry& e : l.delayed)
      if (!visit(e)) return;
  }
}

std::vector<std::unique_ptr<InferenceRequest>> RequestQueue::PopFront(size_t n) {
  std::vector<std::unique_ptr<InferenceRequest>> out;
  out.reserve(n);
  for (auto level = levels_.begin(); level != levels_.end() && out.size() < n;) {
    Level& l = level->second;
    for (auto* q : {&l.queue, &l.delayed}) {
      while (out.size() < n && !q->empty()) {
        out.push_back(std::move(q->front().request));
        q->pop_front();
        --size_;
      }
    }
    level = l.queue.empty() && l.delayed.empty() ? levels_.erase(level) : std::next(level);
  }
  return out;
}

}  // namespace nereid
