#include "perf/load_generator.h"

#include <grpcpp/grpcpp.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "common/data_type.h"
#include "common/prometheus_escape.h"
#include "frontend/grpc/grpc_service.grpc.pb.h"
#include "nereid/backend_util.h"

namespace nereid::perf {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

// One client connection to the server under test; Send returns 200 on success, 0 on a transport
// error (the connection is then reopened), another HTTP-like code on a server error.
class Connection {
 public:
  virtual ~Connection() = default;
  virtual int Send() = 0;
};

class HttpConnection {
 public:
  HttpConnection(const std::string& host, const std::string& port) {
    tcp::resolver resolver(ioc_);
    stream_.connect(resolver.resolve(host, port));
    stream_.socket().set_option(tcp::no_delay(true));
  }
  // Returns the HTTP status (0 on a transport error, after which the connection is reopened).
  int Send(bhttp::request<bhttp::string_body>& req, std::string* body = nullptr) {
    beast::error_code ec;
    bhttp::write(stream_, req, ec);
    if (ec) return 0;
    bhttp::response<bhttp::string_body> res;
    bhttp::read(stream_, buffer_, res, ec);
    if (ec) return 0;
    if (body) *body = std::move(res.body());
    return res.result_int();
  }

 private:
  net::io_context ioc_;
  beast::tcp_stream stream_{ioc_};
  beast::flat_buffer buffer_;
};

struct Target {
  std::string host, port, base, path;
  std::string header;                    // HTTP: the JSON part
  std::string body;                      // HTTP: header + binary blobs
  inference::ModelInferRequest message;  // gRPC: the same tensors in raw_input_contents
};

struct InputSpec {
  std::string name, datatype;
  std::vector<int64_t> shape;
};

// One unary RPC about the model under test (its name and version set) on a fresh channel.
template <typename Request, typename Response, typename Method>
grpc::Status ModelRpc(const PerfOptions& o, Method method, Response* response) {
  auto stub = inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(o.url, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  Request request;
  request.set_name(o.model);
  request.set_version(o.version);
  return ((*stub).*method)(&ctx, request, response);
}

// GET 'path' on a fresh connection: the HTTP status, or Unavailable when the server is unreachable.
StatusOr<int> HttpGet(const PerfOptions& o, const Target& t, const std::string& path,
                      std::string* body) {
  try {
    HttpConnection c(t.host, t.port);
    bhttp::request<bhttp::string_body> get{bhttp::verb::get, path, 11};
    get.set(bhttp::field::host, t.host);
    return c.Send(get, body);
  } catch (const std::exception& e) {
    return Unavailable("cannot reach " + o.url + ": " + e.what());
  }
}

// The model's inputs from its metadata, over the protocol under test.
StatusOr<std::vector<InputSpec>> FetchInputs(const PerfOptions& o, const Target& t,
                                             const std::string& base) {
  std::vector<InputSpec> specs;
  if (o.protocol == "grpc") {
    inference::ModelMetadataResponse md;
    const grpc::Status status = ModelRpc<inference::ModelMetadataRequest>(
        o, &inference::GRPCInferenceService::Stub::ModelMetadata, &md);
    if (!status.ok())
      return NotFound("cannot read the metadata of model '" + o.model +
                      "' over gRPC: " + status.error_message());
    for (const auto& in : md.inputs())
      specs.push_back({in.name(), in.datatype(), {in.shape().begin(), in.shape().end()}});
    return specs;
  }
  std::string metadata;
  ASSIGN_OR_RETURN(const int status, HttpGet(o, t, base, &metadata));
  rapidjson::Document md;
  md.Parse(metadata.c_str());
  if (status != 200 || !md.IsObject() || !md.HasMember("inputs") || !md["inputs"].IsArray())
    return NotFound("cannot read the metadata of model '" + o.model + "' (HTTP " +
                    std::to_string(status) + "): " + metadata);
  for (const auto& in : md["inputs"].GetArray()) {
    InputSpec spec{in["name"].GetString(), in["datatype"].GetString(), {}};
    for (const auto& d : in["shape"].GetArray()) spec.shape.push_back(d.GetInt64());
    specs.push_back(std::move(spec));
  }
  return specs;
}

StatusOr<Target> BuildRequest(const PerfOptions& o) {
  Target t;
  const size_t colon = o.url.rfind(':');
  t.host = colon == std::string::npos ? o.url : o.url.substr(0, colon);
  t.port = colon == std::string::npos ? "80" : o.url.substr(colon + 1);
  t.base = "/v2/models/" + o.model + (o.version.empty() ? "" : "/versions/" + o.version);
  t.path = t.base + "/infer";
  ASSIGN_OR_RETURN(std::vector<InputSpec> specs, FetchInputs(o, t, t.base));
  t.message.set_model_name(o.model);
  t.message.set_model_version(o.version);
  std::mt19937 rng(1);
  std::string header = "{\"inputs\":[", blobs;
  bool first = true;
  for (const InputSpec& spec : specs) {
    const std::string& name = spec.name;
    const std::string& dtype = spec.datatype;
    std::vector<int64_t> shape = spec.shape;
    if (auto it = o.shapes.find(name); it != o.shapes.end()) {
      // --shape gives the non-batch dims (as perf_analyzer does) or the full shape.
      std::vector<int64_t> given = it->second;
      if (!shape.empty() && shape[0] == -1 && given.size() + 1 == shape.size())
        given.insert(given.begin(), -1);
      shape = given;
    }
    bool batch_dim_done = false;
    for (int64_t& d : shape) {
      if (d == -1 && !batch_dim_done) {
        d = o.batch_size;  // the first variable dimension is the batch dimension
        batch_dim_done = true;
      } else if (d < 0) {
        return InvalidArgument("input '" + name +
                               "' has a variable dimension; give it with --shape " + name + ":...");
      }
    }
    size_t elements = 1;
    std::string shape_json;
    for (int64_t d : shape) {
      elements *= static_cast<size_t>(d);
      shape_json += (shape_json.empty() ? "" : ",") + std::to_string(d);
    }
    // Tensor bytes: one short string per element for BYTES, else random FP32 values or zeros.
    std::string data;
    if (dtype == "BYTES") {
      std::vector<uint8_t> bytes;
      for (size_t e = 0; e < elements; ++e) backend::AppendBytesElement(bytes, "abcd");
      data.assign(bytes.begin(), bytes.end());
    } else {
      data.assign(elements * DataTypeSize(DataTypeFromName(dtype)), '\0');
      if (dtype == "FP32") {
        std::uniform_real_distribution<float> dist(-1, 1);
        for (size_t e = 0; e < elements; ++e) {
          const float v = dist(rng);
          std::memcpy(data.data() + e * 4, &v, 4);
        }
      }
    }
    auto* tensor = t.message.add_inputs();
    tensor->set_name(name);
    tensor->set_datatype(dtype);
    for (int64_t d : shape) tensor->add_shape(d);
    t.message.add_raw_input_contents(data);
    if (o.json_data && dtype != "BYTES") {
      std::string values;
      for (size_t e = 0; e < elements; ++e)
        values += (e ? "," : "") + std::string(dtype == "BOOL" ? "true" : "1");
      header += std::string(first ? "" : ",") + "{\"name\":\"" + name + "\",\"shape\":[" +
                shape_json + "],\"datatype\":\"" + dtype + "\",\"data\":[" + values + "]}";
    } else {
      header += std::string(first ? "" : ",") + "{\"name\":\"" + name + "\",\"shape\":[" +
                shape_json + "],\"datatype\":\"" + dtype +
                "\",\"parameters\":{\"binary_data_size\":" + std::to_string(data.size()) + "}}";
      blobs += data;
    }
    first = false;
  }
  header +=
      "],\"parameters\":{\"binary_data_output\":" + std::string(o.json_data ? "false" : "true") +
      "}}";
  t.header = header;
  t.body = header + blobs;
  return t;
}

bhttp::request<bhttp::string_body> MakeRequest(const Target& t, bool json);

// Where a connection stands in its current sequence (--sequence-length): each new sequence takes
// the next id of the process, so no two connections share one.
class SequencePosition {
 public:
  explicit SequencePosition(int64_t length) : length_(length) {}
  bool active() const { return length_ > 0; }
  // Advances to the next request: its id and whether it starts or ends its sequence.
  void Next(uint64_t* id, bool* start, bool* end) {
    if (step_ == 0) id_ = next_id_.fetch_add(1, std::memory_order_relaxed);
    *id = id_;
    *start = step_ == 0;
    *end = step_ + 1 == length_;
    step_ = *end ? 0 : step_ + 1;
  }

 private:
  static inline std::atomic<uint64_t> next_id_{1};
  const int64_t length_;
  int64_t step_ = 0;
  uint64_t id_ = 0;
};

class HttpInferConnection : public Connection {
 public:
  HttpInferConnection(const Target& t, bool json, int64_t sequence_length)
      : http_(t.host, t.port),
        request_(MakeRequest(t, json)),
        json_(json),
        sequence_(sequence_length) {
    if (sequence_.active()) {
      // The request-level parameters close the header ('..."binary_data_output":B}}'): the
      // sequence's go before that, the binary tensors after the header.
      header_head_ = t.header.substr(0, t.header.size() - 2);
      if (!json) blobs_ = t.body.substr(t.header.size());
    }
  }
  int Send() override {
    if (sequence_.active()) {
      uint64_t id = 0;
      bool start = false, end = false;
      sequence_.Next(&id, &start, &end);
      std::string body = header_head_ + ",\"sequence_id\":" + std::to_string(id) +
                         ",\"sequence_start\":" + (start ? "true" : "false") +
                         ",\"sequence_end\":" + (end ? "true" : "false") + "}}";
      if (!json_) request_.set("Inference-Header-Content-Length", std::to_string(body.size()));
      request_.body() = std::move(body.append(blobs_));
      request_.prepare_payload();
    }
    return http_.Send(request_);
  }

 private:
  HttpConnection http_;
  bhttp::request<bhttp::string_body> request_;
  const bool json_;
  SequencePosition sequence_;
  std::string header_head_, blobs_;  // --sequence-length: the request around its parameters
};

// gRPC: one channel per connection, as perf_analyzer's sync mode uses.
class GrpcInferConnection : public Connection {
 public:
  GrpcInferConnection(const std::string& url, const inference::ModelInferRequest& message,
                      int64_t sequence_length)
      : stub_(inference::GRPCInferenceService::NewStub(grpc::CreateCustomChannel(
            url, grpc::InsecureChannelCredentials(), ChannelArguments()))),
        message_(message),
        sequence_(sequence_length) {
    if (sequence_.active()) own_ = message;
  }
  int Send() override {
    grpc::ClientContext ctx;
    inference::ModelInferResponse response;
    if (sequence_.active()) {
      uint64_t id = 0;
      bool start = false, end = false;
      sequence_.Next(&id, &start, &end);
      auto& params = *own_.mutable_parameters();
      params["sequence_id"].set_int64_param(static_cast<int64_t>(id));
      params["sequence_start"].set_bool_param(start);
      params["sequence_end"].set_bool_param(end);
    }
    const grpc::Status status =
        stub_->ModelInfer(&ctx, sequence_.active() ? own_ : message_, &response);
    if (status.ok()) return 200;
    return status.error_code() == grpc::StatusCode::UNAVAILABLE ? 503 : 400;
  }

 private:
  static grpc::ChannelArguments ChannelArguments() {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    args.SetInt("grpc.use_local_subchannel_pool", 1);  // one TCP connection per channel
    return args;
  }
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  const inference::ModelInferRequest& message_;
  inference::ModelInferRequest own_;  // with this connection's sequence parameters
  SequencePosition sequence_;
};

std::unique_ptr<Connection> Connect(const PerfOptions& o, const Target& t) {
  if (o.protocol == "grpc")
    return std::make_unique<GrpcInferConnection>(o.url, t.message, o.sequence_length);
  return std::make_unique<HttpInferConnection>(t, o.json_data, o.sequence_length);
}

bhttp::request<bhttp::string_body> MakeRequest(const Target& t, bool json) {
  bhttp::request<bhttp::string_body> req{bhttp::verb::post, t.path, 11};
  req.set(bhttp::field::host, t.host);
  if (!json) req.set("Inference-Header-Content-Length", std::to_string(t.header.size()));
  req.body() = json ? t.header : t.body;
  req.prepare_payload();
  return req;
}

// The model's cumulative server-side statistics (the statistics extension), read over the protocol
// under test at the edges of each measurement window; their difference is the window's server
// share.
struct ServerCounters {
  bool ok = false;
  uint64_t inferences = 0, executions = 0, queue_ns = 0, compute_ns = 0;
  bool energy_ok = false;
  double metered_joules = 0, model_joules = 0, model_inferences = 0, model_grams = 0;
};

// The energy families of a Prometheus text: every scope's metered joules, and the model's joules,
// inferences and grams (its version's, with -x) summed over scopes.
void AddEnergy(const PerfOptions& o, const std::string& text, ServerCounters* s) {
  const std::string model = "model=\"" + PrometheusEscape(o.model) + "\"";
  const std::string version = o.version.empty() ? "" : "version=\"" + o.version + "\"";
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    double value = 0;
    try {
      value = std::stod(line.substr(space + 1));
    } catch (const std::exception&) {
      continue;
    }
    const std::string series = line.substr(0, space);
    auto is = [&](const char* family) { return series.rfind(std::string(family) + "{", 0) == 0; };
    const bool mine = series.find(model) != std::string::npos &&
                      (version.empty() || series.find(version) != std::string::npos);
    if (is("nereid_energy_metered_joules_total")) {
      s->metered_joules += value;
      s->energy_ok = true;
    } else if (mine && is("nereid_energy_joules_total")) {
      s->model_joules += value;
    } else if (mine && is("nereid_energy_inferences_total")) {
      s->model_inferences += value;
    } else if (mine && is("nereid_carbon_grams_total")) {
      s->model_grams += value;
    }
  }
}

ServerCounters ReadServerCounters(const PerfOptions& o, const Target& t);

// The server's counters, and its energy figures when --metrics-url names its metrics port.
ServerCounters ReadServerWithEnergy(const PerfOptions& o, const Target& t) {
  ServerCounters s = ReadServerCounters(o, t);
  if (o.metrics_url.empty()) return s;
  Target metrics;
  const size_t colon = o.metrics_url.rfind(':');
  metrics.host = o.metrics_url.substr(0, colon);
  metrics.port = colon == std::string::npos ? "8002" : o.metrics_url.substr(colon + 1);
  std::string text;
  StatusOr<int> status = HttpGet(o, metrics, "/metrics", &text);
  if (status.ok() && *status == 200) AddEnergy(o, text, &s);
  return s;
}

ServerCounters ReadServerCounters(const PerfOptions& o, const Target& t) {
  ServerCounters s;
  if (o.protocol == "grpc") {
    inference::ModelStatisticsResponse response;
    if (!ModelRpc<inference::ModelStatisticsRequest>(
             o, &inference::GRPCInferenceService::Stub::ModelStatistics, &response)
             .ok())
      return s;
    for (const auto& m : response.model_stats()) {
      s.inferences += m.inference_count();
      s.executions += m.execution_count();
      s.queue_ns += m.inference_stats().queue().ns();
      s.compute_ns += m.inference_stats().compute_infer().ns();
    }
    s.ok = true;
    return s;
  }
  std::string body;
  StatusOr<int> status = HttpGet(o, t, t.base + "/stats", &body);
  if (!status.ok() || *status != 200) return s;
  rapidjson::Document d;
  d.Parse(body.c_str());
  if (!d.IsObject() || !d.HasMember("model_stats") || !d["model_stats"].IsArray()) return s;
  auto u64 = [](const rapidjson::Value& v, const char* key) -> uint64_t {
    return v.IsObject() && v.HasMember(key) && v[key].IsUint64() ? v[key].GetUint64() : 0;
  };
  for (const auto& m : d["model_stats"].GetArray()) {
    s.inferences += u64(m, "inference_count");
    s.executions += u64(m, "execution_count");
    if (!m.IsObject() || !m.HasMember("inference_stats")) continue;
    const auto& st = m["inference_stats"];
    if (st.IsObject() && st.HasMember("queue")) s.queue_ns += u64(st["queue"], "ns");
    if (st.IsObject() && st.HasMember("compute_infer"))
      s.compute_ns += u64(st["compute_infer"], "ns");
  }
  s.ok = true;
  return s;
}

// The server's counters at the window's edges, read on the calling thread (which sleeps until
// each).
struct ServerWindow {
  ServerCounters start, end;
  double seconds = 0;
};
ServerWindow ReadServerWindow(const PerfOptions& o, const Target& t, Clock::time_point from,
                              Clock::time_point to) {
  ServerWindow w;
  std::this_thread::sleep_until(from);
  w.start = ReadServerWithEnergy(o, t);
  std::this_thread::sleep_until(to);
  w.end = ReadServerWithEnergy(o, t);
  w.seconds = std::chrono::duration<double>(to - from).count();
  return w;
}

// Fills the server columns of 'r' from the counters at the window's start and end.
void AddServerShare(const ServerWindow& w, PerfResult& r) {
  const ServerCounters &a = w.start, &b = w.end;
  if (a.energy_ok && b.energy_ok && w.seconds > 0) {
    r.energy = true;
    r.watts = (b.metered_joules - a.metered_joules) / w.seconds;
    const double joules = b.model_joules - a.model_joules;
    const double inferences = b.model_inferences - a.model_inferences;
    if (inferences > 0) {
      r.mj_per_inference = joules / inferences * 1e3;
      r.grams_per_1k = (b.model_grams - a.model_grams) / inferences * 1e3;
    }
    if (joules > 0) r.inferences_per_joule = inferences / joules;
  }
  if (!a.ok || !b.ok || b.inferences <= a.inferences || b.executions <= a.executions) return;
  const double inferences = static_cast<double>(b.inferences - a.inferences);
  r.server_batch = inferences / static_cast<double>(b.executions - a.executions);
  r.server_queue_us = static_cast<double>(b.queue_ns - a.queue_ns) / inferences / 1e3;
  r.server_compute_us = static_cast<double>(b.compute_ns - a.compute_ns) / inferences / 1e3;
}

struct Sample {
  Clock::time_point done;
  uint32_t latency_us;
  bool ok;
};

// Per-thread sample buffers, merged after each step.
struct Recorder {
  std::mutex mu;
  std::vector<Sample> samples;
  void Add(std::vector<Sample>& local) {
    std::lock_guard<std::mutex> lock(mu);
    samples.insert(samples.end(), local.begin(), local.end());
    local.clear();
  }
};

PerfResult Summarize(const std::string& mode, double load, std::vector<Sample>& samples,
                     Clock::time_point from, Clock::time_point to, int64_t batch) {
  PerfResult r;
  r.mode = mode;
  r.load = load;
  std::vector<uint32_t> lat;
  for (const Sample& s : samples) {
    if (s.done < from || s.done >= to) continue;
    if (!s.ok) {
      ++r.errors;
      continue;
    }
    lat.push_back(s.latency_us);
  }
  r.count = lat.size();
  const double seconds = std::chrono::duration<double>(to - from).count();
  r.throughput =
      seconds > 0 ? static_cast<double>(lat.size()) * static_cast<double>(batch) / seconds : 0;
  if (lat.empty()) return r;
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double p) {
    return static_cast<double>(
        lat[std::min(lat.size() - 1, static_cast<size_t>(std::ceil(p * lat.size())) - 1)]);
  };
  double sum = 0;
  for (uint32_t v : lat) sum += v;
  r.avg_us = sum / static_cast<double>(lat.size());
  r.p50_us = pct(0.50);
  r.p90_us = pct(0.90);
  r.p95_us = pct(0.95);
  r.p99_us = pct(0.99);
  r.max_us = lat.back();
  return r;
}

