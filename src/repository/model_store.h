// ModelStore: Triton's model repositories on disk, as a load reads them: which models are there
// and where, a model directory's fingerprint, and a load's plan (the config read, defaulted and
// checked as written; the versions its policy selects; the backend that runs them, resolved from
// what the installed backends declare). It reads files and builds no model. ModelRepository
// (model_repository.h) loads what it plans.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/model_config.h"
#include "runtime/backend_library.h"

namespace nereid {

enum class ModelControlMode { kNone, kExplicit, kPoll };

struct RepositoryOptions {
  std::vector<std::string> paths;
  ModelControlMode control_mode = ModelControlMode::kNone;
  std::vector<std::string> startup_models;  // --load-model; "*" loads everything
  bool strict_readiness = true;
  // Backends may fill in what config.pbtxt leaves out (inputs, outputs, max_batch_size);
  // --strict-model-config / --disable-auto-complete-config turn it off.
  bool auto_complete = true;
  // Which library runs a model whose backend another library stands in for (declares it as an
  // alias; --onnx-engine, named for its one case today: the native engine for onnxruntime):
  // "" the backend's own library; a backend name: that library where it stands in; "auto": the
  // stand-in when it can run the model, else the backend's own (docs/onnxruntime.md).
  std::string onnx_engine;
  // A load that has not finished after this long fails (its backend is told to abort it); an
  // unloaded model whose requests have not finished after unload_timeout is aborted too
  // (--model-load-timeout-secs, --model-unload-timeout-secs).
  std::chrono::milliseconds load_timeout{std::chrono::seconds(600)};
  std::chrono::milliseconds unload_timeout{std::chrono::seconds(30)};
  // Poll mode: how often the repository is looked at (--repository-poll-secs; 0: never after
  // start-up).
  std::chrono::milliseconds poll_period{std::chrono::seconds(15)};
};

class ModelStore {
 public:
  // 'options' and 'backends' outlive the store.
  ModelStore(const RepositoryOptions& options, BackendManager* backends)
      : options_(options), backends_(backends) {}

  // Names of the model directories in the repository paths, sorted.
  std::set<std::string> ModelsOnDisk() const;
  // The directory of model 'name' (the first repository path holding it), or NOT_FOUND.
  StatusOr<std::string> FindModelDir(const std::string& name) const;
  // A model directory's fingerprint: a hash of every file's relative path, size and modification
  // time below it (at most kMaxFiles files; the rest are not looked at). Poll mode compares them,
  // and a load without overrides of a model loaded from an unchanged directory is not redone.
  static uint64_t Fingerprint(const std::string& directory);
  static constexpr size_t kMaxFiles = 10000;

  // The steps of a load before any model object exists: the config read (config.pbtxt, the
  // load request's JSON, or empty for auto-complete), defaulted and checked as written; the
  // versions the policy selects, their model files, the backend. 'override_dir': the folder of a
  // load with file overrides (empty: the repository's). Config errors also go to 'config_errors'.
  struct Plan {
    std::string model_dir;
    ParsedModelConfig parsed;
    std::vector<int64_t> versions;
    std::shared_ptr<Backend> backend;
    // --onnx-engine=auto: the backend that runs the model when 'backend' cannot (UNSUPPORTED).
    std::shared_ptr<Backend> fallback;
  };
  StatusOr<Plan> PlanLoad(const std::string& name, const std::string& config_json,
                          std::vector<std::string>* config_errors,
                          const std::string& override_dir = "") const;

  // What a load of 'name' would find, without serving it: every config error (file, line,
  // field), or the config the model would run with (auto-completed by its backend, newest
  // version). For `nereid config check` and `nereid config generate`.
  struct CheckResult {
    std::vector<std::string> errors;
    inference::ModelConfig config;
  };
  CheckResult Check(const std::string& name) const;

 private:
  const RepositoryOptions& options_;
  BackendManager* backends_;
};

// The backend a config asks for, from what the installed backends declare (NereidBackendPlatforms,
// NereidBackendModelFile): 'backend' as written; else the backend a platform's name begins with
// (up to its first '_'), which must declare it; else the backend whose model file a version
// directory holds. Fills 'backend' (and 'platform', from a model file) as Triton's auto-complete
// does. Exposed for unit tests.
StatusOr<std::string> ResolveBackend(inference::ModelConfig* config, const std::string& model_dir,
                                     const std::vector<int64_t>& versions,
                                     BackendManager& backends);
// Ok when 'backend' serves the config's platform (one that declares none takes any); else an
// error naming file, line and field.
Status CheckPlatform(const inference::ModelConfig& config, const ConfigLocator& locator,
                     const Backend& backend);

// Ok when --onnx-engine's value names an installed backend (or is "auto" or "").
Status CheckEngine(BackendManager& backends, const std::string& engine);

// Ok when 'name' can name a model directory: one path component, no NUL, at most 255 bytes.
Status CheckModelName(const std::string& name);

// The versions a policy selects from those present on disk, ascending.
StatusOr<std::vector<int64_t>> SelectVersions(const inference::ModelVersionPolicy& policy,
                                              const std::vector<int64_t>& available,
                                              const std::string& model_name);

// "a, b, c" (the lists in the repository's messages).
std::string JoinNames(const std::vector<std::string>& items);

}  // namespace nereid
