#include "config/model_parameters.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace nereid {
namespace {

std::string Shown(double d) {
  std::ostringstream s;
  s << d;
  return s.str();
}

}  // namespace

Status NumberParameter(const inference::ModelConfig& config, const char* key, double lo, double hi,
                       double* out) {
  auto it = config.parameters().find(key);
  if (it == config.parameters().end()) return Status::Ok();
  const std::string& v = it->second.string_value();
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || errno == ERANGE || !std::isfinite(d) ||
      !(d >= lo && d <= hi))
    return InvalidArgument("model '" + config.name() + "': parameter '" + key +
                           "' must be a finite number from " + Shown(lo) + " to " + Shown(hi) +
                           ", got '" + v + "'");
  *out = d;
  return Status::Ok();
}

Status WholeNumberParameter(const inference::ModelConfig& config, const char* key, uint64_t hi,
                            uint64_t* out) {
  auto it = config.parameters().find(key);
  if (it == config.parameters().end()) return Status::Ok();
  const std::string& v = it->second.string_value();
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos ||
      end != v.c_str() + v.size() || errno != 0 || n > hi)
    return InvalidArgument("model '" + config.name() + "': parameter '" + key +
                           "' must be a whole number from 0 to " + std::to_string(hi) + ", got '" +
                           v + "'");
  *out = n;
  return Status::Ok();
}

}  // namespace nereid