void Progress(const PerfOptions& o, const PerfResult& r) {
  if (o.quiet) return;
  std::fprintf(stderr, "  %s %g: %.1f infer/s, p50 %.0f us, p99 %.0f us%s\n", r.mode.c_str(),
               r.load, r.throughput, r.p50_us, r.p99_us,
               r.errors ? (" (" + std::to_string(r.errors) + " errors)").c_str() : "");
}

// Sends one request on 'c' (connecting first when needed); the latency counts from 'since'. A
// transport error drops the connection so that the next send reconnects.
Sample SendOne(std::unique_ptr<Connection>& c, const PerfOptions& o, const Target& t,
               Clock::time_point since) {
  if (!c) {
    try {
      c = Connect(o, t);
    } catch (...) {
      return {Clock::now(), 0, false};
    }
  }
  const int status = c->Send();
  const auto done = Clock::now();
  if (status == 0) c.reset();
  return {done,
          static_cast<uint32_t>(
              std::chrono::duration_cast<std::chrono::microseconds>(done - since).count()),
          status == 200};
}

PerfResult RunConcurrency(const PerfOptions& o, const Target& t, int concurrency) {
  std::atomic<bool> stop{false};
  Recorder recorder;
  std::vector<std::thread> threads;
  for (int i = 0; i < concurrency; ++i) {
    threads.emplace_back([&] {
      std::vector<Sample> local;
      local.reserve(1 << 14);
      std::unique_ptr<Connection> c;
      while (!stop.load(std::memory_order_relaxed)) {
        local.push_back(SendOne(c, o, t, Clock::now()));
        if (!c)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));  // server down: back off
        if (local.size() >= (1 << 14)) recorder.Add(local);
      }
      recorder.Add(local);
    });
  }
  const auto start = Clock::now();
  const auto from = start + std::chrono::milliseconds(o.warmup_ms);
  const auto to = from + std::chrono::milliseconds(o.measurement_ms);
  const ServerWindow server = ReadServerWindow(o, t, from, to);
  stop = true;
  for (auto& th : threads) th.join();
  PerfResult r = Summarize("concurrency", concurrency, recorder.samples, from, to, o.batch_size);
  AddServerShare(server, r);
  return r;
}

