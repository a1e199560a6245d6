#include "trace/trace.h"

#include <charconv>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>

#include "common/clock.h"
#include "common/logging.h"
#include "trace/otlp_exporter.h"
#include "trace/protobuf_writer.h"

namespace nereid::trace {

namespace {

constexpr std::string_view kKeyLevel = "trace_level", kKeyRate = "trace_rate",
                           kKeyCount = "trace_count", kKeyFrequency = "log_frequency",
                           kKeyFile = "trace_file", kKeyMode = "trace_mode";

std::array<uint8_t, 8> RandomSpanId() {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  std::array<uint8_t, 8> id{};
  uint64_t v = 0;
  while (v == 0) v = gen();
  for (size_t i = 0; i < 8; ++i) id[i] = static_cast<uint8_t>(v >> (8 * i));
  return id;
}

std::array<uint8_t, 16> RandomTraceId() {
  std::array<uint8_t, 16> id{};
  const auto a = RandomSpanId(), b = RandomSpanId();
  std::copy(a.begin(), a.end(), id.begin());
  std::copy(b.begin(), b.end(), id.begin() + 8);
  return id;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // W3C: lowercase only
}

bool ParseHex(std::string_view text, uint8_t* out, size_t n) {
  if (text.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i) {
    const int hi = HexDigit(text[2 * i]), lo = HexDigit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

void AppendJsonString(std::string* out, std::string_view s) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          snprintf(buf, sizeof buf, "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

std::string_view View(const std::array<uint8_t, 16>& a) {
  return {reinterpret_cast<const char*>(a.data()), a.size()};
}
std::string_view View(const std::array<uint8_t, 8>& a) {
  return {reinterpret_cast<const char*>(a.data()), a.size()};
}

// Trace ids, unique in the process (steps of an ensemble have their own).
uint64_t NextId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

bool IsFrontend(std::string_view name) {
  return name.rfind("HTTP_", 0) == 0 || name.rfind("GRPC_", 0) == 0;
}

StatusOr<uint64_t> ParseUnsigned(std::string_view key, std::string_view v, uint64_t max) {
  uint64_t out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && out > max))
    return InvalidArgument("Unable to parse '" + std::string(key) +
                           "', value is out of range [ 0, " + std::to_string(max) +
                           " ], got: " + std::string(v));
  if (ec != std::errc() || end != v.data() + v.size() || v.empty())
    return InvalidArgument("Unable to parse '" + std::string(key) + "', got: " + std::string(v));
  return out;
}

StatusOr<int32_t> ParseCount(std::string_view key, std::string_view v) {
  int64_t out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec == std::errc::result_out_of_range ||
      (ec == std::errc() && out > std::numeric_limits<int32_t>::max()))
    return InvalidArgument(
        "Unable to parse '" + std::string(key) + "', value is out of range [ -1, " +
        std::to_string(std::numeric_limits<int32_t>::max()) + " ], got: " + std::string(v));
  if (ec != std::errc() || end != v.data() + v.size() || v.empty())
    return InvalidArgument("Unable to parse '" + std::string(key) + "', got: " + std::string(v));
  if (out < -1)
    return InvalidArgument("Unable to parse '" + std::string(key) +
                           "'. Expecting value >= -1, got:" + std::string(v));
  return static_cast<int32_t>(out);
}

StatusOr<uint32_t> ParseLevels(const std::vector<std::string>& levels) {
  uint32_t level = 0;
  for (const std::string& l : levels) {
    if (l == "OFF") {
      if (levels.size() != 1)
        return InvalidArgument("Expect only one trace level 'OFF' is specified");
    } else if (l == "TIMESTAMPS") {
      level |= kTimestamps;
    } else if (l == "TENSORS") {
      level |= kTensors;
    } else {
      return InvalidArgument("unknown trace level '" + l +
                             "' (expected OFF, TIMESTAMPS or TENSORS)");
    }
  }
  return level;
}

}  // namespace

// Triton's trace file: with log_frequency 0 every trace goes to <file> (one JSON array, closed when
// the server stops, written as it fills); otherwise each group of log_frequency traces to
// <file>.<n>.
struct TraceFile {
  explicit TraceFile(std::string p) : path(std::move(p)) {}
  ~TraceFile() {
    if (out.is_open()) out << "]";
  }
  void Save(const std::string& traces, bool indexed) {
    if (path.empty() || traces.empty()) return;
    if (indexed) {
      std::ofstream f(path + "." + std::to_string(index.fetch_add(1)));
      f << "[" << traces << "]";
      if (!f) LOG_ERROR << "trace file '" << path << "': cannot write";
      return;
    }
    std::lock_guard<std::mutex> lock(mu);
    if (!out.is_open()) {
      out.open(path);
      if (!out) {
        LOG_ERROR << "trace file '" << path << "': cannot open";
        return;
      }
      out << "[";
    } else {
      out << ",";
    }
    out << traces;
    out.flush();
  }
  const std::string path;
  std::atomic<int> index{0};
  std::mutex mu;
  std::ofstream out;
};

// Trace file text a setting holds in memory before writing it out, whatever its log_frequency.
constexpr size_t kMaxBufferedTraceBytes = size_t{4} << 20;

// One trace setting in force (global, or a model's): its values, which of them the model set itself
// (the others follow the global setting), and the sampling state. Replaced, never changed, on an
// update; traces sampled under it keep it alive until they are written.
struct Setting {
  SettingValues values;  // values.count changes as traces are taken (under mu)
  SettingSpecified specified;
  Mode mode = Mode::kTriton;
  std::shared_ptr<TraceFile> file;
  std::shared_ptr<OtlpExporter> exporter;

