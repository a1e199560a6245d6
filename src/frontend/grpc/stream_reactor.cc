#include "frontend/grpc/stream_reactor.h"

#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "common/logging.h"
#include "frontend/grpc/grpc_api.h"
#include "frontend/grpc/infer_message.h"
#include "frontend/grpc/response_sinks.h"

namespace nereid::grpc_frontend {
namespace {

namespace pb = inference;

// One ModelStreamInfer stream: reads requests as they come, enqueues each, and writes each response
// (or its error, in error_message) as it completes, one write at a time. Lives until the stream is
// done and every request it enqueued has completed.
// What a stream may hold for a client that does not read: past kPauseBytes of responses waiting
// (or kPauseRequests requests unanswered) the stream stops reading requests until half of it is
// gone, so a client that only sends is slowed by gRPC's flow control; past kCancelBytes (one
// decoupled request answering without end) the stream is cancelled and what waits dropped.
class StreamReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                            public OpenStream {
 public:
  static constexpr size_t kPauseBytes = size_t{1} << 20;
  static constexpr int kPauseRequests = 256;
  static constexpr size_t kCancelBytes = size_t{256} << 20;

  StreamReactor(StreamHost* server, grpc::CallbackServerContext* ctx) : server_(server), ctx_(ctx) {
    server_->AddStream(this);
    StartRead(&next_);
  }

  void Drain() override {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
    MaybeFinishLocked();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      std::lock_guard<std::mutex> lock(mu_);
      reads_done_ = true;
      MaybeFinishLocked();
      return;
    }
    const uint64_t read_start = SteadyNowNs();
    auto parsed = ParseInferRequest(next_);
    next_.Clear();
    bool read_next = false, draining = false;
    {
      // Counted before the next read starts: if that read ends the stream at once, the reactor
      // must not finish (and be deleted) while this request is still being handled.
      std::lock_guard<std::mutex> lock(mu_);
      ++in_flight_;
      read_next = !OverLimitLocked();
      paused_ = !read_next;
      draining = draining_;
    }
    if (draining) {  // the server is shutting down: answered, not run
      const std::string model = parsed.ok() ? (*parsed)->message.model_name() : "";
      const std::string id = parsed.ok() ? (*parsed)->message.id() : "";
      Send(Error(model, id, Unavailable("Server is shutting down: no new requests")), true);
      // Reading goes on: the read pending when the stream is cancelled is what finishes it.
      if (read_next) StartRead(&next_);
      return;
    }
    Handle(std::move(parsed), read_start);
    // The next message is read only once this one is queued: a stream's requests reach their
    // models in the order sent (a sequence's requests must).
    if (read_next) StartRead(&next_);
  }

  void Handle(StatusOr<std::shared_ptr<ParsedInferRequest>> parsed, uint64_t read_start) {
    if (!parsed.ok()) return Send(Error("", "", parsed.status()), true);
    std::shared_ptr<ParsedInferRequest> parsed_request = std::move(parsed).value();
    const pb::ModelInferRequest* message = &parsed_request->message;  // kept by parsed_request
    bool empty_final = false;
    if (auto it = message->parameters().find("triton_enable_empty_final_response");
        it != message->parameters().end())
      empty_final = it->second.bool_param();  // false unless a bool_param says true
    RequestContext context = CallContext(ctx_, InferEndpoint::kGrpcStream, read_start);
    context.cancel = cancel_;
    Status queued =
        server_->Infer(parsed_request, context, std::make_shared<Sink>(this, empty_final));
    if (!queued.ok()) Send(Error(message->model_name(), message->id(), queued), true);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    pending_bytes_ -= pending_.front().Length();
    pending_.pop_front();
    if (!ok) broken_ = true;
    WriteNextLocked();
    ResumeLocked();
    MaybeFinishLocked();
  }

  // The client cancelled the stream (stop_stream(cancel_requests=True), a deadline, a broken
  // connection): its requests read as cancelled at once, so a model streaming responses can stop;
  // OnDone comes only after those requests have completed.
  void OnCancel() override {
    cancel_->cancelled.store(true, std::memory_order_relaxed);
    // A paused stream reads again: that read fails at once, which ends the stream (Finish).
    std::lock_guard<std::mutex> lock(mu_);
    if (paused_ && !reads_done_) {
      paused_ = false;
      StartRead(&next_);
    }
  }

  void OnDone() override {
    server_->RemoveStream(this);  // the server is still there: OnDone comes before its Wait ends
    bool destroy = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Ended before we finished it: the client cancelled or went away; its requests stop.
      if (!finished_) cancel_->cancelled.store(true, std::memory_order_relaxed);
      done_ = true;
      destroy = in_flight_ == 0 && !deleted_;
      if (destroy) deleted_ = true;
    }
    if (destroy) delete this;  // otherwise the last completing request deletes it (Send)
  }

