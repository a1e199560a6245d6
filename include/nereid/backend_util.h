// Header-only C++ helpers for backends written against nereid/backend.h. A backend builds with
// include/ alone on its include path: this file is everything it needs besides the C ABI.
//
//   - DataType and shape arithmetic (element counts and byte sizes with overflow checks)
//   - Status / StatusOr with RETURN_IF_ERROR / ASSIGN_OR_RETURN (nereid/status.h), and the
//     conversions to and from NereidError
//   - CheckServerVersion(), logging, request and output helpers
//   - NEREID_BACKEND_GUARD: catches every exception at the ABI boundary
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nereid/backend.h"
#include "nereid/half.h"
#include "nereid/status.h"

namespace nereid::backend {

// ---- Data types ---------------------------------------------------------------------------------

enum class DataType : int {
  kInvalid = NEREID_TYPE_INVALID,
  kBool = NEREID_TYPE_BOOL,
  kUint8 = NEREID_TYPE_UINT8,
  kUint16 = NEREID_TYPE_UINT16,
  kUint32 = NEREID_TYPE_UINT32,
  kUint64 = NEREID_TYPE_UINT64,
  kInt8 = NEREID_TYPE_INT8,
  kInt16 = NEREID_TYPE_INT16,
  kInt32 = NEREID_TYPE_INT32,
  kInt64 = NEREID_TYPE_INT64,
  kFp16 = NEREID_TYPE_FP16,
  kFp32 = NEREID_TYPE_FP32,
  kFp64 = NEREID_TYPE_FP64,
  kBytes = NEREID_TYPE_BYTES,
  kBf16 = NEREID_TYPE_BF16,
};

struct DataTypeInfo {
  DataType type;
  std::string_view name;  // the KServe protocol name
  size_t size;            // bytes per element; 0 for BYTES
};
inline constexpr std::array<DataTypeInfo, 14> kDataTypes = {{
    {DataType::kBool, "BOOL", 1},
    {DataType::kUint8, "UINT8", 1},
    {DataType::kUint16, "UINT16", 2},
    {DataType::kUint32, "UINT32", 4},
    {DataType::kUint64, "UINT64", 8},
    {DataType::kInt8, "INT8", 1},
    {DataType::kInt16, "INT16", 2},
    {DataType::kInt32, "INT32", 4},
    {DataType::kInt64, "INT64", 8},
    {DataType::kFp16, "FP16", 2},
    {DataType::kFp32, "FP32", 4},
    {DataType::kFp64, "FP64", 8},
    {DataType::kBytes, "BYTES", 0},
    {DataType::kBf16, "BF16", 2},
}};

inline std::string_view DataTypeName(DataType type) {
  for (const auto& t : kDataTypes)
    if (t.type == type) return t.name;
  return "INVALID";
}
inline DataType DataTypeFromName(std::string_view name) {
  for (const auto& t : kDataTypes)
    if (t.name == name) return t.type;
  return DataType::kInvalid;
}
inline size_t DataTypeSize(DataType type) {
  for (const auto& t : kDataTypes)
    if (t.type == type) return t.size;
  return 0;
}

// "[2,-1,3]".
inline std::string ShapeString(const int64_t* dims, size_t rank) {
  std::string s = "[";
  for (size_t i = 0; i < rank; ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}
inline std::string ShapeString(const std::vector<int64_t>& shape) {
  return ShapeString(shape.data(), shape.size());
}

// Elements of a shape; -1 when a dimension is negative or the product overflows int64.
inline int64_t ElementCount(const int64_t* shape, size_t rank) {
  int64_t count = 1;
  for (size_t i = 0; i < rank; ++i) {
    if (shape[i] < 0) return -1;
    if (__builtin_mul_overflow(count, shape[i], &count)) return -1;
  }
  return count;
}
inline int64_t ElementCount(const std::vector<int64_t>& shape) {
  return ElementCount(shape.data(), shape.size());
}

// Gives the one -1 of 'shape' the size that makes it hold 'elements'; false (shape unchanged) when
// none does. A shape without -1 is left as it is (true).
inline bool FillVariableDimension(std::vector<int64_t>& shape, int64_t elements) {
  int64_t known = 1;
  size_t variable = shape.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] >= 0) {
      if (__builtin_mul_overflow(known, shape[d], &known)) return false;
    } else if (variable == shape.size()) {
      variable = d;
    } else {
      return false;
    }
  }
  if (variable == shape.size()) return true;
  if (known == 0 || elements < 0 || elements % known != 0) return false;
  shape[variable] = elements / known;
  return true;
}

