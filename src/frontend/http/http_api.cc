#include "frontend/http/http_api.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <simdjson.h>

#include <charconv>
#include <variant>
#include <vector>

#include "common/base64.h"
#include "frontend/http/compression.h"
#include "frontend/http/infer_codec.h"

namespace nereid::http {

int HttpStatusFor(Status::Code code) {
  switch (code) {
    case Status::Code::kOk:
      return 200;
    case Status::Code::kNotFound:
      return 404;
    case Status::Code::kUnsupported:
      return 501;
    case Status::Code::kInternal:
      return 500;
    case Status::Code::kUnavailable:
      return 503;
    case Status::Code::kResourceExhausted:
      return 429;
    case Status::Code::kInvalidArgument:
    case Status::Code::kAlreadyExists:
    case Status::Code::kCancelled:
      return 400;
  }
  return 400;
}

Reply ErrorReply(int status, const std::string& message) { return {status, ErrorJson(message)}; }
Reply StatusReply(const Status& s) { return ErrorReply(HttpStatusFor(s.code()), s.message()); }
Reply OkReply() { return {200, "", nullptr}; }

namespace {

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

Reply OkOrError(const Status& s) { return s.ok() ? OkReply() : StatusReply(s); }

}  // namespace

Reply ServerMetadataReply(const ServerApi& api) {
  const nereid::ServerMetadata md = api.GetServerMetadata();
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  w.Key("name");
  w.String(md.name.c_str());
  w.Key("version");
  w.String(md.version.c_str());
  w.Key("extensions");
  w.StartArray();
  for (const std::string& e : md.extensions) w.String(e.c_str());
  w.EndArray();
  w.EndObject();
  return {200, buffer.GetString()};
}

namespace {
void WriteDuration(JsonWriter& w, const char* key, const DurationSnapshot& d) {
  w.Key(key);
  w.StartObject();
  w.Key("count");
  w.Uint64(d.count);
  w.Key("ns");
  w.Uint64(d.ns);
  w.EndObject();
}

// Nereid's extension to the metadata and the statistics: "placement", where each instance runs
// (nothing when the model has no instances).
void WritePlacement(JsonWriter& w, const std::vector<InstancePlacement>& placement) {
  if (placement.empty()) return;
  w.Key("placement");
  w.StartArray();
  for (const InstancePlacement& p : placement) {
    w.StartObject();
    for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"model", &p.model},
                                     {"instance", &p.instance},
                                     {"kind", &p.kind},
                                     {"device", &p.device},
                                     {"requested", &p.requested}}) {
      w.Key(key);
      w.String(value->c_str());
    }
    w.EndObject();
  }
  w.EndArray();
}
}  // namespace

