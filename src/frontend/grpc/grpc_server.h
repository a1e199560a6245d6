// GrpcServer: inference.GRPCInferenceService (Triton's gRPC protocol) on the gRPC callback API,
// plus grpc.health.v1.Health. It only translates: requests become InferenceRequests for the same
// core path the HTTP frontend uses, and responses come back through the completion callback on the
// instance thread, which finishes the RPC; no gRPC thread waits on a model.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "frontend/grpc/listener_watchdog.h"
#include "frontend/restricted_api.h"
#include "server/server_api.h"

namespace grpc {
class ServerBuilder;
}

namespace nereid::grpc_frontend {

struct GrpcOptions {
  std::string address = "0.0.0.0";
  int port = 8001;  // 0: any free port
  int threads = 0;  // gRPC's threads for callbacks; 0: gRPC's default
  // Largest request message gRPC will read (--grpc-max-input-size); larger ones are refused with
  // RESOURCE_EXHAUSTED before they are buffered whole. Responses are not limited.
  int64_t max_input_size = 64ll << 20;
  // --grpc-memory-quota-bytes: gRPC's ResourceQuota for the whole server. Under pressure gRPC
  // shrinks the windows it offers its peers, so the requests clients send ahead on streams Nereid
  // is not reading (and what else gRPC buffers) stay within about this much.
  int64_t memory_quota = 256ll << 20;
  RestrictedApis restricted;  // --grpc-restricted-protocol
  // --reuse-grpc-port (Triton's flag, default false): let several servers listen on the port
  // (SO_REUSEPORT, connections shared among them). Off, a second server on a port in use fails
  // to start, as it does for HTTP.
  bool reuse_port = false;
  // TLS (Triton's --grpc-use-ssl* flags): PEM file paths, read at Start.
  struct Ssl {
    bool use_ssl = false;
    bool mutual = false;  // client certificates required and verified against root_cert
    std::string server_cert, server_key, root_cert;
  } ssl;
};

// The message limits and channel arguments Nereid's gRPC server runs with (benchmarks that compare
// gRPC server APIs apply the same ones).
void ApplyChannelArguments(grpc::ServerBuilder& builder, const GrpcOptions& options = {});

class GrpcServer {
 public:
  GrpcServer(GrpcOptions options, ServerApi* server);
  ~GrpcServer();
  // Listens and serves; also starts the listener watchdog (listener_watchdog.h).
  Status Start();
  // Stops accepting RPCs; those in flight may finish until 'deadline', then are cancelled.
  void Stop(std::chrono::system_clock::time_point deadline = std::chrono::system_clock::now());
  // grpc.health.v1's status for the whole server (SERVING from Start; NOT_SERVING while draining).
  void SetServing(bool serving);
  int port() const { return port_; }

  class Impl;  // public so the reactors in grpc_server.cc can reach it

 private:
  // Called by the listener watchdog when gRPC has stopped accepting: a new server on the same
  // port (calls in flight are cancelled); false when it does not listen.
  bool Restart();

  GrpcOptions options_;
  ServerApi* api_;
  int port_ = 0;
  std::mutex mu_;  // guards impl_ (a restart against Stop) and stopping_
  bool stopping_ = false;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<ListenerWatchdog> watchdog_;
};

}  // namespace nereid::grpc_frontend
