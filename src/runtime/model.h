// Model: one loaded version of one model: its final config, its backend, its instances and its
// scheduler. The repository creates and stops it; requests hold a shared_ptr while in flight.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "config/model_config.h"
#include "metrics/model_stats.h"
#include "request/infer_api.h"
#include "request/inference_request.h"
#include "request/model_info.h"
#include "runtime/admission.h"
#include "runtime/backend_library.h"
#include "runtime/model_instance.h"
#include "runtime/response_cache.h"
#include "runtime/services.h"
#include "runtime/variant_controller.h"
#include "scheduler/scheduler.h"

namespace nereid {

class Model {
 public:
  // Loads a model version: runs the backend's model initialization (which may auto-complete the
  // config), validates the final config, creates the instances and the scheduler.
  // 'started', when given, sees the model before its backend is called (whoever may need to
  // Abort() a load that hangs).
  using StartedHook = std::function<void(const std::shared_ptr<Model>&)>;
  // 'services': what the server's models share (the infer link, the response cache, the rate
  // limiter, the clock).
  static StatusOr<std::shared_ptr<Model>> Create(
      const std::string& name, int64_t version, const std::string& model_dir,
      inference::ModelConfig config, const ConfigLocator& locator, std::shared_ptr<Backend> backend,
      bool allow_auto_complete, const Services& services, const StartedHook& started = nullptr);
  // The steps of Create before any instance starts (the backend's model initialization and its
  // auto-complete, defaults, validation, label files), for `nereid config check/generate`:
  // returns the config the model would run with.
  static StatusOr<inference::ModelConfig> CompleteConfig(const std::string& name, int64_t version,
                                                         const std::string& model_dir,
                                                         inference::ModelConfig config,
                                                         const ConfigLocator& locator,
                                                         std::shared_ptr<Backend> backend,
                                                         bool allow_auto_complete);
  ~Model();

  // Validates the request against the config and hands it to the scheduler, its response path
  // declared (runtime/request_pipeline.h). On error the caller still owns the request.
  Status Enqueue(std::unique_ptr<InferenceRequest>& request);

  // Finishes everything accepted, then finalizes instances and the backend model. Waits up to
  // 'timeout' for accepted requests to finish; past it the backend is told to abort
  // (NereidModelAbort) and given kAbortGrace more; threads that still do not return are abandoned
  // (logged). False when something was abandoned: the caller must then keep the model alive for
  // ever, since those threads use it. Idempotent (a second call returns true at once).
  bool Stop(std::chrono::milliseconds timeout = std::chrono::milliseconds::max());
  static constexpr std::chrono::seconds kAbortGrace{5};
  // NereidModelAbort, where the backend has it: the server gives up waiting on this model (a load
  // past its timeout). Any thread, any time.
  void Abort();
  bool aborted() const { return aborted_.load(); }
  // Something the model's files depend on (the folder of a load with file overrides), kept until
  // the model is destroyed, after its instances and stubs have stopped.
  void HoldFiles(std::shared_ptr<const void> files) { held_files_ = std::move(files); }

