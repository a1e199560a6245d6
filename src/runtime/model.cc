#include "runtime/model.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/logging.h"
#include "config/config_validator.h"
#include "config/model_files.h"
#include "gpu/cuda_driver.h"
#include "nereid/backend_util.h"
#include "runtime/request_pipeline.h"
#include "runtime/warmup.h"
#include "scheduler/dynamic_batcher.h"
#include "scheduler/ensemble_scheduler.h"
#include "scheduler/scheduler_factory.h"

namespace nereid {
namespace {

// The precision variants' feedback: each successful request's latency, for the policy's window.
class VariantFeedback final : public RequestObserver {
 public:
  explicit VariantFeedback(VariantController* variants) : variants_(variants) {}
  void OnRequestEnd(const RequestRecord& record) override {
    if (record.end == RequestRecord::End::kSuccess)
      variants_->OnCompletion(record.end_ns, record.request_ns());
  }

 private:
  VariantController* variants_;  // the model's, which outlives its observers' calls
};

}  // namespace

StatusOr<std::shared_ptr<Model>> Model::Prepare(
    const std::string& name, int64_t version, const std::string& model_dir,
    inference::ModelConfig config, const ConfigLocator& locator, std::shared_ptr<Backend> backend,
    bool allow_auto_complete, const StartedHook& started, const Services* services) {
  std::shared_ptr<Model> model(new Model());
  if (services != nullptr) {
    model->infer_link_ = services->infer_link;
    model->cache_ = services->cache;
    model->rate_limiter_ = services->rate_limiter;
  }
  model->name_ = name;
  model->version_ = version;
  model->version_path_ = (std::filesystem::path(model_dir) / std::to_string(version)).string();
  model->config_ = std::move(config);
  model->config_json_ = ModelConfigToJson(model->config_);
  model->backend_ = std::move(backend);
  model->allow_auto_complete_ = allow_auto_complete;

  if (started) started(model);
  if (model->aborted_.load())
    return Unavailable("model '" + name + "': the load was aborted (past its timeout)");
  // An ensemble has no backend: its steps' models run on theirs.
  if (model->backend_) {
    model->in_initialize_ = true;
    Status init = StatusFromBackend(
        model->backend_->model_initialize(reinterpret_cast<NereidModel*>(model.get())));
    model->in_initialize_ = false;
    if (!init.ok()) return init;
    model->model_initialized_ = true;
  }

  // The backend may have auto-completed the config; defaults and validation apply to the result.
  FillConfigDefaults(name, &model->config_);
  const auto& driver = gpu::CudaDriver::Get();
  RETURN_IF_ERROR(ResolveInstanceGroups(
      name,
      GpuAvailability{driver.device_count(), driver.unavailable_reason(),
                      model->backend_ && model->backend_->supports_gpu(),
                      model->backend_ ? model->backend_->name() : model->platform(),
                      model->backend_ && model->backend_->gpu_fallback()},
      locator, &model->config_));
  RETURN_IF_ERROR(ValidateModelConfig(model->config_, name, locator));
  model->config_json_ = ModelConfigToJson(model->config_);
  ASSIGN_OR_RETURN(AdmissionLimits limits, ReadAdmissionLimits(model->config_));
  if (limits.enabled()) model->admission_ = std::make_unique<Admission>(limits);

  for (const auto& output : model->config_.output()) {
    if (output.label_filename().empty()) continue;
    auto labels = ReadLabelFile(model_dir, output.label_filename(),
                                "output '" + output.name() + "' label_filename");
    if (!labels.ok())
      return Status(labels.status().code(), "model '" + name + "': " + labels.status().message());
    model->labels_[output.name()] = std::move(labels).value();
  }
  if (model->config_.has_dynamic_batching()) {
    ASSIGN_OR_RETURN(LatencyGoalConfig goal, ReadLatencyGoal(model->config_));
    if (goal.goal_us > 0 && model->config_.max_batch_size() > ModelStats::kDirectBatchSlots)
      return InvalidArgument("model '" + name +
                             "': the latency goal keeps a cost per batch size "
                             "and supports max_batch_size up to " +
                             std::to_string(ModelStats::kDirectBatchSlots));
  }
  return model;
}

StatusOr<inference::ModelConfig> Model::CompleteConfig(const std::string& name, int64_t version,
                                                       const std::string& model_dir,
                                                       inference::ModelConfig config,
                                                       const ConfigLocator& locator,
                                                       std::shared_ptr<Backend> backend,
                                                       bool allow_auto_complete) {
  ASSIGN_OR_RETURN(std::shared_ptr<Model> model,
                   Prepare(name, version, model_dir, std::move(config), locator, std::move(backend),
                           allow_auto_complete));
  return model->config_;  // the model finalizes its backend state as it goes
}

StatusOr<std::shared_ptr<Model>> Model::Create(
    const std::string& name, int64_t version, const std::string& model_dir,
    inference::ModelConfig config, const ConfigLocator& locator, std::shared_ptr<Backend> backend,
    bool allow_auto_complete, const Services& services, const StartedHook& started) {
  ASSIGN_OR_RETURN(std::shared_ptr<Model> model,
                   Prepare(name, version, model_dir, std::move(config), locator, std::move(backend),
                           allow_auto_complete, started, &services));
  const Clock* clock = services.clock;
  // Placement as Triton's instance_group says: 'count' instances of a CPU group, 'count' per
  // listed GPU of a GPU group (ResolveInstanceGroups has resolved KIND_AUTO and checked the GPUs).
  std::vector<BatchExecutor*> instances;
  for (const auto& group : model->config_.instance_group()) {
    const bool gpu = group.kind() == inference::ModelInstanceGroup::KIND_GPU;
    std::vector<int32_t> devices;
    if (gpu)
      devices.assign(group.gpus().begin(), group.gpus().end());
    else
      devices.push_back(0);
    int index = 0;
    for (int32_t device : devices) {
      for (int i = 0; i < group.count(); ++i) {
        auto instance = std::make_unique<ModelInstance>(
            model.get(), group.name() + "_" + std::to_string(index++),
            gpu                                                         ? NEREID_INSTANCE_GPU
            : group.kind() == inference::ModelInstanceGroup::KIND_MODEL ? NEREID_INSTANCE_MODEL
                                                                        : NEREID_INSTANCE_CPU,
            device);
        if (model->rate_limiter_ != nullptr && group.has_rate_limiter()) {
          std::vector<RateLimiter::Resource> resources;
          for (const auto& r : group.rate_limiter().resources())
            resources.push_back({r.name(), r.global(), r.count()});
          auto claim = model->rate_limiter_->Register(std::move(resources), gpu ? device : 0,
                                                      group.rate_limiter().priority());
          if (!claim.ok()) return claim.status();
          instance->SetRateLimit(std::move(claim).value());
        }
        RETURN_IF_ERROR(instance->Initialize());
        instances.push_back(instance.get());
        model->instances_.push_back(std::move(instance));
      }
    }
  }
  // Warmup runs on every instance before the model serves; its executions go to statistics of
  // their own, dropped afterwards (and before any observer sees a batch).
  ASSIGN_OR_RETURN(std::vector<WarmupSample> warmup, ReadWarmupSamples(model->config_, model_dir));
  if (!warmup.empty()) {
    model->stats_ = std::make_unique<ModelStats>(model->config_.max_batch_size());
    std::vector<ModelInstance*> targets;
    for (auto& instance : model->instances_) targets.push_back(instance.get());
    RETURN_IF_ERROR(RunWarmup(model, warmup, targets));
  }
  if (!model->declared_variants_.empty() && !model->instances_.empty()) {
    // Measured before any observer sees a batch: the profile's executions count nowhere.
    bool gpu = false;
    for (auto& instance : model->instances_) gpu = gpu || instance->kind() == NEREID_INSTANCE_GPU;
    ASSIGN_OR_RETURN(VariantSettings settings, ReadVariantSettings(model->config_, gpu));
    if (model->stats_ == nullptr)
      model->stats_ = std::make_unique<ModelStats>(model->config_.max_batch_size());
    model->variants_ =
        std::make_unique<VariantController>(name, version, model->declared_variants_, settings);
    RETURN_IF_ERROR(model->variants_->ProfileAndStart(model, model->instances_.front().get()));
  }
  model->stats_ = std::make_unique<ModelStats>(model->config_.max_batch_size());
  if (!model->config_.response_cache().enable()) model->cache_ = nullptr;
  static std::atomic<uint64_t> loads{0};
  model->generation_ = ++loads;
  model->stats_->cache_enabled = model->cache_ != nullptr;
  auto stats_observer = std::make_shared<StatsObserver>(model->stats_.get());
  model->AddExecutionObserver(stats_observer);
  model->AddRequestObserver(stats_observer);
  if (model->variants_)
    model->AddRequestObserver(std::make_shared<VariantFeedback>(model->variants_.get()));
  model->AddRequestObserver(std::make_shared<TraceEndObserver>());
  for (auto& instance : model->instances_)
    instance->Observe(&model->executions_, &model->requests_);
  SchedulerContext context{
      model->config_, std::move(instances),     &model->requests_,    &model->executions_,
      clock,          model->infer_link_.get(), model->energy_.get(), model_dir};
  ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler, SchedulerFactory::Get().Create(context));
  model->SetScheduler(std::move(scheduler));
  return model;
}

