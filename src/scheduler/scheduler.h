// Scheduler: how a model's requests reach its instances. Each model version owns one. The default
// scheduler hands one request at a time to the first idle instance; the dynamic batcher (later)
// forms batches. Enqueue never blocks on inference.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "runtime/inference_request.h"

namespace nereid {

// What one execution did, for the scheduler's own bookkeeping (adaptive batching).
struct ExecutionSummary {
  int64_t rows = 0;                    // sum of the requests' batch sizes
  uint64_t exec_ns = 0;                // the backend call
  std::vector<uint64_t> latencies_ns;  // per successful request: received to completion
};

// Something that executes a batch and completes every request in it: a ModelInstance, or a fake in
// scheduler tests.
class BatchExecutor {
 public:
  virtual ~BatchExecutor() = default;
  virtual ExecutionSummary Execute(std::vector<std::unique_ptr<InferenceRequest>>& batch) = 0;
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  // Takes the request; on error the request has not been taken and the caller still owns it.
  virtual Status Enqueue(std::unique_ptr<InferenceRequest>& request) = 0;
  // Stops accepting, finishes every request already accepted, joins the instance threads.
  virtual void Stop() = 0;
  // Requests accepted and not yet completed.
  virtual size_t Pending() const = 0;
};

}  // namespace nereid
