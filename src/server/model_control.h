// ModelControl: where repository control requests (load, unload) run. Each model has a lane: its
// requests run one after another, in arrival order, on a thread of that lane; lanes of different
// models run at once, so one model whose load or unload is slow (or stuck until its timeout) never
// delays another's. What waits is bounded: at most kMaxWaiting requests, holding at most
// kMaxWaitingBytes of request bodies (load configs), across all lanes; beyond that a request is
// refused at once (UNAVAILABLE) instead of queueing for ever.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace nereid {

class ModelControl {
 public:
  static constexpr size_t kMaxWaiting = 64;
  static constexpr size_t kMaxWaitingBytes = size_t{64} << 20;
  static constexpr size_t kMaxLanes = 64;  // models with control work at once

  ModelControl() = default;
  ~ModelControl();  // waits for the lanes (each request is bounded by the repository's timeouts)
  ModelControl(const ModelControl&) = delete;
  ModelControl& operator=(const ModelControl&) = delete;

  // Runs 'task' in the lane of 'model' and hands its result to 'done' (on the lane's thread), or
  // refuses it, calling 'done' at once on this thread. 'bytes' is what the request holds while
  // it waits.
  void Run(const std::string& model, size_t bytes, std::function<Status()> task,
           std::function<void(Status)> done);
  // Blocks until no request waits or runs.
  void WaitIdle();

 private:
  struct Request {
    size_t bytes = 0;
    std::function<Status()> task;
    std::function<void(Status)> done;
  };
  struct Lane {
    std::deque<Request> waiting;
    std::thread thread;
  };
  void Drain(const std::string& model);

  std::mutex mu_;
  std::condition_variable idle_;
  std::map<std::string, Lane> lanes_;
  std::vector<std::thread> finished_;  // lane threads that have ended, joined by the next Run
  size_t waiting_ = 0, waiting_bytes_ = 0;
};

}  // namespace nereid
