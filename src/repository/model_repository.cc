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

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
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

std::string Joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
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
      (files.empty() ? std::string("none: no backend declares one") : Joined(files)) + ")");
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
          "' serves " + (served.empty() ? std::string("no declared platform") : Joined(served)));
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
                         Joined(served) + ")");
}

// The folders of loads with file overrides that exist now, and their bytes: bounded, so that
// repeated loads cannot fill the temporary file system.
struct ModelRepository::OverrideFolders {
  std::mutex mu;
  std::set<std::string> live;
  uint64_t bytes = 0;
};

// One load's folder: removed when the last holder lets go. The load holds it while it runs, and
// each version loaded from it for as long as that version exists, so a reload, an unload or a
// failed load removes it once nothing reads it any more.
class ModelRepository::OverrideFiles {
 public:
  OverrideFiles(std::shared_ptr<OverrideFolders> folders, std::string root, std::string model_dir,
                uint64_t bytes)
      : folders_(std::move(folders)),
        root_(std::move(root)),
        model_dir_(std::move(model_dir)),
        bytes_(bytes) {}
  ~OverrideFiles() {
    std::error_code ec;
    fs::remove_all(root_, ec);
    if (ec) LOG_WARNING << "cannot remove " << root_ << ": " << ec.message();
    std::lock_guard<std::mutex> lock(folders_->mu);
    folders_->live.erase(root_);
    folders_->bytes -= bytes_;
  }
  OverrideFiles(const OverrideFiles&) = delete;
  OverrideFiles& operator=(const OverrideFiles&) = delete;
  const std::string& model_dir() const { return model_dir_; }

 private:
  std::shared_ptr<OverrideFolders> folders_;
  const std::string root_, model_dir_;
  const uint64_t bytes_;
};

ModelRepository::ModelRepository(RepositoryOptions options, BackendManager* backends)
    : options_(std::move(options)),
      backends_(backends),
      override_folders_(std::make_shared<OverrideFolders>()) {}

ModelRepository::~ModelRepository() {
  StopAll();
  // Loads and retirements still running are bounded by their timeouts; one that outlives them
  // all (a backend that ignores NereidModelAbort) is left to the process's exit.
  const auto deadline =
      std::chrono::steady_clock::now() + options_.unload_timeout + 2 * Model::kAbortGrace;
  // Taken out of tasks_ before waiting: a task that ends now may retire what it built, which
  // starts another task (Background takes tasks_mu_), waited for in the next round.
  for (;;) {
    std::vector<Task> tasks;
    {
      std::lock_guard<std::mutex> lock(tasks_mu_);
      tasks.swap(tasks_);
    }
    if (tasks.empty()) break;
    for (auto& task : tasks) {
      while (!task.done->load() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      if (task.done->load()) {
        task.thread.join();
      } else {
        LOG_ERROR << "a model load or unload is still running at exit; leaving it";
        task.thread.detach();
      }
    }
  }
  // Folders still held (by versions abandoned at exit, whose threads may never return).
  std::lock_guard<std::mutex> lock(override_folders_->mu);
  for (const auto& dir : override_folders_->live) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
}

std::set<std::string> ModelRepository::ModelsOnDisk() const {
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

uint64_t ModelRepository::Fingerprint(const std::string& directory) {
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

StatusOr<std::string> ModelRepository::FindModelDir(const std::string& name) const {
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
                           "' appears in more than one repository: " + Join(found));
  return found[0];
}

Status ModelRepository::LoadStartupModels() {
  for (const auto& path : options_.paths)
    if (!fs::is_directory(path))
      return NotFound("model repository path '" + path + "' is not a directory");
  std::set<std::string> wanted;
  const bool all = options_.control_mode != ModelControlMode::kExplicit ||
                   std::find(options_.startup_models.begin(), options_.startup_models.end(), "*") !=
                       options_.startup_models.end();
  if (all) wanted = ModelsOnDisk();
  for (const auto& m : options_.startup_models)
    if (m != "*") wanted.insert(m);
  // An ensemble loads its steps' models first (PrepareEnsemble); a model whose load was tried
  // that way is not loaded again.
  for (const auto& name : wanted) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = models_.find(name); it != models_.end() && it->second.generation > 0) continue;
    }
    Status s = Load(name, "");
    if (!s.ok()) LOG_ERROR << s.message();
  }
  return Status::Ok();
}

