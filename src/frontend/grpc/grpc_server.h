// GrpcServer: inference.GRPCInferenceService (Triton's gRPC protocol) on the gRPC callback API,
// plus grpc.health.v1.Health. It only translates: requests become InferenceRequests for the same
// core path the HTTP frontend uses, and responses come back through the completion callback on the
// instance thread, which finishes the RPC; no gRPC thread waits on a model.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "frontend/restricted_api.h"
#include "repository/model_repository.h"

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
  RestrictedApis restricted;  // --grpc-restricted-protocol
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
  GrpcServer(GrpcOptions options, ModelRepository* repository);
  ~GrpcServer();
  Status Start();
  // Stops accepting RPCs; those in flight may finish until 'deadline', then are cancelled.
  void Stop(std::chrono::system_clock::time_point deadline = std::chrono::system_clock::now());
  int port() const;

  class Impl;  // public so the reactors in grpc_server.cc can reach it

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace nereid::grpc_frontend
