// Intra-op parallelism for the CPU kernels: a team of worker threads that a kernel's loop is split
// over. Graph::Run makes a model instance's team current for its thread (ParallelScope); a kernel
// calls ParallelFor, which runs inline when no team is current (one thread: the default).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace nereid::kernels {

class ThreadTeam {
 public:
  // 'threads' in all, the caller of Run included ('threads' - 1 workers).
  explicit ThreadTeam(int threads);
  ~ThreadTeam();
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;
  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls fn(i) for i in [0, count) across the team and returns when all are done. Not
  // reentrant: one Run at a time (one model instance's thread uses its team).
  void Run(int64_t count, const std::function<void(int64_t)>& fn);

 private:
  void Work(int self);
  void Drain(int self);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  // The job, under mu_; generation_ changes (under mu_) when one is posted, so idle workers can
  // spin on it without the lock. Thread k (the caller 0) takes indices from shares_[k] first.
  struct Share {
    int64_t next = 0, end = 0;
  };
  const std::function<void(int64_t)>* fn_ = nullptr;
  std::vector<Share> shares_;
  int64_t count_ = 0, chunk_ = 1, finished_ = 0;
  int sleeping_ = 0;
  bool stop_ = false;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> all_done_{false};
};

// Makes 'team' current for this thread while it lives (null: none).
class ParallelScope {
 public:
  explicit ParallelScope(ThreadTeam* team);
  ~ParallelScope();

 private:
  ThreadTeam* previous_;
};

// fn(i) for i in [0, count): across the current team, or inline.
void ParallelFor(int64_t count, const std::function<void(int64_t)>& fn);
// ParallelFor when 'work' (multiply-adds or elements) is worth waking the team for (2^18: a few
// tens of microseconds), else inline: a small model's ops are faster on one thread.
void ParallelForWork(int64_t count, int64_t work, const std::function<void(int64_t)>& fn);
// How many threads ParallelFor would use here (1 without a team, or inside one's work).
int ParallelThreads();

}  // namespace nereid::kernels