  mutable std::mutex mu;
  uint64_t sampled = 0, taken = 0, written = 0, in_stream = 0;
  std::string stream;

  SettingValues Snapshot() const {
    std::lock_guard<std::mutex> lock(mu);
    return values;
  }
  bool HasFile() const { return mode != Mode::kTriton || (file && !file->path.empty()); }
  std::string Invalid() const {
    if (values.level == 0) return "tracing is disabled";
    if (values.rate == 0) return "sample rate must be non-zero";
    if (!HasFile()) return "trace file name is not given";
    return "";
  }
  // Whether the next request is traced ('forced': it carries a trace context).
  bool Sample(bool forced) {
    std::lock_guard<std::mutex> lock(mu);
    if (values.level == 0) return false;
    bool hit = false;
    if (values.rate != 0 && values.count != 0 && HasFile()) {
      hit = ++sampled % values.rate == 0;
      if (hit && values.count > 0) --values.count;
    }
    if (hit || forced) ++taken;
    return hit || forced;
  }
  void Write(const Trace& t) {
    if (mode == Mode::kOpenTelemetry) {
      std::vector<std::string> spans;
      t.AppendSpans(&spans);
      if (exporter) exporter->Enqueue(std::move(spans));
      return;
    }
    std::string json;
    t.AppendTritonJson(&json);
    std::unique_lock<std::mutex> lock(mu);
    if (in_stream++ != 0) stream += ",";
    stream += json;
    ++written;
    const bool group = (values.count == 0 && written == taken) ||
                       (values.log_frequency != 0 && in_stream >= values.log_frequency);
    // Whatever the settings a client chose (log_frequency 0 or huge, no count, TENSORS), at most
    // kMaxBufferedTraceBytes wait in memory: past it they go out, appended to <file> (log_frequency
    // 0) or as a shorter group in the next <file>.<n>.
    if (group || stream.size() >= kMaxBufferedTraceBytes) {
      std::string out;
      out.swap(stream);
      in_stream = 0;
      lock.unlock();
      file->Save(out, group || values.log_frequency != 0);
    }
  }
  ~Setting() {
    if (mode == Mode::kTriton && in_stream != 0 && file)
      file->Save(stream, values.log_frequency != 0);
  }
};

bool SpanContext::valid() const {
  bool any_trace = false, any_span = false;
  for (uint8_t b : trace_id) any_trace = any_trace || b != 0;
  for (uint8_t b : span_id) any_span = any_span || b != 0;
  return any_trace && any_span;
}

std::optional<SpanContext> ParseTraceparent(std::string_view h) {
  // version "00": 00-<trace id>-<parent id>-<flags>, 55 characters.
  if (h.size() != 55 || h.substr(0, 3) != "00-" || h[35] != '-' || h[52] != '-')
    return std::nullopt;
  SpanContext c;
  uint8_t flags = 0;
  if (!ParseHex(h.substr(3, 32), c.trace_id.data(), 16) ||
      !ParseHex(h.substr(36, 16), c.span_id.data(), 8) || !ParseHex(h.substr(53, 2), &flags, 1))
    return std::nullopt;
  c.sampled = (flags & 1) != 0;
  if (!c.valid()) return std::nullopt;
  return c;
}

std::string Hex(const uint8_t* bytes, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(digits[bytes[i] >> 4]);
    out.push_back(digits[bytes[i] & 15]);
  }
  return out;
}

