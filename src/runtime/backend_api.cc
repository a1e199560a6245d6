// Implements the server functions of include/nereid/backend.h. The opaque handles are the core's
// own objects: NereidModel is Model, NereidInstance is ModelInstance, NereidRequest is
// BackendRequest.
#include "runtime/backend_api.h"

#include <cstring>

#include "common/logging.h"
#include "runtime/backend.h"
#include "runtime/model.h"

using nereid::BackendRequest;
using nereid::Model;
using nereid::ModelInstance;

namespace {

Model* AsModel(const NereidModel* m) {
  return reinterpret_cast<Model*>(const_cast<NereidModel*>(m));
}
ModelInstance* AsInstance(const NereidInstance* i) {
  return reinterpret_cast<ModelInstance*>(const_cast<NereidInstance*>(i));
}
BackendRequest* AsRequest(const NereidRequest* r) {
  return reinterpret_cast<BackendRequest*>(const_cast<NereidRequest*>(r));
}

NereidErrorCode ToCode(nereid::Status::Code code) {
  switch (code) {
    case nereid::Status::Code::kNotFound:
      return NEREID_ERROR_NOT_FOUND;
    case nereid::Status::Code::kUnavailable:
      return NEREID_ERROR_UNAVAILABLE;
    case nereid::Status::Code::kUnsupported:
      return NEREID_ERROR_UNSUPPORTED;
    case nereid::Status::Code::kInternal:
      return NEREID_ERROR_INTERNAL;
    default:
      return NEREID_ERROR_INVALID_ARG;
  }
}

NereidError* ToError(const nereid::Status& s) {
  return s.ok() ? nullptr : new NereidError{ToCode(s.code()), s.message()};
}

void FillTensor(const nereid::InferInput& in, NereidTensor* t) {
  t->name = in.name.c_str();
  t->datatype = static_cast<NereidDataType>(in.datatype);
  t->shape = in.shape.data();
  t->dims_count = static_cast<uint32_t>(in.shape.size());
  t->data = in.data;
  t->byte_size = in.byte_size;
}

}  // namespace

namespace nereid {

Status StatusFromBackend(NereidError* error) {
  if (error == nullptr) return Status::Ok();
  Status::Code code = Status::Code::kInvalidArgument;
  switch (error->code) {
    case NEREID_ERROR_NOT_FOUND:
      code = Status::Code::kNotFound;
      break;
    case NEREID_ERROR_UNAVAILABLE:
      code = Status::Code::kUnavailable;
      break;
    case NEREID_ERROR_UNSUPPORTED:
      code = Status::Code::kUnsupported;
      break;
    case NEREID_ERROR_INTERNAL:
      code = Status::Code::kInternal;
      break;
    default:
      break;
  }
  Status s(code, std::move(error->message));
  delete error;
  return s;
}

}  // namespace nereid