StatusOr<std::shared_ptr<ModelRepository::OverrideFiles>> ModelRepository::WriteOverride(
    const std::string& name, const ModelFiles& files) {
  const std::string failed = "failed to load '" + name + "', failed to poll from model repository";
  if (files.size() > kMaxOverrideFiles)
    return InvalidArgument(failed + ": more than " + std::to_string(kMaxOverrideFiles) +
                           " files in one load request");
  for (const auto& [path, bytes] : files) {
    // Relative, inside the model: no absolute path, no '..' or '.', no empty component, no NUL,
    // no component longer than a file name may be.
    bool ok = !path.empty() && path.front() != '/' && path.find('\0') == std::string::npos;
    bool too_long = false;
    for (size_t at = 0; ok && at <= path.size();) {
      const size_t end = std::min(path.find('/', at), path.size());
      const std::string part = path.substr(at, end - at);
      too_long = part.size() > 255;
      ok = !part.empty() && part != "." && part != ".." && !too_long;
      at = end + 1;
    }
    // A name the file system cannot hold is Triton's 500 (its QA asserts it); a path that
    // leaves the model directory is the client's error.
    if (too_long)
      return Internal(failed + ": file override path '" + path.substr(0, 300) +
                      "...' has a component longer than 255 bytes");
    if (!ok)
      return InvalidArgument(failed + ": file override path '" + path.substr(0, 300) +
                             "' is not a relative path inside the model directory");
  }
  uint64_t bytes = 0;
  for (const auto& [path, data] : files) bytes += data.size();
  std::error_code ec;
  const fs::path root = fs::temp_directory_path(ec);
  if (ec) return Internal(failed + ": no temporary directory: " + ec.message());
  std::string pattern = (root / "nereid-override-XXXXXX").string();
  {
    std::lock_guard<std::mutex> lock(override_folders_->mu);
    OverrideFolders& f = *override_folders_;
    if (f.live.size() >= kMaxOverrideFolders || f.bytes + bytes > kMaxOverrideBytes)
      return ResourceExhausted(failed + ": the file overrides of loaded models hold " +
                               std::to_string(f.live.size()) + " folder(s) and " +
                               std::to_string(f.bytes) + " bytes; this load's " +
                               std::to_string(bytes) + " bytes would pass the bound of " +
                               std::to_string(kMaxOverrideFolders) + " folders and " +
                               std::to_string(kMaxOverrideBytes) + " bytes");
    if (::mkdtemp(pattern.data()) == nullptr)
      return Internal(failed +
                      ": cannot create a directory for the model's files: " + std::strerror(errno));
    f.live.insert(pattern);
    f.bytes += bytes;
  }
  // The model directory is named after the model, as in a repository. Everything under it is
  // created here, fresh: a directory or file that exists already is refused (no link to follow).
  const fs::path dir = fs::path(pattern) / name;
  auto folder = std::make_shared<OverrideFiles>(override_folders_, pattern, dir.string(), bytes);
  if (!fs::create_directory(dir, ec) || ec)
    return Internal(failed + ": " + (ec ? ec.message() : std::string("cannot create it")));
  for (const auto& [path, bytes] : files) {
    const fs::path file = dir / path;
    fs::create_directories(file.parent_path(), ec);
    if (ec) return Internal(failed + ": " + path + ": " + ec.message());
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
    if (fd < 0) return Internal(failed + ": " + path + ": " + std::strerror(errno));
    size_t written = 0;
    while (written < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
      if (n <= 0 && errno != EINTR) break;
      if (n > 0) written += static_cast<size_t>(n);
    }
    ::close(fd);
    if (written != bytes.size()) return Internal(failed + ": " + path + ": short write");
  }
  return folder;
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
    ASSIGN_OR_RETURN(overrides, WriteOverride(name, files));
  }
  uint64_t fingerprint = 0;  // of the directory a load without file overrides reads
  if (files.empty()) {
    auto dir = FindModelDir(name);
    if (!dir.ok())
      return Status(dir.status().code(),
                    "failed to load '" + name +
                        "', failed to poll from model repository: " + dir.status().message());
    fingerprint = Fingerprint(*dir);
    // Triton's rule: a load with no config of a model serving from an unchanged directory keeps
    // what serves (and the config a previous load gave it).
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = models_.find(name);
        config_json.empty() && it != models_.end() && it->second.fingerprint == fingerprint &&
        std::any_of(it->second.versions.begin(), it->second.versions.end(),
                    [](const auto& v) { return v.second.model; })) {
      LOG_INFO << "'" << name << "' is loaded and its directory has not changed: not reloaded";
      return Status::Ok();
    }
  }
  auto attempt = std::make_shared<LoadAttempt>();
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Unavailable("failed to load '" + name + "': the server is shutting down");
    generation = ++models_[name].generation;
    loading_.insert(attempt);
  }
  // The load runs on a thread of its own, so that one that hangs (a model.py blocking at import,
  // a backend that never returns) costs its caller no more than the load timeout.
  struct Outcome {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
  };
  auto outcome = std::make_shared<Outcome>();
  Background([this, name, config_json, generation, attempt, outcome, overrides, fingerprint] {
    Status s = LoadModel(name, config_json, generation, attempt, {}, overrides);
    {
      std::lock_guard<std::mutex> lock(mu_);
      loading_.erase(attempt);
      ModelEntry& m = models_[name];
      if (m.generation == generation) m.fingerprint = s.ok() ? fingerprint : 0;
    }
    std::lock_guard<std::mutex> lock(outcome->mu);
    outcome->status = std::move(s);
    outcome->done = true;
    outcome->cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(outcome->mu);
    if (outcome->cv.wait_for(lock, options_.load_timeout, [&] { return outcome->done; })) {
      const Status& s = outcome->status;
      // Triton's form of a load that ran and failed.
      if (s.ok() || s.message().starts_with("failed to load")) return s;
      return Status(s.code(), "load failed for model '" + name + "': " + s.message());
    }
  }
  const std::string reason =
      "failed to load '" + name + "': the load did not finish within " +
      std::to_string(
          std::chrono::duration_cast<std::chrono::seconds>(options_.load_timeout).count()) +
      " s (--model-load-timeout-secs); it was aborted";
  std::vector<std::weak_ptr<Model>> started;
  {
    std::lock_guard<std::mutex> lock(mu_);
    started = AbandonLocked(*attempt);
    ModelEntry& m = models_[name];
    if (m.generation == generation) m.reason = reason;
  }
  AbortStarted(started);
  LOG_ERROR << reason;
  return Unavailable(reason);
}