uint64_t WallNs(uint64_t steady_ns) {
  // The offset between the two clocks, read once (a wall clock step later is not followed).
  static const int64_t offset = [] {
    const auto wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
    return static_cast<int64_t>(wall) - static_cast<int64_t>(SteadyClock::Get().NowNs());
  }();
  return static_cast<uint64_t>(static_cast<int64_t>(steady_ns) + offset);
}

// ---- Trace ----

Trace::~Trace() {
  if (root_) {  // a step: handed to its root, written with it
    if (setting_->mode == Mode::kOpenTelemetry) {
      std::vector<std::string> spans;
      AppendSpans(&spans);
      std::lock_guard<std::mutex> lock(root_->mu_);
      for (auto& s : spans) root_->children_spans_.push_back(std::move(s));
    } else {
      std::string json;
      AppendTritonJson(&json);
      std::lock_guard<std::mutex> lock(root_->mu_);
      root_->children_json_ += "," + json;
    }
    return;
  }
  try {
    setting_->Write(*this);
  } catch (const std::exception& e) {
    LOG_ERROR << "writing trace " << id_ << ": " << e.what();
  }
}

void Trace::Record(const char* name, uint64_t ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (timestamps_.empty()) timestamps_.reserve(12);
  timestamps_.emplace_back(name, ns);
}

void Trace::EndRequest(uint64_t received, uint64_t queued, uint64_t compute_start,
                       uint64_t input_end, uint64_t output_start, uint64_t compute_end,
                       uint64_t end) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_) return;
  ended_ = true;
  auto add = [&](const char* name, uint64_t ns) {
    if (ns != 0) timestamps_.emplace_back(name, ns);
  };
  add("REQUEST_START", received);
  add("QUEUE_START", queued);
  add("COMPUTE_START", compute_start);
  add("COMPUTE_INPUT_END", input_end);
  add("COMPUTE_OUTPUT_START", output_start);
  add("COMPUTE_END", compute_end);
  add("REQUEST_END", end);
}

void Trace::SetRequestId(std::string id) {
  std::lock_guard<std::mutex> lock(mu_);
  request_id_ = std::move(id);
}

void Trace::SetVersion(int64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  version_ = version;
}

void Trace::SetPlacement(const std::string& instance, const std::string& device) {
  std::lock_guard<std::mutex> lock(mu_);
  instance_ = instance;
  device_ = device;
}

void Trace::RecordTensor(const char* activity, const std::string& name, DataType type,
                         const std::vector<int64_t>& shape, const uint8_t* data, size_t bytes) {
  if (!tensors() || data == nullptr) return;
  std::string values;
  if (type == DataType::kBytes) {  // length-prefixed strings
    size_t at = 0, n = 0;
    while (at + 4 <= bytes && n < kMaxTensorElements) {
      uint32_t len = 0;
      std::memcpy(&len, data + at, 4);
      if (len > bytes - at - 4) break;
      if (n++ != 0) values.push_back(',');
      values.append(reinterpret_cast<const char*>(data + at + 4), len);
      at += 4 + len;
    }
  } else {
    const size_t size = DataTypeSize(type);
    const size_t count = size == 0 ? 0 : std::min(bytes / size, kMaxTensorElements);
    char buf[32];
    for (size_t i = 0; i < count; ++i) {
      if (i != 0) values.push_back(',');
      snprintf(buf, sizeof buf, "%.9g", ElementAsDouble(type, data + i * size));
      values += buf;
    }
  }
  std::string entry = ",{\"id\":" + std::to_string(id_) + ",\"activity\":";
  AppendJsonString(&entry, activity);
  entry += ",\"tensor\":{\"name\":";
  AppendJsonString(&entry, name);
  entry += ",\"data\":";
  AppendJsonString(&entry, values);
  entry += ",\"shape\":";
  const std::string dims = ShapeString(shape);  // "[1,16]": Triton writes "1,16"
  AppendJsonString(&entry, std::string_view(dims).substr(1, dims.size() - 2));
  entry += ",\"dtype\":";
  AppendJsonString(&entry, DataTypeName(type));
  entry += "}}";
  std::lock_guard<std::mutex> lock(mu_);
  tensors_json_ += entry;
}