// Bytes of a fixed-size tensor; -1 for invalid shapes, BYTES/INVALID types and overflow.
inline int64_t TensorByteSize(DataType type, const int64_t* shape, size_t rank) {
  const int64_t elements = ElementCount(shape, rank);
  const auto size = static_cast<int64_t>(DataTypeSize(type));
  int64_t bytes = 0;
  if (elements < 0 || size == 0 || __builtin_mul_overflow(elements, size, &bytes)) return -1;
  return bytes;
}
inline int64_t TensorByteSize(DataType type, const std::vector<int64_t>& shape) {
  return TensorByteSize(type, shape.data(), shape.size());
}

namespace detail {
template <typename T>
inline double Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return static_cast<double>(v);
}
}  // namespace detail

// One element at 'p' (little-endian, any alignment) as a double; FP16/BF16 widened, BOOL 0/1,
// BYTES 0.
inline double ElementAsDouble(DataType type, const uint8_t* p) {
  switch (type) {
    case DataType::kBool:
      return *p ? 1.0 : 0.0;
    case DataType::kUint8:
      return *p;
    case DataType::kInt8:
      return static_cast<int8_t>(*p);
    case DataType::kUint16:
      return detail::Load<uint16_t>(p);
    case DataType::kInt16:
      return detail::Load<int16_t>(p);
    case DataType::kUint32:
      return detail::Load<uint32_t>(p);
    case DataType::kInt32:
      return detail::Load<int32_t>(p);
    case DataType::kUint64:
      return detail::Load<uint64_t>(p);
    case DataType::kInt64:
      return detail::Load<int64_t>(p);
    case DataType::kFp32:
      return detail::Load<float>(p);
    case DataType::kFp64:
      return detail::Load<double>(p);
    case DataType::kFp16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return HalfToFloat(v);
    }
    case DataType::kBf16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return Bf16ToFloat(v);
    }
    default:
      return 0;
  }
}

// ---- BYTES tensors ------------------------------------------------------------------------------
// A serialized BYTES tensor is its elements in row-major order, each a 4-byte little-endian
// length followed by that many bytes (the KServe binary format). The one codec of the project.

inline void AppendBytesElement(std::vector<uint8_t>& out, std::string_view element) {
  const auto n = static_cast<uint32_t>(element.size());
  const uint8_t prefix[4] = {static_cast<uint8_t>(n), static_cast<uint8_t>(n >> 8),
                             static_cast<uint8_t>(n >> 16), static_cast<uint8_t>(n >> 24)};
  out.insert(out.end(), prefix, prefix + 4);
  out.insert(out.end(), element.begin(), element.end());
}

// Calls fn(element, end_offset) for each element; false when a length runs past the end (the
// elements before it have been visited) or fn returns false.
template <typename Fn>
bool ForEachBytesElement(const uint8_t* data, size_t size, Fn&& fn) {
  size_t offset = 0;
  while (offset < size) {
    if (size - offset < 4) return false;
    const uint32_t n = static_cast<uint32_t>(data[offset]) |
                       (static_cast<uint32_t>(data[offset + 1]) << 8) |
                       (static_cast<uint32_t>(data[offset + 2]) << 16) |
                       (static_cast<uint32_t>(data[offset + 3]) << 24);
    offset += 4;
    if (size - offset < n) return false;
    const std::string_view element(reinterpret_cast<const char*>(data + offset), n);
    offset += n;
    if (!fn(element, offset)) return false;
  }
  return true;
}

