#include "repository/model_repository.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "common/hash.h"
#include "common/logging.h"
#include "config/config_validator.h"
#include "config/ensemble_config.h"
#include "config/model_files.h"

namespace nereid {
namespace fs = std::filesystem;

namespace {

// Triton's names of status codes, as its load errors show them.
const char* CodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk:
      return "OK";
    case Status::Code::kInvalidArgument:
      return "Invalid argument";
    case Status::Code::kNotFound:
      return "Not found";
    case Status::Code::kUnavailable:
      return "Unavailable";
    case Status::Code::kUnsupported:
      return "Unsupported";
    case Status::Code::kInternal:
      return "Internal";
    case Status::Code::kAlreadyExists:
      return "Already exists";
    case Status::Code::kCancelled:
      return "Cancelled";
    case Status::Code::kResourceExhausted:
      return "Resource exhausted";
  }
  return "Unknown";
}

}  // namespace

ModelRepository::ModelRepository(RepositoryOptions options, BackendManager* backends,
                                 Services services)
    : options_(std::move(options)), backends_(backends), services_(std::move(services)) {}

ModelRepository::~ModelRepository() {
  StopAll();
  // Loads and retirements still running are bounded by their timeouts; one that outlives them
  // all (a backend that ignores NereidModelAbort) is left to the process's exit.
  tasks_.WaitUntil(std::chrono::steady_clock::now() + options_.unload_timeout +
                   2 * Model::kAbortGrace);
}

Status ModelRepository::LoadStartupModels() {
  for (const auto& path : options_.paths)
    if (!fs::is_directory(path))
      return NotFound("model repository path '" + path + "' is not a directory");
  std::set<std::string> wanted;
  const bool all = options_.control_mode != ModelControlMode::kExplicit ||
                   std::find(options_.startup_models.begin(), options_.startup_models.end(), "*") !=
                       options_.startup_models.end();
  if (all) wanted = store_.ModelsOnDisk();
  for (const auto& m : options_.startup_models)
    if (m != "*") wanted.insert(m);
  // An ensemble loads its steps' models first (PrepareEnsemble); a model whose load was tried
  // that way is not loaded again.
  for (const auto& name : wanted) {
    {
      auto t = registry_.Lock();
      if (auto it = t->models.find(name); it != t->models.end() && it->second.generation > 0)
        continue;
    }
    Status s = Load(name, "");
    if (!s.ok()) LOG_ERROR << s.message();
  }
  return Status::Ok();
}

Status ModelRepository::Load(const std::string& name, const std::string& config_json,
                             const ModelFiles& files) {
  RETURN_IF_ERROR(CheckModelName(name));
  std::shared_ptr<OverrideFiles> overrides;
  if (!files.empty()) {
    if (config_json.empty())
      return InvalidArgument("failed to load '" + name +
                             "', failed to poll from model repository: files were given without "
                             "the 'config' parameter");
    ASSIGN_OR_RETURN(overrides, overrides_.Write(name, files));
  }
  uint64_t fingerprint = 0;  // of the directory a load without file overrides reads
  if (files.empty()) {
    auto dir = store_.FindModelDir(name);
    if (!dir.ok())
      return Status(dir.status().code(),
                    "failed to load '" + name +
                        "', failed to poll from model repository: " + dir.status().message());
    fingerprint = ModelStore::Fingerprint(*dir);
    // Triton's rule: a load with no config of a model serving from an unchanged directory keeps
    // what serves (and the config a previous load gave it).
    auto t = registry_.Lock();
    if (auto it = t->models.find(name);
        config_json.empty() && it != t->models.end() && it->second.fingerprint == fingerprint &&
        std::any_of(it->second.versions.begin(), it->second.versions.end(),
                    [](const auto& v) { return v.second.model; })) {
      LOG_INFO << "'" << name << "' is loaded and its directory has not changed: not reloaded";
      return Status::Ok();
    }
  }
  auto attempt = std::make_shared<LoadAttempt>();
  uint64_t generation = 0;
  {
    auto t = registry_.Lock();
    if (t->stopping)
      return Unavailable("failed to load '" + name + "': the server is shutting down");
    generation = ++t->models[name].generation;
    t->loading.insert(attempt);
  }
  // The load runs on a thread of its own, so that one that hangs (a model.py blocking at import,
  // a backend that never returns) costs its caller no more than the load timeout.
  const std::optional<Status> done = tasks_.RunWithin(
      options_.load_timeout,
      [this, name, config_json, generation, attempt, overrides, fingerprint] {
        Status s = LoadModel(name, config_json, generation, attempt, {}, overrides);
        auto t = registry_.Lock();
        t->loading.erase(attempt);
        ModelEntry& m = t->models[name];
        if (m.generation == generation) m.fingerprint = s.ok() ? fingerprint : 0;
        return s;
      });
  if (done) {
    // Triton's form of a load that ran and failed.
    if (done->ok() || done->message().starts_with("failed to load")) return *done;
    return Status(done->code(), "load failed for model '" + name + "': " + done->message());
  }
  const std::string reason =
      "failed to load '" + name + "': the load did not finish within " +
      std::to_string(
          std::chrono::duration_cast<std::chrono::seconds>(options_.load_timeout).count()) +
      " s (--model-load-timeout-secs); it was aborted";
  std::vector<std::weak_ptr<Model>> started;
  {
    auto t = registry_.Lock();
    started = AbandonLocked(*attempt);
    ModelEntry& m = t->models[name];
    if (m.generation == generation) m.reason = reason;
  }
  AbortStarted(started);
  LOG_ERROR << reason;
  return Unavailable(reason);
}

