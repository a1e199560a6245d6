// Implements the server functions of include/nereid/backend.h. The opaque handles are the core's
// own objects: NereidModel is Model, NereidInstance is ModelInstance, NereidRequest is
// BackendRequest.
#include "runtime/backend_abi.h"

#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "common/logging.h"
#include "metrics/custom_metrics.h"
#include "nereid/backend_util.h"
#include "runtime/backend_library.h"
#include "runtime/model.h"

using nereid::BackendRequest;
using nereid::Model;
using nereid::ModelInstance;

static_assert(static_cast<int>(nereid::DataType::kBf16) == NEREID_TYPE_BF16 &&
              static_cast<int>(nereid::DataType::kBytes) == NEREID_TYPE_BYTES &&
              static_cast<int>(nereid::DataType::kFp32) == NEREID_TYPE_FP32 &&
              static_cast<int>(nereid::DataType::kBool) == NEREID_TYPE_BOOL);
static_assert(static_cast<int>(nereid::MemoryType::kShm) == NEREID_MEMORY_SHM &&
              static_cast<int>(nereid::MemoryType::kGpu) == NEREID_MEMORY_GPU &&
              static_cast<int>(nereid::MemoryType::kCpuPinned) == NEREID_MEMORY_CPU_PINNED);

namespace {

Model* AsModel(const NereidModel* m) {
  return reinterpret_cast<Model*>(const_cast<NereidModel*>(m));
}
ModelInstance* AsInstance(const NereidInstance* i) {
  return reinterpret_cast<ModelInstance*>(const_cast<NereidInstance*>(i));
}
BackendRequest* AsRequest(const NereidRequest* r) { return BackendRequest::From(r); }

NereidError* Error(NereidErrorCode code, const std::string& message) {
  return NereidErrorNew(code, message.c_str());
}

void FillTensor(const nereid::InferInput& in, NereidTensor* t) {
  t->name = in.name.c_str();
  t->datatype = static_cast<NereidDataType>(in.datatype);
  t->shape = in.shape.data();
  t->dims_count = static_cast<uint32_t>(in.shape.size());
  t->data = in.data;
  t->byte_size = in.byte_size;
  t->memory_type = static_cast<NereidMemoryType>(in.location.type);
  t->device_id = in.location.device;
}

}  // namespace

namespace nereid {

// The conversions backends use too (nereid/backend_util.h): one mapping between Status codes and
// NereidErrorCode.
NereidError* ErrorFromStatus(const Status& s) { return backend::ToError(s); }
Status StatusFromBackend(NereidError* error) { return backend::FromError(error); }

}  // namespace nereid

