#include "cpu/parallel.h"

namespace nereid::kernels {

namespace {
thread_local ThreadTeam* t_team = nullptr;
thread_local bool t_in_team_work = false;  // a worker's own loops run inline (no nesting)
}  // namespace

ThreadTeam::ThreadTeam(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { Work(); });
}

ThreadTeam::~ThreadTeam() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

// Takes indices until none are left; counts the ones it finished.
void ThreadTeam::Drain() {
  for (;;) {
    int64_t i;
    const std::function<void(int64_t)>* fn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (next_ >= count_) return;
      i = next_++;
      fn = fn_;
    }
    (*fn)(i);
    std::lock_guard<std::mutex> lock(mu_);
    if (++finished_ == count_) done_.notify_all();
  }
}

void ThreadTeam::Work() {
  t_in_team_work = true;
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    Drain();
  }
}

void ThreadTeam::Run(int64_t count, const std::function<void(int64_t)>& fn) {
  if (count <= 0) return;
  if (workers_.empty() || count == 1) {
    for (int64_t i = 0; i < count; ++i) fn(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    count_ = count, next_ = 0, finished_ = 0;
    ++generation_;
  }
  wake_.notify_all();
  const bool was = t_in_team_work;
  t_in_team_work = true;
  Drain();
  t_in_team_work = was;
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return finished_ == count_; });
  fn_ = nullptr;
}

ParallelScope::ParallelScope(ThreadTeam* team) : previous_(t_team) { t_team = team; }
ParallelScope::~ParallelScope() { t_team = previous_; }

int ParallelThreads() { return t_team == nullptr || t_in_team_work ? 1 : t_team->threads(); }

void ParallelFor(int64_t count, const std::function<void(int64_t)>& fn) {
  if (t_team == nullptr || t_in_team_work) {
    for (int64_t i = 0; i < count; ++i) fn(i);
    return;
  }
  t_team->Run(count, fn);
}

}  // namespace nereid::kernels
