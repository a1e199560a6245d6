// RequestQueue: the dynamic batcher's queue with Triton's priority levels and queue policies. Each
// level has a queue and a queue of delayed requests (timed out under timeout_action DELAY); the
// scheduling order is level 1, its delayed requests, level 2, its delayed requests, ... Not
// thread-safe: the batcher holds its lock around every call.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "config/model_config.h"
#include "request/inference_request.h"

namespace nereid {

class RequestQueue {
 public:
  struct Entry {
    std::unique_ptr<InferenceRequest> request;
    uint64_t enqueue_ns = 0;
    uint64_t deadline_ns = 0;  // 0: no timeout
  };

  explicit RequestQueue(const inference::ModelDynamicBatching& config);

  // Queues the request or refuses it (queue full, bad priority); on refusal the caller keeps it.
  Status Enqueue(std::unique_ptr<InferenceRequest>& request, uint64_t now_ns);
  // Requests past their deadline: REJECT ones are removed into 'rejected', DELAY ones move behind
  // their level's other requests.
  void ExpireTimeouts(uint64_t now_ns, std::vector<std::unique_ptr<InferenceRequest>>* rejected);
  // Earliest deadline of a request that can still time out (0: none).
  uint64_t NextDeadline() const;

  // Visits entries in scheduling order until 'visit' returns false.
  void Walk(const std::function<bool(const Entry&)>& visit) const;
  // Removes the first 'n' entries in scheduling order.
  std::vector<std::unique_ptr<InferenceRequest>> PopFront(size_t n);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  uint64_t levels() const { return level_count_; }

 private:
  struct Level {
    const inference::ModelQueuePolicy* policy = nullptr;
    std::deque<Entry> queue;
    std::deque<Entry> delayed;
  };
  // Only levels that hold requests exist: priority_levels may be any uint64 (Triton's own tests
  // use values near its maximum), so nothing here is sized by it.
  std::map<uint64_t, Level> levels_;
  inference::ModelDynamicBatching config_;  // the policies levels point into
  uint64_t level_count_ = 1;
  uint64_t default_level_ = 1;
  size_t size_ = 0;
};

}  // namespace nereid
