// ModelRepository: Triton's model repository on disk (<repo>/<model>/config.pbtxt and numeric
// version directories), the version policy, the control modes (none, explicit) and the repository
// extension (index, load, unload). Loads of one model never stop the others from serving or
// loading.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "energy/energy_ledger.h"
#include "request/infer_api.h"
#include "request/model_info.h"
#include "runtime/backend_library.h"
#include "runtime/model.h"

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

class ModelRepository {
 public:
  ModelRepository(RepositoryOptions options, BackendManager* backends);
  ~ModelRepository();
  // Where this repository's models send their own requests: the server serving it sets it.
  const std::shared_ptr<InferApiLink>& infer_link() const { return infer_link_; }
  // Where models loaded from now on report their batches for energy attribution (null: nowhere).
  void SetEnergyLedger(energy::EnergyLedger* ledger) { energy_ = ledger; }
  // The server's response cache (null: none), before any model loads; it outlives the models.
  void SetResponseCache(ResponseCache* cache) { cache_ = cache; }
  // The server's rate limiter (null: off), before any model loads; it outlives the models.
  void SetRateLimiter(RateLimiter* limiter) { rate_limiter_ = limiter; }
  energy::EnergyLedger* energy_ledger() const { return energy_; }

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
  // (Re)loads a model; 'config_json' replaces config.pbtxt when not empty. With 'files', the
  // model is loaded from a directory of its own holding them and the config (which then must be
  // given), not from the repository (Triton's load with file overrides); the next load without
  // files uses the repository again. Explicit mode only.
  Status Load(const std::string& name, const std::string& config_json,
              const ModelFiles& files = {});
  // Limits on a load request's files (count; each path component, as the file system allows),
  // and on the folders of such loads that exist at once (each lives while its load runs and while
  // a version loaded from it does; see OverrideFiles).
  static constexpr size_t kMaxOverrideFiles = 4096;
  static constexpr size_t kMaxOverrideFolders = 256;
  static constexpr uint64_t kMaxOverrideBytes = uint64_t{2} << 30;
  // Takes the model out of service at once; answers when it has stopped, or after kUnloadWait
  // while it goes on stopping in the background (bounded by unload_timeout, then aborted).
  // A model directory's fingerprint: a hash of every file's relative path, size and modification
  // time below it (at most kMaxFiles files; the rest are not looked at). Poll mode compares them,
  // and a load without overrides of a model loaded from an unchanged directory is not redone.
  static uint64_t Fingerprint(const std::string& directory);
  static constexpr size_t kMaxFiles = 10000;
  // With 'dependents' (Triton's unload_dependents), an ensemble's step models are unloaded after
  // it, and theirs after them.
  Status Unload(const std::string& name, bool dependents = false);
  static constexpr std::chrono::seconds kUnloadWait{5};
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
  // The directory of model 'name' (the first repository path holding it), or NOT_FOUND.
  StatusOr<std::string> ModelDirectory(const std::string& name) const { return FindModelDir(name); }
  const RepositoryOptions& options() const { return options_; }
  // Server readiness: with strict readiness, every model asked for is ready.
  bool Ready() const;
  // Stops every model (each bounded by unload_timeout, then aborted), all at once.
  void StopAll();
  // NereidModelAbort on every loaded model, for an exit that cannot wait (their processes go).
  void AbortAll();

