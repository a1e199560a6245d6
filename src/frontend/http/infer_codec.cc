#include "frontend/http/infer_codec.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "nereid/backend.h"
#include "nereid/backend_util.h"

namespace nereid::http {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

template <typename T>
void Put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

template <typename T>
Status PutInteger(const element& v, std::vector<uint8_t>& out, const std::string& input) {
  bool ok = false;
  if (v.type() == element_type::INT64) {
    const int64_t x = int64_t(v);
    if constexpr (std::is_signed_v<T>)
      ok = x >= std::numeric_limits<T>::min() && x <= std::numeric_limits<T>::max();
    else
      ok = x >= 0 && static_cast<uint64_t>(x) <= std::numeric_limits<T>::max();
    if (ok) Put<T>(out, static_cast<T>(x));
  } else if (v.type() == element_type::UINT64) {
    const uint64_t x = uint64_t(v);
    ok = x <= static_cast<uint64_t>(std::numeric_limits<T>::max());
    if (ok) Put<T>(out, static_cast<T>(x));
  }
  if (!ok)
    return InvalidArgument("input '" + input +
                           "': a JSON value is not an integer in range of its datatype");
  return Status::Ok();
}

// Appends one JSON element of 'type' to 'out'.
Status PutElement(DataType type, const element& v, std::vector<uint8_t>& out,
                  const std::string& input) {
  switch (type) {
    case DataType::kBool:
      if (v.type() != element_type::BOOL)
        return InvalidArgument("input '" + input + "': BOOL data must be true or false");
      out.push_back(bool(v) ? 1 : 0);
      return Status::Ok();
    case DataType::kInt8:
      return PutInteger<int8_t>(v, out, input);
    case DataType::kInt16:
      return PutInteger<int16_t>(v, out, input);
    case DataType::kInt32:
      return PutInteger<int32_t>(v, out, input);
    case DataType::kInt64:
      return PutInteger<int64_t>(v, out, input);
    case DataType::kUint8:
      return PutInteger<uint8_t>(v, out, input);
    case DataType::kUint16:
      return PutInteger<uint16_t>(v, out, input);
    case DataType::kUint32:
      return PutInteger<uint32_t>(v, out, input);
    case DataType::kUint64:
      return PutInteger<uint64_t>(v, out, input);
    case DataType::kFp16:
    case DataType::kBf16:
    case DataType::kFp32:
    case DataType::kFp64: {
      double d;
      switch (v.type()) {
        case element_type::DOUBLE:
          d = double(v);
          break;
        case element_type::INT64:
          d = static_cast<double>(int64_t(v));
          break;
        case element_type::UINT64:
          d = static_cast<double>(uint64_t(v));
          break;
        default:
          return InvalidArgument("input '" + input + "': " + std::string(DataTypeName(type)) +
                                 " data must be numbers");
      }
      if (type == DataType::kFp64)
        Put<double>(out, d);
      else if (type == DataType::kFp32)
        Put<float>(out, static_cast<float>(d));
      else if (type == DataType::kFp16)
        Put<uint16_t>(out, FloatToHalf(static_cast<float>(d)));
      else
        Put<uint16_t>(out, FloatToBf16(static_cast<float>(d)));
      return Status::Ok();
    }
    case DataType::kBytes: {
      if (v.type() != element_type::STRING)
        return InvalidArgument("input '" + input + "': BYTES data must be strings");
      backend::AppendBytesElement(out, std::string_view(v));
      return Status::Ok();
    }
    default:
      return InvalidArgument("input '" + input + "': unsupported datatype");
  }
}

// Flattens (possibly nested) JSON arrays in row-major order.
Status Flatten(DataType type, const element& v, std::vector<uint8_t>& out, int64_t& count,
               const std::string& input, int depth) {
  if (depth > 100)  // Triton's limit and words
    return InvalidArgument("input '" + input +
                           "': JSON nesting depth exceeds maximum allowed limit (100)");
  if (v.type() == element_type::ARRAY) {
    for (element e : simdjson::dom::array(v))
      RETURN_IF_ERROR(Flatten(type, e, out, count, input, depth + 1));
    return Status::Ok();
  }
  ++count;
  return PutElement(type, v, out, input);
}

// The member 'key' of 'object' if present.
std::optional<element> Member(const element& object, std::string_view key) {
  element value;
  if (object.type() != element_type::OBJECT || object.at_key(key).get(value)) return std::nullopt;
  return value;
}

StatusOr<bool> BoolParam(const element& params, std::string_view key, bool fallback) {
  auto v = Member(params, key);
  if (!v) return fallback;
  if (v->type() != element_type::BOOL)
    return InvalidArgument("parameter '" + std::string(key) + "' must be a boolean");
  return bool(*v);
}

// The shared-memory parameters of an input or output ("shared_memory_region", "_offset",
// "_byte_size"), or nothing when the tensor does not use shared memory.
StatusOr<std::optional<SharedMemoryReference>> SharedMemoryParams(const element* params,
                                                                  const std::string& what) {
  if (params == nullptr) return std::optional<SharedMemoryReference>();
  auto region = Member(*params, "shared_memory_region");
  if (!region) return std::optional<SharedMemoryReference>();
  if (region->type() != element_type::STRING)
    return InvalidArgument(what + ": 'shared_memory_region' must be a string");
  SharedMemoryReference ref;
  ref.region = std::string(std::string_view(*region));
  if (!Member(*params, "shared_memory_byte_size"))
    return InvalidArgument(what + " uses shared memory region '" + ref.region +
                           "' but gives no 'shared_memory_byte_size'");
  ASSIGN_OR_RETURN(ref.byte_size, UintMember(*params, "shared_memory_byte_size"));
  ASSIGN_OR_RETURN(ref.offset, UintMember(*params, "shared_memory_offset"));
  return std::optional<SharedMemoryReference>(std::move(ref));
}

std::optional<uint64_t> AsUint(const element& v) {
  if (v.type() == element_type::UINT64) return uint64_t(v);
  if (v.type() == element_type::INT64 && int64_t(v) >= 0) return static_cast<uint64_t>(int64_t(v));
  return std::nullopt;
}

StatusOr<RequestParameter> Parameter(std::string_view key, const element& value);

// One member of the request's "parameters": those the server acts on (Triton's rules and
// messages for this protocol), or a parameter for the backend.
Status RequestParameterMember(std::string_view key, const element& value,
                              RequestDescription* request) {
  auto unparsable = [&](const char* expected) {
    return InvalidArgument("Unable to parse '" + std::string(key) + "': expected " + expected);
  };
  switch (ClassifyRequestParameter(key, InferEndpoint::kHttp)) {
    case ServerParameter::kSequenceId: {
      CorrelationId& id = request->correlation_id;
      id.present = true;
      if (auto n = AsUint(value)) {
        id.number = *n;
      } else if (value.type() == element_type::STRING) {
        id.is_text = true;
        id.text = std::string(std::string_view(value));
      } else {
        return unparsable("an unsigned integer or a string");
      }
      return Status::Ok();
    }
    case ServerParameter::kSequenceStart:
    case ServerParameter::kSequenceEnd:
    case ServerParameter::kBinaryDataOutput: {
      if (value.type() != element_type::BOOL) return unparsable("a boolean");
      const bool on = bool(value);
      if (key == "binary_data_output")
        request->binary_outputs_by_default = on;
      else if (on)
        request->flags |= key == "sequence_start" ? NEREID_REQUEST_FLAG_SEQUENCE_START
                                                  : NEREID_REQUEST_FLAG_SEQUENCE_END;
      return Status::Ok();
    }
    case ServerParameter::kPriority:
    case ServerParameter::kTimeout: {
      auto n = AsUint(value);
      if (!n) return unparsable("a non-negative integer");
      (key == "priority" ? request->priority : request->timeout_us) = *n;
      return Status::Ok();
    }
    case ServerParameter::kFrontendOption:  // (none over HTTP)
    case ServerParameter::kReservedPrefix:
      return InvalidArgument(
          "parameter keys starting with 'triton_' are reserved for Triton usage and should not "
          "be specified.");
    case ServerParameter::kBackend:
      break;
  }
  ASSIGN_OR_RETURN(RequestParameter p, Parameter(key, value));
  request->parameters.push_back(std::move(p));
  return Status::Ok();
}

StatusOr<RequestParameter> Parameter(std::string_view key, const element& value) {
  RequestParameter p;
  p.name = std::string(key);
  switch (value.type()) {
    case element_type::BOOL:
      p.type = RequestParameter::Type::kBool;
      p.bool_value = bool(value);
      break;
    case element_type::INT64:
      p.type = RequestParameter::Type::kInt64;
      p.int_value = int64_t(value);
      break;
    case element_type::UINT64:
      return InvalidArgument("parameter '" + p.name + "' is out of range");
    case element_type::DOUBLE:
      p.type = RequestParameter::Type::kDouble;
      p.double_value = double(value);
      break;
    case element_type::STRING:
      p.type = RequestParameter::Type::kString;
      p.string_value = std::string(std::string_view(value));
      break;
    default:
      return InvalidArgument("parameter '" + p.name + "' must be a boolean, a number or a string");
  }
  return p;
}

}  // namespace

