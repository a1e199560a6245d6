// ServerApi: all that a frontend may ask of the server, and all that it sees of it. HTTP and gRPC
// translate their wire to these calls and render what comes back; the server behind (the
// repository, models, schedulers, the energy ledger) stays out of their sight, which
// scripts/check_layers.py checks on every frontend file's whole include closure. InferenceServer
// (server/inference_server.h) implements it.
//
// One inference is one call: Infer takes where the request came from (RequestContext), a decoder
// that turns the wire into a RequestDescription once the model is found (an unknown model is
// refused before its body is decoded, as in Triton), and the ResponseSink its responses go to.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "common/status.h"
#include "config/model_config.h"
#include "memory/shared_memory.h"
#include "request/inference_request.h"
#include "request/model_info.h"
#include "server/request_builder.h"
#include "trace/trace.h"

namespace nereid {

// ---- snapshots the frontends render ----

struct ServerMetadata {
  std::string name, version;
  std::vector<std::string> extensions;
};

// Nereid's extension: where an instance runs (its backend's word, else its kind's), in the
// metadata and the statistics (docs/placement.md).
struct InstancePlacement {
  std::string model;  // the instance's model (an ensemble's step's)
  std::string instance, kind, device, requested;
};

struct ModelMetadata {
  std::string name;
  std::vector<int64_t> versions;  // ready versions
  std::string platform;
  std::vector<TensorMetadata> inputs, outputs;
  // The version's instances, or an ensemble's steps' models' (each ready version).
  std::vector<InstancePlacement> placement;
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
  // Nereid's extension: as ModelMetadata::placement.
  std::vector<InstancePlacement> placement;
  // Nereid's extension: the precision variants, their guard results, measured table and policy
  // state (VariantController::Json); empty for a model without variants.
  std::string variants_json;
};

// ---- inference ----

// Where and how a request reached the server, beyond what its wire says.
struct RequestContext {
  InferEndpoint endpoint = InferEndpoint::kHttp;
  std::shared_ptr<CancelFlag> cancel;  // null: the request cannot be cancelled
  // The caller's W3C traceparent, if it sent one (read during the call only).
  std::optional<std::string_view> traceparent;
  // When the frontend began and finished reading the request: a sampled trace records them as
  // HTTP_RECV_START/END or GRPC_WAITREAD_START/END.
  uint64_t read_start_ns = 0, read_end_ns = 0;
};

// Turns the request's wire into its description; called at most once, during Infer.
using RequestDecoder = std::function<StatusOr<RequestDescription>()>;

// Where a request's responses go. A frontend implements it per request (or per connection) and
// hands it to Infer, which keeps it until the last response has gone.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // Once the request is built and before it is enqueued, so before any response: whether its
  // model is decoupled (several responses, the last final) and, when the request is sampled, its
  // trace, on which the frontend records its sending. When Infer fails after this, nothing else
  // comes.
  struct Started {
    bool decoupled = false;
    std::shared_ptr<trace::Trace> trace;
  };
  virtual void OnStarted(const Started& started) {}
  // Each response, on whichever thread completes the request (an instance thread, a backend's
  // own). 'others_pending': more requests of the model wait, so this thread is worth more to
  // them than to the write: a frontend hands it to one of its own.
  virtual void OnResponse(std::unique_ptr<InferenceResponse> response, bool others_pending) = 0;
};

class ServerApi {
 public:
  virtual ~ServerApi() = default;

  // ---- health and metadata ----
  virtual ServerMetadata GetServerMetadata() const = 0;
  // Every model the server must have is ready, and the server is not draining.
  virtual bool Ready() const = 0;
  // Ok when the version (-1: newest) is ready, else why not.
  virtual Status ModelReady(const std::string& name, int64_t version) const = 0;
  virtual StatusOr<ModelMetadata> GetModelMetadata(const std::string& name,
                                                   int64_t version) const = 0;
  // The model configuration in Triton's JSON and as the protobuf message.
  virtual StatusOr<std::string> ModelConfigJson(const std::string& name, int64_t version) const = 0;
  virtual StatusOr<inference::ModelConfig> ModelConfig(const std::string& name,
                                                       int64_t version) const = 0;
  // One model version (name and version given), every version of a model (version -1), or every
  // model (empty name).
  virtual StatusOr<std::vector<ModelStatistics>> Statistics(const std::string& name,
                                                            int64_t version) const = 0;

  // ---- inference ----
  // Finds the model 'name' / 'version' (-1: newest ready) names and checks that it may answer at
  // 'context.endpoint', decodes the request ('decode'), builds it (request_builder.h), samples it
  // for tracing and enqueues it; its responses go to 'sink'. An error means the request was not
  // accepted and 'sink' hears nothing more.
  virtual Status Infer(const std::string& name, int64_t version, const RequestContext& context,
                       const RequestDecoder& decode, std::shared_ptr<ResponseSink> sink) = 0;

  // ---- shared memory (the system and CUDA shared-memory extensions) ----
  virtual SharedMemoryRegistry& shared_memory() = 0;

  // ---- tracing (Triton's trace extension) ----
  // The settings of 'model' ("" : the global ones) after 'update' (empty: a read). An unknown
  // model: "Request for unknown model : <name>".
  virtual StatusOr<trace::SettingMap> TraceSettings(const std::string& model,
                                                    const trace::SettingUpdate* update) = 0;

  // ---- metrics ----
  // The Prometheus text of every loaded model ('gpu': with the per-GPU families).
  virtual std::string MetricsText(bool gpu) const = 0;

  // ---- logging (Triton's log settings) ----
  virtual Status UpdateLogSetting(const std::string& key, const LogSettingValue& value) = 0;
  virtual std::vector<std::pair<std::string, LogSettingValue>> LogSettings() const = 0;

  // ---- repository control ----
  // Runs 'task' in the control lane of 'model' and hands its result to 'done' (on that lane's
  // thread, or at once on this one when the request is refused); 'bytes' is what it holds while
  // waiting (ModelControl).
  virtual void RunControl(const std::string& model, size_t bytes, std::function<Status()> task,
                          std::function<void(Status)> done) = 0;
  // Blocks until no control task is queued or running (a frontend stopping waits here, so that no
  // task's 'done' reaches it after it is gone).
  virtual void WaitForControlIdle() = 0;
  // 'files': a load request's "file:<path>" parameters.
  virtual Status LoadModel(const std::string& name, const std::string& config_json,
                           const ModelFiles& files) = 0;
  // 'dependents': Triton's unload_dependents (an ensemble's step models go with it).
  virtual Status UnloadModel(const std::string& name, bool dependents) = 0;
  virtual std::vector<IndexEntry> RepositoryIndex(bool ready_only) const = 0;
  // Whether load/unload are allowed (explicit model control mode).
  virtual Status CheckRepositoryControl() const = 0;
};

}  // namespace nereid