// Every 1-second window since 'start' (by completion time) as CSV rows.
void WriteWindows(const std::string& file, const std::vector<std::pair<double, double>>& phases,
                  std::vector<Sample>& samples, Clock::time_point start) {
  std::FILE* out = std::fopen(file.c_str(), "w");
  if (out == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", file.c_str());
    return;
  }
  std::fprintf(out, "second,rate,answered,errors,p50_us,p99_us\n");
  std::map<int64_t, std::vector<uint32_t>> ok;
  std::map<int64_t, uint64_t> errors;
  int64_t last = 0;
  for (const Sample& s : samples) {
    const auto second = std::chrono::duration_cast<std::chrono::seconds>(s.done - start).count();
    if (second < 0) continue;
    last = std::max<int64_t>(last, second);
    if (s.ok)
      ok[second].push_back(s.latency_us);
    else
      ++errors[second];
  }
  for (int64_t second = 0; second <= last; ++second) {
    double rate = 0, edge = 0;
    for (const auto& [r, seconds] : phases) {
      edge += seconds;
      if (static_cast<double>(second) < edge) {
        rate = r;
        break;
      }
    }
    std::vector<uint32_t>& lat = ok[second];
    std::sort(lat.begin(), lat.end());
    auto pct = [&](double p) {
      return lat.empty()
                 ? 0.0
                 : static_cast<double>(lat[std::min(
                       lat.size() - 1,
                       static_cast<size_t>(std::ceil(p * static_cast<double>(lat.size()))) - 1)]);
    };
    std::fprintf(out, "%lld,%g,%zu,%llu,%.0f,%.0f\n", static_cast<long long>(second), rate,
                 lat.size(), static_cast<unsigned long long>(errors[second]), pct(0.5), pct(0.99));
  }
  std::fclose(out);
}

