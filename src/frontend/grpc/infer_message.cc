#include "frontend/grpc/infer_message.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "nereid/backend.h"
#include "nereid/backend_util.h"

namespace nereid::grpc_frontend {
namespace {

namespace pb = inference;

StatusOr<uint64_t> UintParameter(const pb::InferParameter& p, const std::string& name) {
  switch (p.parameter_choice_case()) {
    case pb::InferParameter::kUint64Param:
      return p.uint64_param();
    case pb::InferParameter::kInt64Param:
      if (p.int64_param() >= 0) return static_cast<uint64_t>(p.int64_param());
      break;
    default:
      break;
  }
  return InvalidArgument("parameter '" + name + "' must be a non-negative integer");
}

template <typename T, typename Repeated>
void AppendAs(const Repeated& values, std::vector<uint8_t>& out) {
  out.resize(values.size() * sizeof(T));
  for (int i = 0; i < values.size(); ++i) {
    const T v = static_cast<T>(values[i]);
    std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
  }
}

// Typed contents -> raw little-endian bytes. INT8/INT16 and UINT8/UINT16 travel widened, as in
// Triton.
// 'count' is how many elements were sent.
Status ContentsToBytes(const pb::InferTensorContents& c, DataType type, const std::string& name,
                       std::vector<uint8_t>& out, int64_t& count) {
  switch (type) {
    case DataType::kBool:
      AppendAs<uint8_t>(c.bool_contents(), out);
      break;
    case DataType::kInt8:
      AppendAs<int8_t>(c.int_contents(), out);
      break;
    case DataType::kInt16:
      AppendAs<int16_t>(c.int_contents(), out);
      break;
    case DataType::kInt32:
      AppendAs<int32_t>(c.int_contents(), out);
      break;
    case DataType::kInt64:
      AppendAs<int64_t>(c.int64_contents(), out);
      break;
    case DataType::kUint8:
      AppendAs<uint8_t>(c.uint_contents(), out);
      break;
    case DataType::kUint16:
      AppendAs<uint16_t>(c.uint_contents(), out);
      break;
    case DataType::kUint32:
      AppendAs<uint32_t>(c.uint_contents(), out);
      break;
    case DataType::kUint64:
      AppendAs<uint64_t>(c.uint64_contents(), out);
      break;
    case DataType::kFp32:
      AppendAs<float>(c.fp32_contents(), out);
      break;
    case DataType::kFp64:
      AppendAs<double>(c.fp64_contents(), out);
      break;
    case DataType::kBytes:
      for (const std::string& s : c.bytes_contents()) backend::AppendBytesElement(out, s);
      count = c.bytes_contents_size();
      return Status::Ok();
    default:
      return InvalidArgument("input '" + name + "': " + std::string(DataTypeName(type)) +
                             " data must be sent in raw_input_contents");
  }
  count = static_cast<int64_t>(out.size() / DataTypeSize(type));
  return Status::Ok();
}

// The shared-memory parameters of an input or output, or nothing when the tensor does not use
// shared memory.
using ParameterMap = google::protobuf::Map<std::string, pb::InferParameter>;
StatusOr<std::optional<SharedMemoryReference>> SharedMemoryParams(const ParameterMap& params,
                                                                  const std::string& what) {
  auto region = params.find("shared_memory_region");
  if (region == params.end()) return std::optional<SharedMemoryReference>();
  if (region->second.parameter_choice_case() != pb::InferParameter::kStringParam)
    return InvalidArgument(what + ": 'shared_memory_region' must be a string");
  SharedMemoryReference ref;
  ref.region = region->second.string_param();
  auto size = params.find("shared_memory_byte_size");
  if (size == params.end())
    return InvalidArgument(what + " uses shared memory region '" + ref.region +
                           "' but gives no 'shared_memory_byte_size'");
  ASSIGN_OR_RETURN(ref.byte_size, UintParameter(size->second, "shared_memory_byte_size"));
  if (auto o = params.find("shared_memory_offset"); o != params.end()) {
    ASSIGN_OR_RETURN(ref.offset, UintParameter(o->second, "shared_memory_offset"));
  }
  return std::optional<SharedMemoryReference>(std::move(ref));
}

// One entry of the request's parameters: those the server acts on (Triton's rules and messages
// for this protocol), or a parameter for the backend.
Status RequestParameterEntry(const std::string& key, const pb::InferParameter& value,
                             RequestDescription* d) {
  using P = pb::InferParameter;
  const auto type = value.parameter_choice_case();
  auto wrong_type = [&](const char* expected) {
    return InvalidArgument("invalid value type for '" + key + "' parameter, expected " + expected +
                           ".");
  };
  switch (ClassifyRequestParameter(key, InferEndpoint::kGrpcUnary)) {
    case ServerParameter::kSequenceId: {
      CorrelationId& id = d->correlation_id;
      id.present = true;
      if (type == P::kInt64Param) {
        id.number = static_cast<uint64_t>(value.int64_param());
      } else if (type == P::kStringParam) {
        id.is_text = true;
        id.text = value.string_param();
      } else {
        return wrong_type("int64_param or string_param");
      }
      return Status::Ok();
    }
    case ServerParameter::kSequenceStart:
    case ServerParameter::kSequenceEnd:
      if (type != P::kBoolParam) return wrong_type("bool_param");
      if (value.bool_param())
        d->flags |= key == "sequence_start" ? NEREID_REQUEST_FLAG_SEQUENCE_START
                                            : NEREID_REQUEST_FLAG_SEQUENCE_END;
      return Status::Ok();
    case ServerParameter::kPriority:
      if (type == P::kInt64Param && value.int64_param() < 0)
        return InvalidArgument("invalid value for 'priority', expected value >= 0.");
      if (type == P::kInt64Param)
        d->priority = static_cast<uint64_t>(value.int64_param());
      else if (type == P::kUint64Param)
        d->priority = value.uint64_param();
      else
        return wrong_type("int64_param or uint64_param");
      return Status::Ok();
    case ServerParameter::kTimeout:
      if (type != P::kInt64Param) return wrong_type("int64_param");
      if (value.int64_param() < 0)
        return InvalidArgument("invalid value for 'timeout', expected value >= 0.");
      d->timeout_us = static_cast<uint64_t>(value.int64_param());
      return Status::Ok();
    case ServerParameter::kFrontendOption:  // read by the stream itself
      return Status::Ok();
    case ServerParameter::kReservedPrefix: {
      std::string allowed;
      for (std::string_view option : kFrontendOptions) allowed += " " + std::string(option);
      return InvalidArgument(
          "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
          "following keys starting with 'triton_' are allowed:" +
          allowed);
    }
    case ServerParameter::kBinaryDataOutput:  // (HTTP's)
    case ServerParameter::kBackend:
      break;
  }
  RequestParameter p;
  p.name = key;
  switch (type) {
    case P::kBoolParam:
      p.type = RequestParameter::Type::kBool;
      p.bool_value = value.bool_param();
      break;
    case P::kInt64Param:
      p.type = RequestParameter::Type::kInt64;
      p.int_value = value.int64_param();
      break;
    case P::kDoubleParam:
      p.type = RequestParameter::Type::kDouble;
      p.double_value = value.double_param();
      break;
    case P::kStringParam:
      p.type = RequestParameter::Type::kString;
      p.string_value = value.string_param();
      break;
    default:
      return wrong_type("int64_param, bool_param, or string_param");
  }
  d->parameters.push_back(std::move(p));
  return Status::Ok();
}

// A count parameter as a number: a value of another type reads as 0 (refused as not positive).
int64_t CountParameter(const pb::InferParameter& p) {
  if (p.parameter_choice_case() == pb::InferParameter::kInt64Param) return p.int64_param();
  if (p.parameter_choice_case() == pb::InferParameter::kUint64Param)
    return static_cast<int64_t>(
        std::min<uint64_t>(p.uint64_param(), std::numeric_limits<int64_t>::max()));
  return 0;
}

}  // namespace

StatusOr<RequestDescription> Describe(std::shared_ptr<ParsedInferRequest> parsed) {
  const pb::ModelInferRequest& message = parsed->message;
  RequestDescription d;
  d.model_name = message.model_name();
  d.id = message.id();
  d.binary_outputs_by_default = true;
  for (const auto& [key, value] : message.parameters())
    RETURN_IF_ERROR(RequestParameterEntry(key, value, &d));
  // raw_input_contents go, in order, to the inputs that are neither in shared memory nor given
  // as contents (Triton's rule; tritonclient sends none for a shared-memory input).
  const auto& raw = parsed->raw;
  size_t next_raw = 0;
  bool mixed = false;
  for (int i = 0; i < message.inputs_size(); ++i) {
    const auto& t = message.inputs(i);
    InputDescription in;
    in.name = t.name();
    in.datatype = t.datatype();
    in.shape.assign(t.shape().begin(), t.shape().end());
    ASSIGN_OR_RETURN(in.shared_memory,
                     SharedMemoryParams(t.parameters(), "input '" + in.name + "'"));
    if (t.has_contents()) {
      const DataType type = DataTypeFromName(t.datatype());
      std::vector<uint8_t> bytes;
      if (type != DataType::kInvalid)  // an unknown datatype is the builder's to refuse
        RETURN_IF_ERROR(ContentsToBytes(t.contents(), type, in.name, bytes, in.typed_count));
      in.typed = std::move(bytes);
      // Contents beside raw_input_contents: the builder refuses the mix with Triton's message.
      if (!raw.empty()) {
        in.raw = std::string_view();  // marks the mix
        mixed = true;
      }
    } else if (!in.shared_memory) {
      if (next_raw == raw.size())
        return InvalidArgument("unable to find data for input tensor '" + in.name +
                               "' for model '" + message.model_name() + "' in request.");
      in.raw = raw[next_raw];
      in.raw_location = parsed->raw_location[next_raw];
      ++next_raw;
    }
    d.inputs.push_back(std::move(in));
  }
  if (!mixed && next_raw != raw.size())
    return InvalidArgument("the request has " + std::to_string(raw.size()) +
                           " raw_input_contents but only " + std::to_string(next_raw) +
                           " of its inputs take raw data");
  for (const auto& o : message.outputs()) {
    OutputDescription out;
    out.name = o.name();
    if (auto it = o.parameters().find("classification"); it != o.parameters().end())
      out.classification = CountParameter(it->second);
    ASSIGN_OR_RETURN(out.shared_memory,
                     SharedMemoryParams(o.parameters(), "output '" + out.name + "'"));
    d.outputs.push_back(std::move(out));
  }
  d.payload = std::move(parsed);
  return d;
}

void FillResponseHeader(const InferenceResponse& r, pb::ModelInferResponse* out) {
  out->set_model_name(r.model_name);
  out->set_model_version(std::to_string(r.model_version));
  out->set_id(r.id);
  for (const auto& p : r.parameters) {
    pb::InferParameter& v = (*out->mutable_parameters())[p.name];
    switch (p.type) {
      case RequestParameter::Type::kBool:
        v.set_bool_param(p.bool_value);
        break;
      case RequestParameter::Type::kInt64:
        v.set_int64_param(p.int_value);
        break;
      case RequestParameter::Type::kDouble:
        v.set_double_param(p.double_value);
        break;
      case RequestParameter::Type::kString:
        v.set_string_param(p.string_value);
        break;
    }
  }
  for (const auto& o : r.outputs) {
    auto* t = out->add_outputs();
    t->set_name(o.name);
    t->set_datatype(std::string(DataTypeName(o.datatype)));
    for (int64_t d : o.shape) t->add_shape(d);
  }
}

}  // namespace nereid::grpc_frontend
