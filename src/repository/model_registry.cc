#include "repository/model_registry.h"

#include <algorithm>
#include <utility>

#include "config/ensemble_config.h"

namespace nereid {

std::vector<std::string> ModelRegistry::Table::LoadedSteps(const std::string& model) const {
  std::vector<std::string> steps;
  auto it = models.find(model);
  if (it == models.end()) return steps;
  for (const auto& [version, entry] : it->second.versions) {
    if (!entry.model || entry.model->config().platform() != "ensemble") continue;
    for (std::string& step : EnsembleDependencies(entry.model->config()))
      if (std::find(steps.begin(), steps.end(), step) == steps.end())
        steps.push_back(std::move(step));
  }
  return steps;
}

bool ModelRegistry::Table::Reaches(const std::string& from, const std::string& target,
                                   std::set<std::string>& seen) const {
  if (!seen.insert(from).second) return false;
  for (const std::string& step : LoadedSteps(from))
    if (step == target || Reaches(step, target, seen)) return true;
  return false;
}

uint64_t ModelRegistry::Table::ClaimStepLoad(const std::string& name) {
  ModelEntry& m = models[name];
  const bool unloaded =
      !m.versions.empty() && std::all_of(m.versions.begin(), m.versions.end(), [](const auto& v) {
        return !v.second.model && v.second.reason == "unloaded";
      });
  return m.generation == 0 || unloaded ? ++m.generation : 0;
}

ModelRegistry::Unloaded ModelRegistry::Table::Unload(const std::string& name, bool dependents) {
  Unloaded out;
  auto it = models.find(name);
  if (it == models.end()) return out;
  ++it->second.generation;
  it->second.fingerprint = 0;
  for (const auto& entry : models) {
    const auto named = LoadedSteps(entry.first);
    if (std::find(named.begin(), named.end(), name) != named.end())
      out.users.push_back(entry.first);
  }
  if (dependents) out.steps = LoadedSteps(name);
  for (auto& [v, entry] : it->second.versions) {
    if (entry.model) out.retired.push_back(std::move(entry.model));
    entry.model.reset();
    entry.state = "UNAVAILABLE";
    entry.reason = "unloaded";
  }
  it->second.reason.clear();
  return out;
}

ModelRegistry::Table::Committed ModelRegistry::Table::Commit(const std::string& name,
                                                             uint64_t generation,
                                                             const LoadAttempt& attempt,
                                                             std::map<int64_t, VersionEntry> loaded,
                                                             const std::string& first_error) {
  Committed out;
  ModelEntry& m = models[name];
  const bool serving = std::any_of(m.versions.begin(), m.versions.end(),
                                   [](const auto& v) { return v.second.model != nullptr; });
  out.overtaken = !Current(m, generation, attempt);
  if (out.overtaken || (!first_error.empty() && serving)) {
    for (auto& [v, entry] : loaded)
      if (entry.model) out.retired.push_back(std::move(entry.model));
  } else {
    for (auto& [v, old] : m.versions)
      if (old.model) out.retired.push_back(std::move(old.model));
    m.versions = std::move(loaded);
  }
  if (!out.overtaken) m.reason = first_error;
  return out;
}

StatusOr<std::shared_ptr<Model>> ModelRegistry::Get(const std::string& name,
                                                    int64_t version) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = table_.models.find(name);
  // A model whose load failed answers 503 with its load error, whatever the failure was.
  const std::string& load_error = it == table_.models.end() ? std::string() : it->second.reason;
  auto unavailable = [&](const std::string& what) {
    return Unavailable("Request for unknown model: '" + name + "' " + what +
                       (load_error.empty() || load_error == "unloaded"
                            ? std::string()
                            : " (load failed: " + load_error + ")"));
  };
  if (it == table_.models.end() || (it->second.versions.empty() && load_error.empty())) {
    return NotFound("Request for unknown model: '" + name + "' is not found");
  }
  const auto& versions = it->second.versions;
  if (version < 0) {
    for (auto v = versions.rbegin(); v != versions.rend(); ++v)
      if (v->second.model) return v->second.model;
    return unavailable("has no available versions");
  }
  auto v = versions.find(version);
  if (v == versions.end()) {
    if (!load_error.empty() && load_error != "unloaded")
      return unavailable("version " + std::to_string(version) + " is not at ready state");
    return NotFound("Request for unknown model: '" + name + "' version " + std::to_string(version) +
                    " is not found");
  }
  if (!v->second.model)
    return unavailable("version " + std::to_string(version) + " is not at ready state");
  return v->second.model;
}

