#include "server/model_control.h"

#include <exception>
#include <utility>

#include "common/logging.h"

namespace nereid {

ModelControl::~ModelControl() {
  WaitIdle();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& t : finished_) t.join();
}

void ModelControl::Run(const std::string& model, size_t bytes, std::function<Status()> task,
                       std::function<void(Status)> done) {
  std::vector<std::thread> ended;
  Status refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ended.swap(finished_);
    auto lane = lanes_.find(model);
    if (waiting_ >= kMaxWaiting || waiting_bytes_ + bytes > kMaxWaitingBytes) {
      refused =
          Unavailable("too many model control requests are waiting (" + std::to_string(waiting_) +
                      " holding " + std::to_string(waiting_bytes_ >> 20) + " MiB); retry later");
    } else if (lane == lanes_.end() && lanes_.size() >= kMaxLanes) {
      refused = Unavailable("control requests of " + std::to_string(lanes_.size()) +
                            " models are running; retry later");
    } else {
      ++waiting_;
      waiting_bytes_ += bytes;
      const bool start = lane == lanes_.end();
      Lane& l = lanes_[model];
      l.waiting.push_back({bytes, std::move(task), std::move(done)});
      if (start) l.thread = std::thread([this, model] { Drain(model); });
      done = nullptr;  // the lane's now
    }
  }
  for (auto& t : ended) t.join();
  if (done) {  // refused: answered here, outside the lock
    LOG_WARNING << "model '" << model << "': " << refused.message();
    done(std::move(refused));
  }
}

void ModelControl::Drain(const std::string& model) {
  for (;;) {
    Request request;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Lane& lane = lanes_[model];
      if (lane.waiting.empty()) {
        // The lane ends; its thread is joined by whoever comes next (it cannot join itself).
        finished_.push_back(std::move(lane.thread));
        lanes_.erase(model);
        if (lanes_.empty()) idle_.notify_all();
        return;
      }
      request = std::move(lane.waiting.front());
      lane.waiting.pop_front();
      --waiting_;
      waiting_bytes_ -= request.bytes;
    }
    Status s;
    try {
      s = request.task();
    } catch (const std::exception& e) {
      s = Internal(std::string("repository control failed: ") + e.what());
    }
    request.task = nullptr;  // what it holds (a config of many MiB) goes before the answer
    try {
      request.done(std::move(s));
    } catch (const std::exception& e) {
      LOG_ERROR << "answering a model control request failed: " << e.what();
    }
  }
}

void ModelControl::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return lanes_.empty(); });
}

}  // namespace nereid