// The statistics extension, in Triton's JSON shape.
Reply StatisticsReply(const ServerApi& api, const Route& route) {
  auto selected =
      api.Statistics(route.kind == Route::kAllStats ? std::string() : route.model, route.version);
  if (!selected.ok()) return StatusReply(selected.status());
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  w.Key("model_stats");
  w.StartArray();
  for (const ModelStatistics& st : *selected) {
    w.StartObject();
    w.Key("name");
    w.String(st.name.c_str());
    w.Key("version");
    w.String(std::to_string(st.version).c_str());
    w.Key("last_inference");
    w.Uint64(st.last_inference_ms);
    w.Key("inference_count");
    w.Uint64(st.inference_count);
    w.Key("execution_count");
    w.Uint64(st.execution_count);
    w.Key("inference_stats");
    w.StartObject();
    WriteDuration(w, "success", st.success);
    WriteDuration(w, "fail", st.fail);
    WriteDuration(w, "queue", st.queue);
    WriteDuration(w, "compute_input", st.compute_input);
    WriteDuration(w, "compute_infer", st.compute_infer);
    WriteDuration(w, "compute_output", st.compute_output);
    WriteDuration(w, "cache_hit", st.cache_hit);
    WriteDuration(w, "cache_miss", st.cache_miss);
    w.EndObject();
    w.Key("response_stats");
    w.StartObject();
    w.EndObject();
    w.Key("batch_stats");
    w.StartArray();
    for (const auto& bs : st.batches) {
      w.StartObject();
      w.Key("batch_size");
      w.Uint64(static_cast<uint64_t>(bs.batch_size));
      WriteDuration(w, "compute_input", bs.compute_input);
      WriteDuration(w, "compute_infer", bs.compute_infer);
      WriteDuration(w, "compute_output", bs.compute_output);
      w.EndObject();
    }
    w.EndArray();
    w.Key("memory_usage");
    w.StartArray();
    w.EndArray();
    if (!st.variants_json.empty()) {
      w.Key("variants");
      w.RawValue(st.variants_json.c_str(), st.variants_json.size(), rapidjson::kObjectType);
    }
    if (!st.energy.empty()) {
      w.Key("energy");
      w.StartArray();
      for (const auto& e : st.energy) {
        w.StartObject();
        w.Key("scope");
        w.String(e.scope.c_str());
        w.Key("source");
        w.String(e.source.c_str());
        w.Key("active_joules");
        w.Double(e.active_joules);
        w.Key("idle_joules");
        w.Double(e.idle_joules);
        w.Key("inferences");
        w.Uint64(e.inferences);
        w.Key("joules_per_inference");
        w.Double(e.joules_per_inference);
        w.Key("idle_share");
        w.Double(e.idle_share);
        if (e.carbon_grams >= 0) {
          w.Key("carbon_grams");
          w.Double(e.carbon_grams);
        }
        w.Key("active_watts");
        w.Double(e.active_watts);
        w.EndObject();
      }
      w.EndArray();
    }
    WritePlacement(w, st.placement);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return {200, buffer.GetString()};
}

Reply ModelMetadataReply(const ServerApi& api, const Route& route) {
  auto metadata = api.GetModelMetadata(route.model, route.version);
  if (!metadata.ok()) return StatusReply(metadata.status());
  const nereid::ModelMetadata& model = *metadata;
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  w.Key("name");
  w.String(model.name.c_str());
  w.Key("versions");
  w.StartArray();
  for (int64_t v : model.versions) w.String(std::to_string(v).c_str());
  w.EndArray();
  w.Key("platform");
  w.String(model.platform.c_str());
  for (const bool inputs : {true, false}) {
    w.Key(inputs ? "inputs" : "outputs");
    w.StartArray();
    for (const TensorMetadata& t : inputs ? model.inputs : model.outputs) {
      w.StartObject();
      w.Key("name");
      w.String(t.name.c_str());
      w.Key("datatype");
      const auto type = DataTypeName(t.datatype);
      w.String(type.data(), static_cast<rapidjson::SizeType>(type.size()));
      w.Key("shape");
      w.StartArray();
      for (int64_t d : t.shape) w.Int64(d);
      w.EndArray();
      w.EndObject();
    }
    w.EndArray();
  }
  WritePlacement(w, model.placement);
  w.EndObject();
  return {200, buffer.GetString()};
}

// A control request's body, which must be a JSON object.
namespace {
StatusOr<simdjson::dom::element> ParseObject(simdjson::dom::parser& parser, const std::string& body,
                                             const char* what) {
  ASSIGN_OR_RETURN(simdjson::dom::element doc, ParseJson(parser, body));
  if (doc.type() != simdjson::dom::element_type::OBJECT)
    return InvalidArgument(std::string("the ") + what + " request must be a JSON object");
  return doc;
}
// The index request's 'ready' (false when absent). A document nested past the parser's depth limit
// is read lazily for that one field, so that a 'ready' of the wrong type is refused as Triton
// refuses it (its parser has no such limit) rather than for its depth.
StatusOr<bool> ReadyField(const std::string& body) {
  const std::string wrong = "Invalid value for 'ready': expected a boolean";
  simdjson::dom::parser parser;
  auto doc = ParseObject(parser, body, "repository index");
  if (doc.ok()) {
    simdjson::dom::element ready;
    if (doc->at_key("ready").get(ready)) return false;
    if (ready.type() != simdjson::dom::element_type::BOOL) return InvalidArgument(wrong);
    return bool(ready);
  }
  simdjson::dom::element probe;
  if (parser.parse(body).get(probe) != simdjson::DEPTH_ERROR) return doc.status();
  simdjson::ondemand::parser lazy;
  const simdjson::padded_string padded(body);
  simdjson::ondemand::document lazy_doc;
  simdjson::ondemand::object object;
  simdjson::ondemand::value ready;
  if (lazy.iterate(padded).get(lazy_doc) || lazy_doc.get_object().get(object)) return doc.status();
  const auto found = object.find_field_unordered("ready").get(ready);
  if (found == simdjson::NO_SUCH_FIELD) return doc.status();  // too deep elsewhere
  bool value = false;
  if (found || ready.get_bool().get(value)) return InvalidArgument(wrong);
  return doc.status();  // a boolean 'ready' in a document still too deep to read
}

}  // namespace

Reply RepositoryIndexReply(const ServerApi& api, const std::string& body) {
  bool ready_only = false;
  if (!body.empty()) {
    auto ready = ReadyField(body);
    if (!ready.ok()) return StatusReply(ready.status());
    ready_only = *ready;
  }
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartArray();
  for (const auto& e : api.RepositoryIndex(ready_only)) {
    w.StartObject();
    w.Key("name");
    w.String(e.name.c_str());
    if (e.version >= 0) {
      w.Key("version");
      w.String(std::to_string(e.version).c_str());
    }
    if (!e.state.empty()) {
      w.Key("state");
      w.String(e.state.c_str());
      w.Key("reason");
      w.String(e.reason.c_str());
    }
    w.EndObject();
  }
  w.EndArray();
  return {200, buffer.GetString()};
}

void RepositoryControl(ServerApi& api, const Route& route, const std::string& body,
                       std::function<void(Reply)> done) {
  if (Status allowed = api.CheckRepositoryControl(); !allowed.ok())
    return done(StatusReply(allowed));
  std::string config_json;
  ModelFiles files;
  size_t bytes = 0;
  bool dependents = false;  // unload: Triton's unload_dependents
  if (!body.empty()) {
    simdjson::dom::parser parser;
    auto doc = ParseObject(parser, body, "repository");
    if (!doc.ok()) return done(StatusReply(doc.status()));
    simdjson::dom::object params;
    if (!doc->at_key("parameters").get(params)) {
      for (auto [key, value] : params) {
        if (key == "config") {
          std::string_view text;
          if (value.get(text))
            return done(ErrorReply(400, "parameter 'config' must be a JSON string"));
          config_json = std::string(text);
        } else if (key == "unload_dependents") {
          if (value.get(dependents))
            return done(ErrorReply(400, "parameter 'unload_dependents' must be a boolean"));
        } else if (key.substr(0, 5) == "file:") {
          // The file's bytes, base64 in JSON (Triton's form).
          std::string_view text;
          std::optional<std::string> decoded;
          if (value.get(text) || !(decoded = DecodeBase64(text)))
            return done(ErrorReply(400, "parameter '" + std::string(key.substr(0, 300)) +
                                            "' must be the file's bytes as a base64 string"));
          bytes += decoded->size();
          files.emplace_back(std::string(key.substr(5)), std::move(*decoded));
        }
      }
    }
  }
  const bool load = route.kind == Route::kRepoLoad;
  api.RunControl(
      route.model, config_json.size() + bytes,
      [&api, load, name = route.model, config_json, files = std::move(files), dependents] {
        return load ? api.LoadModel(name, config_json, files) : api.UnloadModel(name, dependents);
      },
      [done](Status s) { done(OkOrError(s)); });
}

// A shared-memory status answer: one object per region with its name, the kind's own fields,
// and byte_size.
namespace {
template <typename Region, typename Fields>
Reply RegionsReply(StatusOr<std::vector<Region>> regions, Fields fields) {
  if (!regions.ok()) return StatusReply(regions.status());
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartArray();
  for (const auto& r : *regions) {
    w.StartObject();
    w.Key("name");
    w.String(r.name.c_str(), static_cast<rapidjson::SizeType>(r.name.size()));
    fields(w, r);
    w.Key("byte_size");
    w.Uint64(r.byte_size);
    w.EndObject();
  }
  w.EndArray();
  return {200, buffer.GetString()};
}
}  // namespace

// The CUDA shared-memory extension: regions are another process's device allocations, named by
// a cudaIpcMemHandle_t (base64 in the JSON body).
namespace {
Reply CudaSharedMemoryReply(ServerApi& api, const Route& route, const std::string& body) {
  SharedMemoryRegistry& shm = api.shared_memory();
  if (route.action == "status")
    return RegionsReply(shm.GetCudaStatus(route.model), [](JsonWriter& w, const auto& r) {
      w.Key("device_id");
      w.Int64(r.device_id);
    });
  if (route.action == "unregister") return OkOrError(shm.UnregisterCuda(route.model));
  simdjson::dom::parser parser;
  auto doc = ParseObject(parser, body, "register");
  if (!doc.ok()) return StatusReply(doc.status());
  auto b64 = (*doc)["raw_handle"]["b64"];
  if (b64.error() || !b64.is_string())
    return ErrorReply(400, "CUDA shared memory register needs 'raw_handle': {\"b64\": \"...\"}");
  const auto handle = DecodeBase64(b64.get_string().value_unsafe());
  if (!handle) return ErrorReply(400, "'raw_handle.b64' is not valid base64");
  if ((*doc)["byte_size"].error() || (*doc)["device_id"].error())
    return ErrorReply(400, "CUDA shared memory register needs 'device_id' and 'byte_size'");
  auto device = UintMember(*doc, "device_id", "CUDA shared memory");
  if (!device.ok()) return StatusReply(device.status());
  auto byte_size = UintMember(*doc, "byte_size", "CUDA shared memory");
  if (!byte_size.ok()) return StatusReply(byte_size.status());
  if (*device > 1024) return ErrorReply(400, "invalid 'device_id'");
  Status s = shm.RegisterCuda(route.model, *handle, static_cast<int64_t>(*device), *byte_size);
  if (!s.ok()) return StatusReply(s);
  return OkReply();
}
}  // namespace

// The system shared-memory extension.
Reply SharedMemoryReply(ServerApi& api, const Route& route, const std::string& body) {
  // Triton refuses a (un)register before reading its body when clients may not use regions.
  if (route.action != "status")
    if (Status s = api.shared_memory().CheckClientAccess(); !s.ok()) return StatusReply(s);
  if (route.cuda) return CudaSharedMemoryReply(api, route, body);
  SharedMemoryRegistry& shm = api.shared_memory();
  if (route.action == "status")
    return RegionsReply(shm.GetStatus(route.model), [](JsonWriter& w, const auto& r) {
      w.Key("key");
      w.String(r.key.c_str(), static_cast<rapidjson::SizeType>(r.key.size()));
      w.Key("offset");
      w.Uint64(r.offset);
    });
  if (route.action == "unregister") return OkOrError(shm.Unregister(route.model));
  simdjson::dom::parser parser;
  auto doc = ParseObject(parser, body, "register");
  if (!doc.ok()) return StatusReply(doc.status());
  auto key = (*doc)["key"];
  if (key.error() || !key.is_string())
    return ErrorReply(400, "shared memory register needs a string 'key'");
  if ((*doc)["byte_size"].error())
    return ErrorReply(400, "shared memory register needs 'byte_size'");
  auto offset = UintMember(*doc, "offset", "shared memory");  // absent: 0
  if (!offset.ok()) return StatusReply(offset.status());
  auto byte_size = UintMember(*doc, "byte_size", "shared memory");
  if (!byte_size.ok()) return StatusReply(byte_size.status());
  Status s =
      shm.Register(route.model, std::string(key.get_string().value_unsafe()), *offset, *byte_size);
  if (!s.ok()) return StatusReply(s);
  return OkReply();
}

StatusOr<RequestDescription> DecodeInferBody(Buffer body,
                                             std::optional<std::string_view> content_encoding,
                                             std::optional<std::string_view> header_length,
                                             size_t max_input_size) {
  if (content_encoding) {
    ASSIGN_OR_RETURN(Encoding encoding, ParseContentEncoding(*content_encoding));
    if (encoding != Encoding::kIdentity) {
      const std::string_view compressed(reinterpret_cast<const char*>(body.data()), body.size());
      ASSIGN_OR_RETURN(std::string inflated, Inflate(encoding, compressed, max_input_size));
      auto text = std::make_shared<std::string>(std::move(inflated));
      body = Buffer(reinterpret_cast<uint8_t*>(text->data()), text->size(), MemoryLocation{}, text);
    }
  }
  int64_t json_size = -1;
  if (header_length) {
    const std::string_view v = *header_length;
    auto res = std::from_chars(v.data(), v.data() + v.size(), json_size);
    if (res.ec != std::errc() || res.ptr != v.data() + v.size() || json_size < 0)
      return InvalidArgument("invalid Inference-Header-Content-Length header");
  }
  RequestDescription description;
  RETURN_IF_ERROR(DecodeInferRequest(body, json_size, &description));
  return description;
}

Reply LoggingReply(ServerApi& api, bool update, const std::string& body) {
  if (update) {
    simdjson::dom::parser parser;
    auto doc = ParseObject(parser, body, "logging");
    if (!doc.ok()) return StatusReply(doc.status());
    const simdjson::dom::object settings_json = doc->get_object().value_unsafe();
    for (auto [key_view, v] : settings_json) {
      const std::string key(key_view);
      bool flag;
      uint64_t number;
      std::string_view text;
      LogSettingValue value;
      if (!v.get(flag))
        value = flag;
      else if (!v.get(number))
        value = number;
      else if (!v.get(text))
        value = std::string(text);
      else
        return ErrorReply(400, "unknown or mistyped logging setting '" + key + "'");
      if (Status s = api.UpdateLogSetting(key, value); !s.ok()) return StatusReply(s);
    }
  }
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  for (const auto& [key, value] : api.LogSettings()) {
    w.Key(key.c_str());
    if (const bool* b = std::get_if<bool>(&value))
      w.Bool(*b);
    else if (const uint64_t* n = std::get_if<uint64_t>(&value))
      w.Uint64(*n);
    else
      w.String(std::get<std::string>(value).c_str());
  }
  w.EndObject();
  return {200, buffer.GetString()};
}

// GET / POST v2[/models/m]/trace/setting: values are strings (trace_level a list of them); null
// puts a setting back to the global (or start-up) value.
Reply TraceReply(ServerApi& api, const std::string& model, bool update, const std::string& body) {
  trace::SettingUpdate changes;
  if (update && body.find_first_not_of(" \t\r\n") != std::string::npos) {
    simdjson::dom::parser parser;
    auto doc = ParseObject(parser, body, "trace");
    if (!doc.ok()) return StatusReply(doc.status());
    const simdjson::dom::object object = doc->get_object().value_unsafe();
    for (auto [key_view, v] : object) {
      const std::string key(key_view);
      if (v.is_null()) {
        changes.emplace_back(key, std::nullopt);
        continue;
      }
      // Triton's shapes: trace_level a list of strings, every other setting one string.
      std::vector<std::string> values;
      std::string_view text;
      if (key == "trace_level") {
        simdjson::dom::array list;
        if (v.get(list))
          return ErrorReply(400, "trace setting 'trace_level' must be a list of strings or null");
        for (auto item : list) {
          if (item.get(text))
            return ErrorReply(400, "trace setting 'trace_level' must list strings");
          values.emplace_back(text);
        }
      } else if (!v.get(text)) {
        values.emplace_back(text);
      } else {
        return ErrorReply(400, "trace setting '" + key + "' must be a string or null");
      }
      changes.emplace_back(key, std::move(values));
    }
  }
  auto settings = api.TraceSettings(model, update ? &changes : nullptr);
  if (!settings.ok()) return StatusReply(settings.status());
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  for (const auto& [key, values] : *settings) {
    w.Key(key.c_str());
    if (key == "trace_level") {
      w.StartArray();
      for (const auto& v : values) w.String(v.c_str());
      w.EndArray();
    } else {
      w.String(values.empty() ? "" : values.front().c_str());
    }
  }
  w.EndObject();
  return {200, buffer.GetString()};
}

Handling HandleRoute(ServerApi& api, const RestrictedApis& restricted,
                     const RoutedRequest& request) {
  const Route& route = request.route;
  auto reply = [](Reply r) { return Handling{Handling::kReply, std::move(r)}; };
  const Reply wrong_method = ErrorReply(405, "method not allowed for this endpoint");
  if (const auto group = GroupOf(route.kind)) {
    if (const auto* r = restricted.For(*group)) {
      const auto value = request.header(r->key);
      if (!value || *value != r->value)
        return reply(ErrorReply(403, "This API is restricted, expecting header '" + r->key + "'"));
    }
  }
  if (route.bad_version) return reply(ErrorReply(400, "invalid model version in URL"));
  const bool get = request.method == "GET", post = request.method == "POST";
  switch (route.kind) {
    case Route::kHealthLive:
      return reply(get ? OkReply() : wrong_method);
    case Route::kHealthReady:
      return reply(get ? Reply{api.Ready() ? 200 : 400, "", nullptr} : wrong_method);
    case Route::kServerMetadata:
      return reply(get ? ServerMetadataReply(api) : wrong_method);
    case Route::kModelMetadata:
      return reply(get ? ModelMetadataReply(api, route) : wrong_method);
    case Route::kModelReady: {
      if (!get) return reply(wrong_method);
      Status ready = api.ModelReady(route.model, route.version);
      return reply(ready.ok() ? OkReply()
                              : ErrorReply(400, "Model version not ready: " + ready.message()));
    }
    case Route::kModelConfig: {
      if (!get) return reply(wrong_method);
      auto config = api.ModelConfigJson(route.model, route.version);
      return reply(config.ok() ? Reply{200, std::move(config).value()}
                               : StatusReply(config.status()));
    }
    case Route::kModelInfer:
      return post ? Handling{Handling::kInfer, {}} : reply(wrong_method);
    case Route::kRepoIndex:
      return reply(post ? RepositoryIndexReply(api, request.body) : wrong_method);
    case Route::kRepoLoad:
    case Route::kRepoUnload:
      return post ? Handling{Handling::kRepositoryControl, {}} : reply(wrong_method);
    case Route::kLogging:
      return reply(get || post ? LoggingReply(api, post, request.body) : wrong_method);
    case Route::kModelStats:
    case Route::kAllStats:
      return reply(get ? StatisticsReply(api, route) : wrong_method);
    case Route::kSharedMemory:
      return reply((route.action == "status" ? get : post)
                       ? SharedMemoryReply(api, route, request.body)
                       : wrong_method);
    case Route::kTrace:
      return reply(get || post ? TraceReply(api, route.model, post, request.body) : wrong_method);
    case Route::kGenerate:
      return reply(ErrorReply(501, "the generate extension is not supported yet"));
    case Route::kNotFound:
      break;
  }
  return reply(ErrorReply(404, "Not Found"));
}

}  // namespace nereid::http