std::shared_ptr<Trace> Trace::Child(const std::string& model, int64_t version) {
  std::shared_ptr<Trace> child(new Trace());
  child->id_ = NextId();
  child->root_ = root_ ? root_ : shared_from_this();
  child->setting_ = setting_;
  child->level_ = level_;
  child->model_ = model;
  child->version_ = version;
  child->parent_id_ = id_;
  child->context_ = context_;
  child->context_.span_id = RandomSpanId();
  child->model_span_ = RandomSpanId();
  child->parent_span_ = model_span_;
  child->has_parent_span_ = true;
  return child;
}

std::string Trace::Traceparent() const {
  return "00-" + Hex(context_.trace_id.data(), 16) + "-" + Hex(model_span_.data(), 8) + "-01";
}

void Trace::AppendTritonJson(std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  *out += "{\"id\":" + std::to_string(id_) + ",\"model_name\":";
  AppendJsonString(out, model_);
  *out += ",\"model_version\":" + std::to_string(version_);
  if (!request_id_.empty()) {
    *out += ",\"request_id\":";
    AppendJsonString(out, request_id_);
  }
  if (parent_id_ != 0) *out += ",\"parent_id\":" + std::to_string(parent_id_);
  if (!instance_.empty()) {  // (Nereid's: the instance that ran it and its device)
    *out += ",\"model_instance\":";
    AppendJsonString(out, instance_);
    *out += ",\"device\":";
    AppendJsonString(out, device_);
  }
  *out += "},{\"id\":" + std::to_string(id_) + ",\"timestamps\":[";
  bool first = true;
  for (const auto& [name, ns] : timestamps_) {
    if (!first) out->push_back(',');
    first = false;
    *out += "{\"name\":";
    AppendJsonString(out, name);
    *out += ",\"ns\":" + std::to_string(ns) + "}";
  }
  *out += "]}";
  *out += tensors_json_;
  *out += children_json_;
}

void Trace::AppendSpans(std::vector<std::string>* spans) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto find = [&](std::string_view name) -> uint64_t {
    for (const auto& [n, ns] : timestamps_)
      if (n == name) return ns;
    return 0;
  };
  uint64_t front_start = 0, front_end = 0;
  for (const auto& [n, ns] : timestamps_)
    if (IsFrontend(n)) {
      front_start = front_start == 0 ? ns : std::min(front_start, ns);
      front_end = std::max(front_end, ns);
    }
  auto span = [&](std::string_view name, const std::array<uint8_t, 8>& id,
                  const std::array<uint8_t, 8>* parent, uint64_t start, uint64_t end, int kind,
                  auto&& events) {
    ProtobufWriter s;
    s.Bytes(1, View(context_.trace_id));
    s.Bytes(2, View(id));
    if (parent) s.Bytes(4, View(*parent));
    s.Bytes(5, name);
    s.Int(6, static_cast<uint64_t>(kind));
    s.Fixed64(7, WallNs(start));
    s.Fixed64(8, WallNs(std::max(start, end)));
    s.StringAttribute(9, "model_name", model_);
    s.IntAttribute(9, "model_version", version_);
    if (!request_id_.empty()) s.StringAttribute(9, "request_id", request_id_);
    if (parent_id_ != 0) s.IntAttribute(9, "parent_id", static_cast<int64_t>(parent_id_));
    if (!instance_.empty()) {
      s.StringAttribute(9, "model_instance", instance_);
      s.StringAttribute(9, "device", device_);
    }
    s.IntAttribute(9, "trace_id", static_cast<int64_t>(id_));
    for (const auto& [n, ns] : timestamps_)
      if (events(n)) {
        ProtobufWriter e;
        e.Fixed64(1, WallNs(ns));
        e.Bytes(2, n);
        s.Bytes(11, e.s);
      }
    spans->push_back(std::move(s.s));
  };
  constexpr int kInternal = 1, kServer = 2;
  // The frontend's span (the root of the server's part): parent is the caller's span, if any.
  const std::array<uint8_t, 8>* model_parent = has_parent_span_ ? &parent_span_ : nullptr;
  if (front_start != 0) {
    span("InferRequest", context_.span_id, has_parent_span_ ? &parent_span_ : nullptr, front_start,
         front_end, kServer, [](std::string_view n) { return IsFrontend(n); });
    model_parent = &context_.span_id;
  }
  const uint64_t start = find("REQUEST_START"), end = find("REQUEST_END");
  if (start == 0) return;
  span(model_, model_span_, model_parent, start, end, kInternal, [](std::string_view n) {
    return n == "REQUEST_START" || n == "QUEUE_START" || n == "REQUEST_END";
  });
  const uint64_t queued = find("QUEUE_START"), computing = find("COMPUTE_START");
  if (queued != 0 && computing != 0) {
    span("queue", RandomSpanId(), &model_span_, queued, computing, kInternal,
         [](std::string_view) { return false; });
  }
  if (computing != 0) {
    const uint64_t computed = find("COMPUTE_END");
    span("compute", RandomSpanId(), &model_span_, computing, computed ? computed : end, kInternal,
         [](std::string_view n) { return n.rfind("COMPUTE_", 0) == 0; });
  }
  for (const auto& s : children_spans_) spans->push_back(s);
}

