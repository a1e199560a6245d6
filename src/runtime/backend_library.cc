#include "runtime/backend_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "common/logging.h"

namespace nereid {

template <typename Fn>
static Fn Symbol(void* handle, const char* name) {
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

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
  if (auto aliases = Symbol<const char* (*)()>(handle, "NereidBackendAliases")) {
    std::string list = aliases() ? aliases() : "";
    for (size_t at = 0; at <= list.size();) {
      size_t comma = std::min(list.find(',', at), list.size());
      std::string alias = list.substr(at, comma - at);
      alias.erase(0, alias.find_first_not_of(' '));
      alias.erase(alias.find_last_not_of(' ') + 1);
      if (!alias.empty()) backend->aliases_.push_back(alias);
      at = comma + 1;
    }
  }
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
  const std::string path =
      (std::filesystem::path(directory_) / ("libnereid_backend_" + name + ".so")).string();
  ASSIGN_OR_RETURN(auto backend, Backend::Load(name, path));
  loaded_[name] = backend;
  return backend;
}

StatusOr<std::shared_ptr<Backend>> BackendManager::Get(const std::string& name) {
  // The name becomes part of a library's file name: letters, digits, '_' and '-' only, so that a
  // config (which a client may send) picks among the installed backends and never names a path.
  const bool plain = !name.empty() && name.size() <= 64 &&
                     std::all_of(name.begin(), name.end(), [](unsigned char c) {
                       return std::isalnum(c) || c == '_' || c == '-';
                     });
  if (!plain)
    return InvalidArgument("invalid backend name '" + name.substr(0, 64) +
                           "': letters, digits, '_' and '-' only");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = loaded_.find(name);
  if (it != loaded_.end()) return it->second;
  namespace fs = std::filesystem;
  const std::string prefix = "libnereid_backend_";
  std::error_code ec;
  // The library of that name serves it when it loads; when it is missing or cannot start (the
  // onnxruntime backend without an ONNX Runtime library), a library that declares the name as an
  // alias serves it instead.
  std::string named_failure;
  if (fs::exists(fs::path(directory_) / (prefix + name + ".so"), ec)) {
    auto named = LoadLocked(name);
    if (named.ok()) return named;
    named_failure = named.status().message();
    LOG_WARNING << named_failure << "; looking for another backend that serves '" << name << "'";
  }
  std::vector<std::string> installed;
  for (const auto& entry : fs::directory_iterator(directory_, ec)) {
    const std::string file = entry.path().filename().string();
    if (file.rfind(prefix, 0) != 0 || file.size() <= prefix.size() + 3 ||
        file.substr(file.size() - 3) != ".so")
      continue;
    std::string candidate = file.substr(prefix.size(), file.size() - prefix.size() - 3);
    if (candidate != name) installed.push_back(std::move(candidate));
  }
  std::sort(installed.begin(), installed.end());
  for (const auto& candidate : installed) {
    auto backend = LoadLocked(candidate);
    if (!backend.ok()) {
      LOG_WARNING << backend.status().message();
      continue;
    }
    const auto& aliases = (*backend)->aliases();
    if (std::find(aliases.begin(), aliases.end(), name) != aliases.end()) {
      LOG_INFO << "backend '" << name << "' is served by '" << candidate << "' ("
               << (named_failure.empty() ? "no libnereid_backend_" + name + ".so is installed"
                                         : "libnereid_backend_" + name + ".so did not start")
               << ")";
      loaded_[name] = *backend;
      return *backend;
    }
  }
  std::string list;
  for (const auto& b : installed) list += (list.empty() ? "" : ", ") + b;
  if (!named_failure.empty()) return Unavailable(named_failure);
  return Unsupported("backend '" + name + "' is not available (installed in " + directory_ + ": " +
                     (list.empty() ? "none" : list) + ")");
}

}  // namespace nereid