StatusOr<uint64_t> UintMember(const simdjson::dom::element& object, std::string_view key,
                              std::string_view what) {
  auto v = Member(object, key);
  if (!v) return uint64_t{0};
  if (v->type() == element_type::UINT64) return uint64_t(*v);
  if (v->type() == element_type::INT64 && int64_t(*v) >= 0)
    return static_cast<uint64_t>(int64_t(*v));
  return InvalidArgument(std::string(what) + " '" + std::string(key) +
                         "' must be a non-negative integer");
}

StatusOr<simdjson::dom::element> ParseJson(simdjson::dom::parser& parser, std::string_view text) {
  simdjson::dom::element doc;
  if (auto error = parser.parse(text.data(), text.size()).get(doc))
    return InvalidArgument(std::string("failed to parse the request JSON: ") +
                           simdjson::error_message(error));
  return doc;
}

Status DecodeInferRequest(std::shared_ptr<const std::string> text, int64_t header_length,
                          RequestDescription* request) {
  const Buffer body(reinterpret_cast<uint8_t*>(const_cast<char*>(text->data())), text->size(),
                    MemoryLocation{}, text);
  return DecodeInferRequest(body, header_length, request);
}

Status DecodeInferRequest(const Buffer& body, int64_t header_length, RequestDescription* request) {
  request->payload = body.owner();
  if (header_length == 0) {
    request->whole_body_input = body;
    return Status::Ok();
  }
  const size_t json_size = header_length < 0 ? body.size() : static_cast<size_t>(header_length);
  if (json_size > body.size())
    return InvalidArgument("Inference-Header-Content-Length is " + std::to_string(json_size) +
                           " but the body has only " + std::to_string(body.size()) + " bytes");
  thread_local simdjson::dom::parser parser;
  ASSIGN_OR_RETURN(
      element doc,
      ParseJson(parser, std::string_view(reinterpret_cast<const char*>(body.data()), json_size)));
  if (doc.type() != element_type::OBJECT)
    return InvalidArgument("the request JSON must be an object");

  if (auto id = Member(doc, "id")) {
    if (id->type() != element_type::STRING) return InvalidArgument("'id' must be a string");
    request->id = std::string(std::string_view(*id));
  }
  if (auto params = Member(doc, "parameters")) {
    if (params->type() != element_type::OBJECT)
      return InvalidArgument("'parameters' must be an object");
    for (auto [key, value] : simdjson::dom::object(*params))
      RETURN_IF_ERROR(RequestParameterMember(key, value, request));
  }
  auto inputs = Member(doc, "inputs");
  if (!inputs || inputs->type() != element_type::ARRAY)
    return InvalidArgument("the request JSON needs an 'inputs' array");

  size_t offset = json_size;
  for (element v : simdjson::dom::array(*inputs)) {
    if (v.type() != element_type::OBJECT)
      return InvalidArgument("each entry of 'inputs' must be an object");
    InputDescription in;
    auto name = Member(v, "name");
    if (!name || name->type() != element_type::STRING)
      return InvalidArgument("an input has no 'name'");
    in.name = std::string(std::string_view(*name));
    auto datatype = Member(v, "datatype");
    if (!datatype || datatype->type() != element_type::STRING)
      return InvalidArgument("input '" + in.name + "' has no 'datatype'");
    in.datatype = std::string(std::string_view(*datatype));
    auto shape = Member(v, "shape");
    if (!shape || shape->type() != element_type::ARRAY)
      return InvalidArgument("input '" + in.name + "' has no 'shape' array");
    for (element d : simdjson::dom::array(*shape)) {
      // Triton reads each entry as an unsigned integer and answers anything else with a 500 and
      // these words.
      if (d.type() != element_type::INT64 || int64_t(d) < 0)
        return Internal(
            "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as "
            "unsigned-integer");
      in.shape.push_back(int64_t(d));
    }
    auto input_params = Member(v, "parameters");
    if (input_params && input_params->type() != element_type::OBJECT)
      return InvalidArgument("input '" + in.name + "': 'parameters' must be an object");
    const element* params = input_params ? &*input_params : nullptr;
    ASSIGN_OR_RETURN(in.shared_memory, SharedMemoryParams(params, "input '" + in.name + "'"));
    auto data = Member(v, "data");
    auto size = params ? Member(*params, "binary_data_size") : std::nullopt;
    if (size) {
      if (size->type() != element_type::INT64 || int64_t(*size) < 0)
        return InvalidArgument("input '" + in.name +
                               "': binary_data_size must be a non-negative integer");
      const auto binary_size = static_cast<size_t>(int64_t(*size));
      if (header_length < 0)
        return InvalidArgument("input '" + in.name +
                               "' uses binary_data_size but the request has no "
                               "Inference-Header-Content-Length header");
      if (body.size() - offset < binary_size)
        return InvalidArgument("input '" + in.name + "' expects " + std::to_string(binary_size) +
                               " bytes of binary data but the body ends after " +
                               std::to_string(body.size() - offset) + " (truncated request?)");
      in.raw = std::string_view(reinterpret_cast<const char*>(body.data()) + offset, binary_size);
      in.raw_location = body.location();  // pinned when the body came from the pinned pool
      offset += binary_size;
    } else if (data) {
      std::vector<uint8_t> bytes;
      int64_t count = 0;
      // The datatype is checked by the builder; an unknown one converts nothing here.
      const DataType type = DataTypeFromName(in.datatype);
      if (type != DataType::kInvalid)
        RETURN_IF_ERROR(Flatten(type, *data, bytes, count, in.name, 0));
      in.typed = std::move(bytes);
      in.typed_count = count;
    } else if (!in.shared_memory) {
      return InvalidArgument("input '" + in.name + "' has neither 'data' nor binary_data_size");
    }
    if (in.shared_memory && (data || size))
      return InvalidArgument("input '" + in.name +
                             "' can't set 'shared_memory_region' together with 'data' or "
                             "'binary_data_size'");
    request->inputs.push_back(std::move(in));
  }
  if (offset != body.size())
    return InvalidArgument("the request body has " + std::to_string(body.size() - offset) +
                           " bytes after the JSON header and binary inputs that no input claims");

  if (auto outputs = Member(doc, "outputs")) {
    if (outputs->type() != element_type::ARRAY)
      return InvalidArgument("'outputs' must be an array");
    for (element v : simdjson::dom::array(*outputs)) {
      auto name = Member(v, "name");
      if (!name || name->type() != element_type::STRING)
        return InvalidArgument("each requested output needs a 'name'");
      OutputDescription out;
      out.name = std::string(std::string_view(*name));
      if (auto p = Member(v, "parameters")) {
        if (p->type() != element_type::OBJECT)
          return InvalidArgument("output '" + out.name + "': 'parameters' must be an object");
        if (Member(*p, "binary_data")) {
          ASSIGN_OR_RETURN(bool binary, BoolParam(*p, "binary_data", false));
          out.binary = binary;
        }
        if (auto k = Member(*p, "classification"))
          out.classification = k->type() == element_type::INT64 ? int64_t(*k) : 0;
        ASSIGN_OR_RETURN(out.shared_memory, SharedMemoryParams(&*p, "output '" + out.name + "'"));
      }
      request->outputs.push_back(std::move(out));
    }
  }
  return Status::Ok();
}

namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

void WriteFloat(Writer& w, double v, bool single) {
  if (!std::isfinite(v)) {  // JSON has no NaN/Inf; Triton writes them as strings too
    w.String(std::isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
    return;
  }
  char buf[32];
  auto r = single ? std::to_chars(buf, buf + sizeof(buf), static_cast<float>(v))
                  : std::to_chars(buf, buf + sizeof(buf), v);
  w.RawValue(buf, static_cast<size_t>(r.ptr - buf), rapidjson::kNumberType);
}

void WriteData(Writer& w, const InferOutput& out) {
  w.StartArray();
  const uint8_t* p = out.bytes();
  const size_t n = out.byte_size();
  switch (out.datatype) {
    case DataType::kBool:
      for (size_t i = 0; i < n; ++i) w.Bool(p[i] != 0);
      break;
    case DataType::kInt8:
      for (size_t i = 0; i < n; ++i) w.Int(static_cast<int8_t>(p[i]));
      break;
    case DataType::kUint8:
      for (size_t i = 0; i < n; ++i) w.Uint(p[i]);
      break;
    case DataType::kInt16:
      for (size_t i = 0; i + 2 <= n; i += 2) w.Int(Load<int16_t>(p + i));
      break;
    case DataType::kUint16:
      for (size_t i = 0; i + 2 <= n; i += 2) w.Uint(Load<uint16_t>(p + i));
      break;
    case DataType::kInt32:
      for (size_t i = 0; i + 4 <= n; i += 4) w.Int(Load<int32_t>(p + i));
      break;
    case DataType::kUint32:
      for (size_t i = 0; i + 4 <= n; i += 4) w.Uint(Load<uint32_t>(p + i));
      break;
    case DataType::kInt64:
      for (size_t i = 0; i + 8 <= n; i += 8) w.Int64(Load<int64_t>(p + i));
      break;
    case DataType::kUint64:
      for (size_t i = 0; i + 8 <= n; i += 8) w.Uint64(Load<uint64_t>(p + i));
      break;
    case DataType::kFp16:
      for (size_t i = 0; i + 2 <= n; i += 2)
        WriteFloat(w, HalfToFloat(Load<uint16_t>(p + i)), true);
      break;
    case DataType::kBf16:
      for (size_t i = 0; i + 2 <= n; i += 2)
        WriteFloat(w, Bf16ToFloat(Load<uint16_t>(p + i)), true);
      break;
    case DataType::kFp32:
      for (size_t i = 0; i + 4 <= n; i += 4) WriteFloat(w, Load<float>(p + i), true);
      break;
    case DataType::kFp64:
      for (size_t i = 0; i + 8 <= n; i += 8) WriteFloat(w, Load<double>(p + i), false);
      break;
    case DataType::kBytes:
      backend::ForEachBytesElement(p, n, [&](std::string_view s, size_t) {
        return w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
      });
      break;
    default:
      break;
  }
  w.EndArray();
}

}  // namespace

