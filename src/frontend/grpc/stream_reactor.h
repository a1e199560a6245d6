// ModelStreamInfer: one bidirectional stream's reactor, which reads requests as they come,
// enqueues each through the server and writes each response as it completes, bounded for a
// client that does not read. GrpcServer::Impl is its StreamHost.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "common/status.h"
#include "frontend/grpc/infer_wire.h"
#include "server/server_api.h"

namespace nereid::grpc_frontend {

// An open ModelStreamInfer stream, as the server sees it at shutdown.
class OpenStream {
 public:
  // No new requests; once those in flight are answered and written, the stream is closed (at once
  // when it is idle), so that an idle client's stream does not hold the shutdown to its deadline.
  virtual void Drain() = 0;

 protected:
  ~OpenStream() = default;
};

// What a stream needs of the server it belongs to.
class StreamHost {
 public:
  // Streams register while open (from their start to OnDone); a server shutting down drains them.
  virtual void AddStream(OpenStream* stream) = 0;
  virtual void RemoveStream(OpenStream* stream) = 0;
  // The request a received message asks for, to 'sink' (ServerApi::Infer).
  virtual Status Infer(std::shared_ptr<ParsedInferRequest> parsed, const RequestContext& context,
                       std::shared_ptr<ResponseSink> sink) = 0;

 protected:
  ~StreamHost() = default;
};

// A new stream on 'ctx' (it deletes itself when done).
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartStream(
    StreamHost* host, grpc::CallbackServerContext* ctx);
// A stream refused before its first read: finishes at once with 'status'.
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* RefuseStream(
    const grpc::Status& status);

}  // namespace nereid::grpc_frontend
