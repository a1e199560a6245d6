// ModelRepository: the models Triton's model repository holds (<repo>/<model>/config.pbtxt and
// numeric version directories), loaded and served: the control modes (none, explicit, poll), the
// repository extension (index, load, unload), loads with their timeouts, file overrides and
// ensembles' step models, and the registry of loaded versions. Reading the repositories on disk
// is ModelStore's (model_store.h); the folders of file overrides are OverrideFolders'. Loads of
// one model never stop the others from serving or loading.
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
#include "repository/background_tasks.h"
#include "repository/model_registry.h"
#include "repository/model_store.h"
#include "repository/override_files.h"
#include "request/infer_api.h"
#include "request/model_info.h"
#include "runtime/backend_library.h"
#include "runtime/model.h"
#include "runtime/services.h"

namespace nereid {

class ModelRepository {
 public:
  // 'services': what the models share (runtime/services.h), handed to each as it loads; what
  // they point to outlives the repository.
  ModelRepository(RepositoryOptions options, BackendManager* backends, Services services = {});
  ~ModelRepository();
  const Services& services() const { return services_; }
  // Where this repository's models send their own requests: the server serving it sets it.
  const std::shared_ptr<InferApiLink>& infer_link() const { return services_.infer_link; }
  energy::EnergyLedger* energy_ledger() const { return services_.energy; }

  // Loads what the control mode asks for at startup. Failures are recorded per model and logged;
  // they never stop the other models (the returned status only reports a broken repository path;
  // FailedModels() tells which models failed).
  Status LoadStartupModels();
  // "name: reason" of every model whose last load failed.
  std::vector<std::string> FailedModels() const { return registry_.Failed(); }

  // The ready model 'name', newest ready version when 'version' < 0.
  StatusOr<std::shared_ptr<Model>> GetModel(const std::string& name, int64_t version) const {
    return registry_.Get(name, version);
  }
  // Every loaded version of every model (statistics, metrics).
  std::vector<std::shared_ptr<Model>> LoadedModels() const { return registry_.Loaded(); }
  // The statistics extension's selection: every loaded model when 'name' is empty, one version when
  // 'version' >= 0, else every loaded version of 'name' (NotFound when there is none).
  StatusOr<std::vector<std::shared_ptr<Model>>> StatisticsModels(const std::string& name,
                                                                 int64_t version) const {
    return registry_.Statistics(name, version);
  }
  // Ok in explicit control mode; otherwise the error load/unload requests get (both frontends).
  Status CheckExplicitControl() const;
  // Ready versions of 'name', ascending.
  std::vector<int64_t> ReadyVersions(const std::string& name) const {
    return registry_.ReadyVersions(name);
  }
  // Every version with its state, plus models present on disk that were never loaded.
  std::vector<IndexEntry> Index(bool ready_only) const {
    return registry_.Index(store_.ModelsOnDisk(), ready_only);
  }
  // (Re)loads a model; 'config_json' replaces config.pbtxt when not empty. With 'files', the
  // model is loaded from a directory of its own holding them and the config (which then must be
  // given), not from the repository (Triton's load with file overrides); the next load without
  // files uses the repository again. Explicit mode only.
  Status Load(const std::string& name, const std::string& config_json,
              const ModelFiles& files = {});
  // Takes the model out of service at once; answers when it has stopped, or after kUnloadWait
  // while it goes on stopping in the background (bounded by unload_timeout, then aborted).
  // With 'dependents' (Triton's unload_dependents), an ensemble's step models are unloaded after
  // it, and theirs after them.
  Status Unload(const std::string& name, bool dependents = false);
  static constexpr std::chrono::seconds kUnloadWait{5};
  // The repositories on disk (model_store.h): the models there, where, and what a load of one
  // would find (`nereid config check`).
  const ModelStore& store() const { return store_; }
  using CheckResult = ModelStore::CheckResult;
  CheckResult Check(const std::string& name) const { return store_.Check(name); }
  std::set<std::string> ModelsOnDisk() const { return store_.ModelsOnDisk(); }
  StatusOr<std::string> ModelDirectory(const std::string& name) const {
    return store_.FindModelDir(name);
  }
  const RepositoryOptions& options() const { return options_; }
  // Server readiness: with strict readiness, every model asked for is ready.
  bool Ready() const { return !options_.strict_readiness || registry_.AllReady(); }
  // Stops every model (each bounded by unload_timeout, then aborted), all at once.
  void StopAll();
  // NereidModelAbort on every loaded model, for an exit that cannot wait (their processes go).
  void AbortAll();

 private:
  using VersionEntry = ModelRegistry::VersionEntry;
  using ModelEntry = ModelRegistry::ModelEntry;
  using LoadAttempt = ModelRegistry::LoadAttempt;
  using Plan = ModelStore::Plan;
  // 'chain': the ensembles whose loads wait on this one (their steps name it).
  // 'overrides': the folder of a load with file overrides (null: the repository's); each version
  // loaded from it holds it.
  Status LoadModel(const std::string& name, const std::string& config_json, uint64_t generation,
                   const std::shared_ptr<LoadAttempt>& attempt, std::vector<std::string> chain = {},
                   const std::shared_ptr<OverrideFiles>& overrides = nullptr);
  // Before an ensemble loads: its steps' models, loaded first where no load of them was tried yet
  // (so loading an ensemble in explicit mode loads them too, as in Triton), then the ensemble
  // checked against their configs (and made decoupled when a step is). A cycle among ensembles is
  // refused with Triton's message.
  Status PrepareEnsemble(const std::string& name, inference::ModelConfig& config,
                         const std::shared_ptr<LoadAttempt>& attempt,
                         std::vector<std::string> chain);
  // Model::Create with the plan's backend, then its fallback when the first cannot run the model.
  StatusOr<std::shared_ptr<Model>> CreateVersion(const std::string& name, int64_t version,
                                                 const Plan& plan,
                                                 const std::shared_ptr<LoadAttempt>& attempt);
  // Gives up on a load (with the registry locked): what it builds from now on is aborted at once
  // and never committed. Returns the models it has started, for AbortStarted (outside the lock).
  static std::vector<std::weak_ptr<Model>> AbandonLocked(LoadAttempt& attempt);
  static void AbortStarted(const std::vector<std::weak_ptr<Model>>& started);

  RepositoryOptions options_;
  BackendManager* backends_;
  Services services_;
  ModelStore store_{options_, backends_};
  ModelRegistry registry_;
  BackgroundTasks tasks_{options_.unload_timeout};  // loads and retirements
  // The folders of loads with file overrides that exist now; any left at the end (a version
  // abandoned at exit) is removed as the repository goes.
  OverrideFolders overrides_;
};

}  // namespace nereid