StatusOr<std::shared_ptr<Model>> ModelRepository::CreateVersion(
    const std::string& name, int64_t version, const Plan& plan,
    const std::shared_ptr<LoadAttempt>& attempt) {
  // Each model the load starts is known to its attempt, so that a load past its timeout can abort
  // it (a model started after that is aborted at once).
  const Model::StartedHook started = [this, attempt](const std::shared_ptr<Model>& model) {
    if (services_.energy != nullptr)
      if (auto observer = services_.energy->ObserverFor(model->name(), model->version()))
        model->SetEnergyObserver(std::move(observer));
    bool abandoned = false;
    {
      auto t = registry_.Lock();
      attempt->started.push_back(model);
      abandoned = attempt->abandoned;
    }
    if (abandoned) model->Abort();
  };
  auto create = [&](const std::shared_ptr<Backend>& backend) {
    return Model::Create(name, version, plan.model_dir, plan.parsed.config, plan.parsed.locator,
                         backend, options_.auto_complete, services_, started);
  };
  auto model = create(plan.backend);
  if (model.ok() || !plan.fallback || model.status().code() != Status::Code::kUnsupported)
    return model;
  LOG_INFO << "model '" << name << "': the " << plan.backend->name() << " engine cannot run it ("
           << model.status().message() << "); " << plan.fallback->name()
           << " runs it (--onnx-engine=auto)";
  return create(plan.fallback);
}

Status ModelRepository::PrepareEnsemble(const std::string& name, inference::ModelConfig& config,
                                        const std::shared_ptr<LoadAttempt>& attempt,
                                        std::vector<std::string> chain) {
  chain.push_back(name);
  for (const std::string& dep : EnsembleDependencies(config)) {
    if (std::find(chain.begin(), chain.end(), dep) != chain.end())
      return InvalidArgument("circular dependency between ensembles: " + dep + " -> ... -> " +
                             name + " -> " + dep);
    // An ensemble loaded already may lead back here (a reload that names a model which names
    // this one): each request would then send itself around for ever.
    {
      auto t = registry_.Lock();
      std::set<std::string> seen;
      if (t->Reaches(dep, name, seen))
        return InvalidArgument("circular dependency between ensembles: " + name + " -> ... -> " +
                               dep + " -> " + name);
    }
    if (!store_.FindModelDir(dep).ok())
      return InvalidArgument("ensemble " + name +
                             " contains models that are not available or ambiguous: " + dep);
    const uint64_t generation = registry_.Lock()->ClaimStepLoad(dep);
    if (generation > 0) {
      LOG_INFO << "loading '" << dep << "', a step of ensemble '" << name << "'";
      Status s = LoadModel(dep, "", generation, attempt, chain);
      if (!s.ok()) LOG_ERROR << s.message();
    }
  }
  ASSIGN_OR_RETURN(const auto held, registry_.EnsembleSteps(name, config));
  std::vector<const inference::ModelConfig*> configs;
  for (const auto& model : held) configs.push_back(&model->config());
  RETURN_IF_ERROR(CheckEnsembleSteps(config, configs));
  // A decoupled step makes the ensemble decoupled (Triton's), and then it cannot cache.
  if (std::any_of(held.begin(), held.end(), [](const auto& m) { return m->decoupled(); })) {
    if (config.response_cache().enable()) return InvalidArgument(DecoupledCacheError(name));
    config.mutable_model_transaction_policy()->set_decoupled(true);
  }
  return Status::Ok();
}