PerfResult RunRequestRate(const PerfOptions& o, const Target& t, double rate) {
  const auto start = Clock::now() + std::chrono::milliseconds(20);
  // The phases: one at 'rate' (warm-up and window), or the --rate-schedule's.
  std::vector<std::pair<double, double>> phases = o.rate_schedule;
  if (phases.empty())
    phases.emplace_back(rate, static_cast<double>(o.warmup_ms + o.measurement_ms) / 1e3);
  // The schedule: send times fixed in advance (constant or Poisson gaps).
  std::vector<Clock::time_point> schedule;
  std::mt19937_64 rng(42);
  double at = 0, phase_end = 0;
  for (const auto& [phase_rate, seconds] : phases) {
    std::exponential_distribution<double> gap(phase_rate);
    phase_end += seconds;
    while (at < phase_end) {
      schedule.push_back(start + std::chrono::nanoseconds(static_cast<int64_t>(at * 1e9)));
      at += o.distribution == "poisson" ? gap(rng) : 1.0 / phase_rate;
    }
  }
  const auto total = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(phase_end));
  std::atomic<size_t> next{0};
  Recorder recorder;
  std::vector<std::thread> threads;
  const auto from =
      o.rate_schedule.empty() ? start + std::chrono::milliseconds(o.warmup_ms) : start;
  const auto to = o.rate_schedule.empty() ? from + std::chrono::milliseconds(o.measurement_ms)
                                          : start + total + std::chrono::seconds(2);
  ServerWindow server;
  threads.emplace_back([&] { server = ReadServerWindow(o, t, from, to); });
  for (int i = 0; i < o.max_threads; ++i) {
    threads.emplace_back([&] {
      std::vector<Sample> local;
      std::unique_ptr<Connection> c;
      for (size_t k; (k = next.fetch_add(1)) < schedule.size();) {
        std::this_thread::sleep_until(schedule[k]);
        // From the intended send time: queueing behind busy connections counts as latency.
        local.push_back(SendOne(c, o, t, schedule[k]));
      }
      recorder.Add(local);
    });
  }
  for (auto& th : threads) th.join();
  PerfResult r = Summarize("request_rate", rate, recorder.samples, from, to, o.batch_size);
  AddServerShare(server, r);
  if (!o.windows_file.empty()) WriteWindows(o.windows_file, phases, recorder.samples, start);
  return r;
}

