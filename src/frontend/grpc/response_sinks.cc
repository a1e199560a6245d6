#include "frontend/grpc/response_sinks.h"

#include <exception>
#include <string>

#include "frontend/grpc/grpc_api.h"
#include "frontend/grpc/infer_message.h"
#include "frontend/grpc/infer_wire.h"

namespace nereid::grpc_frontend {

namespace pb = inference;

void UnarySink::Finish(grpc::ServerUnaryReactor* reactor, grpc::ByteBuffer* out,
                       const InferenceResponse& result, trace::Trace* trace) {
  TracedSend send(trace);
  if (!result.status.ok()) return reactor->Finish(ToGrpc(result.status));
  try {
    pb::ModelInferResponse header;
    FillResponseHeader(result, &header);
    SerializeInferResponse(header, result, /*as_stream=*/false, out);
  } catch (const std::exception& e) {  // out of memory serializing: the call still finishes
    return reactor->Finish(ToGrpc(Internal(std::string("serializing the response: ") + e.what())));
  }
  reactor->Finish(grpc::Status::OK);
}

}  // namespace nereid::grpc_frontend
