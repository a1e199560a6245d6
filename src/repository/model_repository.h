// ModelRepository: Triton's model repository on disk (<repo>/<model>/config.pbtxt and numeric
// version directories), the version policy, the control modes (none, explicit) and the repository
// extension (index, load, unload). Loads of one model never stop the others from serving or
// loading.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/backend_library.h"
#include "runtime/model.h"

namespace nereid {

enum class ModelControlMode { kNone, kExplicit };

struct RepositoryOptions {
  std::vector<std::string> paths;
  ModelControlMode control_mode = ModelControlMode::kNone;
  std::vector<std::string> startup_models;  // --load-model; "*" loads everything
  bool strict_readiness = true;
  // Backends may fill in what config.pbtxt leaves out (inputs, outputs, max_batch_size);
  // --strict-model-config / --disable-auto-complete-config turn it off.
  bool auto_complete = true;
  // Which engine runs a model configured for onnxruntime (--onnx-engine): ONNX Runtime; the
  // native engine; or the native engine when it supports every op of the model (and its instance
  // kind), else ONNX Runtime. A config with backend: "native" always gets the native engine.
  enum class OnnxEngine { kOnnxRuntime, kNative, kAuto };
  OnnxEngine onnx_engine = OnnxEngine::kOnnxRuntime;
};

struct IndexEntry {
  std::string name;
  int64_t version = -1;  // -1: never loaded (Triton then prints only the name)
  std::string state;
  std::string reason;
};

class ModelRepository {
 public:
  ModelRepository(RepositoryOptions options, BackendManager* backends);
  ~ModelRepository();

  // Loads what the control mode asks for at startup. Failures are recorded per model and logged;
  // they never stop the other models (the returned status only reports a broken repository path;
  // FailedModels() tells which models failed).
  Status LoadStartupModels();
  // "name: reason" of every model whose last load failed.
  std::vector<std::string> FailedModels() const;

  // The ready model 'name', newest ready version when 'version' < 0.
  StatusOr<std::shared_ptr<Model>> GetModel(const std::string& name, int64_t version) const;
  // Every loaded version of every model (statistics, metrics).
  std::vector<std::shared_ptr<Model>> LoadedModels() const;
  // The statistics extension's selection: every loaded model when 'name' is empty, one version when
  // 'version' >= 0, else every loaded version of 'name' (NotFound when there is none).
  StatusOr<std::vector<std::shared_ptr<Model>>> StatisticsModels(const std::string& name,
                                                                 int64_t version) const;
  // Ok in explicit control mode; otherwise the error load/unload requests get (both frontends).
  Status CheckExplicitControl() const;
  // Ready versions of 'name', ascending.
  std::vector<int64_t> ReadyVersions(const std::string& name) const;
  // Every version with its state, plus models present on disk that were never loaded.
  std::vector<IndexEntry> Index(bool ready_only) const;
  // (Re)loads a model; 'config_json' replaces config.pbtxt when not empty. Explicit mode only.
  Status Load(const std::string& name, const std::string& config_json);
  Status Unload(const std::string& name);
  // What a load of 'name' would find, without serving it: every config error (file, line,
  // field), or the config the model would run with (auto-completed by its backend, newest
  // version). For `nereid config check` and `nereid config generate`.
  struct CheckResult {
    std::vector<std::string> errors;
    inference::ModelConfig config;
  };
  CheckResult Check(const std::string& name) const;
  // Names of the model directories in the repository paths, sorted.
  std::set<std::string> ModelsOnDisk() const;
  // Server readiness: with strict readiness, every model asked for is ready.
  bool Ready() const;
  void StopAll();

 private:
  struct VersionEntry {
    std::string state;  // READY, UNAVAILABLE
    std::string reason;
    std::shared_ptr<Model> model;
  };
  struct ModelEntry {
    std::map<int64_t, VersionEntry> versions;
    std::string reason;  // model-level failure (bad config, no versions, ...)
  };

  // The steps of a load before any model object exists: the config read (config.pbtxt, the
  // load request's JSON, or empty for auto-complete), defaulted and checked as written; the
  // versions the policy selects, their model files, the backend.
  struct Plan {
    std::string model_dir;
    ParsedModelConfig parsed;
    std::vector<int64_t> versions;
    std::shared_ptr<Backend> backend;
    // --onnx-engine=auto: the backend that runs the model when 'backend' cannot (UNSUPPORTED).
    std::shared_ptr<Backend> fallback;
  };
  StatusOr<Plan> PlanLoad(const std::string& name, const std::string& config_json,
                          std::vector<std::string>* config_errors) const;
  Status LoadModel(const std::string& name, const std::string& config_json);
  // Model::Create with the plan's backend, then its fallback when the first cannot run the model.
  StatusOr<std::shared_ptr<Model>> CreateVersion(const std::string& name, int64_t version,
                                                 const Plan& plan) const;
  static void Retire(std::vector<std::shared_ptr<Model>>& retired);
  StatusOr<std::string> FindModelDir(const std::string& name) const;

  RepositoryOptions options_;
  BackendManager* backends_;
  std::mutex load_mu_;  // serializes load/unload; never held while serving inference
  mutable std::mutex mu_;
  std::map<std::string, ModelEntry> models_;
};

// The backend name a config asks for: "backend", else the one Triton's "platform" implies, else
// what the model file found implies. Fills Triton's auto-complete of platform/backend for ONNX
// models. Exposed for unit tests.
StatusOr<std::string> ResolveBackend(inference::ModelConfig* config, const std::string& model_dir,
                                     const std::vector<int64_t>& versions);

// The versions a policy selects from those present on disk, ascending.
StatusOr<std::vector<int64_t>> SelectVersions(const inference::ModelVersionPolicy& policy,
                                              const std::vector<int64_t>& available,
                                              const std::string& model_name);

}  // namespace nereid
