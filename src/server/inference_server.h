// InferenceServer: the server behind ServerApi (what the frontends call) and InferApi (what
// backends and ensembles send their own requests through). It owns what is shared across
// protocols: the model repository it serves, the system shared-memory registry, and where
// repository control runs (ModelControl: load/unload are slow, never run on an I/O or gRPC thread,
// and one model's never waits on another's).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "repository/model_repository.h"
#include "request/infer_api.h"
#include "server/model_control.h"
#include "server/server_api.h"
#include "trace/trace.h"

namespace nereid {

class InferenceServer final : public ServerApi, public InferApi {
 public:
  explicit InferenceServer(ModelRepository* repository);
  ~InferenceServer() override;  // finishes the control requests waiting
  InferenceServer(const InferenceServer&) = delete;
  InferenceServer& operator=(const InferenceServer&) = delete;

  ModelRepository& repository() const { return *repository_; }

  // Shutting down soon (SIGTERM with a drain grace): Ready() is false from now on while requests
  // are still served, so that load balancers take this replica out first.
  void SetDraining() { draining_.store(true, std::memory_order_relaxed); }
  bool draining() const { return draining_.load(std::memory_order_relaxed); }

  // ---- ServerApi ----
  ServerMetadata GetServerMetadata() const override;
  bool Ready() const override;
  Status ModelReady(const std::string& name, int64_t version) const override;
  StatusOr<ModelMetadata> GetModelMetadata(const std::string& name, int64_t version) const override;
  StatusOr<std::string> ModelConfigJson(const std::string& name, int64_t version) const override;
  StatusOr<inference::ModelConfig> ModelConfig(const std::string& name,
                                               int64_t version) const override;
  StatusOr<std::vector<ModelStatistics>> Statistics(const std::string& name,
                                                    int64_t version) const override;
  Status Infer(const std::string& name, int64_t version, const RequestContext& context,
               const RequestDecoder& decode, std::shared_ptr<ResponseSink> sink) override;
  SharedMemoryRegistry& shared_memory() override { return shared_memory_; }
  StatusOr<trace::SettingMap> TraceSettings(const std::string& model,
                                            const trace::SettingUpdate* update) override;
  std::string MetricsText(bool gpu) const override;
  Status UpdateLogSetting(const std::string& key, const LogSettingValue& value) override;
  std::vector<std::pair<std::string, LogSettingValue>> LogSettings() const override;
  void RunControl(const std::string& model, size_t bytes, std::function<Status()> task,
                  std::function<void(Status)> done) override;
  void WaitForControlIdle() override;
  Status LoadModel(const std::string& name, const std::string& config_json,
                   const ModelFiles& files) override;
  Status UnloadModel(const std::string& name, bool dependents) override;
  std::vector<IndexEntry> RepositoryIndex(bool ready_only) const override;
  Status CheckRepositoryControl() const override;

  // ---- InferApi: a backend's own request, routed by its model name and version ----
  Status Submit(std::unique_ptr<InferenceRequest>& request) override;

 private:
  // Where 'model' runs: its instances, or an ensemble's steps' models' (each ready version).
  std::vector<InstancePlacement> Placement(const Model& model) const;
  // Validates and enqueues a routed request (request->model set). On error the caller still owns
  // the request. Its responses come through request->on_complete.
  Status Enqueue(std::unique_ptr<InferenceRequest>& request);
  // Samples a routed request for tracing and records the frontend's read on its trace.
  void StartTrace(InferenceRequest& request, const RequestContext& context) const;

  ModelRepository* repository_;
  SharedMemoryRegistry shared_memory_;
  ModelControl control_;
  std::atomic<bool> draining_{false};
  std::shared_ptr<trace::TraceManager> tracer_;  // the repository's services' (null: no tracing)
};

}  // namespace nereid
