// HttpServer: the KServe v2 REST frontend with Triton's extensions, on Boost.Beast. I/O threads
// parse and answer; inference completes on instance threads and is posted back to the connection's
// strand, so no I/O thread ever waits on a model. Repository load/unload run on a separate control
// thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "frontend/restricted_api.h"
#include "server/server_api.h"

namespace nereid::http {

struct HttpOptions {
  std::string address = "0.0.0.0";
  uint16_t port = 8000;
  int threads = 0;                        // 0: one per hardware thread, at least 2
  uint64_t max_input_size = 64ull << 20;  // --http-max-input-size (Triton's default 64 MiB)
  int metrics_port = -1;    // Prometheus /metrics listener; -1: none, 0: any free port
  bool gpu_metrics = true;  // --allow-gpu-metrics: the nv_gpu_* families (where NVML is)
  // How long a keep-alive connection may stay idle, and how long a request may take to arrive once
  // its first bytes came (--http-read-timeout-secs; checked once a second).
  std::chrono::seconds read_timeout{60};
  // A response must be taken by the client within this time (--http-write-timeout-secs).
  std::chrono::seconds write_timeout{60};
  RestrictedApis restricted;  // --http-restricted-api
  // HTTPS on the inference port (Nereid's flags; tritonserver has no HTTPS): PEM file paths read
  // at Start. With root_cert, clients must present a certificate it signed (mutual TLS).
  struct Tls {
    std::string cert, key, root_cert;
  } tls;
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, ServerApi* server);
  ~HttpServer();
  Status Start();  // binds and starts the I/O threads; returns once listening
  // Shutdown, in three steps: stop accepting connections and new requests (a request read from
  // now on gets 503 and every response closes its connection); wait until every request already
  // read has been answered, or the deadline passes (false then); stop the I/O threads.
  void StopAccepting();
  bool Drain(std::chrono::steady_clock::time_point deadline);
  void Stop();
  int64_t InFlight() const;       // requests read and not yet answered
  uint16_t port() const;          // the bound port (useful with port 0)
  uint16_t metrics_port() const;  // the bound metrics port, 0 if none

  class Impl;  // public so the connection sessions in http_server.cc can reach it

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace nereid::http
