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
  void Work();
  void Drain(uint64_t seen);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  // The job: its number (high 32 bits) and next unclaimed index (low 32 bits) in one word, so a
  // worker claims an index with one compare-and-swap that fails when the job it read has been
  // replaced (a worker late from the previous job never takes the next one's indices). fn_ and
  // count_ are written before the word publishes a new job; finished_ counts the job's indices
  // done. Idle workers spin on the word, then sleep on wake_ (sleeping_ and stop_ under mu_).
  std::atomic<uint64_t> job_{0};
  static constexpr uint32_t kClosed = 0x7fffffff;  // an index no count reaches (a job being set)
  const std::function<void(int64_t)>* fn_ = nullptr;
  std::atomic<int64_t> count_{0};  // (read by late workers while the next job is posted)
  std::atomic<int64_t> finished_{0};
  int sleeping_ = 0;
  bool stop_ = false;
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