 private:
  std::shared_ptr<InferApiLink> infer_link_ = std::make_shared<InferApiLink>();
  energy::EnergyLedger* energy_ = nullptr;
  ResponseCache* cache_ = nullptr;
  RateLimiter* rate_limiter_ = nullptr;
  struct VersionEntry {
    std::string state;  // READY, UNAVAILABLE
    std::string reason;
    std::shared_ptr<Model> model;
  };
  struct ModelEntry {
    std::map<int64_t, VersionEntry> versions;
    std::string reason;  // model-level failure (bad config, no versions, ...)
    // Bumped by every load and unload: a load commits only while it is still the latest (a load
    // that outlived its timeout, or one overtaken by an unload, discards what it built).
    uint64_t generation = 0;
    // The directory's fingerprint at the last load without file overrides that succeeded (its
    // config may have come with the request): a plain load that finds it unchanged is a no-op,
    // as in Triton. 0: always load.
    uint64_t fingerprint = 0;
  };
  // One load in progress: the models it has started (to abort them when it takes too long) and
  // whether its caller has given up on it.
  struct LoadAttempt {
    std::vector<std::weak_ptr<Model>> started;  // weak: a retired model's references are counted
    bool abandoned = false;
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
                          std::vector<std::string>* config_errors,
                          const std::string& override_dir = "") const;
  class OverrideFiles;
  struct OverrideFolders;
  // 'chain': the ensembles whose loads wait on this one (their steps name it).
  // 'overrides': the folder of a load with file overrides (null: the repository's); each version
  // loaded from it holds it.
  Status LoadModel(const std::string& name, const std::string& config_json, uint64_t generation,
                   const std::shared_ptr<LoadAttempt>& attempt, std::vector<std::string> chain = {},
                   const std::shared_ptr<OverrideFiles>& overrides = nullptr);
  // Writes a load request's files into a new folder of their own (no file outside it: paths are
  // checked and nothing in it is a link), within the bounds on such folders.
  StatusOr<std::shared_ptr<OverrideFiles>> WriteOverride(const std::string& name,
                                                         const ModelFiles& files);
  // Before an ensemble loads: its steps' models, loaded first where no load of them was tried yet
  // (so loading an ensemble in explicit mode loads them too, as in Triton), then the ensemble
  // checked against their configs (and made decoupled when a step is). A cycle among ensembles is
  // refused with Triton's message.
  Status PrepareEnsemble(const std::string& name, inference::ModelConfig& config,
                         const std::shared_ptr<LoadAttempt>& attempt,
                         std::vector<std::string> chain);
  // The models the steps of the loaded ensemble versions of 'model' name, each once (with mu_).
  std::vector<std::string> LoadedStepsLocked(const std::string& model) const;
  // Whether a loaded version of 'from' is an ensemble whose steps lead to 'target' (with mu_).
  bool ReachesLocked(const std::string& from, const std::string& target,
                     std::set<std::string>& seen) const;
  // Model::Create with the plan's backend, then its fallback when the first cannot run the model.
  StatusOr<std::shared_ptr<Model>> CreateVersion(const std::string& name, int64_t version,
                                                 const Plan& plan,
                                                 const std::shared_ptr<LoadAttempt>& attempt);
  // Stops the models on a thread of their own (each bounded by unload_timeout, then aborted; a
  // model whose threads never return is kept alive for ever). The returned flag turns true when
  // all are stopped.
  std::shared_ptr<std::atomic<bool>> Retire(std::vector<std::shared_ptr<Model>> retired);
  // Gives up on a load (with mu_ held): what it builds from now on is aborted at once and never
  // committed. Returns the models it has started, for AbortStarted (outside the lock).
  static std::vector<std::weak_ptr<Model>> AbandonLocked(LoadAttempt& attempt);
  static void AbortStarted(const std::vector<std::weak_ptr<Model>>& started);
  // Runs 'task' on a thread the destructor waits for; finished ones are joined as new ones start.
  void Background(std::function<void()> task);
  StatusOr<std::string> FindModelDir(const std::string& name) const;

  RepositoryOptions options_;
  BackendManager* backends_;
  mutable std::mutex mu_;  // never held while a backend runs
  std::map<std::string, ModelEntry> models_;
  bool stopping_ = false;  // StopAll has begun: loads finishing now discard what they built
  std::set<std::shared_ptr<LoadAttempt>> loading_;  // loads running (StopAll aborts them)
  struct Task {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex tasks_mu_;
  std::vector<Task> tasks_;
  // The folders of loads with file overrides that exist now; any left at the end (a version
  // abandoned at exit) is removed by the destructor.
  std::shared_ptr<OverrideFolders> override_folders_;
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

}  // namespace nereid
