// What the server says about itself in server metadata (HTTP GET /v2, gRPC ServerMetadata).
#pragma once

#include <string>
#include <vector>

namespace nereid {

constexpr const char* kServerName = "nereid";
constexpr const char* kServerVersion = "0.1.0";

// Only extensions that work end to end on every frontend are listed.
inline const std::vector<std::string>& ServerExtensions() {
  static const std::vector<std::string> extensions = {"classification",
                                                      "sequence",
                                                      "model_repository",
                                                      "model_configuration",
                                                      "binary_tensor_data",
                                                      "system_shared_memory",
                                                      "schedule_policy",
                                                      "statistics",
                                                      "logging",
                                                      "trace"};
  return extensions;
}

}  // namespace nereid
