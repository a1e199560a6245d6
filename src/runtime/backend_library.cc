#include "runtime/backend_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "common/logging.h"

namespace nereid {

namespace {

template <typename Fn>
Fn Symbol(void* handle, const char* name) {
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

// "a, b,c" -> {"a", "b", "c"}: a backend's comma-separated declaration, blanks trimmed.
std::vector<std::string> SplitList(const std::string& list) {
  std::vector<std::string> items;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    std::string item = list.substr(at, comma - at);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) items.push_back(std::move(item));
    at = comma + 1;
  }
  return items;
}

constexpr const char* kLibraryPrefix = "libnereid_backend_";
std::string LibraryFile(const std::string& name) { return kLibraryPrefix + name + ".so"; }

}  // namespace

StatusOr<std::shared_ptr<Backend>> Backend::Load(const std::string& name, const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr)
    return NotFound("unable to load backend '" + name + "' from " + path + ": " + dlerror());
  std::shared_ptr<Backend> backend(new Backend());
  backend->name_ = name;
  backend->handle_ = handle;
  auto version_fn = Symbol<uint32_t (*)()>(handle, "NereidBackendApiVersion");
  if (version_fn == nullptr)
    return Internal("backend '" + name + "' does not export NereidBackendApiVersion");
  const uint32_t version = version_fn();
  if (NEREID_API_MAJOR(version) != NEREID_API_MAJOR(NEREID_BACKEND_API_VERSION) ||
      NEREID_API_MINOR(version) > NEREID_API_MINOR(NEREID_BACKEND_API_VERSION))
    return Internal("backend '" + name + "' was built for API version " +
                    std::to_string(NEREID_API_MAJOR(version)) + "." +
                    std::to_string(NEREID_API_MINOR(version)) + ", the server speaks " +
                    std::to_string(NEREID_API_MAJOR(NEREID_BACKEND_API_VERSION)) + "." +
                    std::to_string(NEREID_API_MINOR(NEREID_BACKEND_API_VERSION)));
  backend->model_initialize =
      Symbol<decltype(backend->model_initialize)>(handle, "NereidModelInitialize");
  backend->model_finalize =
      Symbol<decltype(backend->model_finalize)>(handle, "NereidModelFinalize");
  backend->instance_initialize =
      Symbol<decltype(backend->instance_initialize)>(handle, "NereidInstanceInitialize");
  backend->instance_finalize =
      Symbol<decltype(backend->instance_finalize)>(handle, "NereidInstanceFinalize");
  backend->instance_execute =
      Symbol<decltype(backend->instance_execute)>(handle, "NereidInstanceExecute");
  backend->model_abort = Symbol<decltype(backend->model_abort)>(handle, "NereidModelAbort");
  if (!backend->model_initialize || !backend->model_finalize || !backend->instance_initialize ||
      !backend->instance_finalize || !backend->instance_execute)
    return Internal("backend '" + name + "' is missing a required Nereid* entry point");
  backend->backend_finalize_ = Symbol<NereidError* (*)()>(handle, "NereidBackendFinalize");
  if (auto gpu = Symbol<int (*)()>(handle, "NereidBackendSupportsGpu"))
    backend->supports_gpu_ = gpu() != 0;
  if (auto fallback = Symbol<int (*)()>(handle, "NereidBackendGpuFallback"))
    backend->gpu_fallback_ = fallback() != 0;
  auto declared = [handle](const char* symbol) {
    auto fn = Symbol<const char* (*)()>(handle, symbol);
    const char* text = fn != nullptr ? fn() : nullptr;
    return SplitList(text != nullptr ? text : "");
  };
  backend->aliases_ = declared("NereidBackendAliases");
  backend->platforms_ = declared("NereidBackendPlatforms");
  if (auto files = declared("NereidBackendModelFile"); !files.empty())
    backend->model_file_ = files.front();
  if (auto init = Symbol<NereidError* (*)()>(handle, "NereidBackendInitialize")) {
    RETURN_IF_ERROR(StatusFromBackend(init()));
  }
  LOG_INFO << "loaded backend '" << name << "' from " << path;
  return backend;
}