StatusOr<std::vector<double>> ParseRange(const std::string& flag, const std::string& v) {
  // start[:end[:step]]; perf_analyzer's ranges are linear; "x2" as step doubles.
  std::vector<std::string> parts;
  std::stringstream ss(v);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  try {
    const double start = std::stod(parts.at(0));
    const double end = parts.size() > 1 ? std::stod(parts[1]) : start;
    const std::string step = parts.size() > 2 ? parts[2] : "1";
    std::vector<double> values;
    if (start <= 0 || end < start) throw std::invalid_argument("range");
    const bool doubling = !step.empty() && step[0] == 'x';
    const double s = std::stod(doubling ? step.substr(1) : step);
    if (s <= (doubling ? 1 : 0)) throw std::invalid_argument("step");
    for (double x = start; x <= end + 1e-9 && values.size() < 10000; x = doubling ? x * s : x + s)
      values.push_back(x);
    return values;
  } catch (const std::exception&) {
    return InvalidArgument(
        "--" + flag + " expects start[:end[:step]] (step may be xN to multiply), got '" + v + "'");
  }
}

}  // namespace

std::string PerfUsage() {
  return R"(Usage: nereid-perf -m MODEL [options]

Measures a KServe v2 server (Nereid or Triton) with closed-loop concurrency or open-loop request
rates, like perf_analyzer (flag names follow it).

  -m MODEL                       model name (required)
  -x VERSION                     model version (default: newest)
  -u HOST:PORT                   server (default localhost:8000)
  -i http|grpc                   protocol (default http; grpc's default URL is localhost:8001)
  -b N                           batch size (fills the first variable dimension; default 1)
  --concurrency-range S[:E[:T]]  closed loop at each concurrency (T may be xN; default 1)
  --request-rate-range S[:E[:T]] open loop at each rate in requests/second
  --request-distribution D       constant (default) or poisson, for request rates
  --rate-schedule R:S,R:S,...    one open-loop run stepping through rates (R requests/s for S
                                 seconds each; no warm-up)
  --windows-file FILE            CSV per 1-second window of a request-rate run: answered,
                                 errors, p50 and p99 latency
  --max-threads N                connections for request-rate mode (default 32)
  -p, --measurement-interval MS  measurement window per step (default 5000)
  --warmup MS                    unmeasured warm-up per step (default 1000)
  --shape NAME:D1,D2,...         dims of an input with variable dimensions
  --json-data                    send JSON tensors (default: binary tensor data)
  -f FILE                        also write CSV;   --json FILE  also write JSON
  -q                             no live progress
  --metrics-url HOST:PORT        the server's metrics port: adds energy columns (Nereid)
  --sequence-length N            send sequences of N requests per connection (sequence_id,
                                 sequence_start, sequence_end) to a sequence-batching model

Latency and throughput are measured by the client. The columns batch, queue us and compute us (CSV:
Server Batch Size, Server Queue, Server Compute Infer) come from the model's statistics, read over
the same protocol at the window's edges: mean requests per execution, and queue and compute time
per inference (0 when the server has no statistics extension). With --metrics-url, the columns
watts, mJ/inf, inf/J and gCO2e/1k come from Nereid's energy metrics at the same edges: the server's
average power over the window (every metered scope, idle included), the model's joules per
inference (its active energy and idle share, as the server attributes them), and its grams CO2e
per 1,000 inferences (0 without --carbon-intensity on the server). The server attributes each
100 ms tick 300 ms after it ends, so a window's figures lag the window by that much.
)";
}