void Model::SetScheduler(std::unique_ptr<Scheduler> scheduler) {
  scheduler_ = std::move(scheduler);
}

Model::~Model() { Stop(); }

size_t Model::Pending() const {
  size_t pending = scheduler_ ? scheduler_->Pending() : 0;
  for (const auto& instance : instances_) pending += instance->Released();
  return pending;
}

void Model::Abort() {
  aborted_.store(true);
  if (backend_ && backend_->model_abort)
    backend_->model_abort(reinterpret_cast<NereidModel*>(this));
}

bool Model::Stop(std::chrono::milliseconds timeout) {
  if (stopped_.exchange(true)) return true;
  if (variants_) variants_->Stop();  // its thread only reads the policy's inputs
  using Clock = std::chrono::steady_clock;
  const auto now = Clock::now();
  const auto deadline = timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(
                                       Clock::time_point::max() - now)
                            ? Clock::time_point::max()
                            : now + timeout;
  // Every wait below ends at the deadline; past it, the backend is told to give up once, and
  // what still waits gets the grace period.
  auto wait = [&](auto&& done) {
    if (done(deadline)) return true;
    if (!aborted_.load()) {  // Abort() sets it
      LOG_WARNING << "model '" << name_ << "' version " << version_ << ": requests still running "
                  << "when the unload timeout passed; aborting them";
      Abort();
    }
    return done(Clock::now() + kAbortGrace);
  };
  if (scheduler_ && !wait([&](Clock::time_point until) { return scheduler_->StopUntil(until); })) {
    scheduler_->Abandon();
    LOG_ERROR << "model '" << name_ << "' version " << version_
              << ": an instance thread did not return after the abort; it is abandoned, with "
                 "what it uses";
    return false;
  }
  bool finalized_all = true;
  for (auto& instance : instances_) {
    if (!wait([&](Clock::time_point until) { return instance->WaitIdle(until); }))
      finalized_all = false;
    instance->Finalize();  // logs and skips an instance with requests outstanding
  }
  if (!finalized_all) return false;
  instances_.clear();
  if (model_initialized_) {
    Status s = StatusFromBackend(backend_->model_finalize(reinterpret_cast<NereidModel*>(this)));
    if (!s.ok()) LOG_WARNING << "model '" << name_ << "' finalize: " << s.message();
  }
  return true;
}

