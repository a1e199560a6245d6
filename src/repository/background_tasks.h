// BackgroundTasks: the repository's own threads, for loads (each bounded by the load timeout) and
// for retiring models that left the registry: a retired model is stopped once nothing else holds
// it (each wait bounded by the unload timeout, then it is aborted; one whose threads never return
// is kept alive for ever rather than freed under them).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/status.h"
#include "runtime/model.h"

namespace nereid {

class BackgroundTasks {
 public:
  explicit BackgroundTasks(std::chrono::milliseconds unload_timeout)
      : unload_timeout_(unload_timeout) {}
  // Whatever still runs (WaitUntil was not called, or gave up on it) is detached.
  ~BackgroundTasks() { WaitUntil(std::chrono::steady_clock::now()); }
  BackgroundTasks(const BackgroundTasks&) = delete;
  BackgroundTasks& operator=(const BackgroundTasks&) = delete;

  // Runs 'task' on a thread of its own; finished ones are joined as new ones start.
  void Run(std::function<void()> task);
  // Runs 'task' on a thread of its own and waits up to 'timeout' for its status; nothing when it
  // has not finished by then (it goes on in the background, its status dropped).
  std::optional<Status> RunWithin(std::chrono::milliseconds timeout, std::function<Status()> task);
  // Stops the models on a thread of their own. The returned flag turns true when all are stopped.
  std::shared_ptr<std::atomic<bool>> Retire(std::vector<std::shared_ptr<Model>> retired);
  // Waits until 'deadline' for every task, those the waited-for start included; those still
  // running then are detached (logged).
  void WaitUntil(std::chrono::steady_clock::time_point deadline);

 private:
  struct Task {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  const std::chrono::milliseconds unload_timeout_;
  std::mutex mu_;
  std::vector<Task> tasks_;
};

}  // namespace nereid
