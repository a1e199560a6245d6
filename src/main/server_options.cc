#include "main/server_options.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <limits>
#include <map>

#include "runtime/backend_library.h"

namespace nereid {
namespace {

StatusOr<bool> ParseBool(const std::string& flag, const std::string& v) {
  if (v == "true" || v == "1" || v == "on" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "off" || v == "no") return false;
  return InvalidArgument("--" + flag + " expects true or false, got '" + v + "'");
}

template <typename T>
StatusOr<T> ParseNumber(const std::string& flag, const std::string& v, T min, T max) {
  T out{};
  auto r = std::from_chars(v.data(), v.data() + v.size(), out);
  if (r.ec != std::errc() || r.ptr != v.data() + v.size() || out < min || out > max)
    return InvalidArgument("--" + flag + " expects a number in [" + std::to_string(min) + ", " +
                           std::to_string(max) + "], got '" + v + "'");
  return out;
}

// Flags Triton has that Nereid accepts without acting on them (so launch scripts, KServe's runtimes
// and ModelMesh's adapter keep working): tuning knobs whose absence changes no answer.
const char* const kAcceptedIgnored[] = {"id",
                                        "backend-config",
                                        "log-format",
                                        "grpc-infer-allocation-pool-size",
                                        "metrics-interval-ms",
                                        "allow-cpu-metrics",
                                        "model-load-thread-count",
                                        "model-load-retry-count",
                                        "buffer-manager-thread-count",
                                        "min-supported-compute-capability",
                                        "cuda-virtual-address-size",
                                        "grpc-keepalive-time",
                                        "grpc-keepalive-timeout",
                                        "grpc-keepalive-permit-without-calls",
                                        "grpc-http2-max-pings-without-data",
                                        "grpc-http2-min-recv-ping-interval-without-data",
                                        "grpc-http2-max-ping-strikes",
                                        "grpc-infer-response-compression-level"};
// Triton's other protocol endpoints: accepted when switched off (ModelMesh passes
// --allow-sagemaker=false), refused when asked for, since Nereid does not serve them.
const char* const kProtocolsNotServed[] = {"allow-sagemaker", "allow-vertex-ai"};

}  // namespace

// --onnx-engine: "auto" or a backend name (which main checks is installed).
Status CheckEngineName(const std::string& v) {
  if (v == "auto" || IsBackendName(v)) return Status::Ok();
  return InvalidArgument("--onnx-engine must be auto or a backend name, got '" + v + "'");
}

std::string ServerUsage() {
  return R"(Usage: nereid serve [options]

Options (names follow tritonserver):
  --model-repository=PATH     model repository (repeatable; alias --model-store)
  --model-control-mode=MODE   none (load everything at start), explicit (load/unload API) or
                              poll (load everything, then follow the repository's changes)
  --repository-poll-secs=N    poll mode: look at the repository every N seconds (default 15)
  --load-model=NAME           with explicit mode: load NAME at start ("*" for all); repeatable
  --strict-readiness=BOOL     /v2/health/ready requires every model to be ready (default true)
  --exit-on-error=BOOL        a model failing to load at start-up stops the server (default true)
  --energy-accounting=BOOL    attribute measured joules to models (default true; docs/energy.md)
  --energy-cpu-watts-per-core=W  the CPU estimate's watts per busy core where no RAPL counter is
                              readable (default 10)
  --energy-poll-ms=MS         read the meters every MS ms (default 0: at their own update period,
                              100 ms for NVML; a read costs ~3 ms on an H200 host)
  --carbon-intensity=G        grid carbon intensity in g CO2e per kWh, for nereid_carbon_* figures
  --carbon-intensity-file=PATH  time-stamped intensities ("unix_seconds,g" or
                              "YYYY-MM-DDTHH:MM:SSZ,g" per line), re-read when it changes
  --pue=X                     power usage effectiveness the carbon figures include (default 1.0)
  --rate-limit=MODE           off (default) or execution_count: instance groups' rate_limiter
                              resources and priorities gate their executions
  --rate-limit-resource=NAME:COUNT[:DEVICE]  a resource's count (on DEVICE, else on every device
                              and in the global pool); repeatable; with any, unnamed ones are 0
  --cache-config=local,size=BYTES  the response cache, for models with response_cache enabled
  --trace-config=[MODE,]KEY=VALUE  request tracing (docs/tracing.md): level=TIMESTAMPS, rate=N,
                                   count=N, mode=triton|opentelemetry, triton,file=PATH,
                                   triton,log-frequency=N, opentelemetry,url=http://HOST:PORT/PATH,
                                   opentelemetry,resource=KEY=VALUE, opentelemetry,bsp_*=N
                              (--response-cache-byte-size=BYTES: Triton's older spelling)
  --exit-timeout-secs=N       on SIGINT/SIGTERM, in-flight requests may finish for N s (default 30)
  --drain-grace-secs=N        on SIGINT/SIGTERM, first N s with readiness false (HTTP, gRPC,
                              grpc.health.v1) while every request is still served, so load
                              balancers take the replica out before it stops accepting (default 0;
                              a second signal ends the grace; Nereid's own)
  --model-load-timeout-secs=N a model load not finished after N s fails, and its backend is told
                              to abort it (default 600; Nereid's own)
  --model-unload-timeout-secs=N  an unloaded model's requests may finish for N s; then they are
                              aborted (a Python model's stubs killed) (default 30; Nereid's own)
  --strict-model-config=BOOL  config.pbtxt must be complete: no auto-complete (default false)
  --disable-auto-complete-config  same as --strict-model-config=true
  --backend-directory=PATH    where libnereid_backend_<name>.so live (default: next to the binary)
  --onnx-engine=ENGINE        which library runs a model whose backend another one stands in for
                              (the native engine for ONNX models): the backend's own (default),
                              the stand-in's name, or auto (the stand-in where it runs every op
                              of the model, else the backend's own); docs/onnxruntime.md
  --allow-http=BOOL           serve HTTP (default true)
  --http-address=ADDR         default 0.0.0.0
  --http-port=PORT            default 8000 (0 picks a free port)
  --http-thread-count=N       HTTP I/O threads (default: CPUs this process may run on, at least 2)
  --http-max-input-size=BYTES largest accepted request body (default 67108864)
  --http-read-timeout-secs=N  an idle keep-alive connection, or a request still arriving, is
                              closed after N s (default 60)
  --http-write-timeout-secs=N a response must be read by the client within N s (default 60)
  --http-ssl-cert=PATH, --http-ssl-key=PATH  serve HTTPS on the HTTP port (PEM files; Nereid's
                              own flags: tritonserver has no HTTPS). The metrics port stays HTTP.
  --http-ssl-root-cert=PATH   with HTTPS: require client certificates signed by this CA (mutual TLS)
  --allow-grpc=BOOL           serve gRPC (default true)
  --grpc-address=ADDR         default 0.0.0.0
  --grpc-port=PORT            default 8001 (0 picks a free port)
  --grpc-thread-count=N       cap on gRPC's callback threads (default: gRPC's own)
  --grpc-max-input-size=BYTES largest accepted request message (default 67108864)
  --grpc-memory-quota-bytes=BYTES  memory gRPC may hold for all connections (its ResourceQuota;
                              default 268435456): past it, gRPC offers clients smaller windows
  --reuse-grpc-port=BOOL      let other processes listen on the gRPC port too (default false)
  --grpc-use-ssl=BOOL         serve gRPC over TLS (needs --grpc-server-cert and --grpc-server-key)
  --grpc-use-ssl-mutual=BOOL  TLS with client certificates verified against --grpc-root-cert
  --grpc-server-cert=PATH, --grpc-server-key=PATH, --grpc-root-cert=PATH   PEM files
  --http-restricted-api=GROUPS:KEY=VALUE      requests to these API groups need header KEY: VALUE
                              (403 otherwise); repeatable, a group in one restriction only
  --grpc-restricted-protocol=GROUPS:KEY=VALUE the same for gRPC; the header (metadata) is
                              triton-grpc-protocol-KEY (UNAVAILABLE otherwise). Groups: health,
                              metadata, inference, shared-memory, model-config, model-repository,
                              statistics, trace, logging
  --allow-metrics=BOOL        serve Prometheus metrics at /metrics (default true)
  --allow-client-shm=BOOL     let clients register and use system and CUDA shared-memory regions
                              (default false, as Triton since 2.69; docs/security.md)
  --metrics-port=PORT         default 8002 (0 picks a free port)
  --allow-gpu-metrics=BOOL    per-GPU nv_gpu_* metrics through NVML (default true; none without
                              a GPU driver)
  --pinned-memory-pool-byte-size=BYTES  page-locked host pool for staging between host and GPU
                              (default 268435456; 0: pageable memory). Used only with GPUs
  --cuda-memory-pool-byte-size=DEVICE:BYTES  device memory pool of one GPU (default 67108864 per
                              GPU; 0: direct allocations); repeatable
  --log-verbose=N             verbose logging level (0 off)
  --log-info=BOOL, --log-warning=BOOL, --log-error=BOOL
  --help                      (and `nereid --version`: the server's and the backend ABI's versions)
)";
}

StatusOr<ServerOptions> ParseServerOptions(const std::vector<std::string>& args) {
  ServerOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "--help" || arg == "-h") {
      o.help = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) return InvalidArgument("unexpected argument '" + arg + "'");
    arg = arg.substr(2);
    std::string flag = arg, value;
    bool has_value = false;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    auto next = [&]() -> StatusOr<std::string> {
      if (has_value) return value;
      if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0)
        return InvalidArgument("--" + flag + " needs a value");
      return args[++i];
    };
    // The flag's value as a number of T in [min, max].
    auto number = [&]<typename T>(T min, T max) -> StatusOr<T> {
      ASSIGN_OR_RETURN(std::string v, next());
      return ParseNumber<T>(flag, v, min, max);
    };
    auto boolean = [&]() -> StatusOr<bool> {
      if (has_value) return ParseBool(flag, value);
      if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) return ParseBool(flag, args[++i]);
      return true;
    };
    if (flag == "model-repository" || flag == "model-store") {
      ASSIGN_OR_RETURN(std::string v, next());
      o.repository.paths.push_back(v);
    } else if (flag == "model-control-mode") {
      ASSIGN_OR_RETURN(std::string v, next());
      if (v == "none")
        o.repository.control_mode = ModelControlMode::kNone;
      else if (v == "explicit")
        o.repository.control_mode = ModelControlMode::kExplicit;
      else if (v == "poll")
        o.repository.control_mode = ModelControlMode::kPoll;
      else
        return InvalidArgument("--model-control-mode must be none, explicit or poll, got '" + v +
                               "'");
    } else if (flag == "load-model") {
      ASSIGN_OR_RETURN(std::string v, next());
      o.repository.startup_models.push_back(v);
    } else if (flag == "exit-on-error") {
      ASSIGN_OR_RETURN(o.exit_on_error, boolean());
    } else if (flag == "allow-gpu-metrics") {
      ASSIGN_OR_RETURN(o.http.gpu_metrics, boolean());
    } else if (flag == "pinned-memory-pool-byte-size") {
      ASSIGN_OR_RETURN(o.memory.pinned_bytes, number(size_t{0}, size_t{1} << 40));
    } else if (flag == "cuda-memory-pool-byte-size") {
      // <device>:<bytes>, repeatable (tritonserver's form).
      ASSIGN_OR_RETURN(std::string v, next());
      const size_t colon = v.find(':');
      if (colon == std::string::npos)
        return InvalidArgument("--cuda-memory-pool-byte-size expects <device>:<bytes>, got '" + v +
                               "'");
      ASSIGN_OR_RETURN(int device, ParseNumber<int>(flag, v.substr(0, colon), 0, 1023));
      ASSIGN_OR_RETURN(o.memory.cuda_bytes[device],
                       ParseNumber<size_t>(flag, v.substr(colon + 1), 0, size_t{1} << 40));
    } else if (flag == "model-load-timeout-secs" || flag == "model-unload-timeout-secs") {
      ASSIGN_OR_RETURN(int secs, number(1, 24 * 3600));
      (flag == "model-load-timeout-secs" ? o.repository.load_timeout
                                         : o.repository.unload_timeout) =
          std::chrono::seconds(secs);
    } else if (flag == "energy-accounting") {
      ASSIGN_OR_RETURN(o.energy_accounting, boolean());
    } else if (flag == "energy-poll-ms") {
      ASSIGN_OR_RETURN(o.energy_poll_ms, number(0, 60000));
    } else if (flag == "energy-cpu-watts-per-core") {
      ASSIGN_OR_RETURN(o.energy_watts_per_core, number(0.0, 1000.0));
    } else if (flag == "carbon-intensity") {
      ASSIGN_OR_RETURN(o.carbon_intensity, number(0.0, 10000.0));
    } else if (flag == "carbon-intensity-file") {
      ASSIGN_OR_RETURN(o.carbon_intensity_file, next());
    } else if (flag == "pue") {
      ASSIGN_OR_RETURN(o.pue, number(1.0, 3.0));
    } else if (flag == "repository-poll-secs") {
      ASSIGN_OR_RETURN(int64_t secs, number(int64_t{0}, int64_t{24 * 3600}));
      o.repository.poll_period = std::chrono::seconds(secs);
    } else if (flag == "rate-limit") {
      ASSIGN_OR_RETURN(std::string v, next());
      if (v != "off" && v != "execution_count")
        return InvalidArgument("--rate-limit expects off or execution_count, got '" + v + "'");
      o.rate_limit = v == "execution_count";
    } else if (flag == "rate-limit-resource") {
      ASSIGN_OR_RETURN(std::string v, next());
      ASSIGN_OR_RETURN(RateLimiter::Available r, RateLimiter::ParseResourceFlag(v));
      o.rate_limit_resources.push_back(std::move(r));
    } else if (flag == "cache-config") {
      ASSIGN_OR_RETURN(std::string v, next());
      o.cache_config.push_back(std::move(v));
    } else if (flag == "trace-config") {
      ASSIGN_OR_RETURN(std::string v, next());
      o.trace_config.push_back(std::move(v));
    } else if (flag == "trace-file" || flag == "trace-log-frequency" || flag == "trace-rate" ||
               flag == "trace-level" || flag == "trace-count") {
      // Triton's deprecated spellings of --trace-config values.
      ASSIGN_OR_RETURN(std::string v, next());
      const std::string key = flag.substr(6);
      const bool triton = key == "file" || key == "log-frequency";
      o.trace_config.push_back((triton ? "triton," : "") + key + "=" + v);
    } else if (flag == "response-cache-byte-size") {
      ASSIGN_OR_RETURN(o.response_cache_byte_size, number(uint64_t{0}, uint64_t{1} << 50));
    } else if (flag == "cache-dir") {
      RETURN_IF_ERROR(next().status());  // where Triton loads cache libraries from: none here
    } else if (flag == "exit-timeout-secs") {
      ASSIGN_OR_RETURN(o.exit_timeout_secs, number(0, 24 * 3600));
    } else if (flag == "drain-grace-secs") {
      ASSIGN_OR_RETURN(o.drain_grace_secs, number(0, 3600));
    } else if (flag == "strict-model-config") {
      ASSIGN_OR_RETURN(bool strict, boolean());
      o.repository.auto_complete = !strict;
    } else if (flag == "onnx-engine") {
      ASSIGN_OR_RETURN(o.repository.onnx_engine, next());
      RETURN_IF_ERROR(CheckEngineName(o.repository.onnx_engine));
    } else if (flag == "disable-auto-complete-config") {
      ASSIGN_OR_RETURN(bool disable, boolean());
      o.repository.auto_complete = !disable;
    } else if (flag == "http-read-timeout-secs" || flag == "http-write-timeout-secs") {
      ASSIGN_OR_RETURN(int secs, number(1, 24 * 3600));
      (flag == "http-read-timeout-secs" ? o.http.read_timeout : o.http.write_timeout) =
          std::chrono::seconds(secs);
    } else if (flag == "grpc-max-input-size") {
      ASSIGN_OR_RETURN(o.grpc.max_input_size,
                       number(int64_t{1}, int64_t{std::numeric_limits<int32_t>::max()}));
    } else if (flag == "grpc-memory-quota-bytes") {
      ASSIGN_OR_RETURN(o.grpc.memory_quota, number(int64_t{16} << 20, int64_t{1} << 40));
    } else if (flag == "http-restricted-api") {
      ASSIGN_OR_RETURN(std::string v, next());
      RETURN_IF_ERROR(o.http.restricted.Add(flag, v));
    } else if (flag == "grpc-restricted-protocol") {
      ASSIGN_OR_RETURN(std::string v, next());
      RETURN_IF_ERROR(o.grpc.restricted.Add(flag, v));
    } else if (flag == "http-ssl-cert") {
      ASSIGN_OR_RETURN(o.http.tls.cert, next());
    } else if (flag == "http-ssl-key") {
      ASSIGN_OR_RETURN(o.http.tls.key, next());
    } else if (flag == "http-ssl-root-cert") {
      ASSIGN_OR_RETURN(o.http.tls.root_cert, next());
    } else if (flag == "reuse-grpc-port") {
      ASSIGN_OR_RETURN(o.grpc.reuse_port, boolean());
    } else if (flag == "grpc-use-ssl") {
      ASSIGN_OR_RETURN(o.grpc.ssl.use_ssl, boolean());
    } else if (flag == "grpc-use-ssl-mutual") {
      ASSIGN_OR_RETURN(o.grpc.ssl.mutual, boolean());
    } else if (flag == "grpc-server-cert") {
      ASSIGN_OR_RETURN(o.grpc.ssl.server_cert, next());
    } else if (flag == "grpc-server-key") {
      ASSIGN_OR_RETURN(o.grpc.ssl.server_key, next());
    } else if (flag == "grpc-root-cert") {
      ASSIGN_OR_RETURN(o.grpc.ssl.root_cert, next());
    } else if (flag == "strict-readiness") {
      ASSIGN_OR_RETURN(o.repository.strict_readiness, boolean());
    } else if (flag == "backend-directory") {
      ASSIGN_OR_RETURN(o.backend_directory, next());
    } else if (flag == "allow-http") {
      ASSIGN_OR_RETURN(o.allow_http, boolean());
    } else if (flag == "allow-grpc") {
      ASSIGN_OR_RETURN(o.allow_grpc, boolean());
    } else if (flag == "allow-client-shm") {
      ASSIGN_OR_RETURN(o.allow_client_shm, boolean());
    } else if (flag == "allow-metrics") {
      ASSIGN_OR_RETURN(o.allow_metrics, boolean());
    } else if (flag == "http-address") {
      ASSIGN_OR_RETURN(o.http.address, next());
    } else if (flag == "http-port" || flag == "grpc-port" || flag == "metrics-port") {
      ASSIGN_OR_RETURN(int port, number(0, 65535));
      if (flag == "http-port")
        o.http.port = static_cast<uint16_t>(port);
      else if (flag == "grpc-port")
        o.grpc.port = port;
      else
        o.metrics_port = static_cast<uint16_t>(port);
    } else if (flag == "grpc-address") {
      ASSIGN_OR_RETURN(o.grpc.address, next());
    } else if (flag == "grpc-thread-count") {
      ASSIGN_OR_RETURN(o.grpc.threads, number(1, 1024));
    } else if (flag == "http-thread-count") {
      ASSIGN_OR_RETURN(o.http.threads, number(1, 1024));
    } else if (flag == "http-max-input-size") {
      ASSIGN_OR_RETURN(o.http.max_input_size, number(uint64_t{1}, uint64_t{1} << 40));
    } else if (flag == "log-verbose") {
      ASSIGN_OR_RETURN(o.log_verbose, number(0, 100));
    } else if (flag == "log-info") {
      ASSIGN_OR_RETURN(o.log_info, boolean());
    } else if (flag == "log-warning") {
      ASSIGN_OR_RETURN(o.log_warning, boolean());
    } else if (flag == "log-error") {
      ASSIGN_OR_RETURN(o.log_error, boolean());
    } else if (std::find(std::begin(kProtocolsNotServed), std::end(kProtocolsNotServed), flag) !=
               std::end(kProtocolsNotServed)) {
      ASSIGN_OR_RETURN(bool on, boolean());
      if (on)
        return InvalidArgument(
            "--" + flag + "=true: Nereid serves the KServe v2 protocol over HTTP and gRPC only");
    } else {
      bool known = false;
      for (const char* name : kAcceptedIgnored) known = known || flag == name;
      if (!known) return InvalidArgument("unknown option --" + flag + " (see --help)");
      if (!has_value && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) ++i;
    }
  }
  if (!o.help && o.repository.paths.empty())
    return InvalidArgument("--model-repository is required");
  if (o.repository.control_mode != ModelControlMode::kExplicit &&
      !o.repository.startup_models.empty())
    return InvalidArgument(
        "Error: Use of '--load-model' requires setting '--model-control-mode=explicit' as well.");
  return o;
}

std::string BackendDirectory(const ServerOptions& options) {
  if (!options.backend_directory.empty()) return options.backend_directory;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "backends";
  const auto dir = exe.parent_path();
  if (std::filesystem::is_directory(dir / "backends")) return (dir / "backends").string();
  return (dir.parent_path() / "lib" / "nereid" / "backends").string();
}

}  // namespace nereid