// Elements in a serialized BYTES tensor; -1 when the lengths do not tile the buffer.
inline int64_t CountBytesElements(const uint8_t* data, size_t size) {
  int64_t count = 0;
  const bool ok = ForEachBytesElement(data, size, [&](std::string_view, size_t) {
    ++count;
    return true;
  });
  return ok ? count : -1;
}

// ---- Status (nereid/status.h) and NereidError ---------------------------------------------------

using ::nereid::Cancelled;
using ::nereid::Internal;
using ::nereid::InvalidArgument;
using ::nereid::NotFound;
using ::nereid::Status;
using ::nereid::StatusOr;
using ::nereid::Unavailable;
using ::nereid::Unsupported;

// A new NereidError for the server (NULL for Ok).
inline NereidError* ToError(const Status& s) {
  if (s.ok()) return nullptr;
  NereidErrorCode code = NEREID_ERROR_INVALID_ARG;
  switch (s.code()) {
    case Status::Code::kNotFound:
      code = NEREID_ERROR_NOT_FOUND;
      break;
    case Status::Code::kUnavailable:
      code = NEREID_ERROR_UNAVAILABLE;
      break;
    case Status::Code::kUnsupported:
      code = NEREID_ERROR_UNSUPPORTED;
      break;
    case Status::Code::kInternal:
      code = NEREID_ERROR_INTERNAL;
      break;
    case Status::Code::kCancelled:
      code = NEREID_ERROR_CANCELLED;
      break;
    default:
      break;
  }
  return NereidErrorNew(code, s.message().c_str());
}

// Takes a server error and turns it into a Status (NULL -> Ok).
inline Status FromError(NereidError* e) {
  if (e == nullptr) return Status::Ok();
  Status::Code code = Status::Code::kInternal;
  switch (NereidErrorGetCode(e)) {
    case NEREID_ERROR_INVALID_ARG:
      code = Status::Code::kInvalidArgument;
      break;
    case NEREID_ERROR_NOT_FOUND:
      code = Status::Code::kNotFound;
      break;
    case NEREID_ERROR_UNAVAILABLE:
      code = Status::Code::kUnavailable;
      break;
    case NEREID_ERROR_UNSUPPORTED:
      code = Status::Code::kUnsupported;
      break;
    case NEREID_ERROR_CANCELLED:
      code = Status::Code::kCancelled;
      break;
    default:
      break;
  }
  Status s(code, NereidErrorGetMessage(e));
  NereidErrorDelete(e);
  return s;
}

// ---- Version, logging, boundary -----------------------------------------------------------------

// For NereidBackendInitialize: the server must speak this header's major version and at least its
// minor one.
inline Status CheckServerVersion() {
  const uint32_t server = NereidServerApiVersion();
  if (NEREID_API_MAJOR(server) != NEREID_API_MAJOR(NEREID_BACKEND_API_VERSION) ||
      NEREID_API_MINOR(server) < NEREID_API_MINOR(NEREID_BACKEND_API_VERSION))
    return Unsupported(
        "backend built for API " + std::to_string(NEREID_API_MAJOR(NEREID_BACKEND_API_VERSION)) +
        "." + std::to_string(NEREID_API_MINOR(NEREID_BACKEND_API_VERSION)) + ", server speaks " +
        std::to_string(NEREID_API_MAJOR(server)) + "." + std::to_string(NEREID_API_MINOR(server)));
  return Status::Ok();
}

inline void Log(NereidLogLevel level, const std::string& message,
                const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  NereidLog(level, file, line, message.c_str());
}

// Runs 'body' (returning Status) and converts its result, or any exception, into a NereidError.
template <typename Body>
NereidError* Guard(Body&& body) noexcept {
  try {
    return ToError(body());
  } catch (const std::exception& e) {
    return NereidErrorNew(NEREID_ERROR_INTERNAL, e.what());
  } catch (...) {
    return NereidErrorNew(NEREID_ERROR_INTERNAL, "unknown exception in backend");
  }
}