std::vector<std::shared_ptr<Model>> ModelRegistry::Loaded() const {
  std::vector<std::shared_ptr<Model>> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, m] : table_.models)
    for (const auto& [v, entry] : m.versions)
      if (entry.model) out.push_back(entry.model);
  return out;
}

StatusOr<std::vector<std::shared_ptr<Model>>> ModelRegistry::Statistics(const std::string& name,
                                                                        int64_t version) const {
  if (name.empty()) return Loaded();
  if (version >= 0) {
    ASSIGN_OR_RETURN(std::shared_ptr<Model> model, Get(name, version));
    return std::vector<std::shared_ptr<Model>>{model};
  }
  std::vector<std::shared_ptr<Model>> models;
  for (auto& m : Loaded())
    if (m->name() == name) models.push_back(m);
  if (models.empty()) return NotFound("requested model '" + name + "' is not available");
  return models;
}

std::vector<int64_t> ModelRegistry::ReadyVersions(const std::string& name) const {
  std::vector<int64_t> versions;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = table_.models.find(name);
  if (it == table_.models.end()) return versions;
  for (const auto& [v, entry] : it->second.versions)
    if (entry.model) versions.push_back(v);
  return versions;
}

std::vector<IndexEntry> ModelRegistry::Index(std::set<std::string> on_disk, bool ready_only) const {
  std::vector<IndexEntry> entries;
  std::set<std::string> names = std::move(on_disk);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, m] : table_.models) names.insert(name);
  for (const auto& name : names) {
    auto it = table_.models.find(name);
    if (it == table_.models.end() || (it->second.versions.empty() && it->second.reason.empty())) {
      if (!ready_only) entries.push_back({name, -1, "", ""});
      continue;
    }
    if (it->second.versions.empty()) {
      if (!ready_only) entries.push_back({name, -1, "UNAVAILABLE", it->second.reason});
      continue;
    }
    for (const auto& [v, entry] : it->second.versions) {
      if (ready_only && entry.state != "READY") continue;
      entries.push_back({name, v, entry.state, entry.reason});
    }
  }
  return entries;
}

std::vector<std::string> ModelRegistry::Failed() const {
  std::vector<std::string> failed;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, m] : table_.models)
    if (!m.reason.empty() && m.reason != "unloaded") failed.push_back(name + ": " + m.reason);
  return failed;
}

bool ModelRegistry::AllReady() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, m] : table_.models) {
    // A failed load leaves a model-level reason; it makes the server unready only when no version
    // is left serving (a failed reload keeps the versions that were READY: Triton's update rule,
    // which model_analyzer relies on when a configuration it tries cannot load).
    bool serving = false;
    for (const auto& [v, entry] : m.versions) serving = serving || entry.state == "READY";
    if (!serving && !m.reason.empty() && m.reason != "unloaded") return false;
    for (const auto& [v, entry] : m.versions)
      if (entry.state != "READY" && entry.reason != "unloaded") return false;
  }
  return true;
}

StatusOr<std::vector<std::shared_ptr<Model>>> ModelRegistry::EnsembleSteps(
    const std::string& name, const inference::ModelConfig& config) const {
  std::vector<std::shared_ptr<Model>> models;
  for (const auto& step : config.ensemble_scheduling().step()) {
    const std::string& dep = step.model_name();
    const int64_t version = step.model_version();
    auto model = Get(dep, version);
    if (model.ok()) {
      models.push_back(std::move(model).value());
      continue;
    }
    std::string reason;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = table_.models.find(dep); it != table_.models.end()) reason = it->second.reason;
    }
    const bool failed = !reason.empty() && reason != "unloaded";
    // A missing version of a model that serves others, or of one that never failed, is the
    // version's fault; otherwise the model's failure is the reason.
    if (version >= 0 && (!failed || !ReadyVersions(dep).empty()))
      return InvalidArgument("ensemble '" + name + "' depends on '" + dep +
                             "' whose required version " + std::to_string(version) +
                             " is not loaded");
    if (failed)
      return InvalidArgument("ensemble '" + name + "' depends on '" + dep +
                             "' which is not valid. Model '" + dep +
                             "' failed with error: " + reason);
    return InvalidArgument("ensemble '" + name + "' depends on '" + dep +
                           "' which has no loaded version.");
  }
  return models;
}

}  // namespace nereid