// ---- configuration ----

StatusOr<TraceConfig> ParseTraceConfig(const std::vector<std::string>& values) {
  TraceConfig c;
  bool level_given = false;
  for (const std::string& raw : values) {
    std::string_view v = raw, section;
    const size_t comma = v.find(','), eq = v.find('=');
    if (comma != std::string_view::npos && (eq == std::string_view::npos || comma < eq)) {
      section = v.substr(0, comma);
      v.remove_prefix(comma + 1);
      if (section != "triton" && section != "opentelemetry")
        return InvalidArgument("--trace-config: unknown trace mode '" + std::string(section) +
                               "' in '" + raw + "' (triton or opentelemetry)");
    }
    const size_t at = v.find('=');
    if (at == std::string_view::npos)
      return InvalidArgument("--trace-config: expected [mode,]key=value, got '" + raw + "'");
    const std::string key(v.substr(0, at)), value(v.substr(at + 1));
    auto number = [&](uint64_t max) -> StatusOr<uint64_t> {
      auto n = ParseUnsigned(key, value, max);
      if (!n.ok()) return InvalidArgument("--trace-config " + raw + ": " + n.status().message());
      return n;
    };
    if (section.empty() && key == "mode") {
      if (value == "triton")
        c.mode = Mode::kTriton;
      else if (value == "opentelemetry")
        c.mode = Mode::kOpenTelemetry;
      else
        return InvalidArgument("--trace-config mode must be triton or opentelemetry, got '" +
                               value + "'");
    } else if (section.empty() && key == "level") {
      ASSIGN_OR_RETURN(uint32_t l, ParseLevels({value}));
      c.level = value == "OFF" ? 0 : (level_given ? c.level : 0) | l;
      level_given = true;
    } else if (section.empty() && key == "rate") {
      ASSIGN_OR_RETURN(uint64_t n, number(std::numeric_limits<uint32_t>::max()));
      c.rate = static_cast<uint32_t>(n);
    } else if (section.empty() && key == "count") {
      auto n = ParseCount(key, value);
      if (!n.ok()) return InvalidArgument("--trace-config " + raw + ": " + n.status().message());
      c.count = *n;
    } else if (section == "triton" && key == "file") {
      c.file = value;
    } else if (section == "triton" && key == "log-frequency") {
      ASSIGN_OR_RETURN(uint64_t n, number(std::numeric_limits<uint32_t>::max()));
      c.log_frequency = static_cast<uint32_t>(n);
    } else if (section == "opentelemetry" && key == "url") {
      c.url = value;
    } else if (section == "opentelemetry" && key == "resource") {
      const size_t e = value.find('=');
      if (e == std::string::npos || e == 0)
        return InvalidArgument("--trace-config opentelemetry,resource expects key=value, got '" +
                               value + "'");
      c.resource.emplace_back(value.substr(0, e), value.substr(e + 1));
    } else if (section == "opentelemetry" && key == "bsp_max_queue_size") {
      ASSIGN_OR_RETURN(uint64_t n, number(1u << 20));
      c.bsp_max_queue_size = static_cast<uint32_t>(n);
    } else if (section == "opentelemetry" && key == "bsp_schedule_delay") {
      ASSIGN_OR_RETURN(uint64_t n, number(3'600'000));
      c.bsp_schedule_delay_ms = static_cast<uint32_t>(n);
    } else if (section == "opentelemetry" && key == "bsp_max_export_batch_size") {
      ASSIGN_OR_RETURN(uint64_t n, number(1u << 20));
      c.bsp_max_export_batch_size = static_cast<uint32_t>(n);
    } else {
      return InvalidArgument("--trace-config: unknown setting '" + raw + "'");
    }
  }
  if (c.bsp_max_export_batch_size == 0 || c.bsp_max_export_batch_size > c.bsp_max_queue_size)
    return InvalidArgument(
        "--trace-config opentelemetry,bsp_max_export_batch_size must be 1..bsp_max_queue_size");
  return c;
}

