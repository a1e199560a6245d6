#include "frontend/restricted_api.h"

namespace nereid {
namespace {

constexpr std::array<std::string_view, static_cast<size_t>(ApiGroup::kCount)> kNames = {
    "health",           "metadata",   "inference", "shared-memory", "model-config",
    "model-repository", "statistics", "trace",     "logging"};

}  // namespace

std::string_view RestrictedApis::Name(ApiGroup group) { return kNames[static_cast<size_t>(group)]; }

bool RestrictedApis::empty() const {
  for (const auto& g : groups_)
    if (g) return false;
  return true;
}

Status RestrictedApis::Add(const std::string& flag, const std::string& spec) {
  const std::string usage =
      "--" + flag + " expects <group>,<group>,...:<key>=<value>, got '" + spec + "'";
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return InvalidArgument(usage);
  const std::string list = spec.substr(0, colon);
  const std::string kv = spec.substr(colon + 1);
  const size_t eq = kv.find('=');
  if (eq == std::string::npos || eq == 0) return InvalidArgument(usage);
  Restriction r{kv.substr(0, eq), kv.substr(eq + 1)};
  size_t start = 0;
  bool any = false;
  while (start <= list.size()) {
    const size_t comma = list.find(',', start);
    const std::string name =
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? list.size() + 1 : comma + 1;
    if (name.empty()) continue;
    size_t i = 0;
    while (i < kNames.size() && kNames[i] != name) ++i;
    if (i == kNames.size()) {
      std::string known;
      for (auto n : kNames) known += (known.empty() ? "" : ", ") + std::string(n);
      return InvalidArgument("--" + flag + ": unknown API group '" + name + "' (known: " + known +
                             ")");
    }
    if (groups_[i])
      return InvalidArgument("--" + flag + ": API group '" + name +
                             "' is already restricted; a group may be in one restriction only");
    groups_[i] = r;
    any = true;
  }
  if (!any) return InvalidArgument(usage);
  return Status::Ok();
}

}  // namespace nereid