extern "C" {

NereidError* NereidErrorNew(NereidErrorCode code, const char* message) {
  return new NereidError{code, message ? message : ""};
}
NereidErrorCode NereidErrorGetCode(const NereidError* error) { return error->code; }
const char* NereidErrorGetMessage(const NereidError* error) { return error->message.c_str(); }
void NereidErrorDelete(NereidError* error) { delete error; }

void NereidLog(NereidLogLevel level, const char* file, int line, const char* message) {
  nereid::LogLevel l = level == NEREID_LOG_WARNING   ? nereid::LogLevel::kWarning
                       : level == NEREID_LOG_ERROR   ? nereid::LogLevel::kError
                       : level == NEREID_LOG_VERBOSE ? nereid::LogLevel::kVerbose
                                                     : nereid::LogLevel::kInfo;
  const auto& settings = nereid::GlobalLogSettings();
  const bool enabled = l == nereid::LogLevel::kVerbose   ? NEREID_VLOG_ON(1)
                       : l == nereid::LogLevel::kWarning ? settings.warning.load()
                       : l == nereid::LogLevel::kError   ? settings.error.load()
                                                         : settings.info.load();
  if (!enabled) return;
  nereid::LogLine(l, file ? file : "backend", line, message ? message : "");
}

const char* NereidModelName(const NereidModel* model) { return AsModel(model)->name().c_str(); }
int64_t NereidModelVersion(const NereidModel* model) { return AsModel(model)->version(); }
const char* NereidModelVersionPath(const NereidModel* model) {
  return AsModel(model)->version_path().c_str();
}
const char* NereidModelConfigJson(const NereidModel* model) {
  return AsModel(model)->config_json().c_str();
}
NereidError* NereidModelSetConfigJson(NereidModel* model, const char* json) {
  if (json == nullptr) return NereidErrorNew(NEREID_ERROR_INVALID_ARG, "config JSON is NULL");
  return ToError(AsModel(model)->SetConfigJson(json));
}
void NereidModelSetState(NereidModel* model, void* state) { AsModel(model)->backend_state = state; }
void* NereidModelState(const NereidModel* model) { return AsModel(model)->backend_state; }

NereidModel* NereidInstanceModel(const NereidInstance* instance) {
  return reinterpret_cast<NereidModel*>(AsInstance(instance)->model());
}
const char* NereidInstanceName(const NereidInstance* instance) {
  return AsInstance(instance)->name().c_str();
}
NereidInstanceKind NereidInstanceGetKind(const NereidInstance* instance) {
  return AsInstance(instance)->kind();
}
int32_t NereidInstanceDeviceId(const NereidInstance* instance) {
  return AsInstance(instance)->device_id();
}
void NereidInstanceSetState(NereidInstance* instance, void* state) {
  AsInstance(instance)->state = state;
}
void* NereidInstanceState(const NereidInstance* instance) { return AsInstance(instance)->state; }

uint32_t NereidRequestInputCount(const NereidRequest* request) {
  return static_cast<uint32_t>(AsRequest(request)->request->inputs.size());
}

NereidError* NereidRequestInput(const NereidRequest* request, uint32_t index,
                                NereidTensor* tensor) {
  const auto& inputs = AsRequest(request)->request->inputs;
  if (index >= inputs.size())
    return NereidErrorNew(NEREID_ERROR_INVALID_ARG, "input index out of range");
  FillTensor(inputs[index], tensor);
  return nullptr;
}

NereidError* NereidRequestInputByName(const NereidRequest* request, const char* name,
                                      NereidTensor* tensor) {
  const nereid::InferInput* in = AsRequest(request)->request->FindInput(name ? name : "");
  if (in == nullptr)
    return NereidErrorNew(
        NEREID_ERROR_NOT_FOUND,
        (std::string("request has no input '") + (name ? name : "") + "'").c_str());
  FillTensor(*in, tensor);
  return nullptr;
}

uint32_t NereidRequestOutputCount(const NereidRequest* request) {
  return static_cast<uint32_t>(AsRequest(request)->request->outputs.size());
}

const char* NereidRequestOutputName(const NereidRequest* request, uint32_t index) {
  const auto& outputs = AsRequest(request)->request->outputs;
  return index < outputs.size() ? outputs[index].name.c_str() : nullptr;
}

NereidError* NereidRequestOutputAllocate(NereidRequest* request, const char* name,
                                         NereidDataType datatype, const int64_t* shape,
                                         uint32_t dims_count, uint64_t byte_size, void** buffer) {
  BackendRequest* r = AsRequest(request);
  if (name == nullptr || buffer == nullptr)
    return NereidErrorNew(NEREID_ERROR_INVALID_ARG, "output name and buffer must not be NULL");
  for (const auto& out : r->response->outputs)
    if (out.name == name)
      return NereidErrorNew(NEREID_ERROR_INTERNAL,
                            (std::string("output '") + name + "' allocated twice").c_str());
  const auto type = static_cast<nereid::DataType>(datatype);
  if (type != nereid::DataType::kBytes) {
    const int64_t expected = nereid::TensorByteSize(type, shape, dims_count);
    if (expected < 0 || static_cast<uint64_t>(expected) != byte_size)
      return NereidErrorNew(
          NEREID_ERROR_INTERNAL,
          (std::string("output '") + name + "': byte_size does not match shape").c_str());
  }
  nereid::InferOutput out;
  out.name = name;
  out.datatype = type;
  out.shape.assign(shape, shape + dims_count);
  out.data.resize(byte_size);
  r->response->outputs.push_back(std::move(out));
  *buffer = r->response->outputs.back().data.data();
  return nullptr;
}

void NereidRequestSetError(NereidRequest* request, NereidError* error) {
  BackendRequest* r = AsRequest(request);
  nereid::Status s = nereid::StatusFromBackend(error);
  if (r->error.ok()) r->error = std::move(s);
}

}  // extern "C"
