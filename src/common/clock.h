// Clock: where the scheduler reads time. Injected so batcher tests control time exactly.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace nereid {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t NowNs() const = 0;
};

class SteadyClock : public Clock {
 public:
  uint64_t NowNs() const override {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }
  static const SteadyClock& Get() {
    static const SteadyClock clock;
    return clock;
  }
};

// A clock that moves only when told to (tests).
class ManualClock : public Clock {
 public:
  explicit ManualClock(uint64_t start_ns = 1'000'000'000) : now_(start_ns) {}
  uint64_t NowNs() const override { return now_.load(); }
  void Advance(uint64_t ns) { now_ += ns; }

 private:
  std::atomic<uint64_t> now_;
};

}  // namespace nereid