StatusOr<PerfOptions> ParsePerfOptions(const std::vector<std::string>& args) {
  PerfOptions o;
  bool url_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    bool has_value = false;
    if (auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    auto next = [&]() -> StatusOr<std::string> {
      if (has_value) return value;
      if (i + 1 >= args.size()) return InvalidArgument(flag + " needs a value");
      return args[++i];
    };
    auto number = [&](auto* out) -> Status {
      ASSIGN_OR_RETURN(std::string v, next());
      try {
        size_t used = 0;
        const double d = std::stod(v, &used);
        if (used != v.size() || d <= 0) throw std::invalid_argument(v);
        *out = static_cast<std::remove_pointer_t<decltype(out)>>(d);
      } catch (const std::exception&) {
        return InvalidArgument(flag + " expects a positive number, got '" + v + "'");
      }
      return Status::Ok();
    };
    if (flag == "-m") {
      ASSIGN_OR_RETURN(o.model, next());
    } else if (flag == "-x") {
      ASSIGN_OR_RETURN(o.version, next());
    } else if (flag == "-u") {
      ASSIGN_OR_RETURN(o.url, next());
      url_given = true;
    } else if (flag == "-i") {
      ASSIGN_OR_RETURN(o.protocol, next());
      if (o.protocol != "http" && o.protocol != "grpc")
        return InvalidArgument("-i must be http or grpc, got '" + o.protocol + "'");
    } else if (flag == "-b") {
      RETURN_IF_ERROR(number(&o.batch_size));
    } else if (flag == "--concurrency-range") {
      ASSIGN_OR_RETURN(std::string v, next());
      ASSIGN_OR_RETURN(o.concurrency, ParseRange("concurrency-range", v));
    } else if (flag == "--request-rate-range") {
      ASSIGN_OR_RETURN(std::string v, next());
      ASSIGN_OR_RETURN(o.request_rate, ParseRange("request-rate-range", v));
    } else if (flag == "--rate-schedule") {
      ASSIGN_OR_RETURN(std::string v, next());
      std::stringstream ss(v);
      for (std::string phase; std::getline(ss, phase, ',');) {
        const size_t colon = phase.find(':');
        char* end = nullptr;
        const double r = std::strtod(phase.c_str(), &end);
        const double secs =
            colon == std::string::npos ? 0 : std::strtod(phase.c_str() + colon + 1, nullptr);
        if (colon == std::string::npos || end != phase.c_str() + colon || !(r > 0) || !(secs > 0) ||
            secs > 86400 || r > 1e7)
          return InvalidArgument("--rate-schedule expects RATE:SECONDS[,RATE:SECONDS...], got '" +
                                 v + "'");
        o.rate_schedule.emplace_back(r, secs);
      }
      if (o.rate_schedule.empty() || o.rate_schedule.size() > 1000)
        return InvalidArgument("--rate-schedule needs 1 to 1000 phases");
      o.request_rate = {o.rate_schedule.front().first};
    } else if (flag == "--windows-file") {
      ASSIGN_OR_RETURN(o.windows_file, next());
    } else if (flag == "--request-distribution") {
      ASSIGN_OR_RETURN(o.distribution, next());
      if (o.distribution != "constant" && o.distribution != "poisson")
        return InvalidArgument("--request-distribution must be constant or poisson");
    } else if (flag == "--max-threads") {
      RETURN_IF_ERROR(number(&o.max_threads));
    } else if (flag == "-p" || flag == "--measurement-interval") {
      RETURN_IF_ERROR(number(&o.measurement_ms));
    } else if (flag == "--warmup") {
      ASSIGN_OR_RETURN(std::string v, next());
      o.warmup_ms = std::stoull(v);
    } else if (flag == "--shape") {
      ASSIGN_OR_RETURN(std::string v, next());
      const size_t colon = v.rfind(':');
      if (colon == std::string::npos) return InvalidArgument("--shape expects NAME:D1,D2,...");
      std::vector<int64_t> dims;
      std::stringstream ss(v.substr(colon + 1));
      for (std::string d; std::getline(ss, d, ',');) dims.push_back(std::stoll(d));
      o.shapes[v.substr(0, colon)] = dims;
    } else if (flag == "--json-data") {
      o.json_data = true;
    } else if (flag == "-f") {
      ASSIGN_OR_RETURN(o.csv_file, next());
    } else if (flag == "--json") {
      ASSIGN_OR_RETURN(o.json_file, next());
    } else if (flag == "-q") {
      o.quiet = true;
    } else if (flag == "--metrics-url") {
      ASSIGN_OR_RETURN(o.metrics_url, next());
    } else if (flag == "--sequence-length") {
      RETURN_IF_ERROR(number(&o.sequence_length));
    } else if (flag == "-h" || flag == "--help") {
      return InvalidArgument("");
    } else {
      return InvalidArgument("unknown option " + flag);
    }
  }
  if (o.model.empty()) return InvalidArgument("-m MODEL is required");
  if (o.protocol == "grpc" && !url_given) o.url = "localhost:8001";
  if (!o.concurrency.empty() && !o.request_rate.empty())
    return InvalidArgument("give either --concurrency-range or --request-rate-range, not both");
  if (o.concurrency.empty() && o.request_rate.empty()) o.concurrency = {1};
  return o;
}

