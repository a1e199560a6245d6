#include "server/request_builder.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <memory>
#include <string_view>
#include <vector>

#include "nereid/backend_util.h"
#include "runtime/model.h"

namespace nereid {
namespace {

constexpr size_t kMaxCorrelationIdLength = 128;  // Triton's bound on a string id
// Asks for the request's energy in its response (docs/energy.md).
constexpr const char* kEnergyParameter = "nereid.energy";

// Triton spells this one "Output" over HTTP and "output" over gRPC.
std::string OutputWord(InferEndpoint endpoint) {
  return endpoint == InferEndpoint::kHttp ? "Output" : "output";
}

StatusOr<Buffer> Resolve(const SharedMemoryReference& ref, const SharedMemoryRegistry* shm) {
  if (shm == nullptr) return Unsupported("shared memory is not available on this endpoint");
  return shm->Get(ref.region, ref.offset, ref.byte_size);
}

// A body that is the model's only input, raw (Inference-Header-Content-Length: 0), shaped as
// Triton shapes it: the config's dims behind a batch dimension of 1, the one variable dimension
// taken from the size; BYTES only for a single element, the body being that element. Where the
// dims have no variable dimension, Nereid also takes the batch dimension from the size (Triton
// refuses such a body unless it holds exactly one row).
Status ShapeWholeBody(const Buffer& body, const inference::ModelConfig& config,
                      InferenceRequest* r) {
  if (config.input_size() != 1)
    return InvalidArgument("Raw request must only have 1 input (found 1) to be deduced but got " +
                           std::to_string(config.input_size()) + " inputs in '" + config.name() +
                           "' model configuration");
  const auto& spec = config.input(0);
  InferInput in;
  in.name = spec.name();
  in.datatype = static_cast<DataType>(spec.data_type());
  const bool batching = config.max_batch_size() > 0;
  if (batching) in.shape.push_back(1);
  in.shape.insert(in.shape.end(), spec.dims().begin(), spec.dims().end());
  const auto variable = std::count(in.shape.begin(), in.shape.end(), -1);
  if (variable > 1)
    return InvalidArgument("The shape of the raw input '" + in.name +
                           "' can not be deduced because there are more than one variable-sized "
                           "dimension");
  if (in.datatype == DataType::kBytes) {
    if (variable != 0 || ElementCount(in.shape) != 1)
      return InvalidArgument("For BYTE datatype raw input '" + in.name +
                             "', the model must have input shape [1]");
    if (body.size() > std::numeric_limits<uint32_t>::max())
      return InvalidArgument("raw BYTES input '" + in.name + "' is larger than 4 GiB");
    // The one element, with the length prefix every BYTES tensor carries.
    std::vector<uint8_t> bytes;
    bytes.reserve(4 + body.size());
    backend::AppendBytesElement(
        bytes, std::string_view(reinterpret_cast<const char*>(body.data()), body.size()));
    auto element = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
    in.Borrow(element->data(), element->size(), MemoryLocation{}, element);
  } else {
    if (batching && variable == 0) in.shape[0] = -1;  // the batch dimension from the size
    const size_t element_size = DataTypeSize(in.datatype);
    if (element_size == 0 || body.size() % element_size != 0 ||
        !FillVariableDimension(in.shape, static_cast<int64_t>(body.size() / element_size)))
      return InvalidArgument("raw binary request of " + std::to_string(body.size()) +
                             " bytes does not fit input '" + in.name + "'");
    in.Borrow(body.data(), body.size(), body.location(), nullptr);
  }
  r->inputs.push_back(std::move(in));
  r->binary_outputs_by_default = true;
  return Status::Ok();
}

Status BuildInput(InputDescription& d, const SharedMemoryRegistry* shm, InferenceRequest* r) {
  InferInput in;
  in.name = std::move(d.name);
  in.datatype = DataTypeFromName(d.datatype);
  if (in.datatype == DataType::kInvalid)
    return InvalidArgument("input '" + in.name + "' has unknown datatype '" + d.datatype + "'");
  for (int64_t dim : d.shape)
    if (dim < 0)
      return InvalidArgument("input '" + in.name +
                             "': shape entries must be non-negative integers");
  in.shape = std::move(d.shape);
  if (d.shared_memory) {
    if (d.raw || d.typed)
      return InvalidArgument("input '" + in.name +
                             "' can't set 'shared_memory_region' together with tensor data");
    ASSIGN_OR_RETURN(Buffer region, Resolve(*d.shared_memory, shm));
    in.Borrow(region.data(), region.size(), region.location(), region.owner());
  } else if (d.raw && d.typed) {
    // Triton's rule and message (a gRPC input with both contents and raw_input_contents).
    return InvalidArgument(
        "contents field must not be specified when using raw_input_contents "
        "for '" +
        in.name + "' for model '" + r->model_name + "'");
  } else if (d.raw) {
    // The request keeps the description's payload (and so the bytes) alive.
    in.Borrow(reinterpret_cast<const uint8_t*>(d.raw->data()), d.raw->size(), d.raw_location,
              nullptr);
  } else if (d.typed) {
    if (d.typed_count >= 0) {
      if (std::string overflow = SizeOverflow(in.name, in.datatype, in.shape); !overflow.empty())
        return InvalidArgument(overflow);
      const int64_t expected = ElementCount(in.shape);
      if (d.typed_count != expected)
        return InvalidArgument("unexpected number of elements for input '" + in.name + "': shape " +
                               ShapeString(in.shape) + " needs " + std::to_string(expected) +
                               ", got " + std::to_string(d.typed_count));
    }
    in.Own(std::move(*d.typed));
  }
  // No data at all: the decoder said why (each wire has its own words for what is missing), or
  // the size check of Enqueue refuses the empty tensor.
  r->inputs.push_back(std::move(in));
  return Status::Ok();
}

Status BuildOutput(OutputDescription& d, bool binary_by_default, InferEndpoint endpoint,
                   const SharedMemoryRegistry* shm, InferenceRequest* r) {
  RequestedOutput out;
  out.name = std::move(d.name);
  out.binary = d.binary.value_or(binary_by_default);
  if (d.classification) {
    if (*d.classification <= 0 || *d.classification > std::numeric_limits<uint32_t>::max())
      return InvalidArgument("output '" + out.name +
                             "': classification must be a positive integer");
    out.class_count = static_cast<uint32_t>(*d.classification);
  }
  if (d.shared_memory) {
    if (d.binary.value_or(false))
      return InvalidArgument(OutputWord(endpoint) +
                             " can't set both 'shared_memory_region' and 'binary_data'");
    if (d.classification)
      return InvalidArgument(OutputWord(endpoint) +
                             " can't set both 'shared_memory_region' and 'classification'");
    ASSIGN_OR_RETURN(out.destination, Resolve(*d.shared_memory, shm));
    out.has_destination = true;
    out.binary = false;
  }
  r->outputs.push_back(std::move(out));
  return Status::Ok();
}

}  // namespace

StatusOr<int64_t> ParseModelVersion(std::string_view text) {
  if (text.empty()) return int64_t{-1};
  int64_t version = -1;
  auto r = std::from_chars(text.data(), text.data() + text.size(), version);
  // Triton's words for each case.
  if (r.ec != std::errc() || r.ptr != text.data() + text.size())
    return InvalidArgument("failed to get model version from specified version string '" +
                           std::string(text) + "', version should be an integral value > 0");
  if (version < 0)
    return InvalidArgument("invalid model version specified '" + std::string(text) +
                           "' , version should be an integral value > 0");
  return version;
}

ServerParameter ClassifyRequestParameter(std::string_view key, InferEndpoint endpoint) {
  static constexpr std::pair<std::string_view, ServerParameter> kTable[] = {
      {"sequence_id", ServerParameter::kSequenceId},
      {"sequence_start", ServerParameter::kSequenceStart},
      {"sequence_end", ServerParameter::kSequenceEnd},
      {"priority", ServerParameter::kPriority},
      {"timeout", ServerParameter::kTimeout},
  };
  for (const auto& [name, kind] : kTable)
    if (key == name) return kind;
  const bool http = endpoint == InferEndpoint::kHttp;
  if (http && key == "binary_data_output") return ServerParameter::kBinaryDataOutput;
  if (key.substr(0, 7) != "triton_") return ServerParameter::kBackend;
  if (!http)
    for (std::string_view option : kFrontendOptions)
      if (key == option) return ServerParameter::kFrontendOption;
  return ServerParameter::kReservedPrefix;
}

Status CheckEndpoint(const Model& model, InferEndpoint endpoint) {
  if (!model.decoupled()) return Status::Ok();
  switch (endpoint) {
    case InferEndpoint::kHttp:
      return Unsupported("HTTP end point doesn't support models with decoupled transaction policy");
    case InferEndpoint::kGrpcUnary:
      return Unsupported("ModelInfer RPC doesn't support models with decoupled transaction policy");
    case InferEndpoint::kGrpcStream:
      break;
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<InferenceRequest>> BuildInferenceRequest(
    RequestDescription d, InferEndpoint endpoint, const inference::ModelConfig& config,
    const SharedMemoryRegistry* shm) {
  auto r = std::make_unique<InferenceRequest>();
  r->times.received_ns = SteadyNowNs();
  r->model_name = config.name();
  r->id = std::move(d.id);
  r->binary_outputs_by_default = d.binary_outputs_by_default;
  if (d.correlation_id.is_text && d.correlation_id.text.size() > kMaxCorrelationIdLength)
    return Unsupported("string correlation ID cannot be longer than " +
                       std::to_string(kMaxCorrelationIdLength) + " characters");
  r->priority = d.priority;
  r->timeout_us = d.timeout_us;
  r->flags = d.flags;
  r->correlation_id = std::move(d.correlation_id);
  for (auto it = d.parameters.begin(); it != d.parameters.end();) {
    if (it->name != kEnergyParameter) {
      ++it;
      continue;
    }
    if (it->type != RequestParameter::Type::kBool)
      return InvalidArgument(std::string("parameter '") + kEnergyParameter + "' must be a boolean");
    r->report_energy = it->bool_value;
    it = d.parameters.erase(it);  // the server's, not the backend's
  }
  r->parameters = std::move(d.parameters);
  if (d.whole_body_input) {
    RETURN_IF_ERROR(ShapeWholeBody(*d.whole_body_input, config, r.get()));
  } else {
    r->inputs.reserve(d.inputs.size());
    for (InputDescription& in : d.inputs) RETURN_IF_ERROR(BuildInput(in, shm, r.get()));
  }
  r->outputs.reserve(d.outputs.size());
  for (OutputDescription& out : d.outputs)
    RETURN_IF_ERROR(BuildOutput(out, r->binary_outputs_by_default, endpoint, shm, r.get()));
  r->payload = std::move(d.payload);
  return r;
}

}  // namespace nereid
