// EnsembleScheduler: Triton's ensembles (platform "ensemble"). A request is a data flow over the
// config's steps: each step is a request of its own to its model, sent through the server's
// inference path (routing, validation, that model's scheduler and statistics) as soon as every
// tensor it reads exists; steps that feed nothing the client asked for are never sent. Tensors
// pass between steps by reference (a step's output buffer is the next step's input, no copy).
// The ensemble answers once no step is left to run: its requested outputs, or the first step's
// error as "in ensemble 'E', <error>". With a decoupled step the ensemble is decoupled: each of
// that step's responses is a new iteration of its outputs, the steps after it run per iteration,
// and the ensemble answers per iteration, then with the final flag (Triton's rule).
// max_inflight_requests bounds each step's requests in flight; the rest wait in line, holding no
// thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "metrics/observers.h"
#include "request/infer_api.h"
#include "scheduler/scheduler.h"

namespace nereid {

// An ensemble's steps and tensors as its config wires them: each tensor by index, the step that
// writes it and those that read it, and the ensemble's own inputs and outputs.
struct EnsembleWiring {
  struct Step {
    std::string model;
    int64_t version = -1;
    std::vector<std::pair<std::string, int>> inputs;   // model input -> tensor index
    std::vector<std::pair<std::string, int>> outputs;  // model output -> tensor index
    std::vector<int> reads;  // distinct tensors among 'inputs' (one may feed two model inputs)
  };
  std::vector<std::string> tensors;  // by index
  std::vector<Step> steps;
  std::vector<int> producer;                                // by tensor: the step writing it, or -1
  std::vector<std::vector<int>> readers;                    // by tensor: the steps reading it
  std::vector<std::pair<std::string, int>> inputs;          // ensemble input -> tensor
  std::map<std::string, int> outputs;                       // ensemble output -> tensor
  std::map<std::string, std::vector<int64_t>> output_dims;  // ensemble output -> config dims
  std::vector<char> is_output;                              // by tensor

  // From a config the repository has checked (ensemble_config.h).
  static EnsembleWiring Of(const inference::ModelConfig& config);
};

class EnsembleScheduler final : public Scheduler {
 public:
  // 'link' reaches the server the steps are sent to; the ensemble's own requests and executions
  // are reported to 'requests' and 'executions' (its model's observers; null: nowhere).
  EnsembleScheduler(const inference::ModelConfig& config, RequestObserver* requests,
                    ExecutionObserver* executions, InferApiLink* link);
  ~EnsembleScheduler() override;

  Status Enqueue(std::unique_ptr<InferenceRequest>& request) override;
  void Stop() override;
  bool StopUntil(std::chrono::steady_clock::time_point deadline) override;
  void Abandon() override {}
  size_t Pending() const override;

 private:
  using Step = EnsembleWiring::Step;
  struct Tensor;
  class Context;
  class StepLimiter;
  using Update = std::pair<int, uint32_t>;  // a tensor and the iteration just written
  struct Ready {
    int step = 0;
    std::unique_ptr<InferenceRequest> request;
    bool waited = false;  // waited in line for max_inflight_requests and holds its slot now
  };

  // Records a value of tensor 't' (with the context's lock): the tensor's next iteration.
  Update Write(Context& c, int t, Tensor tensor) const;
  // The step requests that 'updates' make ready: each step whose tensors all exist at an updated
  // iteration, once per iteration (with the context's lock).
  void ReadyLocked(const std::shared_ptr<Context>& context, const std::vector<Update>& updates,
                   std::vector<Ready>* ready);
  std::unique_ptr<InferenceRequest> StepRequest(const std::shared_ptr<Context>& context, int index,
                                                uint32_t iteration);
  // Sends them (not under any lock: a step may complete at once); one whose step has no room
  // under max_inflight_requests waits in line instead, and goes when a slot is handed to it.
  void Launch(std::vector<Ready>& ready);
  void StepDone(const std::shared_ptr<Context>& context, int index,
                std::unique_ptr<InferenceResponse> response);
  // Decoupled ensembles: the response that 'updates' complete (every requested output written
  // at one iteration), if any (with the context's lock).
  std::unique_ptr<InferenceResponse> DecoupledResponseLocked(Context& c,
                                                             const std::vector<Update>& updates);
  // The requested outputs at 'iteration', Triton's sequence parameters, the model's name.
  Status FillOutputs(Context& c, uint32_t iteration, InferenceResponse& response) const;
  // Once nothing is left to run: the response (the error, or the final flag of a decoupled one)
  // and the statistics.
  void Finish(const std::shared_ptr<Context>& context);
  void Release();

  std::string name_;
  int64_t max_batch_size_ = 0;
  bool decoupled_ = false;  // a step is decoupled: the ensemble answers once per iteration
  RequestObserver* requests_;
  ExecutionObserver* executions_;
  InferApiLink* link_;
  const EnsembleWiring wiring_;
  std::vector<std::unique_ptr<StepLimiter>> limiters_;  // by step, with max_inflight_requests

  std::mutex launch_mu_;
  std::deque<Ready> outbox_;  // step requests to send, by whichever thread is sending
  bool launching_ = false;    // a thread is sending the outbox

  mutable std::mutex mu_;
  std::condition_variable idle_;
  size_t in_flight_ = 0;
  bool stopping_ = false;
};

// Triton's shape rule between an ensemble tensor and its reader, where one batches and the other
// does not: a tensor from a non-batching writer that matches a batching reader's 'dims' gets a
// batch dimension of 1; a tensor of batch 1 from a batching writer that does not match a
// non-batching reader's 'dims' loses it. Any other shape passes as it is.
std::vector<int64_t> EnsembleReshape(const std::vector<int64_t>& shape, bool from_batching,
                                     bool reader_batches, const std::vector<int64_t>& dims);

// The "ensemble" entry of SchedulerFactory.
struct SchedulerContext;
StatusOr<std::unique_ptr<Scheduler>> MakeEnsembleScheduler(SchedulerContext& context);

}  // namespace nereid
