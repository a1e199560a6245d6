#include "runtime/backend.h"

#include <dlfcn.h>

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
  if ((version >> 16) != (NEREID_BACKEND_API_VERSION >> 16))
    return Internal("backend '" + name + "' was built for API version " +
                    std::to_string(version >> 16) + ", server speaks " +
                    std::to_string(NEREID_BACKEND_API_VERSION >> 16));
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
  if (!backend->model_initialize || !backend->model_finalize || !backend->instance_initialize ||
      !backend->instance_finalize || !backend->instance_execute)
    return Internal("backend '" + name + "' is missing a required Nereid* entry point");
  backend->backend_finalize_ = Symbol<NereidError* (*)()>(handle, "NereidBackendFinalize");
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

StatusOr<std::shared_ptr<Backend>> BackendManager::Get(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = loaded_.find(name);
  if (it != loaded_.end()) return it->second;
  const std::string path =
      (std::filesystem::path(directory_) / ("libnereid_backend_" + name + ".so")).string();
  ASSIGN_OR_RETURN(auto backend, Backend::Load(name, path));
  loaded_[name] = backend;
  return backend;
}

}  // namespace nereid
