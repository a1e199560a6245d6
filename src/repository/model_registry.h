// ModelRegistry: the model versions a repository has loaded, with their states and reasons, and
// the loads in progress: what requests are routed by, and what the index, metadata, statistics
// and readiness read. One lock guards it all; the loader (ModelRepository) changes it under
// Lock(), never while a backend runs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "request/model_info.h"
#include "runtime/model.h"

namespace nereid {

class ModelRegistry {
 public:
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

  // What an unload takes out of service (Table::Unload).
  struct Unloaded {
    std::vector<std::shared_ptr<Model>> retired;
    std::vector<std::string> users;  // loaded ensembles whose steps name the model
    std::vector<std::string> steps;  // with 'dependents': the models its own steps name
  };

  struct Table {
    std::map<std::string, ModelEntry> models;
    std::set<std::shared_ptr<LoadAttempt>> loading;  // loads running (StopAll aborts them)
    bool stopping = false;  // StopAll has begun: loads finishing now discard what they built

    // The models the steps of the loaded ensemble versions of 'model' name, each once.
    std::vector<std::string> LoadedSteps(const std::string& model) const;
    // Whether a loaded version of 'from' is an ensemble whose steps lead to 'target'.
    bool Reaches(const std::string& from, const std::string& target,
                 std::set<std::string>& seen) const;
    // The generation of a load of 'name' as an ensemble's step: a new one where no load of it was
    // tried yet or it was unloaded since (Triton loads an ensemble's unloaded steps again), else 0.
    uint64_t ClaimStepLoad(const std::string& name);
    // What an unload of 'name' takes out of service: its versions (each marked unloaded, the
    // generation bumped so that a load still running discards what it builds), the loaded
    // ensembles whose steps name it (they go too, as in Triton) and, with 'dependents', the models
    // its own steps name. Nothing when 'name' was never loaded.
    Unloaded Unload(const std::string& name, bool dependents);
    // Whether a load of generation 'generation' still speaks for 'm': no later load or unload
    // began, its caller has not given up on it, the server is not stopping.
    bool Current(const ModelEntry& m, uint64_t generation, const LoadAttempt& attempt) const {
      return m.generation == generation && !attempt.abandoned && !stopping;
    }
    // Commits the versions a load built ('first_error': its first version's failure, if any):
    // they replace what serves, unless the load no longer speaks for the model ('overtaken') or
    // a version failed while older ones serve (a failed reload leaves them serving, as in
    // Triton). Returns what is to be retired, the replaced or the discarded.
    struct Committed {
      std::vector<std::shared_ptr<Model>> retired;
      bool overtaken = false;
    };
    Committed Commit(const std::string& name, uint64_t generation, const LoadAttempt& attempt,
                     std::map<int64_t, VersionEntry> loaded, const std::string& first_error);
  };

  // The table, under the lock for as long as this lives.
  class Locked {
   public:
    explicit Locked(ModelRegistry& registry) : lock_(registry.mu_), table_(&registry.table_) {}
    Table* operator->() const { return table_; }
    Table& operator*() const { return *table_; }

   private:
    std::unique_lock<std::mutex> lock_;
    Table* table_;
  };
  Locked Lock() { return Locked(*this); }

  // The ready model 'name', newest ready version when 'version' < 0.
  StatusOr<std::shared_ptr<Model>> Get(const std::string& name, int64_t version) const;
  // Every loaded version of every model.
  std::vector<std::shared_ptr<Model>> Loaded() const;
  // The statistics extension's selection: every loaded model when 'name' is empty, one version when
  // 'version' >= 0, else every loaded version of 'name' (NotFound when there is none).
  StatusOr<std::vector<std::shared_ptr<Model>>> Statistics(const std::string& name,
                                                           int64_t version) const;
  // Ready versions of 'name', ascending.
  std::vector<int64_t> ReadyVersions(const std::string& name) const;
  // Every version with its state, plus the models 'on_disk' names that were never loaded.
  std::vector<IndexEntry> Index(std::set<std::string> on_disk, bool ready_only) const;
  // "name: reason" of every model whose last load failed.
  std::vector<std::string> Failed() const;
  // Every model asked for is ready (strict readiness).
  bool AllReady() const;
  // The models the steps of ensemble 'name' run, for checking it against them before it loads;
  // a step whose model is not ready fails with Triton's reason (the model's own load error, or
  // the missing version).
  StatusOr<std::vector<std::shared_ptr<Model>>> EnsembleSteps(
      const std::string& name, const inference::ModelConfig& config) const;

 private:
  mutable std::mutex mu_;
  Table table_;
};

}  // namespace nereid
