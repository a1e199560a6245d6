#include "server/inference_server.h"

#include "common/logging.h"
#include "gpu/cuda_driver.h"
#include "metrics/model_stats.h"
#include "metrics/prometheus.h"
#include "runtime/backend_abi.h"
#include "runtime/model.h"
#include "runtime/server_info.h"

namespace nereid {

InferenceServer::InferenceServer(ModelRepository* repository)
    : repository_(repository), tracer_(repository->services().tracer) {
  repository_->infer_link()->Set(this);
  // Backends that make requests without naming their model (ABI 2.2) reach this server.
  SetDefaultInferLink(repository_->infer_link());
}

InferenceServer::~InferenceServer() {
  repository_->infer_link()->Set(nullptr);  // waits for submissions under way
}

Status InferenceServer::Submit(std::unique_ptr<InferenceRequest>& request) {
  ASSIGN_OR_RETURN(request->model,
                   repository_->GetModel(request->model_name, request->model_version));
  return Enqueue(request);
}

namespace {
DurationSnapshot Snap(const DurationStat& d) {
  return {d.count.load(std::memory_order_relaxed), d.ns.load(std::memory_order_relaxed)};
}
}  // namespace

ServerMetadata InferenceServer::GetServerMetadata() const {
  return {kServerName, kServerVersion, ServerExtensions()};
}

bool InferenceServer::Ready() const { return !draining() && repository_->Ready(); }

Status InferenceServer::Infer(const std::string& name, int64_t version,
                              const RequestContext& context, const RequestDecoder& decode,
                              std::shared_ptr<ResponseSink> sink) {
  ASSIGN_OR_RETURN(std::shared_ptr<Model> model, repository_->GetModel(name, version));
  RETURN_IF_ERROR(CheckEndpoint(*model, context.endpoint));
  ASSIGN_OR_RETURN(RequestDescription description, decode());
  ASSIGN_OR_RETURN(std::unique_ptr<InferenceRequest> request,
                   BuildInferenceRequest(std::move(description), context.endpoint, model->config(),
                                         &shared_memory_));
  request->model_name = model->name();
  request->model_version = model->version();
  request->cancel = context.cancel;
  const bool decoupled = model->decoupled();
  // The request keeps its model alive while its responses are delivered.
  request->on_complete = [sink, model = model.get()](std::unique_ptr<InferenceResponse> response) {
    sink->OnResponse(std::move(response), model->OthersPending());
  };
  request->model = std::move(model);
  StartTrace(*request, context);
  sink->OnStarted({decoupled, request->trace});
  return Enqueue(request);
}

Status InferenceServer::ModelReady(const std::string& name, int64_t version) const {
  return repository_->GetModel(name, version).status();
}

StatusOr<ModelMetadata> InferenceServer::GetModelMetadata(const std::string& name,
                                                          int64_t version) const {
  ASSIGN_OR_RETURN(std::shared_ptr<Model> model, repository_->GetModel(name, version));
  ModelMetadata m;
  m.name = model->name();
  m.versions = repository_->ReadyVersions(model->name());
  m.platform = model->platform();
  m.inputs = model->Metadata(true);
  m.outputs = model->Metadata(false);
  m.placement = Placement(*model);
  return m;
}

std::vector<InstancePlacement> InferenceServer::Placement(const Model& model) const {
  std::vector<InstancePlacement> out;
  auto place = [&out](const Model& m) {
    for (const auto& instance : m.instances())
      out.push_back({m.name(), instance->name(),
                     instance->kind() == NEREID_INSTANCE_GPU     ? "KIND_GPU"
                     : instance->kind() == NEREID_INSTANCE_MODEL ? "KIND_MODEL"
                                                                 : "KIND_CPU",
                     instance->placement(), instance->requested_placement()});
  };
  place(model);
  for (const auto& step : model.config().ensemble_scheduling().step()) {
    auto steps = repository_->StatisticsModels(step.model_name(), step.model_version());
    if (steps.ok())
      for (const auto& m : *steps) place(*m);
  }
  return out;
}

StatusOr<std::string> InferenceServer::ModelConfigJson(const std::string& name,
                                                       int64_t version) const {
  ASSIGN_OR_RETURN(std::shared_ptr<Model> model, repository_->GetModel(name, version));
  return model->config_json();
}

StatusOr<inference::ModelConfig> InferenceServer::ModelConfig(const std::string& name,
                                                              int64_t version) const {
  ASSIGN_OR_RETURN(std::shared_ptr<Model> model, repository_->GetModel(name, version));
  return model->config();
}

StatusOr<std::vector<ModelStatistics>> InferenceServer::Statistics(const std::string& name,
                                                                   int64_t version) const {
  ASSIGN_OR_RETURN(std::vector<std::shared_ptr<Model>> models,
                   repository_->StatisticsModels(name, version));
  std::vector<ModelStatistics> out;
  out.reserve(models.size());
  const energy::EnergyLedger* ledger = repository_->energy_ledger();
  const std::vector<energy::ModelEnergy> energy =
      ledger != nullptr ? ledger->Models() : std::vector<energy::ModelEnergy>();
  const bool carbon = ledger != nullptr && ledger->carbon_known();
  for (const auto& m : models) {
    const ModelStats& st = m->stats();
    ModelStatistics s;
    s.name = m->name();
    s.version = m->version();
    s.last_inference_ms = st.last_inference_ms.load(std::memory_order_relaxed);
    s.inference_count = st.inference_count.load(std::memory_order_relaxed);
    s.execution_count = st.execution_count.load(std::memory_order_relaxed);
    s.success = Snap(st.success);
    s.fail = Snap(st.fail);
    s.queue = Snap(st.queue);
    s.compute_input = Snap(st.compute_input);
    s.compute_infer = Snap(st.compute_infer);
    s.compute_output = Snap(st.compute_output);
    s.cache_hit = Snap(st.cache_hit);
    s.cache_miss = Snap(st.cache_miss);
    st.ForEachBatch([&](int64_t b, const ModelStats::BatchStat& bs) {
      s.batches.push_back(
          {b, Snap(bs.compute_input), Snap(bs.compute_infer), Snap(bs.compute_output)});
    });
    for (const energy::ModelEnergy& e : energy) {
      if (e.model != s.name || e.version != s.version || e.inferences == 0) continue;
      ModelStatistics::Energy& out_e = s.energy.emplace_back();
      out_e.scope = e.scope;
      out_e.source = e.source;
      out_e.active_joules = e.active_joules;
      out_e.idle_joules = e.idle_joules;
      out_e.inferences = e.inferences;
      if (e.per_inference_count > 0)
        out_e.joules_per_inference =
            e.per_inference_sum / static_cast<double>(e.per_inference_count);
      const double total = e.active_joules + e.idle_joules;
      out_e.idle_share = total > 0 ? e.idle_joules / total : 0;
      if (carbon) out_e.carbon_grams = e.carbon_grams;
      out_e.active_watts = e.active_watts;
    }
    if (const VariantController* v = m->variants()) s.variants_json = v->Json();
    s.placement = Placement(*m);
    out.push_back(std::move(s));
  }
  return out;
}

std::string InferenceServer::MetricsText(bool gpu) const {
  std::vector<ModelMetricsSource> sources;
  for (std::shared_ptr<Model>& m : repository_->LoadedModels()) {
    ModelMetricsSource s;
    s.name = m->name();
    s.version = m->version();
    s.stats = &m->stats();
    s.pending = m->Pending();
    if (const VariantController* v = m->variants()) {
      for (const VariantInfo& info : v->declared())
        if (info.admitted) s.variants.push_back(info.name);
      s.active_variant = v->declared()[v->active()].name;
      s.variant_switches = v->switches();
    }
    s.owner = std::move(m);
    sources.push_back(std::move(s));
  }
  std::string text = RenderPrometheus(sources, gpu);
  if (const auto* energy = repository_->energy_ledger()) text += energy->PrometheusText();
  return text;
}

Status InferenceServer::UpdateLogSetting(const std::string& key, const LogSettingValue& value) {
  return ApplyLogSetting(key, value);
}

std::vector<std::pair<std::string, LogSettingValue>> InferenceServer::LogSettings() const {
  return CurrentLogSettings();
}

std::vector<IndexEntry> InferenceServer::RepositoryIndex(bool ready_only) const {
  return repository_->Index(ready_only);
}

Status InferenceServer::CheckRepositoryControl() const {
  return repository_->CheckExplicitControl();
}

Status InferenceServer::Enqueue(std::unique_ptr<InferenceRequest>& request) {
  std::shared_ptr<Model> model = request->model;
  if (!model) return Internal("request was not routed to a model");
  // Device inputs (a client's CUDA region, an ensemble step's output) reach the native engine's
  // GPU instances as device memory; other models get them copied to the host first (counted).
  if (!model->reads_device_inputs())
    for (InferInput& in : request->inputs) {
      if (in.location.type != MemoryType::kGpu) continue;
      std::vector<uint8_t> host(in.byte_size);
      RETURN_IF_ERROR(
          gpu::CudaDriver::Get().CopyToHost(static_cast<int>(in.location.device), host.data(),
                                            reinterpret_cast<uint64_t>(in.data), in.byte_size));
      in.Own(std::move(host));
      CountCopy(CopyKind::kInput, in.byte_size);
    }
  return model->Enqueue(request);
}

void InferenceServer::StartTrace(InferenceRequest& request, const RequestContext& context) const {
  if (!tracer_) return;
  std::optional<trace::SpanContext> caller;
  if (context.traceparent) caller = trace::ParseTraceparent(*context.traceparent);
  request.trace = tracer_->Start(request.model_name, request.model_version, caller);
  if (!request.trace) return;
  request.trace->SetRequestId(request.id);
  const bool http = context.endpoint == InferEndpoint::kHttp;
  request.trace->Record(http ? "HTTP_RECV_START" : "GRPC_WAITREAD_START", context.read_start_ns);
  request.trace->Record(http ? "HTTP_RECV_END" : "GRPC_WAITREAD_END", context.read_end_ns);
}

StatusOr<trace::SettingMap> InferenceServer::TraceSettings(const std::string& model,
                                                           const trace::SettingUpdate* update) {
  if (!tracer_) return Unavailable("the server does not support tracing");
  if (!model.empty() && !repository_->GetModel(model, -1).ok())
    return InvalidArgument("Request for unknown model : " + model);
  if (update == nullptr) return tracer_->Get(model);
  return tracer_->Update(model, *update);
}

void InferenceServer::RunControl(const std::string& model, size_t bytes,
                                 std::function<Status()> task, std::function<void(Status)> done) {
  // A name no model can have is refused before it takes a place in a lane.
  if (Status named = CheckModelName(model); !named.ok()) return done(std::move(named));
  control_.Run(model, bytes, std::move(task), std::move(done));
}

Status InferenceServer::LoadModel(const std::string& name, const std::string& config_json,
                                  const ModelFiles& files) {
  return repository_->Load(name, config_json, files);
}

Status InferenceServer::UnloadModel(const std::string& name, bool dependents) {
  return repository_->Unload(name, dependents);
}

void InferenceServer::WaitForControlIdle() { control_.WaitIdle(); }

}  // namespace nereid
