// Scheduler: how a model's requests reach its instances. Each model version owns one, made by
// SchedulerFactory from the config: the default scheduler hands one request at a time to the first
// idle instance, the dynamic batcher forms batches, the sequence batcher keeps a sequence on its
// slot, an ensemble sends its steps. Enqueue never blocks on inference; a scheduler with business
// in a request's responses declares its stage of the response path (request/response_path.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"
#include "request/inference_request.h"

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
  // Triton's rate limiter: a scheduler that forms batches takes the instance's turn first
  // (AcquireTurn blocks until its resources are free), so that the batch holds what queued while
  // it waited, and gives an unused turn back (ReturnTurn). Execute uses a turn taken this way or
  // takes one itself. Instances that are not rate limited answer false and do nothing.
  virtual bool RateLimited() const { return false; }
  virtual void AcquireTurn() {}
  virtual void ReturnTurn() {}
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  // Takes the request; on error the request has not been taken and the caller still owns it.
  virtual Status Enqueue(std::unique_ptr<InferenceRequest>& request) = 0;
  // Stops accepting, finishes every request already accepted, joins the instance threads.
  virtual void Stop() = 0;
  // Stop() that waits only until 'deadline': true when every thread has finished (and is joined).
  // False leaves the threads running (an Execute that does not return); call again to wait more,
  // or Abandon() to stop waiting for them for good.
  virtual bool StopUntil(std::chrono::steady_clock::time_point deadline) = 0;
  // Detaches threads that never finished: the caller keeps what they use alive for ever.
  virtual void Abandon() = 0;
  // Requests accepted and not yet completed.
  virtual size_t Pending() const = 0;
  // Whether the scheduler could start (its threads); a model whose scheduler failed never serves.
  virtual Status start_status() const { return Status::Ok(); }
};

// The part every scheduler here shares: one thread per instance, a lock and condition variable
// around the scheduler's queue, and stopping (wake everyone, let them drain, join).
class InstanceThreadsScheduler : public Scheduler {
 public:
  void Stop() override;
  bool StopUntil(std::chrono::steady_clock::time_point deadline) override;
  void Abandon() override;
  size_t Pending() const override;
  Status start_status() const override { return start_status_; }

 protected:
  // Starts one thread per instance running Run(instance); call at the end of the constructor.
  void StartThreads(const std::vector<BatchExecutor*>& instances);
  virtual void Run(BatchExecutor* instance) = 0;
  virtual size_t QueuedLocked() const = 0;  // requests waiting, with mu_ held

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  size_t executing_ = 0;  // requests being executed

 private:
  std::vector<std::thread> threads_;
  size_t finished_ = 0;  // threads whose Run has returned (under mu_)
  std::condition_variable finished_cv_;
  Status start_status_;
};

}  // namespace nereid