StatusOr<ModelRepository::Plan> ModelRepository::PlanLoad(const std::string& name,
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

StatusOr<std::shared_ptr<Model>> ModelRepository::CreateVersion(
    const std::string& name, int64_t version, const Plan& plan,
    const std::shared_ptr<LoadAttempt>& attempt) {
  // Each model the load starts is known to its attempt, so that a load past its timeout can abort
  // it (a model started after that is aborted at once).
  const Model::StartedHook started = [this, attempt](const std::shared_ptr<Model>& model) {
    model->SetInferLink(infer_link_);
    model->SetResponseCache(cache_);
    model->SetRateLimiter(rate_limiter_);
    if (energy_ != nullptr)
      if (auto observer = energy_->ObserverFor(model->name(), model->version()))
        model->SetEnergyObserver(std::move(observer));
    bool abandoned = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      attempt->started.push_back(model);
      abandoned = attempt->abandoned;
    }
    if (abandoned) model->Abort();
  };
  auto create = [&](const std::shared_ptr<Backend>& backend) {
    return Model::Create(name, version, plan.model_dir, plan.parsed.config, plan.parsed.locator,
                         backend, options_.auto_complete, &SteadyClock::Get(), started);
  };
  auto model = create(plan.backend);
  if (model.ok() || !plan.fallback || model.status().code() != Status::Code::kUnsupported)
    return model;
  LOG_INFO << "model '" << name << "': the " << plan.backend->name() << " engine cannot run it ("
           << model.status().message() << "); " << plan.fallback->name()
           << " runs it (--onnx-engine=auto)";
  return create(plan.fallback);
}

