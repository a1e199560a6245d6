// EnsembleScheduler: Triton's ensembles (platform "ensemble"). A request is a data flow over the
// config's steps: each step is a request of its own to its model, sent through the server's
// inference path (routing, validation, that model's scheduler and statistics) as soon as every
// tensor it reads exists; steps that feed nothing the client asked for are never sent. Tensors
// pass between steps by reference (a step's output buffer is the next step's input, no copy).
// The ensemble answers once no step is left to run: its requested outputs, or the first step's
// error as "in ensemble 'E', <error>".
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "metrics/model_stats.h"
#include "request/infer_api.h"
#include "scheduler/scheduler.h"

namespace nereid {

class EnsembleScheduler final : public Scheduler {
 public:
  // 'link' reaches the server the steps are sent to; 'stats' are the ensemble's own.
  EnsembleScheduler(const inference::ModelConfig& config, ModelStats* stats, InferApiLink* link);
  ~EnsembleScheduler() override;

  Status Enqueue(std::unique_ptr<InferenceRequest>& request) override;
  void Stop() override;
  bool StopUntil(std::chrono::steady_clock::time_point deadline) override;
  void Abandon() override {}
  size_t Pending() const override;

 private:
  struct Step {
    std::string model;
    int64_t version = -1;
    std::vector<std::pair<std::string, int>> inputs;   // model input -> tensor index
    std::vector<std::pair<std::string, int>> outputs;  // model output -> tensor index
    int tensors_read = 0;  // distinct tensors among 'inputs' (one may feed two model inputs)
  };
  struct Tensor;
  class Context;

  // Sends step 'index' of 'context' (not under any lock: a step may complete at once).
  void Launch(const std::shared_ptr<Context>& context, int index);
  void StepDone(const std::shared_ptr<Context>& context, int index,
                std::unique_ptr<InferenceResponse> response);
  // Answers the client once nothing is left to run (with the context's lock released).
  void Finish(const std::shared_ptr<Context>& context);
  void Release();

  std::string name_;
  int64_t max_batch_size_ = 0;
  ModelStats* stats_;
  InferApiLink* link_;
  std::vector<std::string> tensors_;  // by index
  std::vector<Step> steps_;
  std::vector<int> producer_;                        // by tensor: the step writing it, or -1
  std::vector<std::vector<int>> readers_;            // by tensor: the steps reading it
  std::vector<std::pair<std::string, int>> inputs_;  // ensemble input -> tensor
  std::map<std::string, int> outputs_;               // ensemble output -> tensor

  mutable std::mutex mu_;
  std::condition_variable idle_;
  size_t in_flight_ = 0;
  bool stopping_ = false;
};

// The "ensemble" entry of SchedulerFactory.
struct SchedulerContext;
StatusOr<std::unique_ptr<Scheduler>> MakeEnsembleScheduler(SchedulerContext& context);

}  // namespace nereid
