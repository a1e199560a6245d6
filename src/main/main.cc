// nereid: the server binary. `nereid serve [options]` (or bare options, as tritonserver takes
// them).
#include <execinfo.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <iostream>
#include <thread>

#include "common/logging.h"
#include "frontend/grpc/grpc_server.h"
#include "frontend/http/http_server.h"
#include "gpu/cuda_driver.h"
#include "gpu/nvml.h"
#include "main/config_command.h"
#include "main/server_options.h"
#include "memory/memory_pool.h"
#include "repository/model_repository.h"
#include "repository/repository_poller.h"
#include "runtime/response_cache.h"
#include "runtime/server_info.h"
#include "server/inference_server.h"
#include "trace/trace.h"

namespace {

// A server with many connections needs many descriptors: take the hard limit.
// A crash writes its signal and the stack (addresses resolvable with addr2line against the
// unstripped build) to stderr before the default action ends the process.
void OnFatalSignal(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  char line[64];
  const int len = std::snprintf(line, sizeof(line), "fatal signal %d; stack:\n", sig);
  if (len > 0) (void)!write(STDERR_FILENO, line, static_cast<size_t>(len));
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

void InstallCrashHandler() {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // sanitizers report their own
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) signal(sig, OnFatalSignal);
#endif
}

void RaiseFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

int Shutdown(int sig, int exit_timeout_secs, nereid::http::HttpServer* http,
             nereid::grpc_frontend::GrpcServer* grpc, nereid::ModelRepository& repository,
             nereid::trace::TraceManager* tracer);

int Serve(const std::vector<std::string>& args) {
  auto options_or = nereid::ParseServerOptions(args);
  if (!options_or.ok()) {
    std::cerr << "error: " << options_or.status().message() << "\n\n" << nereid::ServerUsage();
    return 2;
  }
  nereid::ServerOptions& options = *options_or;
  if (options.help) {
    std::cout << nereid::ServerUsage();
    return 0;
  }
  auto& log = nereid::GlobalLogSettings();
  log.verbose = options.log_verbose;
  log.info = options.log_info;
  log.warning = options.log_warning;
  log.error = options.log_error;

  // Block the stop signals in every thread; the main thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  RaiseFileLimit();
  InstallCrashHandler();
  if (nereid::Status pools = nereid::ConfigureMemoryPools(options.memory); !pools.ok()) {
    LOG_ERROR << pools.message();
    return 1;
  }
  const auto& driver = nereid::gpu::CudaDriver::Get();
  for (const auto& d : driver.devices())
    LOG_INFO << "GPU " << d.ordinal << ": " << d.name << ", compute capability " << d.compute_major
             << "." << d.compute_minor << ", " << (d.total_memory >> 20) << " MiB";
  if (!driver.available()) LOG_INFO << "no GPUs: " << driver.unavailable_reason();
  // NVML opened now, so nv_energy_consumption counts from the server's start.
  if (options.allow_metrics && options.http.gpu_metrics && nereid::gpu::Nvml::Get().available())
    LOG_INFO << "GPU metrics through NVML";
  nereid::BackendManager backends(nereid::BackendDirectory(options));
  nereid::Status s = nereid::CheckEngine(backends, options.repository.onnx_engine);
  if (!s.ok()) {
    LOG_ERROR << s.message();
    return 1;
  }
  // Declared before the repository: models report to it until the repository's end.
  std::unique_ptr<nereid::energy::EnergyLedger> energy;
  if (options.energy_accounting)
    energy = nereid::energy::MakeServerLedger(
        options.energy_watts_per_core, std::chrono::milliseconds(options.energy_poll_ms),
        std::make_shared<nereid::energy::CarbonIntensity>(
            options.carbon_intensity, options.carbon_intensity_file, options.pue));
  auto cache_config =
      nereid::ParseCacheConfig(options.cache_config, options.response_cache_byte_size);
  if (!cache_config.ok()) {
    LOG_ERROR << cache_config.status().message();
    return 1;
  }
  std::unique_ptr<nereid::ResponseCache> cache;
  if (!cache_config->implementation.empty()) {
    cache = std::make_unique<nereid::ResponseCache>(cache_config->size);
    LOG_INFO << "response cache: local, " << cache_config->size << " bytes";
  }
  // Tracing (Triton's trace extension; docs/tracing.md). Written out when the server stops.
  std::shared_ptr<nereid::trace::TraceManager> tracer;
  {
    auto trace_config = nereid::trace::ParseTraceConfig(options.trace_config);
    if (!trace_config.ok()) {
      LOG_ERROR << trace_config.status().message();
      return 1;
    }
    auto made = nereid::trace::TraceManager::Create(std::move(trace_config).value());
    if (!made.ok()) {
      LOG_ERROR << made.status().message();
      return 1;
    }
    tracer = std::move(made).value();
  }
  std::unique_ptr<nereid::RateLimiter> rate_limiter;
  if (options.rate_limit)
    rate_limiter = std::make_unique<nereid::RateLimiter>(options.rate_limit_resources);
  nereid::Services services;
  services.cache = cache.get();
  services.rate_limiter = rate_limiter.get();
  services.energy = energy.get();
  services.tracer = tracer;
  nereid::ModelRepository repository(options.repository, &backends, services);
  s = repository.LoadStartupModels();
  if (!s.ok()) {
    LOG_ERROR << s.message();
    return 1;
  }
  if (const auto failed = repository.FailedModels(); !failed.empty() && options.exit_on_error) {
    for (const auto& f : failed) LOG_ERROR << "failed to load " << f;
    LOG_ERROR << "exiting: " << failed.size() << " model(s) failed to load "
              << "(--exit-on-error=false keeps serving the others)";
    return 1;
  }
  // Poll mode: the repository's changes from here on (declared after the repository: it stops
  // first, waiting for the loads it started).
  std::unique_ptr<nereid::RepositoryPoller> poller;
  if (options.repository.control_mode == nereid::ModelControlMode::kPoll &&
      options.repository.poll_period.count() > 0) {
    poller =
        std::make_unique<nereid::RepositoryPoller>(&repository, options.repository.poll_period);
    poller->Start();
    LOG_INFO << "polling the model repository every "
             << options.repository.poll_period.count() / 1000 << " s";
  }

  // The protocol-neutral API both frontends call; outlives them (declared before them).
  nereid::InferenceServer api(&repository);
  api.shared_memory().AllowClients(options.allow_client_shm);
  LOG_INFO << "client shared memory "
           << (options.allow_client_shm ? "allowed (--allow-client-shm=true)"
                                        : "disabled: clients cannot register regions "
                                          "(--allow-client-shm=true allows them)");
  std::unique_ptr<nereid::grpc_frontend::GrpcServer> grpc;
  if (options.allow_grpc) {
    grpc = std::make_unique<nereid::grpc_frontend::GrpcServer>(options.grpc, &api);
    s = grpc->Start();
    if (!s.ok()) {
      LOG_ERROR << s.message();
      return 1;
    }
  }
  std::unique_ptr<nereid::http::HttpServer> http;
  if (options.allow_metrics) options.http.metrics_port = options.metrics_port;
  if (options.allow_http) {
    http = std::make_unique<nereid::http::HttpServer>(options.http, &api);
    s = http->Start();
    if (!s.ok()) {
      LOG_ERROR << s.message();
      return 1;
    }
  }
  int sig = 0;
  sigwait(&signals, &sig);
  if (options.drain_grace_secs > 0) {
    // Readiness false first, everything still served: endpoints are removed before connections
    // close. A second signal ends the grace early.
    api.SetDraining();
    if (grpc) grpc->SetServing(false);
    LOG_INFO << "signal " << sig << " received: not ready; still serving for "
             << options.drain_grace_secs << " s before the shutdown";
    const timespec grace{options.drain_grace_secs, 0};
    if (sigtimedwait(&signals, nullptr, &grace) > 0) LOG_INFO << "second signal: grace ended";
  }
  return Shutdown(sig, options.exit_timeout_secs, http.get(), grpc.get(), repository, tracer.get());
}

// How long past the exit timeout gRPC may take to close its cancelled calls.
constexpr std::chrono::seconds kShutdownGrace{5};

// Triton's shutdown: stop taking new work, let what was accepted finish within the exit timeout,
// then stop. Requests still running when the timeout passes are abandoned (exit status 1).
int Shutdown(int sig, int exit_timeout_secs, nereid::http::HttpServer* http,
             nereid::grpc_frontend::GrpcServer* grpc, nereid::ModelRepository& repository,
             nereid::trace::TraceManager* tracer) {
  const auto steady_deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(exit_timeout_secs);
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(exit_timeout_secs);
  LOG_INFO << "signal " << sig << " received: no new requests; waiting up to " << exit_timeout_secs
           << " s for " << (http ? http->InFlight() : 0) << " HTTP request(s) and gRPC calls "
           << "in flight";
  if (http) http->StopAccepting();
  // gRPC's Shutdown cancels the calls still open at the deadline but then waits for each of them
  // to finish, and a call whose request a model still holds (a sequence held by a test hook, a
  // model that hangs) finishes only when the model answers: past the deadline and a grace, the
  // server exits without them rather than waiting for ever.
  // Requests still running when the timeout passes are abandoned: the server exits without them.
  auto exit_without = [&](const std::string& what) {
    LOG_ERROR << "exit timeout of " << exit_timeout_secs << " s passed with " << what
              << "; exiting without them";
    repository.AbortAll();  // their processes (Python stubs) go with the server
    std::fflush(nullptr);
    std::_Exit(1);  // instance threads may still be running those requests: do not wait for them
  };
  if (grpc) {
    auto stopped = std::make_shared<std::promise<void>>();
    std::future<void> done = stopped->get_future();
    std::thread([grpc, deadline, stopped] {
      grpc->Stop(deadline);
      stopped->set_value();
    }).detach();
    if (done.wait_until(steady_deadline + kShutdownGrace) != std::future_status::ready)
      exit_without("gRPC calls still waiting for their models");
  }
  if (http && !http->Drain(steady_deadline))
    exit_without(std::to_string(http->InFlight()) + " HTTP request(s) unanswered");
  if (http) http->Stop();
  repository.StopAll();
  // Spans still queued for an OpenTelemetry receiver go out within what is left of the timeout.
  if (tracer) tracer->Stop(steady_deadline);
  LOG_INFO << "all requests answered; exiting";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "perf") {
    std::cerr << "the load generator is its own program now: nereid-perf (next to nereid)\n";
    return 2;
  }
  if (!args.empty() && args[0] == "config")
    return nereid::ConfigMain({args.begin() + 1, args.end()});
  if (!args.empty() && (args[0] == "--version" || args[0] == "version")) {
    // The backend ABI's version is stated once, in include/nereid/backend.h.
    std::cout << nereid::kServerName << " " << nereid::kServerVersion << " (backend ABI "
              << NEREID_API_MAJOR(NEREID_BACKEND_API_VERSION) << "."
              << NEREID_API_MINOR(NEREID_BACKEND_API_VERSION) << ")\n";
    return 0;
  }
  if (!args.empty() && args[0] == "serve")
    args.erase(args.begin());
  else if (!args.empty() && args[0].rfind("--", 0) != 0 && args[0] != "-h") {
    std::cerr << "unknown command '" << args[0]
              << "'; try: nereid serve --help, nereid config --help (load generator: nereid-perf "
                 "--help)\n";
    return 2;
  }
  return Serve(args);
}
