#include "cpu/parallel.h"

#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace nereid::kernels {

namespace {
thread_local ThreadTeam* t_team = nullptr;
thread_local bool t_in_team_work = false;  // a worker's own loops run inline (no nesting)

inline void Pause() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long an idle worker, or the caller waiting for the others, spins before it sleeps: a model's
// ops follow each other within microseconds, and a futex wake-up costs tens of them per op.
constexpr auto kSpin = std::chrono::microseconds(200);
}  // namespace

ThreadTeam::ThreadTeam(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { Work(); });
}

ThreadTeam::~ThreadTeam() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    job_.fetch_add(uint64_t{1} << 32, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

// Claims indices of the job numbered as in 'seen' (its high bits) until none are left or another
// job has replaced it, and counts the ones it finished.
void ThreadTeam::Drain(uint64_t seen) {
  uint64_t word = job_.load(std::memory_order_acquire);
  for (;;) {
    if ((word >> 32) != (seen >> 32) ||
        static_cast<int64_t>(word & 0xffffffffu) >= count_.load(std::memory_order_relaxed))
      return;
    if (!job_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                    std::memory_order_acquire))
      continue;  // (word now holds the current value)
    // The claim succeeded, so the job is unfinished (this index is not done): fn_ and count_ are
    // still its own.
    (*fn_)(static_cast<int64_t>(word & 0xffffffffu));
    if (finished_.fetch_add(1, std::memory_order_acq_rel) + 1 ==
        count_.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(mu_);  // (the caller may be asleep on done_)
      all_done_.store(true, std::memory_order_release);
      done_.notify_all();
      return;
    }
    word = job_.load(std::memory_order_acquire);
  }
}

void ThreadTeam::Work() {
  t_in_team_work = true;
  uint64_t seen = job_.load(std::memory_order_acquire) & ~uint64_t{0xffffffffu};
  for (;;) {
    // Spin a little on the job number (no lock), then sleep until it changes.
    auto current = [&] { return job_.load(std::memory_order_acquire) >> 32; };
    const auto until = std::chrono::steady_clock::now() + kSpin;
    while (current() == seen >> 32 && std::chrono::steady_clock::now() < until)
      for (int k = 0; k < 64; ++k) Pause();
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++sleeping_;
      wake_.wait(lock, [&] { return stop_ || current() != seen >> 32; });
      --sleeping_;
      if (stop_) return;
      seen = job_.load(std::memory_order_acquire);
    }
    Drain(seen);
  }
}

void ThreadTeam::Run(int64_t count, const std::function<void(int64_t)>& fn) {
  if (count <= 0) return;
  if (workers_.empty() || count == 1 || count >= int64_t{kClosed}) {
    for (int64_t i = 0; i < count; ++i) fn(i);
    return;
  }
  // The previous job is finished (Run returned), but a worker late from it may still hold its
  // word, whose index is then its count: were count_ raised first, that worker's claim on the old
  // word would succeed. So the new number goes out first with no index claimable (a stale word
  // no longer matches, and the closed one's index exceeds any count), then the job, then the
  // number with index 0.
  const uint64_t seen = ((job_.load(std::memory_order_relaxed) >> 32) + 1) << 32;
  job_.store(seen | kClosed, std::memory_order_relaxed);
  fn_ = &fn;
  count_.store(count, std::memory_order_relaxed);
  finished_.store(0, std::memory_order_relaxed);
  all_done_.store(false, std::memory_order_relaxed);
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_.store(seen, std::memory_order_release);
    wake = sleeping_ > 0;
  }
  if (wake) wake_.notify_all();
  const bool was = t_in_team_work;
  t_in_team_work = true;
  Drain(seen);
  t_in_team_work = was;
  const auto until = std::chrono::steady_clock::now() + kSpin;
  while (!all_done_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until)
    for (int k = 0; k < 64; ++k) Pause();
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return all_done_.load(std::memory_order_acquire); });
  fn_ = nullptr;
}

ParallelScope::ParallelScope(ThreadTeam* team) : previous_(t_team) { t_team = team; }
ParallelScope::~ParallelScope() { t_team = previous_; }

void ParallelForWork(int64_t count, int64_t work, const std::function<void(int64_t)>& fn) {
  constexpr int64_t kMinWork = int64_t{1} << 18;
  if (work < kMinWork) {
    for (int64_t i = 0; i < count; ++i) fn(i);
    return;
  }
  ParallelFor(count, fn);
}

int ParallelThreads() { return t_team == nullptr || t_in_team_work ? 1 : t_team->threads(); }

void ParallelFor(int64_t count, const std::function<void(int64_t)>& fn) {
  if (t_team == nullptr || t_in_team_work) {
    for (int64_t i = 0; i < count; ++i) fn(i);
    return;
  }
  t_team->Run(count, fn);
}

}  // namespace nereid::kernels
