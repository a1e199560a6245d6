// A label value as Prometheus's text exposition writes it: backslash, double quote and newline
// escaped. The server writes label values with it, nereid-perf matches them with it.
#pragma once

#include <string>
#include <string_view>

namespace nereid {

inline std::string PrometheusEscape(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace nereid
