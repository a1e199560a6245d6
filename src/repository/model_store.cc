#include "repository/model_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/hash.h"
#include "common/logging.h"
#include "config/config_validator.h"
#include "config/model_files.h"
#include "runtime/model.h"

namespace nereid {
namespace fs = std::filesystem;

namespace {

std::vector<int64_t> VersionsOnDisk(const std::string& model_dir) {
  std::vector<int64_t> versions;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(model_dir, ec)) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.size() > 18 || !std::all_of(name.begin(), name.end(), ::isdigit))
      continue;
    versions.push_back(std::stoll(name));
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

}  // namespace

StatusOr<std::vector<int64_t>> SelectVersions(const inference::ModelVersionPolicy& policy,
                                              const std::vector<int64_t>& available,
                                              const std::string& model_name) {
  std::vector<int64_t> chosen;
  if (policy.has_all()) {
    chosen = available;
  } else if (policy.has_specific()) {
    for (int64_t v : policy.specific().versions()) {
      // Triton loads the listed versions that are present and logs the others (its lifecycle QA
      // relies on it); none present fails below.
      if (!std::binary_search(available.begin(), available.end(), v)) {
        LOG_ERROR << "version " << v << " is specified for model '" << model_name
                  << "', but the version directory is not present";
        continue;
      }
      chosen.push_back(v);
    }
    std::sort(chosen.begin(), chosen.end());
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
  } else {
    const uint32_t n =
        policy.has_latest() ? std::max<uint32_t>(1, policy.latest().num_versions()) : 1;
    const size_t take = std::min<size_t>(n, available.size());
    chosen.assign(available.end() - static_cast<std::ptrdiff_t>(take), available.end());
  }
  if (chosen.empty())
    return NotFound("model '" + model_name +
                    "' has no version directory (e.g. '1/') that its version policy selects");
  return chosen;
}

namespace {

std::string Extension(const std::string& file) {
  const size_t dot = file.rfind('.');
  return dot == std::string::npos ? "" : file.substr(dot);
}

// The backend whose model file (by extension) a selected version directory holds, and its library.
StatusOr<std::shared_ptr<Backend>> BackendOfModelFile(const inference::ModelConfig& config,
                                                      const std::string& model_dir,
                                                      const std::vector<int64_t>& versions,
                                                      BackendManager& backends) {
  const std::vector<std::shared_ptr<Backend>> all = backends.All();
  std::vector<std::string> files;
  if (!config.default_model_filename().empty()) {
    files.push_back(config.default_model_filename());
  } else {
    for (const auto& backend : all)
      if (!backend->model_file().empty() &&
          std::find(files.begin(), files.end(), backend->model_file()) == files.end())
        files.push_back(backend->model_file());
  }
  for (const std::string& file : files)
    for (int64_t v : versions) {
      std::error_code ec;
      if (!fs::exists(fs::path(model_dir) / std::to_string(v) / file, ec)) continue;
      for (const auto& backend : all)
        if (!backend->model_file().empty() && Extension(backend->model_file()) == Extension(file))
          return backend;
    }
  return InvalidArgument(
      "model '" + config.name() +
      "': config.pbtxt names no 'backend' or 'platform' and no version "
      "directory holds a model file that names one (looked for " +
      (files.empty() ? std::string("none: no backend declares one") : JoinNames(files)) + ")");
}

}  // namespace

StatusOr<std::string> ResolveBackend(inference::ModelConfig* config, const std::string& model_dir,
                                     const std::vector<int64_t>& versions,
                                     BackendManager& backends) {
  if (!config->backend().empty()) return config->backend();
  const std::string& platform = config->platform();
  if (platform == "ensemble") return std::string();  // the server runs it: no backend
  if (!platform.empty()) {
    // Each of Triton's platforms names its backend before its first '_' (or is that name); that
    // backend must declare the platform (docs/backend-abi.md lists the pairs).
    // One exception: Triton serves "torch_aoti" (AOT-Inductor packages) with its pytorch backend.
    const std::string named =
        platform == "torch_aoti" ? "pytorch" : platform.substr(0, platform.find('_'));
    auto backend = backends.Get(named);
    if (!backend.ok())
      return InvalidArgument("model '" + config->name() + "': unknown platform '" + platform +
                             "': " + backend.status().message());
    const auto& served = (*backend)->platforms();
    if (std::find(served.begin(), served.end(), platform) == served.end())
      return InvalidArgument(
          "model '" + config->name() + "': unknown platform '" + platform + "': backend '" + named +
          "' serves " + (served.empty() ? std::string("no declared platform") : JoinNames(served)));
    config->set_backend(named);
    return named;
  }
  ASSIGN_OR_RETURN(auto backend, BackendOfModelFile(*config, model_dir, versions, backends));
  // Triton's auto-complete fills both fields.
  config->set_backend(backend->claimed_name());
  if (!backend->platforms().empty()) config->set_platform(backend->platforms().front());
  return config->backend();
}