// ---- TraceManager ----

StatusOr<std::shared_ptr<TraceManager>> TraceManager::Create(TraceConfig config) {
  std::shared_ptr<OtlpExporter> exporter;
  if (config.mode == Mode::kOpenTelemetry) {
    ASSIGN_OR_RETURN(exporter, OtlpExporter::Create(config));
  }
  return std::make_shared<TraceManager>(std::move(config), std::move(exporter));
}

TraceManager::TraceManager(TraceConfig config, std::shared_ptr<OtlpExporter> exporter)
    : config_(std::move(config)), exporter_(std::move(exporter)) {
  file_ = std::make_shared<TraceFile>(config_.file);
  startup_ = {config_.level, config_.rate, config_.log_frequency, config_.count};
  global_ = Make(startup_, {});
  if (const std::string why = global_->Invalid();
      config_.level != 0 && !why.empty() && !(config_.rate == 0 && exporter_))
    LOG_WARNING << "tracing is configured but takes no traces: " << why;
}

TraceManager::~TraceManager() {
  std::lock_guard<std::mutex> lock(mu_);
  models_.clear();
  global_.reset();
}

void TraceManager::Stop(std::chrono::steady_clock::time_point deadline) {
  if (exporter_) exporter_->Stop(deadline);
}

std::shared_ptr<Setting> TraceManager::Make(const SettingValues& v,
                                            const SettingSpecified& s) const {
  auto setting = std::make_shared<Setting>();
  setting->values = v;
  setting->specified = s;
  setting->mode = config_.mode;
  setting->file = file_;
  setting->exporter = exporter_;
  return setting;
}

std::shared_ptr<Setting> TraceManager::For(const std::string& model) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = models_.find(model); !model.empty() && it != models_.end()) return it->second;
  return global_;
}

std::shared_ptr<Trace> TraceManager::Start(const std::string& model, int64_t version,
                                           const std::optional<SpanContext>& caller) {
  std::shared_ptr<Setting> setting = For(model);
  const bool forced = caller.has_value() && config_.mode == Mode::kOpenTelemetry && exporter_;
  if (!setting->Sample(forced)) return nullptr;
  std::shared_ptr<Trace> t(new Trace());
  t->id_ = NextId();
  t->model_ = model;
  t->version_ = version;
  // Tensor contents go to Triton's trace file only (OpenTelemetry mode has no TENSORS level).
  const uint32_t level = setting->values.level;  // (only count changes)
  t->level_ = config_.mode == Mode::kTriton ? level : level & ~kTensors;
  t->setting_ = std::move(setting);
  if (caller && config_.mode == Mode::kOpenTelemetry) {
    t->context_.trace_id = caller->trace_id;
    t->parent_span_ = caller->span_id;
    t->has_parent_span_ = true;
  } else {
    t->context_.trace_id = RandomTraceId();
  }
  t->context_.span_id = RandomSpanId();
  t->model_span_ = RandomSpanId();
  return t;
}

