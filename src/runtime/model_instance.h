// ModelInstance: one execution instance of a model (instance_group count N gives N of them), bound
// to a kind and device and driven by exactly one scheduler thread. It hands a batch of requests to
// the backend, which completes each request (now or later, from any thread) through Send/Complete.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nereid/backend.h"
#include "request/inference_request.h"
#include "runtime/execution_observer.h"
#include "scheduler/rate_limiter.h"
#include "scheduler/scheduler.h"

namespace nereid {

class Model;
struct BackendRequest;

class ModelInstance : public BatchExecutor {
 public:
  ModelInstance(Model* model, std::string name, NereidInstanceKind kind, int32_t device_id)
      : model_(model),
        name_(std::move(name)),
        kind_(kind),
        device_id_(device_id),
        placement_(kind == NEREID_INSTANCE_GPU     ? "gpu:" + std::to_string(device_id)
                   : kind == NEREID_INSTANCE_MODEL ? "model"
                                                   : "cpu"),
        requested_(placement_) {}

  Status Initialize();
  // Waits until 'deadline' for every request handed to the backend to be completed: true when
  // they all are.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline);
  // Finalizes the backend's instance when no request is outstanding; otherwise leaves its state
  // allocated rather than freeing it under a thread that may still use it (logged).
  void Finalize();
  // Hands the batch to the backend. Requests the backend completes before returning count in the
  // summary's latencies; the others complete later.
  ExecutionSummary Execute(std::vector<std::unique_ptr<InferenceRequest>>& batch) override;

  // NereidRequestSend / NereidRequestComplete.
  void Send(BackendRequest* request, bool final);
  void Complete(BackendRequest* request, Status status);
  // Requests handed to the backend whose Execute call has returned and that are not completed yet
  // (the scheduler no longer counts them).
  size_t Released() const { return released_.load(std::memory_order_relaxed); }

  // Where this instance reports its batches and its requests' ends (the model's observers), set
  // once warmup and profiling are over, before it serves: until then they count nowhere.
  void Observe(ExecutionObserver* executions, RequestObserver* requests) {
    executions_ = executions;
    requests_ = requests;
  }
  ExecutionObserver* executions() const { return executions_; }
  // The rate limiter's claim of this instance (--rate-limit=execution_count): each execution
  // waits for its resources first (queue time) and holds them while the backend executes.
  void SetRateLimit(std::shared_ptr<RateLimiter::Client> claim) { rate_limit_ = std::move(claim); }
  bool RateLimited() const override { return rate_limit_ != nullptr; }
  void AcquireTurn() override;
  void ReturnTurn() override;

  // The variant (an index among those the model declared) of the execution running now; a
  // forced one (>= 0) overrides the model's policy (its profiling, before the model serves).
  uint32_t variant() const { return variant_; }
  void ForceVariant(int32_t variant) { forced_variant_ = variant; }

  Model* model() const { return model_; }
  const std::string& name() const { return name_; }
  NereidInstanceKind kind() const { return kind_; }
  int32_t device_id() const { return device_id_; }
  // Where it runs ("openvino:CPU", "gpu:0", "cpu") and what its config asked for: the backend's
  // word (NereidInstanceSetPlacement, while it initializes the instance), else its kind's.
  void SetPlacement(std::string device, std::string requested) {
    placement_ = std::move(device);
    requested_ = std::move(requested);
  }
  const std::string& placement() const { return placement_; }
  const std::string& requested_placement() const { return requested_; }
  void* state = nullptr;  // backend-owned

 private:
  // Orders the outputs as requested (one the backend did not produce is left out, as in Triton)
  // and writes those bound for a client's region there.
  Status FinishOutputs(const InferenceRequest& request, InferenceResponse& response) const;
  void Deliver(InferenceRequest& request, std::unique_ptr<InferenceResponse> response);
  // Shows the observers the final successful response of 'r' before it goes (its energy).
  void ShowFinal(const BackendRequest& r, InferenceResponse& response) const;

  Model* model_;
  std::string name_;
  NereidInstanceKind kind_;
  int32_t device_id_;
  std::string placement_, requested_;  // written before the instance serves, read after
  bool initialized_ = false;
  std::mutex mu_;
  std::condition_variable idle_;
  size_t outstanding_ = 0;
  std::atomic<size_t> released_{0};
  ExecutionObserver* executions_ = nullptr;  // the model's (Observe)
  RequestObserver* requests_ = nullptr;
  std::shared_ptr<RateLimiter::Client> rate_limit_;
  uint32_t variant_ = 0;         // instance thread
  int32_t forced_variant_ = -1;  // instance thread (profiling) or before it serves
  bool turn_held_ = false;  // AcquireTurn ran and no Execute or ReturnTurn yet (instance thread)
};

}  // namespace nereid
