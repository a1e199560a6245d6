// Command-line options of `nereid serve`, named like tritonserver's so existing launch scripts
// work.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "frontend/grpc/grpc_server.h"
#include "frontend/http/http_server.h"
#include "memory/memory_pool.h"
#include "repository/model_repository.h"
#include "scheduler/rate_limiter.h"

namespace nereid {

struct ServerOptions {
  RepositoryOptions repository;
  MemoryPoolOptions memory;
  http::HttpOptions http;
  bool allow_http = true;
  bool allow_grpc = true;
  bool allow_metrics = true;
  bool allow_client_shm = false;  // --allow-client-shm (Triton 2.69's default: off)
  grpc_frontend::GrpcOptions grpc;
  uint16_t metrics_port = 8002;
  std::string backend_directory;  // empty: next to the executable
  // Shutdown: in-flight requests may finish for this long after SIGINT/SIGTERM.
  int exit_timeout_secs = 30;
  // On SIGTERM/SIGINT: seconds of readiness false while still serving, before the shutdown.
  int drain_grace_secs = 0;
  // A model that fails to load at start-up stops the server (tritonserver's default).
  bool exit_on_error = true;
  // Energy attribution (docs/energy.md): meters read by a poller thread, batches reported to it.
  bool energy_accounting = true;
  // The CPU estimate's watts per busy core, where no RAPL counter is readable.
  double energy_watts_per_core = 10;
  // How often the meters are read (0: at their own update period, 100 ms for NVML).
  int energy_poll_ms = 0;
  // Carbon (docs/energy.md): g CO2e/kWh (< 0: none), or a file of time-stamped intensities; PUE.
  double carbon_intensity = -1;
  std::string carbon_intensity_file;
  // The response cache: --cache-config values and Triton's deprecated --response-cache-byte-size.
  std::vector<std::string> cache_config;
  // Tracing: --trace-config values ([mode,]key=value), Triton's deprecated --trace-* flags folded
  // in.
  std::vector<std::string> trace_config;
  // Triton's rate limiter: --rate-limit=execution_count turns it on; --rate-limit-resource values.
  bool rate_limit = false;
  std::vector<RateLimiter::Available> rate_limit_resources;
  uint64_t response_cache_byte_size = 0;
  double pue = 1.0;
  int log_verbose = 0;
  bool log_info = true, log_warning = true, log_error = true;
  bool help = false;
};

// Parses argv (after the subcommand). Accepts --flag=value and --flag value; booleans also bare.
StatusOr<ServerOptions> ParseServerOptions(const std::vector<std::string>& args);
std::string ServerUsage();
// --backend-directory, else "backends" next to the executable, else ../lib/nereid/backends.
std::string BackendDirectory(const ServerOptions& options);

}  // namespace nereid
