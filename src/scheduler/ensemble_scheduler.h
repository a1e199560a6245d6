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
#include "scheduler/ensemble_wiring.h"
#include "scheduler/scheduler.h"

namespace nereid {

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
  class Context;
  class StepLimiter;
  using Update = std::pair<int, uint32_t>;  // a tensor and the iteration just written
  struct Ready {
    int step = 0;
    std::unique_ptr<InferenceRequest> request;
    bool waited = false;  // waited in line for max_inflight_requests and holds its slot now
  };

  // Records a value of tensor 't' (with the context's lock): the tensor's next iteration.
  Update Write(Context& c, int t, EnsembleTensor tensor) const;
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

// The "ensemble" entry of SchedulerFactory.
struct SchedulerContext;
StatusOr<std::unique_ptr<Scheduler>> MakeEnsembleScheduler(SchedulerContext& context);

}  // namespace nereid