Backend::~Backend() {
  if (backend_finalize_) {
    Status s = StatusFromBackend(backend_finalize_());
    if (!s.ok()) LOG_WARNING << "backend '" << name_ << "' finalize: " << s.message();
  }
  // Backends stay mapped until exit: code from a backend may still sit on a thread's stack during
  // shutdown, and dlclose buys nothing in a server process.
}

StatusOr<std::shared_ptr<Backend>> BackendManager::LoadLocked(const std::string& name) {
  auto it = loaded_.find(name);
  if (it != loaded_.end() && it->second->name() == name) return it->second;
  const std::string path = (std::filesystem::path(directory_) / LibraryFile(name)).string();
  ASSIGN_OR_RETURN(auto backend, Backend::Load(name, path));
  loaded_[name] = backend;
  return backend;
}

std::vector<std::string> BackendManager::Installed() const {
  namespace fs = std::filesystem;
  const std::string prefix = kLibraryPrefix;
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory_, ec)) {
    const std::string file = entry.path().filename().string();
    if (file.rfind(prefix, 0) != 0 || file.size() <= prefix.size() + 3 ||
        file.substr(file.size() - 3) != ".so")
      continue;
    names.push_back(file.substr(prefix.size(), file.size() - prefix.size() - 3));
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::shared_ptr<Backend> BackendManager::StandInLocked(const std::string& name) {
  for (const auto& candidate : Installed()) {
    if (candidate == name) continue;
    auto backend = LoadLocked(candidate);
    if (!backend.ok()) {
      LOG_WARNING << backend.status().message();
      continue;
    }
    const auto& aliases = (*backend)->aliases();
    if (std::find(aliases.begin(), aliases.end(), name) != aliases.end()) return *backend;
  }
  return nullptr;
}

std::shared_ptr<Backend> BackendManager::StandIn(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  return StandInLocked(name);
}

std::vector<std::shared_ptr<Backend>> BackendManager::All() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Backend>> all;
  for (const auto& name : Installed()) {
    auto backend = LoadLocked(name);
    if (backend.ok())
      all.push_back(*std::move(backend));
    else
      LOG_WARNING << backend.status().message();
  }
  return all;
}

bool IsBackendName(std::string_view name) {
  return !name.empty() && name.size() <= 64 &&
         std::all_of(name.begin(), name.end(),
                     [](unsigned char c) { return std::isalnum(c) || c == '_' || c == '-'; });
}

StatusOr<std::shared_ptr<Backend>> BackendManager::Get(const std::string& name) {
  if (!IsBackendName(name))
    return InvalidArgument("invalid backend name '" + name.substr(0, 64) +
                           "': letters, digits, '_' and '-' only");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = loaded_.find(name);
  if (it != loaded_.end()) return it->second;
  // The library of that name serves it when it loads; when it is missing or cannot start (the
  // onnxruntime backend without an ONNX Runtime library), a library that declares the name as an
  // alias serves it instead.
  const std::vector<std::string> installed = Installed();
  std::string named_failure;
  if (std::find(installed.begin(), installed.end(), name) != installed.end()) {
    auto named = LoadLocked(name);
    if (named.ok()) return named;
    named_failure = named.status().message();
    LOG_WARNING << named_failure << "; looking for another backend that serves '" << name << "'";
  }
  if (auto stand_in = StandInLocked(name)) {
    LOG_INFO << "backend '" << name << "' is served by '" << stand_in->name() << "' ("
             << (named_failure.empty() ? "no " + LibraryFile(name) + " is installed"
                                       : LibraryFile(name) + " did not start")
             << ")";
    loaded_[name] = stand_in;
    return stand_in;
  }
  if (!named_failure.empty()) return Unavailable(named_failure);
  std::string list;
  for (const auto& b : installed) list += (list.empty() ? "" : ", ") + b;
  return Unsupported("backend '" + name + "' is not available (installed in " + directory_ + ": " +
                     (list.empty() ? "none" : list) + ")");
}

}  // namespace nereid