const std::vector<std::string>* Model::Labels(const std::string& output) const {
  auto it = labels_.find(output);
  return it == labels_.end() ? nullptr : &it->second;
}

std::vector<TensorMetadata> Model::Metadata(bool inputs) const {
  std::vector<TensorMetadata> out;
  auto add = [&](const std::string& name, inference::DataType type, const auto& dims) {
    TensorMetadata t{name, FromConfigType(type), {}};
    if (config_.max_batch_size() > 0) t.shape.push_back(-1);
    t.shape.insert(t.shape.end(), dims.begin(), dims.end());
    out.push_back(std::move(t));
  };
  if (inputs)
    for (const auto& in : config_.input()) add(in.name(), in.data_type(), in.dims());
  else
    for (const auto& o : config_.output()) add(o.name(), o.data_type(), o.dims());
  return out;
}

Status Model::SetVariants(std::vector<VariantInfo> variants) {
  if (!in_initialize_)
    return Internal("NereidModelSetVariants may only be called during NereidModelInitialize");
  bool any = false;
  for (size_t i = 0; i < variants.size(); ++i) {
    any = any || variants[i].admitted;
    for (size_t j = 0; j < i; ++j)
      if (variants[j].name == variants[i].name)
        return InvalidArgument("model '" + name_ + "': variant '" + variants[i].name +
                               "' is declared twice");
  }
  if (!variants.empty() && !any)
    return InvalidArgument("model '" + name_ + "': no precision variant passed the accuracy guard");
  declared_variants_ = std::move(variants);
  return Status::Ok();
}

Status Model::SetConfigJson(const std::string& json) {
  if (!in_initialize_)
    return Internal("NereidModelSetConfigJson may only be called during NereidModelInitialize");
  if (!allow_auto_complete_)
    return InvalidArgument("model '" + name_ +
                           "': config.pbtxt is incomplete (inputs, outputs or max_batch_size "
                           "missing) and auto-complete is off (--strict-model-config)");
  ASSIGN_OR_RETURN(config_, ModelConfigFromJson(json));
  config_json_ = ModelConfigToJson(config_);
  return Status::Ok();
}

Status Model::Enqueue(std::unique_ptr<InferenceRequest>& request) {
  return EnterModel(*this, request);
}

}  // namespace nereid
