// Triton's gRPC inference messages, translated: a received ModelInferRequest (infer_wire.h) into
// the RequestDescription the server builds requests from, under this protocol's own rules (typed
// contents, the parameters the server acts on and their messages, shared-memory references), and an
// InferenceResponse into the ModelInferResponse header its tensors follow.
#pragma once

#include <memory>

#include "common/status.h"
#include "frontend/grpc/grpc_service.pb.h"
#include "frontend/grpc/infer_wire.h"
#include "request/inference_request.h"
#include "server/request_builder.h"

namespace nereid::grpc_frontend {

// ModelInferRequest -> the request description (the wire only; the server's request builder
// does the rest). Raw input data is not copied: it points into 'parsed', which the description
// keeps alive.
StatusOr<RequestDescription> Describe(std::shared_ptr<ParsedInferRequest> parsed);

// InferenceResponse -> the ModelInferResponse header (names, types, shapes). The bytes travel as
// raw_output_contents, one per output as Triton sends them, appended by SerializeInferResponse
// without a copy (empty for outputs written to shared memory).
void FillResponseHeader(const InferenceResponse& r, inference::ModelInferResponse* out);

}  // namespace nereid::grpc_frontend