ModelRepository::CheckResult ModelRepository::Check(const std::string& name) const {
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

std::vector<std::string> ModelRepository::LoadedStepsLocked(const std::string& model) const {
  std::vector<std::string> steps;
  auto it = models_.find(model);
  if (it == models_.end()) return steps;
  for (const auto& [version, entry] : it->second.versions) {
    if (!entry.model || entry.model->config().platform() != "ensemble") continue;
    for (std::string& step : EnsembleDependencies(entry.model->config()))
      if (std::find(steps.begin(), steps.end(), step) == steps.end())
        steps.push_back(std::move(step));
  }
  return steps;
}

bool ModelRepository::ReachesLocked(const std::string& from, const std::string& target,
                                    std::set<std::string>& seen) const {
  if (!seen.insert(from).second) return false;
  for (const std::string& step : LoadedStepsLocked(from))
    if (step == target || ReachesLocked(step, target, seen)) return true;
  return false;
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
      std::lock_guard<std::mutex> lock(mu_);
      std::set<std::string> seen;
      if (ReachesLocked(dep, name, seen))
        return InvalidArgument("circular dependency between ensembles: " + name + " -> ... -> " +
                               dep + " -> " + name);
    }
    if (!FindModelDir(dep).ok())
      return InvalidArgument("ensemble " + name +
                             " contains models that are not available or ambiguous: " + dep);
    uint64_t generation = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ModelEntry& m = models_[dep];
      // Never tried, or unloaded since (Triton loads an ensemble's unloaded steps again).
      const bool unloaded = !m.versions.empty() &&
                            std::all_of(m.versions.begin(), m.versions.end(), [](const auto& v) {
                              return !v.second.model && v.second.reason == "unloaded";
                            });
      if (m.generation == 0 || unloaded) generation = ++m.generation;
    }
    if (generation > 0) {
      LOG_INFO << "loading '" << dep << "', a step of ensemble '" << name << "'";
      Status s = LoadModel(dep, "", generation, attempt, chain);
      if (!s.ok()) LOG_ERROR << s.message();
    }
  }
  std::vector<std::shared_ptr<Model>> held;  // alive while their configs are read
  std::vector<const inference::ModelConfig*> configs;
  const auto& steps = config.ensemble_scheduling().step();
  for (int i = 0; i < steps.size(); ++i) {
    const std::string& dep = steps[i].model_name();
    const int64_t version = steps[i].model_version();
    auto model = GetModel(dep, version);
    if (!model.ok()) {
      std::string reason;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (auto it = models_.find(dep); it != models_.end()) reason = it->second.reason;
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
    configs.push_back(&(*model)->config());
    held.push_back(std::move(model).value());
  }
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
  // Whether this load still speaks for the model: no later load or unload began, the caller has
  // not given up on it, the server is not stopping. With mu_ held.
  auto current = [&](const ModelEntry& m) {
    return m.generation == generation && !attempt->abandoned && !stopping_;
  };
  auto plan = PlanLoad(name, config_json, nullptr, overrides ? overrides->model_dir() : "");
  if (!plan.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    // Versions that were serving keep serving; the reason is recorded for the index and for
    // requests to a model that has none.
    if (ModelEntry& m = models_[name]; current(m)) m.reason = plan.status().message();
    return plan.status();
  }
  const inference::ModelConfig& config = plan->parsed.config;
  if (config.platform() == "ensemble")
    if (Status s = PrepareEnsemble(name, plan->parsed.config, attempt, std::move(chain)); !s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (ModelEntry& m = models_[name]; current(m)) m.reason = s.message();
      return s;
    }
  const std::vector<int64_t>& versions = plan->versions;
  const std::vector<std::string> ignored = IgnoredConfigFields(config);
  if (!ignored.empty())
    LOG_WARNING << "model '" << name
                << "': config fields accepted but not acted on yet: " << Join(ignored);

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

  std::vector<std::shared_ptr<Model>> retired;
  bool overtaken = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ModelEntry& m = models_[name];
    bool serving = false;
    for (const auto& [v, old] : m.versions) serving = serving || old.model != nullptr;
    if (!current(m)) {
      overtaken = true;
      for (auto& [v, entry] : loaded)
        if (entry.model) retired.push_back(entry.model);
    } else if (!first_error.empty() && serving) {
      // A failed reload leaves what was serving untouched (Triton does the same); the versions
      // that did load are dropped with it.
      for (auto& [v, entry] : loaded)
        if (entry.model) retired.push_back(entry.model);
    } else {
      for (auto& [v, old] : m.versions)
        if (old.model) retired.push_back(old.model);
      m.versions = std::move(loaded);
    }
    if (!overtaken) m.reason = first_error;
  }
  Retire(std::move(retired));
  if (overtaken)
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

