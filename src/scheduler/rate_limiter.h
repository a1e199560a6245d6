// RateLimiter: Triton's rate limiter (--rate-limit=execution_count). Instances whose group has a
// rate_limiter { resources, priority } execute only while every resource they name is free on
// their device (global resources: one pool for the server), and hold them while the backend's
// execute runs. Among instances waiting with their resources free, the one with the smallest
// finished executions x max(priority, 1) goes first (ties: the smaller priority, then the longest
// waiting), so priority 2 gets half the executions of priority 1 under contention. Available counts
// come from --rate-limit-resource; without any, each resource has the largest count any loaded
// instance asks for on that device.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace nereid {

class RateLimiter {
 public:
  struct Resource {
    std::string name;
    bool global = false;
    uint32_t count = 0;
  };
  // A --rate-limit-resource value: NAME:COUNT (every device and the global pool) or
  // NAME:COUNT:DEVICE. Names are case-insensitive, as in Triton.
  struct Available {
    std::string name;
    uint32_t count = 0;
    std::optional<int32_t> device;
  };
  static StatusOr<Available> ParseResourceFlag(const std::string& value);

  explicit RateLimiter(std::vector<Available> available);

  // One instance's claim: registered when its model loads, unregistered when it is destroyed.
  class Client {
   public:
    ~Client();
    Client(const Client&) = delete;
    Client& operator=(const Client&) = delete;
    // Blocks until this instance may execute, then holds its resources until Release.
    void Acquire();
    void Release();
    // Gives back resources acquired for an execution that did not happen (no batch was formed):
    // not counted as an execution.
    void Return();

   private:
    friend class RateLimiter;
    Client() = default;
    void GiveBack(bool executed);
    RateLimiter* limiter_ = nullptr;
    std::vector<Resource> resources_;
    int32_t device_ = 0;
    uint32_t priority_ = 1;  // max(priority, 1)
    uint64_t executions_ = 0;
    uint64_t waiting_since_ = 0;  // its place in the queue (0: not waiting)
    // Just released: its thread comes straight back when it has more work, and until then (at
    // most kReturnGrace) it still competes, so that a waiter woken by the release does not take
    // a turn the returning instance's priority would have won.
    std::chrono::steady_clock::time_point returning_until_{};
  };
  static constexpr std::chrono::microseconds kReturnGrace{500};
  // Registers an instance on 'device' (CPU instances: 0) needing 'resources'; fails
  // with Triton's messages when a resource is both global and per device among the loaded
  // models, or when the counts available can never satisfy it.
  StatusOr<std::shared_ptr<Client>> Register(std::vector<Resource> resources, int32_t device,
                                             uint32_t priority);

 private:
  uint32_t AvailableLocked(const std::string& name, bool global, int32_t device) const;
  bool FreeLocked(const Client& c) const;
  // The instance to run next: the best of those waiting and those just released (which may
  // be a released one: then nobody runs yet).
  const Client* NextLocked(std::chrono::steady_clock::time_point now) const;
  static std::string Key(const std::string& name, bool global, int32_t device);

  const bool explicit_;  // --rate-limit-resource given: unnamed resources count 0
  std::vector<Available> available_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Client*> clients_;          // registered
  std::map<std::string, uint32_t> used_;  // Key -> count held now
  uint64_t next_ticket_ = 1;
};

}  // namespace nereid