StatusOr<std::vector<PerfResult>> RunPerf(const PerfOptions& o) {
  ASSIGN_OR_RETURN(Target target, BuildRequest(o));
  std::vector<PerfResult> results;
  if (!o.quiet)
    std::fprintf(stderr, "nereid-perf: model %s at %s, batch %lld, %llu ms windows\n",
                 o.model.c_str(), o.url.c_str(), static_cast<long long>(o.batch_size),
                 static_cast<unsigned long long>(o.measurement_ms));
  for (double c : o.concurrency) {
    results.push_back(RunConcurrency(o, target, static_cast<int>(c)));
    Progress(o, results.back());
  }
  for (double r : o.request_rate) {
    results.push_back(RunRequestRate(o, target, r));
    Progress(o, results.back());
  }
  return results;
}

std::string FormatTable(const std::vector<PerfResult>& results) {
  const bool energy =
      std::any_of(results.begin(), results.end(), [](const PerfResult& r) { return r.energy; });
  std::ostringstream out;
  char line[384];
  std::snprintf(line, sizeof(line),
                "| %-12s | %10s | %12s | %9s | %9s | %9s | %9s | %9s | %7s | %7s | %8s | %10s |",
                "mode", "load", "infer/s", "p50 us", "p90 us", "p95 us", "p99 us", "avg us",
                "errors", "batch", "queue us", "compute us");
  out << line;
  if (energy) {
    std::snprintf(line, sizeof(line), " %8s | %9s | %9s | %9s |", "watts", "mJ/inf", "inf/J",
                  "gCO2e/1k");
    out << line;
  }
  out << "\n|" << std::string(energy ? 188 : 144, '-') << "|\n";
  for (const auto& r : results) {
    std::snprintf(
        line, sizeof(line),
        "| %-12s | %10g | %12.1f | %9.0f | %9.0f | %9.0f | %9.0f | %9.0f | %7llu | %7.2f | %8.0f | "
        "%10.0f |",
        r.mode.c_str(), r.load, r.throughput, r.p50_us, r.p90_us, r.p95_us, r.p99_us, r.avg_us,
        static_cast<unsigned long long>(r.errors), r.server_batch, r.server_queue_us,
        r.server_compute_us);
    out << line;
    if (energy) {
      std::snprintf(line, sizeof(line), " %8.1f | %9.3f | %9.1f | %9.3g |", r.watts,
                    r.mj_per_inference, r.inferences_per_joule, r.grams_per_1k);
      out << line;
    }
    out << "\n";
  }
  return out.str();
}

