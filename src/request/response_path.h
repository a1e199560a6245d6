// ResponsePath: the way a request's responses go, from the backend that answers to whoever asked,
// as one list of stages in a fixed order. Each part that has business with a response (the
// scheduler, admission, the cache, ...) declares its stage in its slot instead of wrapping the
// request's callback, so the order is written down once (ResponseStage) rather than implied by who
// wrapped whom. runtime/request_pipeline.cc declares the stages as a request enters its model;
// schedulers declare theirs as they take it.
//
// A request has a path only once a stage is declared: until then its on_complete is the sink
// itself, and a request that needs no stage pays nothing.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "request/inference_request.h"

namespace nereid {

// The stages in the order a response passes them. docs/architecture.md's request diagram lists
// them in this order; tests/unit/request/response_path_test.cc holds the two together.
enum class ResponseStage : uint8_t {
  kScheduler,       // the scheduler's own: a sequence's state kept, the order of responses restored
  kAdmission,       // the model's queue limits: the request's place given back with its final one
  kCache,           // the response cache: what a miss computed is stored
  kEnsembleStep,    // an ensemble's step: whether the model batches, for the next step's shapes
  kClassification,  // the classification extension: top-k strings in place of the scores
  kTraceTensors,    // tracing at the TENSORS level: the outputs recorded
  kSink,            // whoever asked: a frontend's ResponseSink, a backend's callback, an ensemble
};
inline constexpr size_t kResponseStageCount = 7;
inline constexpr std::array<std::string_view, kResponseStageCount> kResponseStageNames = {
    "scheduler", "admission", "cache", "ensemble step", "classification", "trace tensors", "sink"};

class ResponsePath : public std::enable_shared_from_this<ResponsePath> {
 public:
  // One stage's work on a response, on whichever thread completes the request: change it in place
  // and return, and it goes on to the next stage; or take it (leaving 'response' null) and hand it
  // on later through path.After(this stage) (a scheduler restoring the order of responses).
  using Stage =
      std::function<void(std::unique_ptr<InferenceResponse>& response, ResponsePath& path)>;

  // The path of 'request', made on first use: the request's on_complete becomes the sink, and
  // on_complete enters the path from then on.
  static ResponsePath& Of(InferenceRequest& request);

  // Declares 'stage' (kSink is the request's own callback, not declared here); a null 'run'
  // removes it. 'refused' runs if the request is refused after this (Unwind): what the stage took
  // is given back there.
  void Set(ResponseStage stage, Stage run, std::function<void()> refused = nullptr);

  // The stages after 'stage', as a callback that keeps the path alive.
  ResponseCallback After(ResponseStage stage);

  // 'request' was refused before it could be answered: each declared stage's 'refused' runs, in
  // stage order (the one nearest the backend first, as the pipeline declares them last), and the
  // request is left as it came, on_complete its sink again. The one
  // place a refusal unwinds what its stages took.
  static void Unwind(InferenceRequest& request);

 private:
  void Run(size_t from, std::unique_ptr<InferenceResponse> response);

  std::array<Stage, kResponseStageCount - 1> stages_;  // every stage but the sink
  std::array<std::function<void()>, kResponseStageCount - 1> refused_;
  ResponseCallback sink_;
};

}  // namespace nereid