Status ModelRepository::LoadModel(const std::string& name, const std::string& config_json,
                                  uint64_t generation, const std::shared_ptr<LoadAttempt>& attempt,
                                  std::vector<std::string> chain,
                                  const std::shared_ptr<OverrideFiles>& overrides) {
  auto plan = store_.PlanLoad(name, config_json, nullptr, overrides ? overrides->model_dir() : "");
  if (!plan.ok()) {
    auto t = registry_.Lock();
    // Versions that were serving keep serving; the reason is recorded for the index and for
    // requests to a model that has none.
    if (ModelEntry& m = t->models[name]; t->Current(m, generation, *attempt))
      m.reason = plan.status().message();
    return plan.status();
  }
  const inference::ModelConfig& config = plan->parsed.config;
  if (config.platform() == "ensemble")
    if (Status s = PrepareEnsemble(name, plan->parsed.config, attempt, std::move(chain)); !s.ok()) {
      auto t = registry_.Lock();
      if (ModelEntry& m = t->models[name]; t->Current(m, generation, *attempt))
        m.reason = s.message();
      return s;
    }
  const std::vector<int64_t>& versions = plan->versions;
  const std::vector<std::string> ignored = IgnoredConfigFields(config);
  if (!ignored.empty())
    LOG_WARNING << "model '" << name
                << "': config fields accepted but not acted on yet: " << JoinNames(ignored);

  std::map<int64_t, VersionEntry> loaded;
  std::string first_error;
  std::string version_errors;  // Triton's words for each version that failed
  for (int64_t v : versions) {
    auto model = CreateVersion(name, v, *plan, attempt);
    VersionEntry entry;
    if (model.ok()) {
      entry.state = "READY";
      entry.model = std::move(model).value();
      if (overrides) entry.model->HoldFiles(overrides);
      LOG_INFO << "successfully loaded '" << name << "' version " << v;
    } else {
      entry.state = "UNAVAILABLE";
      entry.reason = model.status().message();
      if (first_error.empty()) first_error = entry.reason;
      version_errors += "version " + std::to_string(v) +
                        " is at UNAVAILABLE state: " + CodeName(model.status().code()) + ": " +
                        entry.reason + ";";
      LOG_ERROR << "failed to load '" << name << "' version " << v << ": " << entry.reason;
    }
    loaded[v] = std::move(entry);
  }

  ModelRegistry::Table::Committed committed =
      registry_.Lock()->Commit(name, generation, *attempt, std::move(loaded), first_error);
  tasks_.Retire(std::move(committed.retired));
  if (committed.overtaken)
    return Unavailable("the load of '" + name +
                       "' was overtaken (timed out, or a later load or "
                       "unload began); what it built is stopped");
  if (!first_error.empty()) return InvalidArgument(version_errors);
  return Status::Ok();
}

std::vector<std::weak_ptr<Model>> ModelRepository::AbandonLocked(LoadAttempt& attempt) {
  attempt.abandoned = true;
  return attempt.started;
}

void ModelRepository::AbortStarted(const std::vector<std::weak_ptr<Model>>& started) {
  for (const auto& weak : started)
    if (auto model = weak.lock()) model->Abort();
}

Status ModelRepository::Unload(const std::string& name, bool dependents) {
  RETURN_IF_ERROR(CheckModelName(name));
  ModelRegistry::Unloaded unloaded;
  {
    auto t = registry_.Lock();
    // Not loaded (or not anywhere): nothing to do, as in Triton.
    if (t->models.find(name) == t->models.end()) return Status::Ok();
    unloaded = t->Unload(name, dependents);
  }
  auto stopped = tasks_.Retire(std::move(unloaded.retired));
  const auto deadline = std::chrono::steady_clock::now() + kUnloadWait;
  while (!stopped->load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  if (stopped->load()) {
    LOG_INFO << "successfully unloaded '" << name << "'";
  } else {
    LOG_WARNING << "'" << name << "' is out of service and still stopping after "
                << kUnloadWait.count() << " s; it goes on in the background (at most "
                << std::chrono::duration_cast<std::chrono::seconds>(options_.unload_timeout).count()
                << " s, --model-unload-timeout-secs, then it is aborted)";
  }
  // Ensembles cannot form cycles (PrepareEnsemble refuses them), so these end.
  for (const std::string& user : unloaded.users) {
    LOG_INFO << "unloading ensemble '" << user << "': its step model '" << name << "' was unloaded";
    RETURN_IF_ERROR(Unload(user));
  }
  for (const std::string& step : unloaded.steps) RETURN_IF_ERROR(Unload(step, /*dependents=*/true));
  return Status::Ok();
}

Status ModelRepository::CheckExplicitControl() const {
  if (options_.control_mode == ModelControlMode::kExplicit) return Status::Ok();
  if (options_.control_mode == ModelControlMode::kPoll)
    return Unavailable("explicit model load / unload is not allowed if polling is enabled");
  return Unavailable(
      "explicit model load / unload is not allowed if model control mode is not EXPLICIT "
      "(start with --model-control-mode=explicit)");
}

void ModelRepository::StopAll() {
  std::vector<std::shared_ptr<std::atomic<bool>>> stopped;
  std::vector<std::weak_ptr<Model>> loading;
  {
    auto t = registry_.Lock();
    t->stopping = true;
    for (const auto& attempt : t->loading) {
      auto started = AbandonLocked(*attempt);
      loading.insert(loading.end(), started.begin(), started.end());
    }
    for (auto& [name, m] : t->models)
      for (auto& [v, entry] : m.versions)
        if (entry.model) {
          std::vector<std::shared_ptr<Model>> one{std::move(entry.model)};
          entry.state = "UNAVAILABLE";
          entry.reason = "unloaded";
          stopped.push_back(
              tasks_.Retire(std::move(one)));  // (takes the tasks' lock, not the registry's)
        }
  }
  AbortStarted(loading);  // loads still running end soon
  for (auto& flag : stopped)
    while (!flag->load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

void ModelRepository::AbortAll() {
  for (auto& model : LoadedModels()) model->Abort();
}

}  // namespace nereid
