#include "cpu/parallel.h"

#include <algorithm>
#include <chrono>
#include <thread>

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

constexpr uint64_t Pack(int64_t next, int64_t end) {
  return static_cast<uint64_t>(next) | static_cast<uint64_t>(end) << 32;
}
constexpr int64_t Next(uint64_t word) { return static_cast<int64_t>(word & 0xffffffffu); }
constexpr int64_t End(uint64_t word) { return static_cast<int64_t>(word >> 32); }

// A job's indices fit the 32-bit halves of a share's word; a longer loop runs as pieces.
constexpr int64_t kMaxPiece = int64_t{1} << 31;

// Spins on 'ready' up to kSpin, then yields the core between looks (a worker the caller waits
// for may be preempted: spinning would keep it off its core).
template <typename Ready>
void SpinThenYield(Ready ready) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  while (!ready()) {
    if (std::chrono::steady_clock::now() < until) {
      for (int k = 0; k < 64; ++k) Pause();
    } else {
      std::this_thread::yield();
    }
  }
}
}  // namespace

ThreadTeam::ThreadTeam(int threads) : shares_(static_cast<size_t>(std::max(threads, 1))) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { Work(i); });
}

ThreadTeam::~ThreadTeam() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

// Takes runs of chunk_ indices until none are left and counts the ones it finished: first from
// its own share, front to back, then from the back of the share with the most left. Each
// thread's share is the same part of every loop ([self * count / threads, ...)), so consecutive
// layers split over the same output rows find their inputs in the cache of the core that wrote
// them; claimed one by one, the rows moved between cores' caches from layer to layer. Runs of
// chunk_ indices: one index a claim made two threads trade the share's line on every index of a
// fine-grained loop (a layout conversion's 8x8 tiles: 6,272 for 112x112x32).
void ThreadTeam::Drain(int self) {
  const std::function<void(int64_t)>& fn = *fn_;
  const int64_t chunk = chunk_, count = count_;
  for (;;) {
    int64_t first = 0, last = 0;
    std::atomic<uint64_t>& own = shares_[static_cast<size_t>(self)].word;
    uint64_t word = own.load(std::memory_order_relaxed);
    while (Next(word) < End(word)) {
      const int64_t next = std::min(End(word), Next(word) + chunk);
      if (own.compare_exchange_weak(word, Pack(next, End(word)), std::memory_order_relaxed)) {
        first = Next(word), last = next;
        break;
      }
    }
    while (first == last) {  // steal: the back of the share with the most left
      std::atomic<uint64_t>* most = nullptr;
      uint64_t seen = 0;
      for (Share& other : shares_) {
        const uint64_t w = other.word.load(std::memory_order_relaxed);
        if (End(w) - Next(w) > (most ? End(seen) - Next(seen) : 0)) most = &other.word, seen = w;
      }
      if (most == nullptr) return;
      const int64_t end = std::max(Next(seen), End(seen) - chunk);
      if (most->compare_exchange_weak(seen, Pack(Next(seen), end), std::memory_order_relaxed))
        first = end, last = End(seen);
    }
    for (int64_t i = first; i < last; ++i) fn(i);
    if (finished_.fetch_add(last - first, std::memory_order_acq_rel) + (last - first) == count) {
      {
        std::lock_guard<std::mutex> lock(mu_);  // a caller about to sleep sees it or is woken
        all_done_.store(true, std::memory_order_release);
      }
      done_.notify_all();
    }
  }
}

void ThreadTeam::Work(int self) {
  t_in_team_work = true;
  uint64_t last = 0;  // the generation of the last job this worker looked at
  const auto open = [&](uint64_t g) { return (g & 1) != 0 && g != last; };
  for (;;) {
    // Spin a little on the generation (no lock), then sleep until a new job opens.
    const auto until = std::chrono::steady_clock::now() + kSpin;
    uint64_t g;
    while (!open(g = generation_.load(std::memory_order_acquire)) &&
           std::chrono::steady_clock::now() < until)
      for (int k = 0; k < 64; ++k) Pause();
    if (!open(g)) {
      std::unique_lock<std::mutex> lock(mu_);
      ++sleeping_;
      wake_.wait(lock, [&] { return stop_ || open(g = generation_.load()); });
      --sleeping_;
      if (stop_) return;
    }
    // Join, then check the job is still open (see the header).
    active_.fetch_add(1, std::memory_order_seq_cst);
    if (generation_.load(std::memory_order_seq_cst) == g) Drain(self);
    active_.fetch_sub(1, std::memory_order_release);
    last = g;
  }
}

void ThreadTeam::Run(int64_t count, const std::function<void(int64_t)>& fn) {
  for (int64_t first = 0; first < count; first += kMaxPiece) {
    const int64_t n = std::min(kMaxPiece, count - first);
    if (first == 0) {
      RunPiece(n, fn);
    } else {
      RunPiece(n, [&fn, first](int64_t i) { fn(first + i); });
    }
  }
}

void ThreadTeam::RunPiece(int64_t count, const std::function<void(int64_t)>& fn) {
  if (workers_.empty() || count == 1) {
    for (int64_t i = 0; i < count; ++i) fn(i);
    return;
  }
  fn_ = &fn;
  count_ = count;
  const int64_t t = threads();
  for (int64_t k = 0; k < t; ++k)
    shares_[static_cast<size_t>(k)].word.store(Pack(count * k / t, count * (k + 1) / t),
                                               std::memory_order_relaxed);
  // Eight runs a thread: few enough claims, still even where the indices' costs differ.
  chunk_ = std::max<int64_t>(1, count / (8 * t));
  finished_.store(0, std::memory_order_relaxed);
  all_done_.store(false, std::memory_order_relaxed);
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_seq_cst);  // open (odd)
    wake = sleeping_ > 0;
  }
  if (wake) wake_.notify_all();
  const bool was = t_in_team_work;
  t_in_team_work = true;
  Drain(0);
  t_in_team_work = was;
  const auto until = std::chrono::steady_clock::now() + kSpin;
  while (!all_done_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until)
    for (int k = 0; k < 64; ++k) Pause();
  if (!all_done_.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return all_done_.load(std::memory_order_acquire); });
  }
  generation_.fetch_add(1, std::memory_order_seq_cst);  // closed (even)
  // Workers still inside found nothing left to claim; they leave within a few loads.
  SpinThenYield([&] { return active_.load(std::memory_order_acquire) == 0; });
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
