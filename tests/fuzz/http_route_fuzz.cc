// Fuzz target for the HTTP route parser (src/frontend/http/http_routes): any request target,
// matched the way Triton's HTTP server matches its URLs (query strings, repeated slashes,
// percent-encoded names, versions), then its API group.
//   libFuzzer: scripts/fuzz.sh [seconds]       replay (any compiler): build/http_route_fuzz FILE...
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "frontend/http/http_routes.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view target(reinterpret_cast<const char*>(data), size);
  const nereid::http::Route route = nereid::http::Match(target);
  (void)nereid::http::GroupOf(route.kind);
  // A route that names a model names something the target held (decoding only shrinks it).
  if (route.model.size() > target.size()) __builtin_trap();
  return 0;
}
