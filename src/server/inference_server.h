// InferenceServer: the protocol-neutral server API that HTTP, gRPC (and later ensembles and BLS)
// call. It owns what is shared across protocols: the model repository it serves, the system
// shared-memory registry, and where repository control runs (ModelControl: load/unload are slow,
// never run on an I/O or gRPC thread, and one model's never waits on another's). Frontends only
// translate between wire and this API.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/logging.h"
#include "common/status.h"
#include "memory/shared_memory.h"
#include "repository/model_repository.h"
#include "request/inference_request.h"
#include "server/model_control.h"
#include "server/request_builder.h"
#include "trace/trace.h"

namespace nereid {

// Snapshots the frontends render, so that neither reads the core's classes.
struct ServerMetadata {
  std::string name, version;
  std::vector<std::string> extensions;
};

struct ModelMetadata {
  std::string name;
  std::vector<int64_t> versions;  // ready versions
  std::string platform;
  std::vector<TensorMetadata> inputs, outputs;
};

struct DurationSnapshot {
  uint64_t count = 0, ns = 0;
};
struct ModelStatistics {
  std::string name;
  int64_t version = 0;
  uint64_t last_inference_ms = 0, inference_count = 0, execution_count = 0;
  DurationSnapshot success, fail, queue, compute_input, compute_infer, compute_output;
  DurationSnapshot cache_hit, cache_miss;
  struct Batch {
    int64_t batch_size = 0;
    DurationSnapshot compute_input, compute_infer, compute_output;
  };
  std::vector<Batch> batches;  // batch sizes that have executed, ascending
  // Nereid's extension: the energy ledger's figures per scope the version ran on (docs/energy.md).
  struct Energy {
    std::string scope, source;
    double active_joules = 0, idle_joules = 0;
    uint64_t inferences = 0;
    double joules_per_inference = 0;  // active + idle per row of finished batches (0: none yet)
    double idle_share = 0;            // idle / (active + idle)
    double carbon_grams = -1;         // < 0: no carbon intensity known
    double active_watts = 0;          // the fitted power while its batches are busy (0: not yet)
  };
  std::vector<Energy> energy;
  // Nereid's extension: the precision variants, their guard results, measured table and policy
  // state (VariantController::Json); empty for a model without variants.
  std::string variants_json;
};

class InferenceServer : public InferApi {
 public:
  explicit InferenceServer(ModelRepository* repository);
  ~InferenceServer() override;  // finishes the control requests waiting
  InferenceServer(const InferenceServer&) = delete;
  InferenceServer& operator=(const InferenceServer&) = delete;

  ModelRepository& repository() const { return *repository_; }
  SharedMemoryRegistry& shared_memory() { return shared_memory_; }

  // ---- health and metadata ----
  ServerMetadata GetServerMetadata() const;
  // Every model the server must have is ready, and the server is not draining.
  bool Ready() const;
  // Shutting down soon (SIGTERM with a drain grace): Ready() is false from now on while requests
  // are still served, so that load balancers take this replica out first.
  void SetDraining() { draining_.store(true, std::memory_order_relaxed); }
  bool draining() const { return draining_.load(std::memory_order_relaxed); }
  // Ok when the version (-1: newest) is ready, else why not.
  Status ModelReady(const std::string& name, int64_t version) const;
  StatusOr<ModelMetadata> GetModelMetadata(const std::string& name, int64_t version) const;
  // The model configuration in Triton's JSON and as the protobuf message.
  StatusOr<std::string> ModelConfigJson(const std::string& name, int64_t version) const;
  StatusOr<inference::ModelConfig> ModelConfig(const std::string& name, int64_t version) const;
  // One model version (name and version given), every version of a model (version -1), or every
  // model (empty name).
  StatusOr<std::vector<ModelStatistics>> Statistics(const std::string& name, int64_t version) const;

  // ---- inference ----
  // The model a request names (version -1: newest ready), or NOT_FOUND / UNAVAILABLE.
  StatusOr<std::shared_ptr<Model>> GetModel(const std::string& name, int64_t version) const;
  // The model a request to 'endpoint' names: GetModel, and refused when it cannot answer there
  // (a decoupled model over HTTP or unary gRPC).
  StatusOr<std::shared_ptr<Model>> ModelFor(const std::string& name, int64_t version,
                                            InferEndpoint endpoint) const;
  // The request a frontend decoded, put together for 'model' (from ModelFor), shared-memory
  // tensors resolved in this server's registry (request_builder.h), and routed to it.
  StatusOr<std::unique_ptr<InferenceRequest>> BuildRequest(RequestDescription description,
                                                           InferEndpoint endpoint,
                                                           std::shared_ptr<Model> model) const;
  // Validates and enqueues a routed request (request->model set). On error the caller still owns
  // the request. Its responses come through request->on_complete, with outputs the client asked
  // to classify already classified.
  Status Infer(std::unique_ptr<InferenceRequest>& request);

  // A backend's own request (InferApi): routed by its model name and version, then Infer.
  Status Submit(std::unique_ptr<InferenceRequest>& request) override;

  // ---- tracing (Triton's trace extension, trace/trace.h) ----
  void SetTracer(std::shared_ptr<trace::TraceManager> tracer) { tracer_ = std::move(tracer); }
  trace::TraceManager* tracer() const { return tracer_.get(); }
  // Samples a routed request for tracing ('traceparent': the caller's W3C header, if it sent one);
  // the trace, also set on the request, or null.
  std::shared_ptr<trace::Trace> StartTrace(InferenceRequest& request,
                                           std::optional<std::string_view> traceparent) const;
  // The settings of 'model' ("" : the global ones) after 'update' (empty: a read). An unknown
  // model: "Request for unknown model : <name>".
  StatusOr<trace::SettingMap> TraceSettings(const std::string& model,
                                            const trace::SettingUpdate* update);

  // ---- metrics ----
  // The Prometheus text of every loaded model ('gpu': with the per-GPU families).
  std::string MetricsText(bool gpu) const;

  // ---- logging (Triton's log settings) ----
  Status UpdateLogSetting(const std::string& key, const LogSettingValue& value);
  std::vector<std::pair<std::string, LogSettingValue>> LogSettings() const;

  // ---- repository control ----
  // Runs 'task' in the control lane of 'model' and hands its result to 'done' (on that lane's
  // thread, or at once on this one when the request is refused); 'bytes' is what it holds while
  // waiting (ModelControl).
  void RunControl(const std::string& model, size_t bytes, std::function<Status()> task,
                  std::function<void(Status)> done);
  // Blocks until no control task is queued or running (a frontend stopping waits here, so that no
  // task's 'done' reaches it after it is gone).
  void WaitForControlIdle();
  // 'files': a load request's "file:<path>" parameters (ModelRepository::Load).
  Status LoadModel(const std::string& name, const std::string& config_json,
                   const ModelRepository::ModelFiles& files = {});
  // 'dependents': Triton's unload_dependents (an ensemble's step models go with it).
  Status UnloadModel(const std::string& name, bool dependents = false);
  std::vector<IndexEntry> RepositoryIndex(bool ready_only) const;
  // Whether load/unload are allowed (explicit model control mode).
  Status CheckRepositoryControl() const;

 private:
  ModelRepository* repository_;
  SharedMemoryRegistry shared_memory_;
  ModelControl control_;
  std::atomic<bool> draining_{false};
  std::shared_ptr<trace::TraceManager> tracer_;
};

}  // namespace nereid
