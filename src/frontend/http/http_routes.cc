#include "frontend/http/http_routes.h"

#include <string>
#include <vector>

#include "server/request_builder.h"

namespace nereid::http {

// The API group of a route, for --http-restricted-api (Triton's grouping).
std::optional<ApiGroup> GroupOf(Route::Kind kind) {
  switch (kind) {
    case Route::kHealthLive:
    case Route::kHealthReady:
    case Route::kModelReady:
      return ApiGroup::kHealth;
    case Route::kServerMetadata:
    case Route::kModelMetadata:
      return ApiGroup::kMetadata;
    case Route::kModelInfer:
    case Route::kGenerate:
      return ApiGroup::kInference;
    case Route::kModelConfig:
      return ApiGroup::kModelConfig;
    case Route::kModelStats:
    case Route::kAllStats:
      return ApiGroup::kStatistics;
    case Route::kRepoIndex:
    case Route::kRepoLoad:
    case Route::kRepoUnload:
      return ApiGroup::kModelRepository;
    case Route::kSharedMemory:
      return ApiGroup::kSharedMemory;
    case Route::kTrace:
      return ApiGroup::kTrace;
    case Route::kLogging:
      return ApiGroup::kLogging;
    case Route::kNotFound:
      break;
  }
  return std::nullopt;
}

namespace {

std::vector<std::string_view> SplitPath(std::string_view path) {
  std::vector<std::string_view> parts;
  while (!path.empty()) {
    while (!path.empty() && path.front() == '/') path.remove_prefix(1);
    const size_t slash = path.find('/');
    if (!path.empty()) parts.push_back(path.substr(0, slash));
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash);
  }
  return parts;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A name segment as the client meant it: tritonclient percent-encodes model names in URLs
// (urllib.parse.quote), and Triton decodes them. A '%' not followed by two hex digits stays.
// What the decoded name may hold is the model-name check's business (it refuses '/', NUL, ...).
std::string PercentDecoded(std::string_view segment) {
  std::string out;
  out.reserve(segment.size());
  for (size_t i = 0; i < segment.size(); ++i) {
    if (segment[i] == '%' && i + 2 < segment.size()) {
      const int hi = HexValue(segment[i + 1]), lo = HexValue(segment[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += segment[i];
  }
  return out;
}

}  // namespace

Route Match(std::string_view target) {
  Route r;
  target = target.substr(0, target.find('?'));
  const auto p = SplitPath(target);
  if (p.empty() || p[0] != "v2") return r;
  if (p.size() == 1) return r.kind = Route::kServerMetadata, r;
  if (p[1] == "health" && p.size() == 3) {
    if (p[2] == "live") r.kind = Route::kHealthLive;
    if (p[2] == "ready") r.kind = Route::kHealthReady;
    return r;
  }
  if (p[1] == "models") {
    if (p.size() == 3 && p[2] == "stats") return r.kind = Route::kAllStats, r;
    if (p.size() < 3) return r;
    r.model = PercentDecoded(p[2]);
    size_t i = 3;
    if (p.size() > 4 && p[3] == "versions") {
      // (SplitPath drops empty segments, so this is never "", the newest version)
      auto version = ParseModelVersion(p[4]);
      r.bad_version = !version.ok();
      r.version = version.ok() ? *version : -1;
      i = 5;
    }
    if (i == p.size()) return r.kind = Route::kModelMetadata, r;
    if (i + 1 == p.size()) {
      if (p[i] == "infer")
        r.kind = Route::kModelInfer;
      else if (p[i] == "ready")
        r.kind = Route::kModelReady;
      else if (p[i] == "config")
        r.kind = Route::kModelConfig;
      else if (p[i] == "stats")
        r.kind = Route::kModelStats;
      else if (p[i] == "generate" || p[i] == "generate_stream")
        r.kind = Route::kGenerate;
    } else if (i + 2 == p.size() && p[i] == "trace" && p[i + 1] == "setting") {
      r.kind = Route::kTrace;
    }
    return r;
  }
  if (p[1] == "repository") {
    if (p.size() == 3 && p[2] == "index") return r.kind = Route::kRepoIndex, r;
    if (p.size() == 5 && p[2] == "models") {
      r.model = PercentDecoded(p[3]);
      if (p[4] == "load") r.kind = Route::kRepoLoad;
      if (p[4] == "unload") r.kind = Route::kRepoUnload;
    }
    return r;
  }
  if (p[1] == "systemsharedmemory" || p[1] == "cudasharedmemory") {
    // /v2/<kind>sharedmemory[/region/<name>]/(status|register|unregister)
    r.cuda = p[1] == "cudasharedmemory";
    std::string_view action;
    if (p.size() == 3) {
      action = p[2];
    } else if (p.size() == 5 && p[2] == "region") {
      r.model = PercentDecoded(p[3]);
      action = p[4];
    }
    if (action == "status" || action == "register" || action == "unregister") {
      r.kind = Route::kSharedMemory;
      r.action = std::string(action);
    }
    if (action == "register" && r.model.empty()) r.kind = Route::kNotFound;
    return r;
  }
  if (p[1] == "trace" && p.size() == 3 && p[2] == "setting") return r.kind = Route::kTrace, r;
  if (p[1] == "logging" && p.size() == 2) return r.kind = Route::kLogging, r;
  return r;
}

}  // namespace nereid::http