// ---- Requests -----------------------------------------------------------------------------------

inline StatusOr<NereidTensor> Input(const NereidRequest* request, uint32_t index) {
  NereidTensor t{};
  if (NereidError* e = NereidRequestInput(request, index, &t)) return FromError(e);
  return t;
}
inline StatusOr<NereidTensor> Input(const NereidRequest* request, const char* name) {
  NereidTensor t{};
  if (NereidError* e = NereidRequestInputByName(request, name, &t)) return FromError(e);
  return t;
}
inline std::vector<int64_t> Shape(const NereidTensor& t) {
  return std::vector<int64_t>(t.shape, t.shape + t.dims_count);
}
// The outputs a request asked for.
inline std::vector<std::string> RequestedOutputs(const NereidRequest* request) {
  std::vector<std::string> names;
  for (uint32_t i = 0; i < NereidRequestOutputCount(request); ++i)
    names.emplace_back(NereidRequestOutputName(request, i));
  return names;
}
// Allocates a host-addressable output (preferring 'preferred'); what the server gave is in the
// returned buffer.
inline StatusOr<NereidBuffer> AllocateOutput(NereidRequest* request, const std::string& name,
                                             DataType type, const std::vector<int64_t>& shape,
                                             uint64_t byte_size,
                                             NereidMemoryType preferred = NEREID_MEMORY_CPU) {
  NereidBuffer buffer{};
  if (NereidError* e = NereidRequestOutputAllocate(
          request, name.c_str(), static_cast<NereidDataType>(type), shape.data(),
          static_cast<uint32_t>(shape.size()), byte_size, preferred, 0, &buffer))
    return FromError(e);
  if (buffer.memory_type == NEREID_MEMORY_GPU)
    return Internal("output '" + name + "' was placed on a GPU; this helper is for host memory");
  return buffer;
}
inline void Complete(NereidRequest* request, const Status& status) {
  NereidRequestComplete(request, ToError(status));
}

// NereidInstanceExecute's body, written once: runs 'execute(failed)' (a Status for the whole batch;
// 'failed' has one Status per request, for failures of one request alone) with every exception
// caught. An error returns to the server, which fails the whole batch (the backend took none of
// the requests); otherwise each request completes with its own status.
template <typename Execute>
NereidError* ExecuteRequests(NereidRequest** requests, uint32_t count, Execute&& execute) {
  std::vector<Status> failed(count);
  NereidError* error = Guard([&] { return execute(failed); });
  if (error != nullptr) return error;
  for (uint32_t r = 0; r < count; ++r) Complete(requests[r], failed[r]);
  return nullptr;
}