  const std::string& name() const { return name_; }
  int64_t version() const { return version_; }
  const std::string& version_path() const { return version_path_; }
  const inference::ModelConfig& config() const { return config_; }
  const std::string& config_json() const { return config_json_; }
  const std::vector<std::string>* Labels(const std::string& output) const;
  // Metadata endpoints (HTTP and gRPC): the platform name and the input/output tensors.
  const std::string& platform() const {
    return config_.platform().empty() ? config_.backend() : config_.platform();
  }
  std::vector<TensorMetadata> Metadata(bool inputs) const;
  // The backend that runs it (none for an ensemble: only instances call this).
  Backend& backend() const { return *backend_; }
  // Requests accepted and not completed: queued, executing, or held by the backend.
  size_t Pending() const;
  // Whether requests wait besides the one being completed (which Pending() still counts): the
  // frontends then hand a response's sending off the instance thread instead of doing it there.
  bool OthersPending() const { return Pending() > 1; }
  // The server this model's backend sends its own requests to (BLS, an ensemble's steps); while
  // no server serves it, requests are refused.
  const std::shared_ptr<InferApiLink>& infer_link() const { return infer_link_; }
  bool decoupled() const { return config_.model_transaction_policy().decoupled(); }
  // Device inputs go to the backend as they are only where it reads device memory: the native
  // engine with every instance a KIND_GPU one. Other models get them copied to the host first.
  bool reads_device_inputs() const { return ReadsDeviceInputs(config_); }
  ModelStats& stats() { return *stats_; }
  const ModelStats& stats() const { return *stats_; }
  // Its instances (none for an ensemble), fixed once it serves.
  const std::vector<std::unique_ptr<ModelInstance>>& instances() const { return instances_; }
  Scheduler* scheduler() const { return scheduler_.get(); }
  // The response cache when the config enables it (null: none), the nereid.max_queued_* limits
  // (null: none), and this load's number among the process's loads (part of cache keys).
  ResponseCache* cache() const { return cache_; }
  Admission* admission() const { return admission_.get(); }
  uint64_t generation() const { return generation_; }
  // Observers of this version's batches and requests (metrics/observers.h; statistics, the trace's
  // end and the variants' feedback are attached by Create). Before the model serves, or while
  // nothing executes: they are read without a lock.
  void AddExecutionObserver(std::shared_ptr<ExecutionObserver> observer) {
    executions_.Add(std::move(observer));
  }
  void AddRequestObserver(std::shared_ptr<RequestObserver> observer) {
    requests_.Add(std::move(observer));
  }
  // What the instances, the request pipeline and the scheduler report requests' ends to.
  RequestObserver& request_observers() { return requests_; }
  // The energy ledger's observer of this version, set before the model serves (the repository's
  // started hook): it sees every batch, prices the requests that ask for their energy and is the
  // energy model the scheduler's energy objective reads. Null without energy accounting.
  void SetEnergyObserver(std::shared_ptr<EnergyObserver> observer) {
    energy_ = observer;
    AddExecutionObserver(observer);
    AddRequestObserver(std::move(observer));
  }
  const EnergyObserver* energy() const { return energy_.get(); }
  // The scheduler requests go through (Create sets the one SchedulerFactory makes for the config).
  void SetScheduler(std::unique_ptr<Scheduler> scheduler);

  // Precision variants (NereidModelSetVariants, during the backend's model initialization); the
  // controller that picks one per execution exists once the model serves with any declared.
  Status SetVariants(std::vector<VariantInfo> variants);
  const VariantController* variants() const { return variants_.get(); }
  VariantController* variants() { return variants_.get(); }

  // Backend ABI support.
  void* backend_state = nullptr;
  Status SetConfigJson(const std::string& json);
  bool in_initialize() const { return in_initialize_; }

 private:
  Model() = default;
  static StatusOr<std::shared_ptr<Model>> Prepare(
      const std::string& name, int64_t version, const std::string& model_dir,
      inference::ModelConfig config, const ConfigLocator& locator, std::shared_ptr<Backend> backend,
      bool allow_auto_complete, const StartedHook& started = nullptr,
      const Services* services = nullptr);

  std::shared_ptr<const void> held_files_;  // first: destroyed after every other member
  std::string name_;
  int64_t version_ = 0;
  std::string version_path_;
  inference::ModelConfig config_;
  std::string config_json_;
  std::shared_ptr<Backend> backend_;
  std::shared_ptr<InferApiLink> infer_link_ = std::make_shared<InferApiLink>();  // Services'
  ExecutionObservers executions_;           // AddExecutionObserver's, the instances' too
  RequestObservers requests_;               // AddRequestObserver's
  std::shared_ptr<EnergyObserver> energy_;  // outlives the scheduler
  ResponseCache* cache_ = nullptr;          // the server's; outlives the models
  RateLimiter* rate_limiter_ = nullptr;     // the server's; outlives the models
  uint64_t generation_ = 0;  // this load's number among the process's loads (cache keys)
  std::vector<std::unique_ptr<ModelInstance>> instances_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelStats> stats_;
  std::vector<VariantInfo> declared_variants_;
  std::unique_ptr<VariantController> variants_;
  std::unique_ptr<Admission> admission_;  // null without nereid.max_queued_* limits
  std::map<std::string, std::vector<std::string>> labels_;
  bool in_initialize_ = false;
  bool allow_auto_complete_ = true;
  bool model_initialized_ = false;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> aborted_{false};  // Abort() was called: a load not yet in the backend stops
};

}  // namespace nereid