std::string FormatCsv(const std::vector<PerfResult>& results) {
  // perf_analyzer's leading columns, so existing spreadsheets read it.
  std::ostringstream out;
  out << (results.empty() || results[0].mode == "concurrency" ? "Concurrency" : "Request Rate")
      << ",Inferences/Second,p50 latency,p90 latency,p95 latency,p99 latency,Avg latency,Errors,"
         "Server Queue,Server Compute Infer,Server Batch Size,Avg Watts,mJ/Inference,"
         "Inferences/Joule,gCO2e/1000 Inferences\n";
  for (const auto& r : results)
    out << r.load << "," << r.throughput << "," << r.p50_us << "," << r.p90_us << "," << r.p95_us
        << "," << r.p99_us << "," << r.avg_us << "," << r.errors << "," << r.server_queue_us << ","
        << r.server_compute_us << "," << r.server_batch << "," << r.watts << ","
        << r.mj_per_inference << "," << r.inferences_per_joule << "," << r.grams_per_1k << "\n";
  return out.str();
}

std::string FormatJson(const PerfOptions& o, const std::vector<PerfResult>& results) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("model");
  w.String(o.model.c_str());
  w.Key("url");
  w.String(o.url.c_str());
  w.Key("batch_size");
  w.Int64(o.batch_size);
  w.Key("results");
  w.StartArray();
  for (const auto& r : results) {
    w.StartObject();
    w.Key("mode");
    w.String(r.mode.c_str());
    w.Key("load");
    w.Double(r.load);
    w.Key("throughput");
    w.Double(r.throughput);
    w.Key("count");
    w.Uint64(r.count);
    w.Key("errors");
    w.Uint64(r.errors);
    for (auto [key, v] : {std::pair{"p50_us", r.p50_us},
                          {"p90_us", r.p90_us},
                          {"p95_us", r.p95_us},
                          {"p99_us", r.p99_us},
                          {"avg_us", r.avg_us},
                          {"max_us", r.max_us},
                          {"server_queue_us", r.server_queue_us},
                          {"server_compute_us", r.server_compute_us},
                          {"server_batch_size", r.server_batch},
                          {"watts", r.watts},
                          {"mj_per_inference", r.mj_per_inference},
                          {"inferences_per_joule", r.inferences_per_joule},
                          {"grams_co2e_per_1000", r.grams_per_1k}}) {
      w.Key(key);
      w.Double(v);
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return buffer.GetString();
}

int PerfMain(const std::vector<std::string>& args) {
  auto options = ParsePerfOptions(args);
  if (!options.ok()) {
    if (!options.status().message().empty())
      std::cerr << "error: " << options.status().message() << "\n\n";
    std::cerr << PerfUsage();
    return options.status().message().empty() ? 0 : 2;
  }
  auto results = RunPerf(*options);
  if (!results.ok()) {
    std::cerr << "error: " << results.status().message() << "\n";
    return 1;
  }
  std::cout << FormatTable(*results);
  if (!options->csv_file.empty()) std::ofstream(options->csv_file) << FormatCsv(*results);
  if (!options->json_file.empty())
    std::ofstream(options->json_file) << FormatJson(*options, *results) << "\n";
  for (const auto& r : *results)
    if (r.count == 0) return 1;  // a step that completed nothing is a failed measurement
  return 0;
}

}  // namespace nereid::perf
