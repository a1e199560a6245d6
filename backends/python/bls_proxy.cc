#include "python/bls_proxy.h"

#include <memory>
#include <string>
#include <vector>

namespace nereid::python {
namespace {

// A BLS request of the model (pb_utils.InferenceRequest(...).exec()): sent into the server;
// each response goes back to the stub as an 'infer_response' with its tensors in the payload.
struct BlsCall {
  std::shared_ptr<Channel> channel;
  uint64_t call = 0;
};

rapidjson::Value ErrorJson(const NereidError* e, rapidjson::Document::AllocatorType& a) {
  rapidjson::Value v(rapidjson::kObjectType);
  v.AddMember("message", rapidjson::Value(NereidErrorGetMessage(e), a), a);
  v.AddMember("code", TritonErrorCode(NereidErrorGetCode(e)), a);
  return v;
}

void BlsResponse(void* user, NereidInferResponse* response) {
  auto* call = static_cast<BlsCall*>(user);
  const bool final = NereidInferResponseIsFinal(response) != 0;
  rapidjson::Document h = AnswerHeader(call->call, final);
  auto& a = h.GetAllocator();
  std::string payload;
  rapidjson::Value outputs(rapidjson::kArrayType);
  if (NereidError* e = NereidInferResponseError(response)) {
    h.AddMember("error", ErrorJson(e, a), a);
    NereidErrorDelete(e);
  } else {
    h.AddMember("error", rapidjson::Value(), a);
    for (uint32_t i = 0; i < NereidInferResponseOutputCount(response); ++i) {
      NereidTensor t;
      if (NereidError* e = NereidInferResponseOutput(response, i, &t)) {
        NereidErrorDelete(e);
        continue;
      }
      outputs.PushBack(TensorJson(t, payload.size(), a), a);
      payload.append(static_cast<const char*>(t.data), t.byte_size);
    }
  }
  h.AddMember("outputs", outputs, a);
  NereidInferResponseDelete(response);
  call->channel->Write(Json(h), payload);
  if (final) delete call;
}

// Ends BLS call 'call' with 'error' (taken) and no outputs.
void AnswerWithError(const std::shared_ptr<Channel>& channel, uint64_t call, NereidError* error) {
  rapidjson::Document h = AnswerHeader(call, true);
  auto& a = h.GetAllocator();
  h.AddMember("error", ErrorJson(error, a), a);
  h.AddMember("outputs", rapidjson::Value(rapidjson::kArrayType), a);
  NereidErrorDelete(error);
  channel->Write(Json(h));
}

void BlsUnchecked(NereidModel* caller, const std::shared_ptr<Channel>& channel, const Message& m) {
  auto call = std::make_unique<BlsCall>(BlsCall{channel, m.header["call"].GetUint64()});
  NereidInferRequest* request = nullptr;
  // Freed on every way out but a successful submission (a malformed field throws).
  struct Unsent {
    NereidInferRequest*& request;
    ~Unsent() {
      if (request) NereidInferRequestDelete(request);
    }
  } unsent{request};
  const std::string id = StringField(m.header, "id");
  NereidError* error =
      NereidModelInferRequestNew(caller, StringField(m.header, "model").c_str(),
                                 m.header["version"].GetInt64(), id.c_str(), &request);
  for (const auto& in : m.header["inputs"].GetArray()) {
    if (error) break;
    std::vector<int64_t> shape;
    for (const auto& d : in["shape"].GetArray()) shape.push_back(d.GetInt64());
    const uint64_t at = in["offset"].GetUint64(), n = in["size"].GetUint64();
    if (at > m.payload.size() || n > m.payload.size() - at) {
      error = NereidErrorNew(NEREID_ERROR_INVALID_ARG, "BLS input outside its message");
      break;
    }
    error = NereidInferRequestAddInput(
        request, StringField(in, "name").c_str(),
        static_cast<NereidDataType>(backend::DataTypeFromName(StringField(in, "datatype"))),
        shape.data(), static_cast<uint32_t>(shape.size()), m.payload.data() + at, n);
  }
  if (!error && m.header.HasMember("timeout") && m.header["timeout"].GetUint64() > 0)
    error = NereidInferRequestSetTimeout(request, m.header["timeout"].GetUint64());
  if (m.header.HasMember("parameters"))
    for (const auto& p : m.header["parameters"].GetObject()) {
      if (error) break;
      NereidParameter parameter{};
      parameter.name = p.name.GetString();
      std::string text;
      if (p.value.IsBool()) {
        parameter.type = NEREID_PARAMETER_BOOL, parameter.bool_value = p.value.GetBool();
      } else if (p.value.IsInt64()) {
        parameter.type = NEREID_PARAMETER_INT64, parameter.int_value = p.value.GetInt64();
      } else if (p.value.IsNumber()) {
        parameter.type = NEREID_PARAMETER_DOUBLE, parameter.double_value = p.value.GetDouble();
      } else if (p.value.IsString()) {
        parameter.type = NEREID_PARAMETER_STRING, parameter.string_value = p.value.GetString();
      } else {
        error = NereidErrorNew(NEREID_ERROR_INVALID_ARG,
                               "BLS parameters must be bool, int, float or str values");
        break;
      }
      error = NereidInferRequestAddParameter(request, &parameter);
    }
  for (const auto& out : m.header["outputs"].GetArray()) {
    if (!error && !out.IsString())
      error = NereidErrorNew(NEREID_ERROR_INVALID_ARG,
                             "requested_output_names must be strings (output names)");
    if (!error) error = NereidInferRequestAddOutput(request, out.GetString());
  }
  if (!error) error = NereidInferAsync(request, &BlsResponse, call.get());
  if (!error) {
    request = nullptr;                  // the server's now
    static_cast<void>(call.release());  // the callback frees it with the final response
    return;
  }
  AnswerWithError(channel, call->call, error);
}

}  // namespace

void ServeBls(NereidModel* caller, const std::shared_ptr<Channel>& channel, const Message& m) {
  if (!m.header.HasMember("call") || !m.header["call"].IsUint64())
    throw std::runtime_error("a BLS request without its call id");
  try {
    BlsUnchecked(caller, channel, m);
  } catch (const std::exception& e) {
    AnswerWithError(channel, m.header["call"].GetUint64(),
                    NereidErrorNew(NEREID_ERROR_INVALID_ARG,
                                   (std::string("malformed BLS request: ") + e.what()).c_str()));
  }
}

}  // namespace nereid::python