Status CheckEngine(BackendManager& backends, const std::string& engine) {
  if (engine.empty() || engine == "auto") return Status::Ok();
  auto backend = backends.Get(engine);
  if (!backend.ok())
    return InvalidArgument("--onnx-engine=" + engine + ": " + backend.status().message());
  return Status::Ok();
}

Status CheckPlatform(const inference::ModelConfig& config, const ConfigLocator& locator,
                     const Backend& backend) {
  const auto& served = backend.platforms();
  if (config.platform().empty() || served.empty() ||
      std::find(served.begin(), served.end(), config.platform()) != served.end())
    return Status::Ok();
  return InvalidArgument("model '" + config.name() + "': " + locator.Where({{"platform"}}) +
                         ": field 'platform': platform '" + config.platform() +
                         "' does not go with backend '" + config.backend() + "' (it serves " +
                         JoinNames(served) + ")");
}

std::set<std::string> ModelStore::ModelsOnDisk() const {
  std::set<std::string> names;
  for (const auto& path : options_.paths) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(path, ec))
      if (entry.is_directory() && entry.path().filename().string()[0] != '.')
        names.insert(entry.path().filename().string());
  }
  return names;
}

Status CheckModelName(const std::string& name) {
  // A name becomes a directory name: one path component, no NUL (which would end the path early
  // in every system call), short enough for the file system.
  constexpr size_t kMaxName = 255;
  if (name.size() > kMaxName)
    return InvalidArgument("invalid model name of " + std::to_string(name.size()) +
                           " characters: at most " + std::to_string(kMaxName));
  if (name.empty() || name == "." || name == ".." ||
      name.find_first_of(std::string("/\\\0", 3)) != std::string::npos) {
    std::string shown;
    for (char c : name) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
    return InvalidArgument("invalid model name '" + shown +
                           "': a model name is one directory name (no '/', '\\', NUL, '.' or "
                           "'..')");
  }
  return Status::Ok();
}

uint64_t ModelStore::Fingerprint(const std::string& directory) {
  // A hash of (path, size, mtime) of every file, in a sorted order so that it does not depend on
  // the order the file system lists them in.
  std::vector<std::string> entries;
  std::error_code ec;
  fs::recursive_directory_iterator it(directory, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator() && entries.size() < kMaxFiles;
       it.increment(ec)) {
    struct stat st {};
    if (::stat(it->path().c_str(), &st) != 0) continue;
    entries.push_back(fs::relative(it->path(), directory, ec).string() + '\0' +
                      std::to_string(st.st_size) + '\0' + std::to_string(st.st_mtim.tv_sec) + '.' +
                      std::to_string(st.st_mtim.tv_nsec) + (S_ISDIR(st.st_mode) ? "/" : ""));
  }
  std::sort(entries.begin(), entries.end());
  Hasher64 h(0x706f6c6c2d763131ULL);
  for (const std::string& e : entries) h.Add(e);  // each string's length is hashed too
  return h.Finish();
}

StatusOr<std::string> ModelStore::FindModelDir(const std::string& name) const {
  RETURN_IF_ERROR(CheckModelName(name));
  std::vector<std::string> found;
  for (const auto& path : options_.paths) {
    const fs::path dir = fs::path(path) / name;
    std::error_code ec;
    // One repository named twice (Triton's test_config_override does) is one place.
    const bool again = std::any_of(found.begin(), found.end(), [&](const std::string& f) {
      return fs::equivalent(f, dir, ec);
    });
    if (fs::is_directory(dir) && !again) found.push_back(dir.string());
  }
  if (found.empty()) return NotFound("model '" + name + "' is not in any model repository");
  if (found.size() > 1)
    return InvalidArgument("model '" + name +
                           "' appears in more than one repository: " + JoinNames(found));
  return found[0];
}