void ModelRepository::Background(std::function<void()> task) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::lock_guard<std::mutex> lock(tasks_mu_);
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = tasks_.erase(it);
    } else {
      ++it;
    }
  }
  tasks_.push_back({std::thread([task = std::move(task), done] {
                      try {
                        task();
                      } catch (const std::exception& e) {
                        LOG_ERROR << "model control task failed: " << e.what();
                      }
                      done->store(true);
                    }),
                    done});
}

namespace {
// Models whose threads never returned: kept alive for ever, since those threads use them.
void Abandon(std::shared_ptr<Model> model) {
  static std::mutex mu;
  static auto* abandoned = new std::vector<std::shared_ptr<Model>>();
  std::lock_guard<std::mutex> lock(mu);
  abandoned->push_back(std::move(model));
}
}  // namespace

// A model out of the map can still be holding requests, and a frontend that looked it up just
// before the swap may still hand it one. Once 'retired' holds the only reference, nobody can: only
// then is it stopped, so a reload or unload fails no request that found the model. (Counting the
// requests it holds instead is racy: a completed request leaves the count only after its
// response is out.) Every wait is bounded by the unload timeout; past it the model is stopped
// with what is left of it and aborted, and one whose threads never return is abandoned.
std::shared_ptr<std::atomic<bool>> ModelRepository::Retire(
    std::vector<std::shared_ptr<Model>> retired) {
  auto done = std::make_shared<std::atomic<bool>>(retired.empty());
  if (retired.empty()) return done;
  Background([retired = std::move(retired), done, timeout = options_.unload_timeout]() mutable {
    for (auto& model : retired) {
      const auto start = std::chrono::steady_clock::now();
      while (model.use_count() > 1 && std::chrono::steady_clock::now() - start < timeout)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - start);
      if (!model->Stop(timeout > spent ? timeout - spent : std::chrono::milliseconds(0)))
        Abandon(std::move(model));
    }
    retired.clear();
    done->store(true);
  });
  return done;
}

Status ModelRepository::Unload(const std::string& name, bool dependents) {
  RETURN_IF_ERROR(CheckModelName(name));
  std::vector<std::shared_ptr<Model>> retired;
  std::vector<std::string> steps;  // with 'dependents': the models an ensemble's steps name
  std::vector<std::string> users;  // loaded ensembles that name this model in a step
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(name);
    // Not loaded (or not anywhere): nothing to do, as in Triton.
    if (it == models_.end()) return Status::Ok();
    ++it->second.generation;  // a load still running discards what it builds
    it->second.fingerprint = 0;
    // Ensembles whose steps name this model go with it (Triton unloads them too).
    for (const auto& entry : models_) {
      const auto named = LoadedStepsLocked(entry.first);
      if (std::find(named.begin(), named.end(), name) != named.end()) users.push_back(entry.first);
    }
    if (dependents) steps = LoadedStepsLocked(name);
    for (auto& [v, entry] : it->second.versions) {
      if (entry.model) retired.push_back(entry.model);
      entry.model.reset();
      entry.state = "UNAVAILABLE";
      entry.reason = "unloaded";
    }
    it->second.reason.clear();
  }
  auto stopped = Retire(std::move(retired));
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
  for (const std::string& user : users) {
    LOG_INFO << "unloading ensemble '" << user << "': its step model '" << name << "' was unloaded";
    RETURN_IF_ERROR(Unload(user));
  }
  for (const std::string& step : steps) RETURN_IF_ERROR(Unload(step, /*dependents=*/true));
  return Status::Ok();
}