 private:
  // Where one request's responses go: serialized on the completing thread, queued on the stream.
  // Decoupled models answer with any number of responses; each carries Triton's
  // "triton_final_response" flag, and an empty final one is sent only when the client asked.
  class Sink final : public ResponseSink {
   public:
    Sink(StreamReactor* stream, bool empty_final) : stream_(stream), empty_final_(empty_final) {}
    void OnStarted(const Started& started) override {
      decoupled_ = started.decoupled;
      trace_ = started.trace;
    }
    void OnResponse(std::unique_ptr<InferenceResponse> result, bool /*others_pending*/) override {
      TracedSend send(result->final ? trace_.get() : nullptr);  // the final response's
      if (!result->status.ok())
        return stream_->Send(Error(result->model_name, result->id, result->status), true);
      if (result->empty_final && !empty_final_) return stream_->Send(std::nullopt, true);
      pb::ModelInferResponse header;
      FillResponseHeader(*result, &header);
      if (decoupled_)
        (*header.mutable_parameters())["triton_final_response"].set_bool_param(result->final);
      grpc::ByteBuffer buffer;
      SerializeInferResponse(header, *result, /*as_stream=*/true, &buffer);
      stream_->Send(std::move(buffer), result->final);
    }

   private:
    StreamReactor* stream_;  // lives until this request's last response is sent
    bool empty_final_;
    bool decoupled_ = false;
    std::shared_ptr<trace::Trace> trace_;
  };

  // A request's error on the stream: the message, with the model name and id it was sent with.
  static grpc::ByteBuffer Error(const std::string& model_name, const std::string& id,
                                const Status& s) {
    pb::ModelStreamInferResponse out;
    out.set_error_message(s.message());
    out.mutable_infer_response()->set_model_name(model_name);
    out.mutable_infer_response()->set_id(id);
    grpc::ByteBuffer buffer;
    Serialize(out, &buffer);
    return buffer;
  }

  // Queues a response of one request (serialized now, on the completing thread) and writes it
  // when the stream is free; 'last' when the request has no more responses to come (the response
  // itself may be absent: an empty final response the client did not ask for).
  void Send(std::optional<grpc::ByteBuffer> response, bool last) {
    bool destroy = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (last) --in_flight_;
      if (response && !done_ && !broken_) {
        pending_bytes_ += response->Length();
        pending_.push_back(std::move(*response));
        WriteNextLocked();
        if (pending_bytes_ > kCancelBytes) {
          // Only the write in progress stays (gRPC owns its buffer until it completes).
          while (pending_.size() > 1) {
            pending_bytes_ -= pending_.back().Length();
            pending_.pop_back();
          }
          broken_ = true;
          cancel_->cancelled.store(true, std::memory_order_relaxed);
          LOG_WARNING << "a gRPC stream's client left more than " << (kCancelBytes >> 20)
                      << " MiB of responses unread: the stream is cancelled";
          ctx_->TryCancel();
        }
      }
      ResumeLocked();
      MaybeFinishLocked();
      destroy = done_ && in_flight_ == 0 && !deleted_;
      if (destroy) deleted_ = true;
    }
    if (destroy) delete this;
  }

  bool OverLimitLocked() const {
    return pending_bytes_ >= kPauseBytes || in_flight_ >= kPauseRequests;
  }

  // Reads again once what waits has fallen to half the limits.
  void ResumeLocked() {
    if (!paused_ || done_ || reads_done_ || pending_bytes_ > kPauseBytes / 2 ||
        in_flight_ > kPauseRequests / 2)
      return;
    paused_ = false;
    StartRead(&next_);
  }

  void WriteNextLocked() {
    if (writing_ || pending_.empty() || done_) return;
    writing_ = true;
    StartWrite(&pending_.front());
  }

  void MaybeFinishLocked() {
    if (finished_ || in_flight_ > 0 || writing_ || !pending_.empty()) return;
    if (reads_done_) {
      finished_ = true;
      Finish(grpc::Status::OK);
    } else if (draining_ && !closing_) {
      // Shutting down with nothing left to answer: a read is still pending, which only
      // cancelling ends (Finish must wait for it); the failed read then finishes the stream.
      closing_ = true;
      ctx_->TryCancel();
    }
  }

  StreamHost* server_;
  grpc::CallbackServerContext* ctx_;
  std::shared_ptr<CancelFlag> cancel_ = std::make_shared<CancelFlag>();
  grpc::ByteBuffer next_;
  std::mutex mu_;
  std::deque<grpc::ByteBuffer> pending_;
  size_t pending_bytes_ = 0;
  bool paused_ = false;  // reading stopped until what waits drains (OverLimitLocked)
  int in_flight_ = 0;
  bool reads_done_ = false, writing_ = false, finished_ = false, broken_ = false, done_ = false;
  bool deleted_ = false;
  bool draining_ = false, closing_ = false;  // the server is shutting down; cancel requested
};

class RefusedStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit RefusedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartStream(
    StreamHost* host, grpc::CallbackServerContext* ctx) {
  return new StreamReactor(host, ctx);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* RefuseStream(
    const grpc::Status& status) {
  return new RefusedStream(status);
}

}  // namespace nereid::grpc_frontend