StatusOr<ModelStore::Plan> ModelStore::PlanLoad(const std::string& name,
                                                const std::string& config_json,
                                                std::vector<std::string>* config_errors,
                                                const std::string& override_dir) const {
  Plan plan;
  if (!override_dir.empty()) {
    plan.model_dir = override_dir;
  } else {
    ASSIGN_OR_RETURN(plan.model_dir, FindModelDir(name));
  }
  const std::string config_path = (fs::path(plan.model_dir) / "config.pbtxt").string();
  ParsedModelConfig& parsed = plan.parsed;
  if (!config_json.empty()) {
    auto config = ModelConfigFromJson(config_json);
    if (!config.ok())  // Triton's words (its client examples look for "failed to load")
      return InvalidArgument("failed to load '" + name +
                             "', failed to poll from model repository: Invalid config override: " +
                             config.status().message());
    parsed.config = std::move(config).value();
    parsed.locator = ConfigLocator("load request config", nullptr);
  } else if (fs::exists(config_path)) {
    std::ifstream in(config_path);
    std::stringstream text;
    text << in.rdbuf();
    auto result = ParseModelConfigText(text.str(), name + "/config.pbtxt");
    if (!result.ok()) return InvalidArgument("model '" + name + "': " + result.status().message());
    parsed = std::move(result).value();
  } else if (options_.auto_complete) {
    parsed.locator = ConfigLocator(name + " (no config.pbtxt; auto-completed)", nullptr);
  } else {
    return InvalidArgument("model '" + name + "': " + config_path +
                           " does not exist, and auto-complete is off (--strict-model-config)");
  }
  inference::ModelConfig& config = parsed.config;
  FillConfigDefaults(name, &config);
  // What can be checked before a model file is opened is checked first, as Triton does. Without
  // auto-complete the config as written is the final one.
  std::vector<std::string> errors =
      ModelConfigErrors(config, name, parsed.locator,
                        options_.auto_complete ? ConfigStage::kAsWritten : ConfigStage::kFinal);
  if (!errors.empty()) {
    Status invalid = ConfigErrorsStatus(errors);
    if (config_errors) *config_errors = std::move(errors);
    return invalid;
  }

  const std::vector<int64_t> available = VersionsOnDisk(plan.model_dir);
  ASSIGN_OR_RETURN(plan.versions, SelectVersions(config.version_policy(), available, name));
  ASSIGN_OR_RETURN(std::string backend_name,
                   ResolveBackend(&config, plan.model_dir, plan.versions, *backends_));
  if (backend_name.empty()) return plan;  // an ensemble
  ASSIGN_OR_RETURN(plan.backend, backends_->Get(backend_name));
  // --onnx-engine: a library that stands in for this backend (declares it as an alias) runs the
  // model instead when it is the engine asked for; with 'auto' it runs it when it can, and the
  // backend's own library takes over when it answers UNSUPPORTED.
  const std::string& engine = options_.onnx_engine;
  if (!engine.empty() && engine != backend_name) {
    if (auto stand_in = backends_->StandIn(backend_name);
        stand_in && stand_in != plan.backend && (engine == "auto" || engine == stand_in->name())) {
      if (engine == "auto") plan.fallback = plan.backend;
      plan.backend = stand_in;
    }
  }
  RETURN_IF_ERROR(CheckPlatform(config, parsed.locator, *plan.backend));
  // The model file of each version must lie inside the model directory (a symlink may not lead
  // out of it). A missing file is left to the backend, which names what it looked for.
  std::string model_file = config.default_model_filename();
  if (model_file.empty()) model_file = plan.backend->model_file();
  for (int64_t v : plan.versions) {
    if (model_file.empty()) break;
    auto file = ResolveModelFile(plan.model_dir, fs::path(plan.model_dir) / std::to_string(v),
                                 model_file, "default_model_filename");
    if (!file.ok() && file.status().code() != Status::Code::kNotFound)
      return InvalidArgument("model '" + name + "' version " + std::to_string(v) + ": " +
                             file.status().message());
  }
  return plan;
}

ModelStore::CheckResult ModelStore::Check(const std::string& name) const {
  CheckResult result;
  auto plan = PlanLoad(name, "", &result.errors);
  if (!plan.ok()) {
    if (result.errors.empty()) result.errors.push_back(plan.status().message());
    return result;
  }
  // The newest version stands for the model: its file is what auto-complete reads.
  auto complete = [&](const std::shared_ptr<Backend>& backend) {
    return Model::CompleteConfig(name, plan->versions.back(), plan->model_dir, plan->parsed.config,
                                 plan->parsed.locator, backend, options_.auto_complete);
  };
  auto config = complete(plan->backend);
  if (!config.ok() && plan->fallback && config.status().code() == Status::Code::kUnsupported)
    config = complete(plan->fallback);
  if (!config.ok()) {
    result.errors.push_back(config.status().message());
    return result;
  }
  result.config = std::move(config).value();
  return result;
}

std::string JoinNames(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace nereid
