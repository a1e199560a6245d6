// Where the responses of unary ModelInfer calls go (UnarySink), and the thread that finishes them
// for busy models (Handoff); TracedSend, the GRPC_SEND_* timestamps of a traced response, for
// these and the stream's.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "request/inference_request.h"
#include "server/server_api.h"
#include "trace/trace.h"

namespace nereid::grpc_frontend {

// A traced response's send: GRPC_SEND_START now, GRPC_SEND_END when it leaves scope (after the
// response is handed to gRPC, on every return path). Nothing without a trace.
class TracedSend {
 public:
  explicit TracedSend(trace::Trace* t) : t_(t) {
    if (t_) t_->Record("GRPC_SEND_START", SteadyNowNs());
  }
  ~TracedSend() {
    if (t_) t_->Record("GRPC_SEND_END", SteadyNowNs());
  }
  TracedSend(const TracedSend&) = delete;
  TracedSend& operator=(const TracedSend&) = delete;

 private:
  trace::Trace* t_;
};

// One thread that finishes unary infer RPCs for the instance threads of busy models. Serializing a
// response and gRPC's Finish (which writes to the socket on the calling thread) cost tens of
// microseconds that the next batch of a busy model would wait for on its instance thread; an idle
// model's response is finished on its completing thread (a hand-off would only add a wake-up).
class Handoff {
 public:
  Handoff() : thread_([this] { Loop(); }) {}
  ~Handoff() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();  // after what was posted has run
  }
  void Post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      std::deque<std::function<void()>> batch;
      batch.swap(tasks_);
      lock.unlock();
      for (auto& task : batch) task();  // each task catches its own exceptions
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

// Where a unary ModelInfer's response goes: the RPC's own buffer, then Finish. A busy model's
// instance thread hands the work to the Handoff thread.
class UnarySink final : public ResponseSink {
 public:
  UnarySink(Handoff* handoff, grpc::ServerUnaryReactor* reactor, grpc::ByteBuffer* out)
      : handoff_(handoff), reactor_(reactor), out_(out) {}

  void OnStarted(const Started& started) override { trace_ = started.trace; }
  void OnResponse(std::unique_ptr<InferenceResponse> response, bool others_pending) override {
    if (!others_pending) return Finish(reactor_, out_, *response, trace_.get());
    // (The sink goes with its request, perhaps before the task runs: the task holds its own.)
    std::shared_ptr<InferenceResponse> shared(std::move(response));
    handoff_->Post([reactor = reactor_, out = out_, shared, trace = trace_] {
      Finish(reactor, out, *shared, trace.get());
    });
  }

 private:
  static void Finish(grpc::ServerUnaryReactor* reactor, grpc::ByteBuffer* out,
                     const InferenceResponse& result, trace::Trace* trace);

  Handoff* handoff_;
  grpc::ServerUnaryReactor* reactor_;
  grpc::ByteBuffer* out_;
  std::shared_ptr<trace::Trace> trace_;
};

}  // namespace nereid::grpc_frontend
