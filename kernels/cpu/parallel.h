// Intra-op parallelism for the CPU kernels: a team of worker threads that a kernel's loop is split
// over. Graph::Run makes a model instance's team current for its thread (ParallelScope); a kernel
// calls ParallelFor, which runs inline when no team is current (one thread: the default).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

namespace nereid::kernels {

// A thread's scratch (held thread_local): storage for at least n values, 64-byte aligned (an
// AVX-512 load or store never splits a cache line), grown when short and otherwise kept as it is,
// its values left as they were. (A std::vector's resize() to a smaller size and back zero-fills
// the difference again: a memset per call where layers of different sizes take turns.)
template <typename T>
class Scratch {
 public:
  T* Get(size_t n) {
    if (n > size_) {
      void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);
      if (p == nullptr) throw std::bad_alloc();
      data_.reset(static_cast<T*>(p));
      size_ = n;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  size_t size_ = 0;
};

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
  void RunPiece(int64_t count, const std::function<void(int64_t)>& fn);

  std::vector<std::thread> workers_;
  // The job: written by Run before it opens the job, read by the workers that joined it.
  // generation_ is odd while a job is open; Run closes it (even) once every index has finished
  // and returns only when no worker is inside it (active_ 0), so a late worker never sees the
  // next job's shares with this one's function (it joins, then checks the generation: seq_cst
  // on both sides, so either Run waits for it or it sees the job closed and leaves).
  // Thread k (the caller 0) takes runs of indices from the front of share k, then from the back
  // of the share with the most left: one compare-and-swap on the share's word (next | end << 32).
  struct alignas(64) Share {
    std::atomic<uint64_t> word{0};
  };
  const std::function<void(int64_t)>* fn_ = nullptr;
  std::vector<Share> shares_;
  int64_t count_ = 0, chunk_ = 1;
  // Written by every claim: a line apart from what idle workers spin on.
  alignas(64) std::atomic<int64_t> finished_{0};
  std::atomic<int> active_{0};
  alignas(64) std::atomic<uint64_t> generation_{0};
  std::atomic<bool> all_done_{false};
  // Sleeping workers and a sleeping caller (after their spin): under mu_.
  std::mutex mu_;
  std::condition_variable wake_, done_;
  int sleeping_ = 0;
  bool stop_ = false;
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
