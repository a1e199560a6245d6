#include "repository/background_tasks.h"

#include <condition_variable>
#include <exception>
#include <utility>

#include "common/logging.h"

namespace nereid {

void BackgroundTasks::Run(std::function<void()> task) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = tasks_.erase(it);
    } else {
      ++it;
    }
  }
  tasks_.push_back({std::thread([task = std::move(task), done] {
                      try {
                        task();
                      } catch (const std::exception& e) {
                        LOG_ERROR << "model control task failed: " << e.what();
                      }
                      done->store(true);
                    }),
                    done});
}

namespace {
// Models whose threads never returned: kept alive for ever, since those threads use them.
void Abandon(std::shared_ptr<Model> model) {
  static std::mutex mu;
  static auto* abandoned = new std::vector<std::shared_ptr<Model>>();
  std::lock_guard<std::mutex> lock(mu);
  abandoned->push_back(std::move(model));
}
}  // namespace

// A model out of the map can still be holding requests, and a frontend that looked it up just
// before the swap may still hand it one. Once 'retired' holds the only reference, nobody can: only
// then is it stopped, so a reload or unload fails no request that found the model. (Counting the
// requests it holds instead is racy: a completed request leaves the count only after its
// response is out.) Every wait is bounded by the unload timeout; past it the model is stopped
// with what is left of it and aborted, and one whose threads never return is abandoned.
std::shared_ptr<std::atomic<bool>> BackgroundTasks::Retire(
    std::vector<std::shared_ptr<Model>> retired) {
  auto done = std::make_shared<std::atomic<bool>>(retired.empty());
  if (retired.empty()) return done;
  Run([retired = std::move(retired), done, timeout = unload_timeout_]() mutable {
    for (auto& model : retired) {
      const auto start = std::chrono::steady_clock::now();
      while (model.use_count() > 1 && std::chrono::steady_clock::now() - start < timeout)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - start);
      if (!model->Stop(timeout > spent ? timeout - spent : std::chrono::milliseconds(0)))
        Abandon(std::move(model));
    }
    retired.clear();
    done->store(true);
  });
  return done;
}

std::optional<Status> BackgroundTasks::RunWithin(std::chrono::milliseconds timeout,
                                                 std::function<Status()> task) {
  struct Outcome {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
  };
  auto outcome = std::make_shared<Outcome>();
  Run([outcome, task = std::move(task)] {
    Status s = task();
    std::lock_guard<std::mutex> lock(outcome->mu);
    outcome->status = std::move(s);
    outcome->done = true;
    outcome->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(outcome->mu);
  if (!outcome->cv.wait_for(lock, timeout, [&] { return outcome->done; })) return std::nullopt;
  return outcome->status;
}

void BackgroundTasks::WaitUntil(std::chrono::steady_clock::time_point deadline) {
  // Taken out of tasks_ before waiting: a task that ends now may retire what it built, which
  // starts another task (Run takes mu_), waited for in the next round.
  for (;;) {
    std::vector<Task> tasks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks.swap(tasks_);
    }
    if (tasks.empty()) break;
    for (auto& task : tasks) {
      while (!task.done->load() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      if (task.done->load()) {
        task.thread.join();
      } else {
        LOG_ERROR << "a model load or unload is still running at exit; leaving it";
        task.thread.detach();
      }
    }
  }
}

}  // namespace nereid