StatusOr<std::shared_ptr<Model>> ModelRepository::GetModel(const std::string& name,
                                                           int64_t version) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(name);
  // A model whose load failed answers 503 with its load error, whatever the failure was.
  const std::string& load_error = it == models_.end() ? std::string() : it->second.reason;
  auto unavailable = [&](const std::string& what) {
    return Unavailable("Request for unknown model: '" + name + "' " + what +
                       (load_error.empty() || load_error == "unloaded"
                            ? std::string()
                            : " (load failed: " + load_error + ")"));
  };
  if (it == models_.end() || (it->second.versions.empty() && load_error.empty())) {
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

std::vector<std::shared_ptr<Model>> ModelRepository::LoadedModels() const {
  std::vector<std::shared_ptr<Model>> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, m] : models_)
    for (const auto& [v, entry] : m.versions)
      if (entry.model) out.push_back(entry.model);
  return out;
}

StatusOr<std::vector<std::shared_ptr<Model>>> ModelRepository::StatisticsModels(
    const std::string& name, int64_t version) const {
  if (name.empty()) return LoadedModels();
  if (version >= 0) {
    ASSIGN_OR_RETURN(std::shared_ptr<Model> model, GetModel(name, version));
    return std::vector<std::shared_ptr<Model>>{model};
  }
  std::vector<std::shared_ptr<Model>> models;
  for (auto& m : LoadedModels())
    if (m->name() == name) models.push_back(m);
  if (models.empty()) return NotFound("requested model '" + name + "' is not available");
  return models;
}

Status ModelRepository::CheckExplicitControl() const {
  if (options_.control_mode == ModelControlMode::kExplicit) return Status::Ok();
  if (options_.control_mode == ModelControlMode::kPoll)
    return Unavailable("explicit model load / unload is not allowed if polling is enabled");
  return Unavailable(
      "explicit model load / unload is not allowed if model control mode is not EXPLICIT "
      "(start with --model-control-mode=explicit)");
}

std::vector<int64_t> ModelRepository::ReadyVersions(const std::string& name) const {
  std::vector<int64_t> versions;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end()) return versions;
  for (const auto& [v, entry] : it->second.versions)
    if (entry.model) versions.push_back(v);
  return versions;
}

std::vector<IndexEntry> ModelRepository::Index(bool ready_only) const {
  std::vector<IndexEntry> entries;
  std::set<std::string> names = ModelsOnDisk();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, m] : models_) names.insert(name);
  for (const auto& name : names) {
    auto it = models_.find(name);
    if (it == models_.end() || (it->second.versions.empty() && it->second.reason.empty())) {
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

std::vector<std::string> ModelRepository::FailedModels() const {
  std::vector<std::string> failed;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, m] : models_)
    if (!m.reason.empty() && m.reason != "unloaded") failed.push_back(name + ": " + m.reason);
  return failed;
}

bool ModelRepository::Ready() const {
  if (!options_.strict_readiness) return true;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, m] : models_) {
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

void ModelRepository::StopAll() {
  std::vector<std::shared_ptr<std::atomic<bool>>> stopped;
  std::vector<std::weak_ptr<Model>> loading;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (const auto& attempt : loading_) {
      auto started = AbandonLocked(*attempt);
      loading.insert(loading.end(), started.begin(), started.end());
    }
    for (auto& [name, m] : models_)
      for (auto& [v, entry] : m.versions)
        if (entry.model) {
          std::vector<std::shared_ptr<Model>> one{std::move(entry.model)};
          entry.state = "UNAVAILABLE";
          entry.reason = "unloaded";
          stopped.push_back(Retire(std::move(one)));  // Background takes tasks_mu_, not mu_
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