SettingMap TraceManager::Render(const Setting& s) const {
  const SettingValues v = s.Snapshot();
  SettingMap m;
  std::vector<std::string> levels;
  if (v.level == 0) levels.emplace_back("OFF");
  if (v.level & kTimestamps) levels.emplace_back("TIMESTAMPS");
  if (v.level & kTensors) levels.emplace_back("TENSORS");
  m.emplace_back(kKeyLevel, levels);
  m.emplace_back(kKeyRate, std::vector<std::string>{std::to_string(v.rate)});
  m.emplace_back(kKeyCount, std::vector<std::string>{std::to_string(v.count)});
  if (config_.mode == Mode::kTriton) {
    m.emplace_back(kKeyFrequency, std::vector<std::string>{std::to_string(v.log_frequency)});
    m.emplace_back(kKeyFile, std::vector<std::string>{config_.file});
    m.emplace_back(kKeyMode, std::vector<std::string>{"triton"});
  } else {
    m.emplace_back(kKeyMode, std::vector<std::string>{"opentelemetry"});
    m.emplace_back("url", std::vector<std::string>{config_.url});
    for (const auto& [k, v] : config_.resource)
      m.emplace_back("resource", std::vector<std::string>{k + "=" + v});
    m.emplace_back("bsp_max_queue_size",
                   std::vector<std::string>{std::to_string(config_.bsp_max_queue_size)});
    m.emplace_back("bsp_schedule_delay",
                   std::vector<std::string>{std::to_string(config_.bsp_schedule_delay_ms)});
    m.emplace_back("bsp_max_export_batch_size",
                   std::vector<std::string>{std::to_string(config_.bsp_max_export_batch_size)});
  }
  return m;
}

SettingMap TraceManager::Get(const std::string& model) const { return Render(*For(model)); }

StatusOr<SettingMap> TraceManager::Update(const std::string& model, const SettingUpdate& update) {
  for (const auto& [key, value] : update)
    if (key == kKeyFile)
      return Unsupported("trace file location can not be updated through network protocol");
  {
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(Rebuild(model, update));
    if (model.empty()) {
      // The models that follow the global setting in part follow the new one.
      std::vector<std::string> partial;
      for (const auto& [name, s] : models_)
        if (!s->specified.all()) partial.push_back(name);
      for (const std::string& name : partial) RETURN_IF_ERROR(Rebuild(name, {}));
    }
  }
  return Get(model);
}

Status TraceManager::Rebuild(const std::string& model, const SettingUpdate& update) {
  // Under mu_. What a setting does not specify itself follows its fallback: the global setting for
  // a model, the start-up values for the global setting.
  const Setting* current = global_.get();
  if (!model.empty()) {
    auto it = models_.find(model);
    current = it == models_.end() ? nullptr : it->second.get();
  }
  const SettingValues fallback = model.empty() ? startup_ : global_->Snapshot();
  SettingValues own = current ? current->Snapshot() : fallback;
  SettingSpecified s = current ? current->specified : SettingSpecified{};
  for (const auto& [key, value] : update) {
    if (key == kKeyLevel) {
      s.level = value.has_value();
      if (value) {
        ASSIGN_OR_RETURN(own.level, ParseLevels(*value));
      }
      continue;
    }
    if (value && value->size() != 1)
      return InvalidArgument("trace setting '" + key + "' expects a single string value");
    // Other keys (trace_mode, the OpenTelemetry ones) are not settable and are ignored, as Triton.
    bool* specified = key == kKeyRate        ? &s.rate
                      : key == kKeyCount     ? &s.count
                      : key == kKeyFrequency ? &s.log_frequency
                                             : nullptr;
    if (specified == nullptr) continue;
    *specified = value.has_value();
    if (!value) continue;
    if (key == kKeyCount) {
      ASSIGN_OR_RETURN(own.count, ParseCount(key, value->front()));
    } else {
      ASSIGN_OR_RETURN(uint64_t n,
                       ParseUnsigned(key, value->front(), std::numeric_limits<uint32_t>::max()));
      (key == kKeyRate ? own.rate : own.log_frequency) = static_cast<uint32_t>(n);
    }
  }
  SettingValues v = fallback;
  if (s.level) v.level = own.level;
  if (s.rate) v.rate = own.rate;
  if (s.count) v.count = own.count;
  if (s.log_frequency) v.log_frequency = own.log_frequency;
  std::shared_ptr<Setting> next = Make(v, s);
  if (const std::string why = next->Invalid(); !why.empty() && v.level != 0)
    return InvalidArgument("Attempting to set invalid trace setting :" + why);
  if (model.empty())
    global_ = std::move(next);
  else if (!s.any())
    models_.erase(model);
  else
    models_[model] = std::move(next);
  return Status::Ok();
}

}  // namespace nereid::trace
