// The HTTP API's routes: a request path matched the way Triton's HTTP server matches its URLs, and
// the API group each route belongs to (for --http-restricted-api).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "frontend/restricted_api.h"

namespace nereid::http {

// The route of a request path, split the way Triton's HTTP server matches its URLs.
struct Route {
  enum Kind {
    kNotFound,
    kServerMetadata,
    kHealthLive,
    kHealthReady,
    kModelMetadata,
    kModelReady,
    kModelConfig,
    kModelInfer,
    kModelStats,
    kAllStats,
    kRepoIndex,
    kRepoLoad,
    kRepoUnload,
    kSharedMemory,
    kTrace,
    kLogging,
    kGenerate
  } kind = kNotFound;
  std::string model;   // also the region name of a shared-memory route
  std::string action;  // shared memory: status, register or unregister
  bool cuda = false;
  int64_t version = -1;
  bool bad_version = false;
};

// The route of 'target' (a request target, query string ignored).
Route Match(std::string_view target);

// The API group of a route (Triton's grouping); none for routes outside every group.
std::optional<ApiGroup> GroupOf(Route::Kind kind);

}  // namespace nereid::http
