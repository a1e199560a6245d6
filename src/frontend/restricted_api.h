// Triton's restricted API groups (--http-restricted-api, --grpc-restricted-protocol): a request to
// an endpoint of a restricted group must carry a header with the configured value, or it is
// refused (HTTP 403, gRPC UNAVAILABLE). Shared by both frontends.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace nereid {

enum class ApiGroup {
  kHealth,
  kMetadata,
  kInference,
  kSharedMemory,
  kModelConfig,
  kModelRepository,
  kStatistics,
  kTrace,
  kLogging,
  kCount
};

class RestrictedApis {
 public:
  struct Restriction {
    std::string key;  // the header name as given (HTTP matches it case-insensitively)
    std::string value;
  };

  // Adds one flag value, "<group>,<group>,...:<key>=<value>". Unknown groups, a group restricted
  // twice, an empty key or a missing '=' are errors naming the flag.
  Status Add(const std::string& flag, const std::string& spec);
  // The restriction on 'group', or nullptr when it is open.
  const Restriction* For(ApiGroup group) const {
    const auto& r = groups_[static_cast<size_t>(group)];
    return r ? &*r : nullptr;
  }
  bool empty() const;

  static std::string_view Name(ApiGroup group);

 private:
  std::array<std::optional<Restriction>, static_cast<size_t>(ApiGroup::kCount)> groups_;
};

}  // namespace nereid