namespace {
bool ValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned char c = *p;
    size_t n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : 4;
    if (n == 4 || static_cast<size_t>(end - p) <= n) return false;
    uint32_t code = n == 0 ? c : c & (0x3f >> n);
    for (size_t i = 1; i <= n; ++i) {
      if ((p[i] & 0xc0) != 0x80) return false;
      code = (code << 6) | (p[i] & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (code < kMin[n] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    p += n + 1;
  }
  return true;
}
}  // namespace

Status CheckJsonOutputs(const InferenceResponse& response) {
  for (const auto& out : response.outputs) {
    if (out.binary || out.in_shared_memory || out.datatype != DataType::kBytes) continue;
    bool valid = true;
    backend::ForEachBytesElement(out.bytes(), out.byte_size(), [&](std::string_view e, size_t) {
      valid = ValidUtf8(e);
      return valid;
    });
    if (!valid)
      return InvalidArgument("output '" + out.name +
                             "' holds BYTES that are not valid UTF-8, which a JSON response "
                             "cannot carry; ask for it as binary data (\"binary_data\": true)");
  }
  return Status::Ok();
}

EncodedResponse EncodeInferResponse(const InferenceResponse& response) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("model_name");
  w.String(response.model_name.c_str(),
           static_cast<rapidjson::SizeType>(response.model_name.size()));
  w.Key("model_version");
  w.String(std::to_string(response.model_version).c_str());
  if (!response.id.empty()) {
    w.Key("id");
    w.String(response.id.c_str(), static_cast<rapidjson::SizeType>(response.id.size()));
  }
  if (!response.parameters.empty()) {
    w.Key("parameters");
    w.StartObject();
    for (const auto& p : response.parameters) {
      w.Key(p.name.c_str(), static_cast<rapidjson::SizeType>(p.name.size()));
      switch (p.type) {
        case RequestParameter::Type::kBool:
          w.Bool(p.bool_value);
          break;
        case RequestParameter::Type::kInt64:
          w.Int64(p.int_value);
          break;
        case RequestParameter::Type::kDouble:
          w.Double(p.double_value);
          break;
        case RequestParameter::Type::kString:
          w.String(p.string_value.c_str(), static_cast<rapidjson::SizeType>(p.string_value.size()));
          break;
      }
    }
    w.EndObject();
  }
  w.Key("outputs");
  w.StartArray();
  for (const auto& out : response.outputs) {
    w.StartObject();
    w.Key("name");
    w.String(out.name.c_str(), static_cast<rapidjson::SizeType>(out.name.size()));
    w.Key("datatype");
    const auto type_name = DataTypeName(out.datatype);
    w.String(type_name.data(), static_cast<rapidjson::SizeType>(type_name.size()));
    w.Key("shape");
    w.StartArray();
    for (int64_t d : out.shape) w.Int64(d);
    w.EndArray();
    if (out.in_shared_memory) {
      // Written into the client's region: metadata only, as Triton answers.
    } else if (out.binary) {
      w.Key("parameters");
      w.StartObject();
      w.Key("binary_data_size");
      w.Uint64(out.byte_size());
      w.EndObject();
    } else {
      w.Key("data");
      WriteData(w, out);
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();

  EncodedResponse encoded;
  encoded.json.assign(buffer.GetString(), buffer.GetSize());
  for (const auto& out : response.outputs) {
    if (!out.binary || out.in_shared_memory) continue;
    encoded.has_binary = true;
    encoded.binary.push_back(out.buffer);
  }
  return encoded;
}

size_t EncodedResponse::size() const {
  size_t n = json.size();
  for (const auto& b : binary) n += b.size();
  return n;
}

std::string EncodedResponse::Flatten() const {
  std::string body;
  body.reserve(size());
  body.append(json);
  for (const auto& b : binary) {
    body.append(reinterpret_cast<const char*>(b.data()), b.size());
    CountCopy(CopyKind::kOutput, b.size());
  }
  return body;
}

std::string ErrorJson(const std::string& message) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("error");
  w.String(message.c_str(), static_cast<rapidjson::SizeType>(message.size()));
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace nereid::http
