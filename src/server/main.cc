// nereid: the server binary. `nereid serve [options]` (or bare options, as tritonserver takes
// them).
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "common/logging.h"
#include "frontend/grpc/grpc_server.h"
#include "frontend/http/http_server.h"
#include "perf/load_generator.h"
#include "repository/model_repository.h"
#include "runtime/server_info.h"
#include "server/server_options.h"

namespace {

std::string DefaultBackendDirectory() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "backends";
  const auto dir = exe.parent_path();
  if (std::filesystem::is_directory(dir / "backends")) return (dir / "backends").string();
  return (dir.parent_path() / "lib" / "nereid" / "backends").string();
}

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

  nereid::BackendManager backends(options.backend_directory.empty() ? DefaultBackendDirectory()
                                                                    : options.backend_directory);
  nereid::ModelRepository repository(options.repository, &backends);
  nereid::Status s = repository.LoadStartupModels();
  if (!s.ok()) {
    LOG_ERROR << s.message();
    return 1;
  }
  std::unique_ptr<nereid::grpc_frontend::GrpcServer> grpc;
  if (options.allow_grpc) {
    grpc = std::make_unique<nereid::grpc_frontend::GrpcServer>(options.grpc, &repository);
    s = grpc->Start();
    if (!s.ok()) {
      LOG_ERROR << s.message();
      return 1;
    }
  }
  if (options.allow_metrics)
    LOG_INFO << "metrics port " << options.metrics_port
             << " is reserved; metrics are not in this build";
  std::unique_ptr<nereid::http::HttpServer> http;
  if (options.allow_metrics) options.http.metrics_port = options.metrics_port;
  if (options.allow_http) {
    http = std::make_unique<nereid::http::HttpServer>(
        options.http, nereid::http::ServerInfo{nereid::kServerName, nereid::kServerVersion},
        &repository);
    s = http->Start();
    if (!s.ok()) {
      LOG_ERROR << s.message();
      return 1;
    }
  }
  int sig = 0;
  sigwait(&signals, &sig);
  LOG_INFO << "signal " << sig << " received, shutting down";
  if (http) http->Stop();
  if (grpc) grpc->Stop();
  repository.StopAll();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "perf")
    return nereid::perf::PerfMain({args.begin() + 1, args.end()});
  if (!args.empty() && args[0] == "serve")
    args.erase(args.begin());
  else if (!args.empty() && args[0].rfind("--", 0) != 0 && args[0] != "-h") {
    std::cerr << "unknown command '" << args[0]
              << "'; try: nereid serve --help, nereid perf --help\n";
    return 2;
  }
  return Serve(args);
}
