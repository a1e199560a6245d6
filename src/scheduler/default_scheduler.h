// DefaultScheduler: Triton's default (non-batching) scheduling. One FIFO queue per model; one
// thread per instance takes the oldest request whenever its instance is idle and executes it alone.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "scheduler/scheduler.h"

namespace nereid {

class DefaultScheduler : public Scheduler {
 public:
  explicit DefaultScheduler(std::vector<BatchExecutor*> instances);
  ~DefaultScheduler() override;
  Status Enqueue(std::unique_ptr<InferenceRequest>& request) override;
  void Stop() override;
  size_t Pending() const override;

 private:
  void Run(BatchExecutor* instance);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<InferenceRequest>> queue_;
  size_t executing_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace nereid
