// The one place an inference request is put together. A frontend decodes only its wire (JSON and
// binary sections, a protobuf message) into a RequestDescription: names, datatypes and shapes as
// sent, each tensor's data as the wire carried it (raw bytes, typed values the decoder converted,
// or a shared-memory reference), parameters, requested outputs. BuildInferenceRequest does the
// rest for every protocol: the endpoint's decoupled rule, the checks of datatypes and shapes,
// the correlation id's bounds, shared-memory resolution, the rules on mixing data, shared memory
// and classification, and the requested outputs. Model::Enqueue then checks the request against the
// model's config.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "config/model_config.h"
#include "memory/buffer.h"
#include "memory/shared_memory.h"
#include "request/inference_request.h"

namespace nereid {

class Model;

// A tensor placed in a registered shared-memory region (its parameters shared_memory_region,
// shared_memory_offset, shared_memory_byte_size).
struct SharedMemoryReference {
  std::string region;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

struct InputDescription {
  std::string name;
  std::string datatype;        // as sent
  std::vector<int64_t> shape;  // as sent
  // The data, in at most one form (a mix is refused):
  // raw little-endian bytes where the wire left them (the binary extension, raw_input_contents),
  // kept alive by the description's payload;
  std::optional<std::string_view> raw;
  MemoryLocation raw_location;
  // typed values (JSON 'data', gRPC 'contents') the decoder converted to bytes, and how many
  // elements were sent;
  std::optional<std::vector<uint8_t>> typed;
  int64_t typed_count = -1;  // -1: the wire does not count them (checked by size later)
  // or a shared-memory region.
  std::optional<SharedMemoryReference> shared_memory;
};

struct OutputDescription {
  std::string name;
  std::optional<bool> binary;  // the client's binary_data, when it said
  // The classification parameter as a number (a decoder maps a value of the wrong type to 0,
  // refused here like any count that is not positive).
  std::optional<int64_t> classification;
  std::optional<SharedMemoryReference> shared_memory;
};

struct RequestDescription {
  std::string model_name;
  int64_t model_version = -1;  // -1: the newest ready version
  std::string id;
  std::vector<RequestParameter> parameters;  // those for the backend, in order
  // The parameters the server acts on, read by the decoder under its wire's rules (Triton checks
  // their types with different messages per protocol).
  uint64_t priority = 0;
  uint64_t timeout_us = 0;
  uint32_t flags = 0;  // NEREID_REQUEST_FLAG_SEQUENCE_START / _END
  CorrelationId correlation_id;
  std::vector<InputDescription> inputs;
  std::vector<OutputDescription> outputs;
  bool binary_outputs_by_default = false;  // outputs not named, or named without binary_data
  // A body that is one raw tensor for a model with a single input (HTTP's
  // Inference-Header-Content-Length: 0): shaped from the model's config.
  std::optional<Buffer> whole_body_input;
  std::shared_ptr<const void> payload;  // keeps the raw bytes alive
};

// Where a request came in: decides whether a decoupled model may answer it.
enum class InferEndpoint { kHttp, kGrpcUnary, kGrpcStream };

// The request parameters the server acts on itself and never passes to a backend: one table for
// both protocols, each frontend reading the values under its own wire's types and messages
// (Triton's differ per protocol).
enum class ServerParameter {
  kBackend,           // not the server's: passed to the backend
  kSequenceId,        // the correlation id (a number or a string)
  kSequenceStart,     // bool
  kSequenceEnd,       // bool
  kPriority,          // the schedule policy extension
  kTimeout,           // microseconds
  kBinaryDataOutput,  // HTTP only: outputs not named default to binary
  kFrontendOption,    // a "triton_" key the frontend reads itself (kFrontendOptions)
  kReservedPrefix,    // any other "triton_" key: refused
};
// The "triton_" keys a client may send (gRPC only; Triton's list).
inline constexpr std::string_view kFrontendOptions[] = {"triton_enable_empty_final_response"};
// What 'key' is in a request sent to 'endpoint'.
ServerParameter ClassifyRequestParameter(std::string_view key, InferEndpoint endpoint);

// A model version as a client writes it ("" for the newest: -1), or INVALID_ARGUMENT.
StatusOr<int64_t> ParseModelVersion(std::string_view text);

// Ok when 'model' can answer a request sent to 'endpoint' (a decoupled model only on a stream).
Status CheckEndpoint(const Model& model, InferEndpoint endpoint);

// The request 'description' asks of the model configured by 'config', sent to 'endpoint', its
// shared-memory tensors resolved in 'shm' (null: the extension is not available). Received now;
// the caller routes it (model, version) and Model::Enqueue validates it against the config.
StatusOr<std::unique_ptr<InferenceRequest>> BuildInferenceRequest(
    RequestDescription description, InferEndpoint endpoint, const inference::ModelConfig& config,
    const SharedMemoryRegistry* shm);

}  // namespace nereid
