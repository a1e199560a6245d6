// Triton's gRPC protocol apart from inference: its status table, and the answer to each unary
// RPC from the server's API (a request message in, a response message and a Status out), in
// Triton's messages. No gRPC calls here: GrpcServer::Impl checks access, calls one of these and
// finishes the RPC.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>

#include "common/status.h"
#include "frontend/grpc/grpc_service.pb.h"
#include "request/model_info.h"
#include "server/server_api.h"

namespace nereid::grpc_frontend {

// Triton's gRPC code for each Status code: the one table of this protocol.
grpc::StatusCode GrpcCodeFor(Status::Code code);
grpc::Status ToGrpc(const Status& s);

// A message into gRPC's buffer (the server's own replies; the inference messages go through
// infer_wire).
void Serialize(const google::protobuf::Message& message, grpc::ByteBuffer* out);

// The request context of a call read from 'ctx' (its "traceparent" metadata, if any); gRPC hands
// over whole messages, so the read began when the handler did ('read_start').
RequestContext CallContext(grpc::CallbackServerContext* ctx, InferEndpoint endpoint,
                           uint64_t read_start);

// ---- the unary RPCs' answers ----
void AnswerServerMetadata(const ServerApi& api, inference::ServerMetadataResponse* response);
Status AnswerModelMetadata(const ServerApi& api, const inference::ModelMetadataRequest& request,
                           inference::ModelMetadataResponse* response);
Status AnswerModelConfig(const ServerApi& api, const inference::ModelConfigRequest& request,
                         inference::ModelConfigResponse* response);
// The statistics extension.
Status AnswerModelStatistics(const ServerApi& api, const inference::ModelStatisticsRequest& request,
                             inference::ModelStatisticsResponse* response);
void AnswerRepositoryIndex(const ServerApi& api, const inference::RepositoryIndexRequest& request,
                           inference::RepositoryIndexResponse* response);
// A load request's parameters: "config" (a JSON string) and "file:<path>" (the file's bytes);
// 'bytes' is what they hold together.
Status ReadLoadRequest(const inference::RepositoryModelLoadRequest& request, std::string* config,
                       ModelFiles* files, size_t* bytes);
Status AnswerSystemSharedMemoryStatus(ServerApi& api,
                                      const inference::SystemSharedMemoryStatusRequest& request,
                                      inference::SystemSharedMemoryStatusResponse* response);
Status AnswerCudaSharedMemoryStatus(ServerApi& api,
                                    const inference::CudaSharedMemoryStatusRequest& request,
                                    inference::CudaSharedMemoryStatusResponse* response);
// The trace extension: a setting with no values is cleared (back to the global, or start-up,
// value).
Status AnswerTraceSetting(ServerApi& api, const inference::TraceSettingRequest& request,
                          inference::TraceSettingResponse* response);
// The logging extension: applies the request's settings, answers with those in force.
Status AnswerLogSettings(ServerApi& api, const inference::LogSettingsRequest& request,
                         inference::LogSettingsResponse* response);

}  // namespace nereid::grpc_frontend
