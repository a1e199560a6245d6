// Backend: one loaded backend shared library (libnereid_backend_<name>.so) and its entry points.
// BackendManager loads each backend once, by name, from the backend directory.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
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
  bool supports_gpu_ = false;
  void* handle_ = nullptr;
  NereidError* (*backend_finalize_)() = nullptr;
};

// Resolves backend names to libraries: libnereid_backend_<name>.so when it exists, else a library
// in the directory that declares <name> as an alias.
class BackendManager {
 public:
  explicit BackendManager(std::string directory) : directory_(std::move(directory)) {}
  StatusOr<std::shared_ptr<Backend>> Get(const std::string& name);
  const std::string& directory() const { return directory_; }

 private:
  std::string directory_;
  StatusOr<std::shared_ptr<Backend>> LoadLocked(const std::string& name);
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Backend>> loaded_;  // by library name and by alias
};

}  // namespace nereid