extern "C" {

uint32_t NereidServerApiVersion(void) { return NEREID_BACKEND_API_VERSION; }
uint64_t NereidNowNs(void) { return nereid::SteadyNowNs(); }

NereidError* NereidErrorNew(NereidErrorCode code, const char* message) {
  return new NereidError{code, message ? message : ""};
}
NereidErrorCode NereidErrorGetCode(const NereidError* error) { return error->code; }
const char* NereidErrorGetMessage(const NereidError* error) { return error->message.c_str(); }
void NereidErrorDelete(NereidError* error) { delete error; }

int NereidLogEnabled(NereidLogLevel level) {
  const auto& settings = nereid::GlobalLogSettings();
  switch (level) {
    case NEREID_LOG_VERBOSE:
      return NEREID_VLOG_ON(1);
    case NEREID_LOG_WARNING:
      return settings.warning.load();
    case NEREID_LOG_ERROR:
      return settings.error.load();
    default:
      return settings.info.load();
  }
}

void NereidLog(NereidLogLevel level, const char* file, int line, const char* message) {
  if (!NereidLogEnabled(level)) return;
  const nereid::LogLevel l = level == NEREID_LOG_WARNING   ? nereid::LogLevel::kWarning
                             : level == NEREID_LOG_ERROR   ? nereid::LogLevel::kError
                             : level == NEREID_LOG_VERBOSE ? nereid::LogLevel::kVerbose
                                                           : nereid::LogLevel::kInfo;
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
  return nereid::ErrorFromStatus(AsModel(model)->SetConfigJson(json));
}
NereidError* NereidModelSetVariants(NereidModel* model, const NereidVariant* variants,
                                    uint32_t count) {
  if (variants == nullptr && count > 0)
    return NereidErrorNew(NEREID_ERROR_INVALID_ARG, "variants is NULL");
  std::vector<nereid::VariantInfo> infos;
  for (uint32_t i = 0; i < count; ++i) {
    const NereidVariant& v = variants[i];
    if (v.name == nullptr || *v.name == '\0')
      return NereidErrorNew(NEREID_ERROR_INVALID_ARG, "a variant has no name");
    infos.push_back({v.name, v.admitted != 0, v.top1_agreement, v.max_abs_error, v.max_rel_error,
                     v.detail != nullptr ? v.detail : ""});
  }
  return nereid::ErrorFromStatus(AsModel(model)->SetVariants(std::move(infos)));
}
int NereidModelIsDecoupled(const NereidModel* model) { return AsModel(model)->decoupled() ? 1 : 0; }
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
NereidError* NereidInstanceSetPlacement(NereidInstance* instance, const char* device,
                                        const char* requested) {
  if (instance == nullptr || device == nullptr || *device == '\0')
    return Error(NEREID_ERROR_INVALID_ARG, "NereidInstanceSetPlacement: no device");
  AsInstance(instance)->SetPlacement(device, requested != nullptr ? requested : device);
  return nullptr;
}
uint32_t NereidInstanceVariant(const NereidInstance* instance) {
  return AsInstance(instance)->variant();
}
void NereidInstanceSetState(NereidInstance* instance, void* state) {
  AsInstance(instance)->state = state;
}
void* NereidInstanceState(const NereidInstance* instance) { return AsInstance(instance)->state; }

const char* NereidRequestId(const NereidRequest* request) {
  return AsRequest(request)->request->id.c_str();
}
uint32_t NereidRequestFlags(const NereidRequest* request) {
  return AsRequest(request)->request->flags;
}
int NereidRequestCorrelationId(const NereidRequest* request, uint64_t* number, const char** text) {
  const nereid::CorrelationId& id = AsRequest(request)->request->correlation_id;
  if (!id.present) return 0;
  if (id.is_text) {
    if (text != nullptr) *text = id.text.c_str();
    return 2;
  }
  if (number != nullptr) *number = id.number;
  return 1;
}
int NereidRequestIsCancelled(const NereidRequest* request) {
  return AsRequest(request)->request->cancelled() ? 1 : 0;
}
uint32_t NereidRequestParameterCount(const NereidRequest* request) {
  return static_cast<uint32_t>(AsRequest(request)->request->parameters.size());
}
NereidError* NereidRequestParameter(const NereidRequest* request, uint32_t index,
                                    NereidParameter* parameter) {
  const auto& params = AsRequest(request)->request->parameters;
  if (index >= params.size() || parameter == nullptr)
    return Error(NEREID_ERROR_INVALID_ARG, "parameter index out of range");
  const nereid::RequestParameter& p = params[index];
  parameter->name = p.name.c_str();
  parameter->type = static_cast<NereidParameterType>(p.type);
  parameter->bool_value = p.bool_value ? 1 : 0;
  parameter->int_value = p.int_value;
  parameter->double_value = p.double_value;
  parameter->string_value = p.string_value.c_str();
  return nullptr;
}

uint32_t NereidRequestInputCount(const NereidRequest* request) {
  return static_cast<uint32_t>(AsRequest(request)->request->inputs.size());
}

NereidError* NereidRequestInput(const NereidRequest* request, uint32_t index,
                                NereidTensor* tensor) {
  const auto& inputs = AsRequest(request)->request->inputs;
  if (index >= inputs.size() || tensor == nullptr)
    return Error(NEREID_ERROR_INVALID_ARG, "input index out of range");
  FillTensor(inputs[index], tensor);
  return nullptr;
}

NereidError* NereidRequestInputByName(const NereidRequest* request, const char* name,
                                      NereidTensor* tensor) {
  const nereid::InferInput* in = AsRequest(request)->request->FindInput(name ? name : "");
  if (in == nullptr || tensor == nullptr)
    return Error(NEREID_ERROR_NOT_FOUND,
                 std::string("request has no input '") + (name ? name : "") + "'");
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

namespace {
// Whether [data, data + size) in 'where' shares a byte with one of the request's inputs.
bool OverlapsAnInput(const nereid::InferenceRequest& request, const uint8_t* data, uint64_t size,
                     const nereid::MemoryLocation& where) {
  const auto begin = reinterpret_cast<uintptr_t>(data);
  for (const auto& in : request.inputs) {
    if (in.byte_size == 0 || size == 0 ||
        in.location.host_addressable() != where.host_addressable())
      continue;
    if (!where.host_addressable() && in.location.device != where.device) continue;
    const auto in_begin = reinterpret_cast<uintptr_t>(in.data);
    if (begin < in_begin + in.byte_size && in_begin < begin + size) return true;
  }
  return false;
}

bool HasOutput(const BackendRequest& r, const char* name) {
  for (const auto& out : r.response->outputs)
    if (out.name == name) return true;
  return false;
}

// Adds output 'name' in 'out' (its buffer placed) to the response and tells the backend where it
// is.
void AddOutput(BackendRequest& r, const char* name, nereid::DataType type, const int64_t* shape,
               uint32_t dims_count, nereid::InferOutput out, NereidBuffer* buffer) {
  out.name = name;
  out.datatype = type;
  out.shape.assign(shape, shape + dims_count);
  buffer->data = out.buffer.data();
  buffer->memory_type = static_cast<NereidMemoryType>(out.buffer.location().type);
  buffer->device_id = out.buffer.location().device;
  r.response->outputs.push_back(std::move(out));
}
}  // namespace

NereidError* NereidRequestOutputAllocate(NereidRequest* request, const char* name,
                                         NereidDataType datatype, const int64_t* shape,
                                         uint32_t dims_count, uint64_t byte_size,
                                         NereidMemoryType preferred, int64_t preferred_device_id,
                                         NereidBuffer* buffer) {
  BackendRequest* r = AsRequest(request);
  if (name == nullptr || buffer == nullptr || (shape == nullptr && dims_count > 0))
    return Error(NEREID_ERROR_INVALID_ARG, "output name, shape and buffer must not be NULL");
  if (r->final_sent)
    return Error(NEREID_ERROR_INTERNAL,
                 std::string("output '") + name + "' allocated after the final response was sent");
  if (HasOutput(*r, name))
    return Error(NEREID_ERROR_INTERNAL, std::string("output '") + name + "' allocated twice");
  const auto type = static_cast<nereid::DataType>(datatype);
  if (type != nereid::DataType::kBytes) {
    const int64_t expected = nereid::TensorByteSize(type, shape, dims_count);
    if (expected < 0 || static_cast<uint64_t>(expected) != byte_size)
      return Error(NEREID_ERROR_INTERNAL,
                   std::string("output '") + name + "': byte_size does not match shape");
  }
  nereid::InferOutput out;
  const nereid::RequestedOutput* wanted = nullptr;
  for (const auto& o : r->request->outputs)
    if (o.name == name) wanted = &o;
  if (wanted != nullptr && wanted->has_destination) {
    // The client asked for this output in its shared-memory region: write it there.
    if (nereid::Status fits = nereid::CheckOutputRegion(*wanted, name, byte_size); !fits.ok())
      return nereid::ErrorFromStatus(fits);
    const nereid::Buffer& d = wanted->destination;
    nereid::Buffer region(d.data(), byte_size, d.location(), d.owner());
    out.in_shared_memory = true;
    const bool device_from_host =
        d.location().type == nereid::MemoryType::kGpu && preferred != NEREID_MEMORY_GPU;
    // Written in place, an output that shares bytes with an input would clobber that input while
    // the model still reads it (ONNX Runtime writes outputs during the run): it is written to a
    // buffer of the server's and copied into the region when the response is finished.
    const bool aliases_input = OverlapsAnInput(*r->request, d.data(), byte_size, d.location());
    if (device_from_host || aliases_input) {
      // The backend writes a pinned host buffer (for a CUDA region too: the buffer's memory type
      // tells the backend).
      auto staged = nereid::DefaultAllocator().Allocate(
          byte_size, nereid::MemoryLocation{nereid::MemoryType::kCpuPinned, 0});
      if (!staged.ok()) return nereid::ErrorFromStatus(staged.status());
      out.buffer = std::move(staged).value();
      out.destination = std::move(region);
    } else {
      out.buffer = std::move(region);
    }
  } else {
    // Outputs go to clients: device memory only into a CUDA region, else host memory (pinned when
    // the backend asks for device memory, so its copy back is fast). An output the next ensemble
    // step reads stays on the device the backend asked for.
    const bool on_device = preferred == NEREID_MEMORY_GPU && wanted != nullptr && wanted->device_ok;
    const NereidMemoryType where =
        preferred == NEREID_MEMORY_GPU && !on_device ? NEREID_MEMORY_CPU_PINNED : preferred;
    const int64_t device = on_device ? std::max<int64_t>(preferred_device_id, 0) : 0;
    auto allocated = nereid::DefaultAllocator().Allocate(
        byte_size, nereid::MemoryLocation{static_cast<nereid::MemoryType>(where), device});
    if (!allocated.ok()) return nereid::ErrorFromStatus(allocated.status());
    out.buffer = std::move(allocated).value();
  }
  AddOutput(*r, name, type, shape, dims_count, std::move(out), buffer);
  return nullptr;
}

NereidError* NereidRequestsOutputAllocate(NereidRequest* const* requests, uint32_t count,
                                          const char* name, NereidDataType datatype,
                                          const int64_t* shapes, uint32_t dims_count,
                                          const uint64_t* byte_sizes, NereidMemoryType preferred,
                                          NereidBuffer* buffers) {
  if (requests == nullptr || name == nullptr || buffers == nullptr || byte_sizes == nullptr ||
      (shapes == nullptr && dims_count > 0) || count == 0)
    return Error(NEREID_ERROR_INVALID_ARG,
                 "requests, output name, shapes, sizes and buffers must not be NULL");
  const auto type = static_cast<nereid::DataType>(datatype);
  if (type == nereid::DataType::kBytes)
    return Error(NEREID_ERROR_UNSUPPORTED, "BYTES outputs are allocated request by request");
  // Every request's place must be the server's host memory, as NereidRequestOutputAllocate would
  // choose it: else none is allocated here.
  uint64_t total = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const BackendRequest* r = AsRequest(requests[i]);
    const int64_t* shape = shapes + static_cast<size_t>(i) * dims_count;
    const int64_t expected = nereid::TensorByteSize(type, shape, dims_count);
    if (r->final_sent || expected < 0 || static_cast<uint64_t>(expected) != byte_sizes[i] ||
        byte_sizes[i] > UINT64_MAX - total)
      return Error(NEREID_ERROR_UNSUPPORTED,
                   std::string("output '") + name + "' is not allocated for the batch at once");
    if (HasOutput(*r, name))
      return Error(NEREID_ERROR_UNSUPPORTED,
                   std::string("output '") + name + "' is already allocated");
    for (const auto& o : r->request->outputs)
      if (o.name == name && (o.has_destination || (preferred == NEREID_MEMORY_GPU && o.device_ok)))
        return Error(NEREID_ERROR_UNSUPPORTED,
                     std::string("output '") + name + "' goes elsewhere for one request");
    total += byte_sizes[i];
  }
  const NereidMemoryType where =
      preferred == NEREID_MEMORY_GPU ? NEREID_MEMORY_CPU_PINNED : preferred;
  auto block = nereid::DefaultAllocator().Allocate(
      total, nereid::MemoryLocation{static_cast<nereid::MemoryType>(where), 0});
  if (!block.ok()) return nereid::ErrorFromStatus(block.status());
  uint64_t at = 0;
  for (uint32_t i = 0; i < count; ++i) {
    nereid::InferOutput out;
    // Each request's slice keeps the whole block alive until its response is gone.
    out.buffer =
        nereid::Buffer(block->data() + at, byte_sizes[i], block->location(), block->owner());
    at += byte_sizes[i];
    AddOutput(*AsRequest(requests[i]), name, type, shapes + static_cast<size_t>(i) * dims_count,
              dims_count, std::move(out), &buffers[i]);
  }
  return nullptr;
}

NereidError* NereidRequestSend(NereidRequest* request, uint32_t flags) {
  BackendRequest* r = AsRequest(request);
  if (!r->instance->model()->decoupled())
    return Error(NEREID_ERROR_INTERNAL,
                 "NereidRequestSend is for decoupled models; complete the request instead");
  if (r->final_sent) return Error(NEREID_ERROR_INTERNAL, "the final response was already sent");
  r->instance->Send(r, (flags & NEREID_RESPONSE_FINAL) != 0);
  return nullptr;
}

void NereidRequestSetComputeTimes(NereidRequest* request, uint64_t start_ns, uint64_t end_ns) {
  BackendRequest* r = AsRequest(request);
  if (end_ns < start_ns) return;
  r->compute_start_ns = start_ns;
  r->compute_end_ns = end_ns;
}

void NereidRequestSetDeviceTime(NereidRequest* request, uint64_t busy_ns) {
  BackendRequest* r = AsRequest(request);
  if (r->execution) r->execution->device_busy_ns.store(busy_ns, std::memory_order_relaxed);
}

void NereidRequestComplete(NereidRequest* request, NereidError* error) {
  BackendRequest* r = AsRequest(request);
  r->instance->Complete(r, nereid::StatusFromBackend(error));
}

namespace {
// Owners of the buffers NereidMemoryAllocate handed out, by address.
std::mutex memory_mu;
std::unordered_map<void*, nereid::Buffer>& BackendBuffers() {
  static auto* buffers = new std::unordered_map<void*, nereid::Buffer>();
  return *buffers;
}
}  // namespace

NereidError* NereidMemoryAllocate(NereidMemoryType type, int64_t device_id, uint64_t byte_size,
                                  NereidBuffer* buffer) {
  if (buffer == nullptr) return Error(NEREID_ERROR_INVALID_ARG, "buffer is NULL");
  if (type == NEREID_MEMORY_SHM)
    return Error(NEREID_ERROR_INVALID_ARG, "shared memory is the client's, not allocated");
  auto allocated = nereid::DefaultAllocator().Allocate(
      byte_size, nereid::MemoryLocation{static_cast<nereid::MemoryType>(type), device_id});
  if (!allocated.ok()) return nereid::ErrorFromStatus(allocated.status());
  buffer->data = allocated->data();
  buffer->memory_type = static_cast<NereidMemoryType>(allocated->location().type);
  buffer->device_id = allocated->location().device;
  void* key = allocated->data();  // read before the move below (its right side runs first)
  std::lock_guard lock(memory_mu);
  BackendBuffers()[key] = std::move(allocated).value();
  return nullptr;
}

void NereidMemoryRelease(void* data) {
  nereid::Buffer released;  // freed outside the lock
  std::lock_guard lock(memory_mu);
  auto it = BackendBuffers().find(data);
  if (it == BackendBuffers().end()) return;
  released = std::move(it->second);
  BackendBuffers().erase(it);
}

// ---- Inference from a backend (BLS) -------------------------------------------------------------

struct NereidInferRequest {
  std::unique_ptr<nereid::InferenceRequest> request;
  std::shared_ptr<nereid::InferApiLink> link;  // the server it goes to
};
struct NereidInferResponse {
  std::unique_ptr<nereid::InferenceResponse> response;
};

namespace {
std::mutex default_link_mu;
std::shared_ptr<nereid::InferApiLink>& DefaultLink() {
  static auto* link = new std::shared_ptr<nereid::InferApiLink>();
  return *link;
}

NereidError* NewInferRequest(std::shared_ptr<nereid::InferApiLink> link, const char* model,
                             int64_t version, const char* id, NereidInferRequest** request) {
  if (model == nullptr || request == nullptr)
    return Error(NEREID_ERROR_INVALID_ARG, "NereidInferRequestNew: model and request are required");
  auto r = std::make_unique<NereidInferRequest>();
  r->request = std::make_unique<nereid::InferenceRequest>();
  r->request->model_name = model;
  r->request->model_version = version;
  if (id != nullptr) r->request->id = id;
  r->request->binary_outputs_by_default = true;
  r->request->times.received_ns = nereid::SteadyNowNs();
  r->link = std::move(link);
  *request = r.release();
  return nullptr;
}
}  // namespace

NereidError* NereidModelInferRequestNew(NereidModel* caller, const char* model, int64_t version,
                                        const char* id, NereidInferRequest** request) {
  if (caller == nullptr)
    return Error(NEREID_ERROR_INVALID_ARG, "NereidModelInferRequestNew: caller is NULL");
  return NewInferRequest(AsModel(caller)->infer_link(), model, version, id, request);
}

NereidError* NereidInferRequestNew(const char* model, int64_t version, const char* id,
                                   NereidInferRequest** request) {
  std::shared_ptr<nereid::InferApiLink> link;
  {
    std::lock_guard lock(default_link_mu);
    link = DefaultLink();
  }
  return NewInferRequest(std::move(link), model, version, id, request);
}

NereidError* NereidInferRequestAddInput(NereidInferRequest* request, const char* name,
                                        NereidDataType datatype, const int64_t* shape,
                                        uint32_t dims_count, const void* data, uint64_t byte_size) {
  if (request == nullptr || name == nullptr || (dims_count > 0 && shape == nullptr) ||
      (byte_size > 0 && data == nullptr))
    return Error(NEREID_ERROR_INVALID_ARG,
                 "NereidInferRequestAddInput: a required argument is NULL");
  nereid::InferInput in;
  in.name = name;
  in.datatype = static_cast<nereid::DataType>(datatype);
  in.shape.assign(shape, shape + dims_count);
  const auto* bytes = static_cast<const uint8_t*>(data);
  in.Own(std::vector<uint8_t>(bytes, bytes + byte_size));
  request->request->inputs.push_back(std::move(in));
  return nullptr;
}

NereidError* NereidInferRequestAddOutput(NereidInferRequest* request, const char* name) {
  if (request == nullptr || name == nullptr)
    return Error(NEREID_ERROR_INVALID_ARG,
                 "NereidInferRequestAddOutput: a required argument is NULL");
  nereid::RequestedOutput out;
  out.name = name;
  out.binary = true;
  request->request->outputs.push_back(std::move(out));
  return nullptr;
}

NereidError* NereidInferRequestSetTimeout(NereidInferRequest* request, uint64_t timeout_us) {
  if (request == nullptr)
    return Error(NEREID_ERROR_INVALID_ARG, "NereidInferRequestSetTimeout: request is NULL");
  constexpr uint64_t kMaxUs = uint64_t{1} << 40;  // ~12 days; keeps the arithmetic in range
  nereid::InferenceRequest& r = *request->request;
  r.timeout_us = std::min(timeout_us, kMaxUs);
  r.deadline_ns = timeout_us == 0 ? 0 : r.times.received_ns + r.timeout_us * 1000;
  return nullptr;
}

NereidError* NereidInferRequestAddParameter(NereidInferRequest* request,
                                            const NereidParameter* parameter) {
  if (request == nullptr || parameter == nullptr || parameter->name == nullptr ||
      (parameter->type == NEREID_PARAMETER_STRING && parameter->string_value == nullptr))
    return Error(NEREID_ERROR_INVALID_ARG,
                 "NereidInferRequestAddParameter: a required argument is NULL");
  using Type = nereid::RequestParameter::Type;
  nereid::RequestParameter p;
  p.name = parameter->name;
  switch (parameter->type) {
    case NEREID_PARAMETER_BOOL:
      p.type = Type::kBool, p.bool_value = parameter->bool_value != 0;
      break;
    case NEREID_PARAMETER_INT64:
      p.type = Type::kInt64, p.int_value = parameter->int_value;
      break;
    case NEREID_PARAMETER_DOUBLE:
      p.type = Type::kDouble, p.double_value = parameter->double_value;
      break;
    case NEREID_PARAMETER_STRING:
      p.type = Type::kString, p.string_value = parameter->string_value;
      break;
    default:
      return Error(NEREID_ERROR_INVALID_ARG, "NereidInferRequestAddParameter: unknown type");
  }
  request->request->parameters.push_back(std::move(p));
  return nullptr;
}

void NereidInferRequestDelete(NereidInferRequest* request) { delete request; }

NereidError* NereidInferAsync(NereidInferRequest* request, NereidInferCallback callback,
                              void* user) {
  if (request == nullptr || callback == nullptr)
    return Error(NEREID_ERROR_INVALID_ARG, "NereidInferAsync: request and callback are required");
  if (!request->link) return Error(NEREID_ERROR_UNAVAILABLE, "the server is not serving requests");
  request->request->on_complete = [callback, user](std::unique_ptr<nereid::InferenceResponse> r) {
    auto* response = new NereidInferResponse{std::move(r)};
    callback(user, response);
  };
  std::unique_ptr<nereid::InferenceRequest> r = std::move(request->request);
  nereid::Status s = request->link->Submit(r);
  if (!s.ok()) {
    r->on_complete = nullptr;
    request->request = std::move(r);  // still the caller's
    return nereid::ErrorFromStatus(s);
  }
  delete request;
  return nullptr;
}

NereidError* NereidInferResponseError(const NereidInferResponse* response) {
  return response->response->status.ok() ? nullptr
                                         : nereid::ErrorFromStatus(response->response->status);
}

int NereidInferResponseIsFinal(const NereidInferResponse* response) {
  return response->response->final ? 1 : 0;
}

uint32_t NereidInferResponseOutputCount(const NereidInferResponse* response) {
  return static_cast<uint32_t>(response->response->outputs.size());
}

NereidError* NereidInferResponseOutput(const NereidInferResponse* response, uint32_t index,
                                       NereidTensor* tensor) {
  const auto& outputs = response->response->outputs;
  if (tensor == nullptr || index >= outputs.size())
    return Error(NEREID_ERROR_INVALID_ARG,
                 "NereidInferResponseOutput: no output " + std::to_string(index));
  const nereid::InferOutput& out = outputs[index];
  tensor->name = out.name.c_str();
  tensor->datatype = static_cast<NereidDataType>(out.datatype);
  tensor->shape = out.shape.data();
  tensor->dims_count = static_cast<uint32_t>(out.shape.size());
  tensor->data = out.bytes();
  tensor->byte_size = out.byte_size();
  tensor->memory_type = NEREID_MEMORY_CPU;
  tensor->device_id = 0;
  return nullptr;
}

void NereidInferResponseDelete(NereidInferResponse* response) { delete response; }

// ---- custom metrics (metrics/custom_metrics.h) ----

struct NereidMetricFamily {
  std::unique_ptr<nereid::CustomMetrics::FamilyHandle> handle;
};
struct NereidMetric {
  std::unique_ptr<nereid::CustomMetrics::MetricHandle> handle;
};

NereidError* NereidMetricFamilyNew(NereidMetricKind kind, const char* name, const char* description,
                                   NereidMetricFamily** family) {
  if (name == nullptr || family == nullptr)
    return Error(NEREID_ERROR_INVALID_ARG, "NereidMetricFamilyNew: name and family are required");
  auto handle = nereid::CustomMetrics::Get().NewFamily(static_cast<nereid::MetricKind>(kind), name,
                                                       description ? description : "");
  if (!handle.ok()) return nereid::ErrorFromStatus(handle.status());
  *family = new NereidMetricFamily{std::move(handle).value()};
  return nullptr;
}

void NereidMetricFamilyDelete(NereidMetricFamily* family) {
  if (family == nullptr) return;
  nereid::CustomMetrics::Get().DeleteFamily(std::move(family->handle));
  delete family;
}

NereidError* NereidMetricNew(NereidMetricFamily* family, const char* const* label_names,
                             const char* const* label_values, uint32_t label_count,
                             const double* buckets, uint32_t bucket_count, NereidMetric** metric) {
  if (family == nullptr || metric == nullptr ||
      (label_count > 0 && (!label_names || !label_values)))
    return Error(NEREID_ERROR_INVALID_ARG, "NereidMetricNew: family, labels and metric required");
  if (label_count > nereid::CustomMetrics::kMaxLabels ||
      bucket_count > nereid::CustomMetrics::kMaxBuckets)
    return Error(NEREID_ERROR_INVALID_ARG, "NereidMetricNew: too many labels or buckets");
  std::vector<std::pair<std::string, std::string>> labels;
  for (uint32_t i = 0; i < label_count; ++i) {
    if (label_names[i] == nullptr || label_values[i] == nullptr)
      return Error(NEREID_ERROR_INVALID_ARG, "NereidMetricNew: a label name or value is NULL");
    labels.emplace_back(label_names[i], label_values[i]);
  }
  std::optional<std::vector<double>> bounds;
  if (buckets != nullptr) bounds.emplace(buckets, buckets + bucket_count);
  auto handle = nereid::CustomMetrics::Get().NewMetric(*family->handle, labels, bounds);
  if (!handle.ok()) return nereid::ErrorFromStatus(handle.status());
  *metric = new NereidMetric{std::move(handle).value()};
  return nullptr;
}

void NereidMetricDelete(NereidMetric* metric) {
  if (metric == nullptr) return;
  nereid::CustomMetrics::Get().DeleteMetric(std::move(metric->handle));
  delete metric;
}

NereidError* NereidMetricIncrement(NereidMetric* metric, double value) {
  if (metric == nullptr) return Error(NEREID_ERROR_INVALID_ARG, "NereidMetricIncrement: no metric");
  return nereid::ErrorFromStatus(nereid::CustomMetrics::Get().Increment(*metric->handle, value));
}

NereidError* NereidMetricSet(NereidMetric* metric, double value) {
  if (metric == nullptr) return Error(NEREID_ERROR_INVALID_ARG, "NereidMetricSet: no metric");
  return nereid::ErrorFromStatus(nereid::CustomMetrics::Get().Set(*metric->handle, value));
}

NereidError* NereidMetricObserve(NereidMetric* metric, double value) {
  if (metric == nullptr) return Error(NEREID_ERROR_INVALID_ARG, "NereidMetricObserve: no metric");
  return nereid::ErrorFromStatus(nereid::CustomMetrics::Get().Observe(*metric->handle, value));
}

NereidError* NereidMetricValue(NereidMetric* metric, double* value) {
  if (metric == nullptr || value == nullptr)
    return Error(NEREID_ERROR_INVALID_ARG, "NereidMetricValue: metric and value are required");
  auto v = nereid::CustomMetrics::Get().Value(*metric->handle);
  if (!v.ok()) return nereid::ErrorFromStatus(v.status());
  *value = *v;
  return nullptr;
}

}  // extern "C"

namespace nereid {
void SetDefaultInferLink(std::shared_ptr<InferApiLink> link) {
  std::lock_guard lock(default_link_mu);
  DefaultLink() = std::move(link);
}
}  // namespace nereid
