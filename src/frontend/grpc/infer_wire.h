// The inference messages on the gRPC wire without copying tensor bytes: a ModelInferRequest is
// parsed from gRPC's received slices with its raw_input_contents left where they arrived, and a
// ModelInferResponse is sent as slices that reference the outputs' own buffers. Everything else in
// the messages goes through protobuf as usual.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "frontend/grpc/grpc_service.pb.h"
#include "request/inference_request.h"

namespace nereid::grpc_frontend {

// A received ModelInferRequest: the message without its raw_input_contents, and each raw input
// as a contiguous span into the received slices (or, when an input straddled two slices, into a
// gathered copy: from the pinned pool for 64 KiB and more when there are GPUs, so that a GPU
// instance copies it to the device straight from there). Keeps the bytes alive.
//
// The message is kept as gRPC's byte buffer, read through views of its slices (no references of
// our own): the last holder is often an instance thread, and only grpc_byte_buffer_destroy brings
// the execution context gRPC needs when freed slices go back to its memory quota. Dropping bare
// slice references there crashed gRPC 1.51 (ExecCtx::Run from the quota's reclaimer) once
// --grpc-memory-quota-bytes was under pressure.
struct ParsedInferRequest {
  inference::ModelInferRequest message;
  std::vector<std::string_view> raw;
  std::vector<MemoryLocation> raw_location;  // one per raw input

  grpc::ByteBuffer buffer;
  std::unique_ptr<grpc::ProtoBufferReader> reader;  // declared after 'buffer': destroyed first
  std::vector<std::string_view> pieces;             // the buffer's slices, in order
  std::vector<std::shared_ptr<const void>> gathered;
};
StatusOr<std::shared_ptr<ParsedInferRequest>> ParseInferRequest(const grpc::ByteBuffer& buffer);

// Serializes 'header' (a ModelInferResponse without raw_output_contents) followed by one
// raw_output_contents entry per output of 'response' (empty for outputs written to shared memory).
// With 'as_stream' the result is a ModelStreamInferResponse wrapping it.
void SerializeInferResponse(const inference::ModelInferResponse& header,
                            const InferenceResponse& response, bool as_stream,
                            grpc::ByteBuffer* out);

}  // namespace nereid::grpc_frontend
