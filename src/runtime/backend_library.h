// Backend: one loaded backend shared library (libnereid_backend_<name>.so) and its entry points.
// BackendManager loads each backend once, by name, from the backend directory.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "nereid/backend.h"

namespace nereid {

// Converts a backend-owned error into a Status and frees it (NULL -> Ok).
Status StatusFromBackend(NereidError* error);

class Backend {
 public:
  static StatusOr<std::shared_ptr<Backend>> Load(const std::string& name, const std::string& path);
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  const std::string& name() const { return name_; }
  // Other backend names this library answers for (NereidBackendAliases).
  const std::vector<std::string>& aliases() const { return aliases_; }
  // Whether it runs KIND_GPU instances (NereidBackendSupportsGpu).
  bool supports_gpu() const { return supports_gpu_; }
  // Whether it takes explicit KIND_GPU instances anyway (NereidBackendGpuFallback).
  bool gpu_fallback() const { return gpu_fallback_; }
  // The Triton platforms it serves (NereidBackendPlatforms); empty: it takes any.
  const std::vector<std::string>& platforms() const { return platforms_; }
  // The model file of a version directory when the config names none (NereidBackendModelFile);
  // empty when it declares none.
  const std::string& model_file() const { return model_file_; }
  // The backend name its model file stands for: its first alias, else its own name.
  const std::string& claimed_name() const { return aliases_.empty() ? name_ : aliases_.front(); }

  NereidError* (*model_initialize)(NereidModel*) = nullptr;
  NereidError* (*model_finalize)(NereidModel*) = nullptr;
  NereidError* (*instance_initialize)(NereidInstance*) = nullptr;
  NereidError* (*instance_finalize)(NereidInstance*) = nullptr;
  NereidError* (*instance_execute)(NereidInstance*, NereidRequest**, uint32_t) = nullptr;
  void (*model_abort)(NereidModel*) = nullptr;  // optional (NereidModelAbort)

 private:
  Backend() = default;
  std::string name_;
  std::vector<std::string> aliases_;
  std::vector<std::string> platforms_;
  std::string model_file_;
  bool supports_gpu_ = false;
  bool gpu_fallback_ = false;
  void* handle_ = nullptr;
  NereidError* (*backend_finalize_)() = nullptr;
};

// Whether 'name' can name a backend: letters, digits, '_' and '-', 1 to 64 of them. A backend name
// becomes part of a library's file name, so a config (which a client may send) picks among the
// installed backends and never names a path.
bool IsBackendName(std::string_view name);

// Resolves backend names to libraries: libnereid_backend_<name>.so when it exists, else a library
// in the directory that declares <name> as an alias. Thread-safe; each library loads once.
class BackendManager {
 public:
  explicit BackendManager(std::string directory) : directory_(std::move(directory)) {}
  StatusOr<std::shared_ptr<Backend>> Get(const std::string& name);
  // Another library that declares 'name' as an alias (the native engine for onnxruntime), loaded;
  // null when there is none.
  std::shared_ptr<Backend> StandIn(const std::string& name);
  // Every library of the directory that loads, by name (those that fail are logged and skipped).
  std::vector<std::shared_ptr<Backend>> All();
  const std::string& directory() const { return directory_; }

 private:
  // The <name>s of libnereid_backend_<name>.so in the directory, sorted.
  std::vector<std::string> Installed() const;
  StatusOr<std::shared_ptr<Backend>> LoadLocked(const std::string& name);
  std::shared_ptr<Backend> StandInLocked(const std::string& name);
  std::string directory_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Backend>> loaded_;  // by library name and by alias
};

}  // namespace nereid
