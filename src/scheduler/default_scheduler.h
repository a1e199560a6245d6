// DefaultScheduler: Triton's default (non-batching) scheduling. One FIFO queue per model; one
// thread per instance takes the oldest request whenever its instance is idle and executes it alone.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "scheduler/scheduler.h"

namespace nereid {

class DefaultScheduler : public InstanceThreadsScheduler {
 public:
  explicit DefaultScheduler(std::vector<BatchExecutor*> instances);
  ~DefaultScheduler() override;
  Status Enqueue(std::unique_ptr<InferenceRequest>& request) override;

 private:
  void Run(BatchExecutor* instance) override;
  size_t QueuedLocked() const override { return queue_.size(); }

  static constexpr int kSpinUs = 100;
  std::deque<std::unique_ptr<InferenceRequest>> queue_;
  std::atomic<size_t> queued_{0};  // queue_.size(), readable without the lock
};

}  // namespace nereid
