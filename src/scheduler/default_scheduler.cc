#include "scheduler/default_scheduler.h"

#include <chrono>
#include <system_error>

#include "common/cpus.h"

namespace nereid {

DefaultScheduler::DefaultScheduler(std::vector<BatchExecutor*> instances) {
  StartThreads(instances);
}

DefaultScheduler::~DefaultScheduler() { Stop(); }

Status DefaultScheduler::Enqueue(std::unique_ptr<InferenceRequest>& request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Unavailable("model '" + request->model_name + "' is unloading");
    request->times.queued_ns = SteadyNowNs();
    queue_.push_back(std::move(request));
    queued_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_one();
  return Status::Ok();
}

void DefaultScheduler::Run(BatchExecutor* instance) {
  std::vector<std::unique_ptr<InferenceRequest>> batch;
  for (;;) {
    // Briefly poll before sleeping: a request arriving soon after the last one then costs no
    // futex wake-up and context switch. Bounded, so an idle server does not burn a core, and
    // yielding, so a runnable I/O thread gets the core first (on 2 cores a pause loop cost 10-25%
    // throughput at concurrency 8).
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinUs);
    while (queued_.load(std::memory_order_acquire) == 0 &&
           std::chrono::steady_clock::now() < spin_until)
      std::this_thread::yield();  // yields the core to a runnable I/O thread
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      // Accepted requests are drained before the thread exits, so unloading loses nothing.
      if (queue_.empty()) return;
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
      ++executing_;
    }
    (void)instance->Execute(batch);
    batch.clear();
    std::lock_guard<std::mutex> lock(mu_);
    --executing_;
  }
}

void InstanceThreadsScheduler::StartThreads(const std::vector<BatchExecutor*>& instances) {
  threads_.reserve(instances.size());
  try {
    for (BatchExecutor* instance : instances)
      threads_.emplace_back([this, instance] {
        // A batcher's max_queue_delay and a sequence's idle timeout are timed waits on this
        // thread, in microseconds: wake on time.
        UseFineTimerSlack();
        Run(instance);
        std::lock_guard<std::mutex> lock(mu_);
        ++finished_;
        finished_cv_.notify_all();
      });
  } catch (const std::system_error& e) {
    // Out of threads: stop the ones that started (the caller sees start_status and gives up).
    start_status_ =
        Unavailable("cannot start instance thread " + std::to_string(threads_.size() + 1) + " of " +
                    std::to_string(instances.size()) + ": " + e.what());
    Stop();
  }
}

void InstanceThreadsScheduler::Stop() { StopUntil(std::chrono::steady_clock::time_point::max()); }

bool InstanceThreadsScheduler::StopUntil(std::chrono::steady_clock::time_point deadline) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
    const auto all_finished = [&] { return finished_ >= threads_.size(); };
    if (deadline == std::chrono::steady_clock::time_point::max())
      finished_cv_.wait(lock, all_finished);
    else if (!finished_cv_.wait_until(lock, deadline, all_finished))
      return false;
  }
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
  finished_ = 0;
  return true;
}

void InstanceThreadsScheduler::Abandon() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& t : threads_)
    if (t.joinable()) t.detach();
  threads_.clear();
  finished_ = 0;
}

size_t InstanceThreadsScheduler::Pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return QueuedLocked() + executing_;
}

}  // namespace nereid
