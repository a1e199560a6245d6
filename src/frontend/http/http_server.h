// HttpServer: the KServe v2 REST frontend with Triton's extensions, on Boost.Beast. I/O threads
// parse and answer; inference completes on instance threads and is posted back to the connection's
// strand, so no I/O thread ever waits on a model. Repository load/unload run on a separate control
// thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "repository/model_repository.h"

namespace nereid::http {

struct HttpOptions {
  std::string address = "0.0.0.0";
  uint16_t port = 8000;
  int threads = 0;                        // 0: one per hardware thread, at least 2
  uint64_t max_input_size = 64ull << 20;  // --http-max-input-size (Triton's default 64 MiB)
  int metrics_port = -1;  // Prometheus /metrics listener; -1: none, 0: any free port
};

struct ServerInfo {
  std::string name = "nereid";
  std::string version;
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, ServerInfo info, ModelRepository* repository);
  ~HttpServer();
  Status Start();  // binds and starts the I/O threads; returns once listening
  void Stop();
  uint16_t port() const;          // the bound port (useful with port 0)
  uint16_t metrics_port() const;  // the bound metrics port, 0 if none

  class Impl;  // public so the connection sessions in http_server.cc can reach it

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace nereid::http