// ---- A batch backend's exports, written once ----------------------------------------------------
//
// A backend whose instances run each batch to completion inside NereidInstanceExecute describes
// itself as one type and writes NEREID_BATCH_BACKEND(Type) once, at global scope:
//
//   struct MyBackend {
//     using Model = MyModel;        // one per model version (NereidModelState)
//     using Instance = MyInstance;  // one per instance (NereidInstanceState)
//     static constexpr const char* kPlatforms = "";          // NereidBackendPlatforms
//     static constexpr const char* kModelFile = "model.my";  // NereidBackendModelFile
//     static Status Initialize();                            // once, after the version check
//     static StatusOr<std::unique_ptr<Model>> LoadModel(NereidModel* model);
//     static StatusOr<std::unique_ptr<Instance>> CreateInstance(NereidInstance* instance,
//                                                               Model& model);
//     // One batch: a Status for the whole batch, 'failed' one per request (ExecuteRequests).
//     static Status Execute(const Model& model, Instance& instance, NereidInstance* handle,
//                           NereidRequest** requests, uint32_t count, std::vector<Status>& failed);
//   };
//
// The optional exports (NereidBackendAliases, NereidBackendSupportsGpu, NereidModelAbort) are
// written beside it; states are deleted at finalize.
namespace batch {

template <typename B>
NereidError* BackendInitialize() {
  return Guard([]() -> Status {
    RETURN_IF_ERROR(CheckServerVersion());
    return B::Initialize();
  });
}

template <typename B>
NereidError* ModelInitialize(NereidModel* model) {
  return Guard([&]() -> Status {
    ASSIGN_OR_RETURN(std::unique_ptr<typename B::Model> state, B::LoadModel(model));
    NereidModelSetState(model, state.release());
    return Status::Ok();
  });
}

template <typename B>
NereidError* ModelFinalize(NereidModel* model) {
  delete static_cast<typename B::Model*>(NereidModelState(model));
  NereidModelSetState(model, nullptr);
  return nullptr;
}

template <typename B>
NereidError* InstanceInitialize(NereidInstance* instance) {
  return Guard([&]() -> Status {
    auto* model = static_cast<typename B::Model*>(NereidModelState(NereidInstanceModel(instance)));
    ASSIGN_OR_RETURN(std::unique_ptr<typename B::Instance> state,
                     B::CreateInstance(instance, *model));
    NereidInstanceSetState(instance, state.release());
    return Status::Ok();
  });
}

template <typename B>
NereidError* InstanceFinalize(NereidInstance* instance) {
  delete static_cast<typename B::Instance*>(NereidInstanceState(instance));
  NereidInstanceSetState(instance, nullptr);
  return nullptr;
}

// Synchronous: every request is complete when it returns.
template <typename B>
NereidError* InstanceExecute(NereidInstance* instance, NereidRequest** requests, uint32_t count) {
  const auto* model =
      static_cast<const typename B::Model*>(NereidModelState(NereidInstanceModel(instance)));
  auto* state = static_cast<typename B::Instance*>(NereidInstanceState(instance));
  return ExecuteRequests(requests, count, [&](std::vector<Status>& failed) {
    return B::Execute(*model, *state, instance, requests, count, failed);
  });
}

}  // namespace batch

}  // namespace nereid::backend

// The required exports of a batch backend, plus its platforms and model file (see "A batch
// backend's exports" above).
#define NEREID_BATCH_BACKEND(B)                                                                \
  extern "C" {                                                                                 \
  NEREID_EXPORT uint32_t NereidBackendApiVersion(void) { return NEREID_BACKEND_API_VERSION; }  \
  NEREID_EXPORT NereidError* NereidBackendInitialize(void) {                                   \
    return ::nereid::backend::batch::BackendInitialize<B>();                                   \
  }                                                                                            \
  NEREID_EXPORT const char* NereidBackendPlatforms(void) { return B::kPlatforms; }             \
  NEREID_EXPORT const char* NereidBackendModelFile(void) { return B::kModelFile; }             \
  NEREID_EXPORT NereidError* NereidModelInitialize(NereidModel* model) {                       \
    return ::nereid::backend::batch::ModelInitialize<B>(model);                                \
  }                                                                                            \
  NEREID_EXPORT NereidError* NereidModelFinalize(NereidModel* model) {                         \
    return ::nereid::backend::batch::ModelFinalize<B>(model);                                  \
  }                                                                                            \
  NEREID_EXPORT NereidError* NereidInstanceInitialize(NereidInstance* instance) {              \
    return ::nereid::backend::batch::InstanceInitialize<B>(instance);                          \
  }                                                                                            \
  NEREID_EXPORT NereidError* NereidInstanceFinalize(NereidInstance* instance) {                \
    return ::nereid::backend::batch::InstanceFinalize<B>(instance);                            \
  }                                                                                            \
  NEREID_EXPORT NereidError* NereidInstanceExecute(NereidInstance* instance,                   \
                                                   NereidRequest** requests, uint32_t count) { \
    return ::nereid::backend::batch::InstanceExecute<B>(instance, requests, count);            \
  }                                                                                            \
  }
