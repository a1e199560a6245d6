// The part of ONNX Runtime's C API this backend calls, declared here from the API's documented
// layout (docs/onnxruntime.md says why: Debian 12 has no ONNX Runtime headers; the library itself
// comes from PyPI's onnxruntime wheel and is loaded at run time).
//
// The C API is one entry point, OrtGetApiBase(), which hands out a table of function pointers
// (OrtApi) for a requested API version. Versions only ever append entries, so a table laid out as
// of version kApiVersion is valid for every library that accepts that version. Entries this backend
// does not call are kept as placeholders so that every pointer sits at its documented index; the
// static_asserts below pin each one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nereid::ort {

// ONNX Runtime 1.13's API version: every entry used here exists since then, but the execution
// providers' (from index 170), which need kProvidersApiVersion (1.17: OpenVINO's V2 options).
inline constexpr uint32_t kApiVersion = 13;
inline constexpr uint32_t kProvidersApiVersion = 17;

struct OrtStatus;
struct OrtEnv;
struct OrtSession;
struct OrtSessionOptions;
struct OrtRunOptions;
struct OrtValue;
struct OrtTypeInfo;
struct OrtTensorTypeAndShapeInfo;
struct OrtMemoryInfo;
struct OrtAllocator;
struct OrtTensorRTProviderOptionsV2;
struct OrtCUDAProviderOptionsV2;

// ONNXTensorElementDataType.
enum ElementType : int {
  kUndefined = 0,
  kFloat = 1,
  kUint8 = 2,
  kInt8 = 3,
  kUint16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
  kUint32 = 12,
  kUint64 = 13,
  kComplex64 = 14,
  kComplex128 = 15,
  kBfloat16 = 16,
};

enum OnnxType : int { kTypeUnknown = 0, kTypeTensor = 1 };  // ONNXType (others: sequence, map...)
enum LoggingLevel : int { kVerbose = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };
enum ExecutionMode : int { kSequential = 0, kParallel = 1 };
enum GraphOptimizationLevel : int {
  kDisableAll = 0,
  kEnableBasic = 1,
  kEnableExtended = 2,
  kEnableAll = 99
};
enum AllocatorType : int { kDeviceAllocator = 0, kArenaAllocator = 1 };
enum MemType : int { kMemTypeDefault = 0 };

using LoggingFunction = void (*)(void* param, LoggingLevel severity, const char* category,
                                 const char* logid, const char* code_location, const char* message);

#define NEREID_ORT_UNUSED(first, last) void* unused_##first##_##last[(last) - (first) + 1]

// OrtApi, entries 0..275 (indices in the comments).
struct Api {
  OrtStatus* (*CreateStatus)(int code, const char* msg) noexcept;                         // 0
  int (*GetErrorCode)(const OrtStatus* status) noexcept;                                  // 1
  const char* (*GetErrorMessage)(const OrtStatus* status) noexcept;                       // 2
  OrtStatus* (*CreateEnv)(LoggingLevel level, const char* logid, OrtEnv** out) noexcept;  // 3
  OrtStatus* (*CreateEnvWithCustomLogger)(LoggingFunction fn, void* param, LoggingLevel level,
                                          const char* logid, OrtEnv** out) noexcept;  // 4
  NEREID_ORT_UNUSED(5, 5);
  OrtStatus* (*DisableTelemetryEvents)(const OrtEnv* env) noexcept;  // 6
  OrtStatus* (*CreateSession)(const OrtEnv* env, const char* path, const OrtSessionOptions* options,
                              OrtSession** out) noexcept;  // 7
  NEREID_ORT_UNUSED(8, 8);
  OrtStatus* (*Run)(OrtSession* session, const OrtRunOptions* options,
                    const char* const* input_names, const OrtValue* const* inputs,
                    size_t input_count, const char* const* output_names, size_t output_count,
                    OrtValue** outputs) noexcept;                        // 9
  OrtStatus* (*CreateSessionOptions)(OrtSessionOptions** out) noexcept;  // 10
  NEREID_ORT_UNUSED(11, 12);
  OrtStatus* (*SetSessionExecutionMode)(OrtSessionOptions* o, ExecutionMode mode) noexcept;  // 13
  NEREID_ORT_UNUSED(14, 15);
  OrtStatus* (*EnableMemPattern)(OrtSessionOptions* o) noexcept;                    // 16
  OrtStatus* (*DisableMemPattern)(OrtSessionOptions* o) noexcept;                   // 17
  OrtStatus* (*EnableCpuMemArena)(OrtSessionOptions* o) noexcept;                   // 18
  OrtStatus* (*DisableCpuMemArena)(OrtSessionOptions* o) noexcept;                  // 19
  OrtStatus* (*SetSessionLogId)(OrtSessionOptions* o, const char* logid) noexcept;  // 20
  NEREID_ORT_UNUSED(21, 22);
  OrtStatus* (*SetSessionGraphOptimizationLevel)(OrtSessionOptions* o,
                                                 GraphOptimizationLevel level) noexcept;  // 23
  OrtStatus* (*SetIntraOpNumThreads)(OrtSessionOptions* o, int threads) noexcept;         // 24
  OrtStatus* (*SetInterOpNumThreads)(OrtSessionOptions* o, int threads) noexcept;         // 25
  NEREID_ORT_UNUSED(26, 29);
  OrtStatus* (*SessionGetInputCount)(const OrtSession* s, size_t* out) noexcept;   // 30
  OrtStatus* (*SessionGetOutputCount)(const OrtSession* s, size_t* out) noexcept;  // 31
  NEREID_ORT_UNUSED(32, 32);
  OrtStatus* (*SessionGetInputTypeInfo)(const OrtSession* s, size_t index,
                                        OrtTypeInfo** out) noexcept;  // 33
  OrtStatus* (*SessionGetOutputTypeInfo)(const OrtSession* s, size_t index,
                                         OrtTypeInfo** out) noexcept;  // 34
  NEREID_ORT_UNUSED(35, 35);
  OrtStatus* (*SessionGetInputName)(const OrtSession* s, size_t index, OrtAllocator* allocator,
                                    char** out) noexcept;  // 36
  OrtStatus* (*SessionGetOutputName)(const OrtSession* s, size_t index, OrtAllocator* allocator,
                                     char** out) noexcept;  // 37
  NEREID_ORT_UNUSED(38, 47);
  OrtStatus* (*CreateTensorAsOrtValue)(OrtAllocator* allocator, const int64_t* shape, size_t rank,
                                       ElementType type,
                                       OrtValue** out) noexcept;  // 48
  OrtStatus* (*CreateTensorWithDataAsOrtValue)(const OrtMemoryInfo* info, void* data, size_t bytes,
                                               const int64_t* shape, size_t rank, ElementType type,
                                               OrtValue** out) noexcept;                     // 49
  OrtStatus* (*IsTensor)(const OrtValue* value, int* out) noexcept;                          // 50
  OrtStatus* (*GetTensorMutableData)(OrtValue* value, void** out) noexcept;                  // 51
  OrtStatus* (*FillStringTensor)(OrtValue* value, const char* const* s, size_t n) noexcept;  // 52
  OrtStatus* (*GetStringTensorDataLength)(const OrtValue* value, size_t* out) noexcept;      // 53
  OrtStatus* (*GetStringTensorContent)(const OrtValue* value, void* s, size_t s_len,
                                       size_t* offsets, size_t offsets_len) noexcept;  // 54
  OrtStatus* (*CastTypeInfoToTensorInfo)(const OrtTypeInfo* info,
                                         const OrtTensorTypeAndShapeInfo** out) noexcept;  // 55
  OrtStatus* (*GetOnnxTypeFromTypeInfo)(const OrtTypeInfo* info, OnnxType* out) noexcept;  // 56
  NEREID_ORT_UNUSED(57, 59);
  OrtStatus* (*GetTensorElementType)(const OrtTensorTypeAndShapeInfo* info,
                                     ElementType* out) noexcept;  // 60
  OrtStatus* (*GetDimensionsCount)(const OrtTensorTypeAndShapeInfo* info,
                                   size_t* out) noexcept;  // 61
  OrtStatus* (*GetDimensions)(const OrtTensorTypeAndShapeInfo* info, int64_t* dims,
                              size_t count) noexcept;  // 62
  NEREID_ORT_UNUSED(63, 63);
  OrtStatus* (*GetTensorShapeElementCount)(const OrtTensorTypeAndShapeInfo* info,
                                           size_t* out) noexcept;  // 64
  OrtStatus* (*GetTensorTypeAndShape)(const OrtValue* value,
                                      OrtTensorTypeAndShapeInfo** out) noexcept;  // 65
  NEREID_ORT_UNUSED(66, 68);
  OrtStatus* (*CreateCpuMemoryInfo)(AllocatorType type, MemType mem_type,
                                    OrtMemoryInfo** out) noexcept;  // 69
  NEREID_ORT_UNUSED(70, 75);
  OrtStatus* (*AllocatorFree)(OrtAllocator* allocator, void* p) noexcept;  // 76
  NEREID_ORT_UNUSED(77, 77);
  OrtStatus* (*GetAllocatorWithDefaultOptions)(OrtAllocator** out) noexcept;  // 78
  NEREID_ORT_UNUSED(79, 91);
  void (*ReleaseEnv)(OrtEnv*) noexcept;                                        // 92
  void (*ReleaseStatus)(OrtStatus*) noexcept;                                  // 93
  void (*ReleaseMemoryInfo)(OrtMemoryInfo*) noexcept;                          // 94
  void (*ReleaseSession)(OrtSession*) noexcept;                                // 95
  void (*ReleaseValue)(OrtValue*) noexcept;                                    // 96
  void (*ReleaseRunOptions)(OrtRunOptions*) noexcept;                          // 97
  void (*ReleaseTypeInfo)(OrtTypeInfo*) noexcept;                              // 98
  void (*ReleaseTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo*) noexcept;  // 99
  void (*ReleaseSessionOptions)(OrtSessionOptions*) noexcept;                  // 100
  NEREID_ORT_UNUSED(101, 124);
  OrtStatus* (*GetAvailableProviders)(char*** names, int* count) noexcept;    // 125
  OrtStatus* (*ReleaseAvailableProviders)(char** names, int count) noexcept;  // 126
  NEREID_ORT_UNUSED(127, 129);
  OrtStatus* (*AddSessionConfigEntry)(OrtSessionOptions* o, const char* key,
                                      const char* value) noexcept;  // 130
  // ---- execution providers (kProvidersApiVersion) ----
  NEREID_ORT_UNUSED(131, 169);
  OrtStatus* (*SessionOptionsAppendExecutionProvider_TensorRT_V2)(
      OrtSessionOptions* o, const OrtTensorRTProviderOptionsV2* trt) noexcept;               // 170
  OrtStatus* (*CreateTensorRTProviderOptions)(OrtTensorRTProviderOptionsV2** out) noexcept;  // 171
  OrtStatus* (*UpdateTensorRTProviderOptions)(OrtTensorRTProviderOptionsV2* trt,
                                              const char* const* keys, const char* const* values,
                                              size_t count) noexcept;  // 172
  NEREID_ORT_UNUSED(173, 173);
  void (*ReleaseTensorRTProviderOptions)(OrtTensorRTProviderOptionsV2*) noexcept;  // 174
  NEREID_ORT_UNUSED(175, 203);
  OrtStatus* (*SessionOptionsAppendExecutionProvider_CUDA_V2)(
      OrtSessionOptions* o, const OrtCUDAProviderOptionsV2* cuda) noexcept;          // 204
  OrtStatus* (*CreateCUDAProviderOptions)(OrtCUDAProviderOptionsV2** out) noexcept;  // 205
  OrtStatus* (*UpdateCUDAProviderOptions)(OrtCUDAProviderOptionsV2* cuda, const char* const* keys,
                                          const char* const* values,
                                          size_t count) noexcept;  // 206
  NEREID_ORT_UNUSED(207, 207);
  void (*ReleaseCUDAProviderOptions)(OrtCUDAProviderOptionsV2*) noexcept;  // 208
  NEREID_ORT_UNUSED(209, 274);
  OrtStatus* (*SessionOptionsAppendExecutionProvider_OpenVINO_V2)(OrtSessionOptions* o,
                                                                  const char* const* keys,
                                                                  const char* const* values,
                                                                  size_t count) noexcept;  // 275
};

#undef NEREID_ORT_UNUSED

#define NEREID_ORT_INDEX(member, index) \
  static_assert(offsetof(Api, member) == (index) * sizeof(void*), #member " is not at " #index)
NEREID_ORT_INDEX(GetErrorMessage, 2);
NEREID_ORT_INDEX(CreateEnvWithCustomLogger, 4);
NEREID_ORT_INDEX(DisableTelemetryEvents, 6);
NEREID_ORT_INDEX(CreateSession, 7);
NEREID_ORT_INDEX(Run, 9);
NEREID_ORT_INDEX(CreateSessionOptions, 10);
NEREID_ORT_INDEX(SetSessionExecutionMode, 13);
NEREID_ORT_INDEX(EnableMemPattern, 16);
NEREID_ORT_INDEX(DisableCpuMemArena, 19);
NEREID_ORT_INDEX(SetSessionLogId, 20);
NEREID_ORT_INDEX(SetSessionGraphOptimizationLevel, 23);
NEREID_ORT_INDEX(SetInterOpNumThreads, 25);
NEREID_ORT_INDEX(SessionGetInputCount, 30);
NEREID_ORT_INDEX(SessionGetInputTypeInfo, 33);
NEREID_ORT_INDEX(SessionGetOutputTypeInfo, 34);
NEREID_ORT_INDEX(SessionGetInputName, 36);
NEREID_ORT_INDEX(SessionGetOutputName, 37);
NEREID_ORT_INDEX(CreateTensorAsOrtValue, 48);
NEREID_ORT_INDEX(CreateTensorWithDataAsOrtValue, 49);
NEREID_ORT_INDEX(GetTensorMutableData, 51);
NEREID_ORT_INDEX(GetStringTensorContent, 54);
NEREID_ORT_INDEX(GetOnnxTypeFromTypeInfo, 56);
NEREID_ORT_INDEX(GetTensorElementType, 60);
NEREID_ORT_INDEX(GetDimensions, 62);
NEREID_ORT_INDEX(GetTensorShapeElementCount, 64);
NEREID_ORT_INDEX(GetTensorTypeAndShape, 65);
NEREID_ORT_INDEX(CreateCpuMemoryInfo, 69);
NEREID_ORT_INDEX(AllocatorFree, 76);
NEREID_ORT_INDEX(GetAllocatorWithDefaultOptions, 78);
NEREID_ORT_INDEX(ReleaseEnv, 92);
NEREID_ORT_INDEX(ReleaseSessionOptions, 100);
NEREID_ORT_INDEX(GetAvailableProviders, 125);
NEREID_ORT_INDEX(ReleaseAvailableProviders, 126);
NEREID_ORT_INDEX(AddSessionConfigEntry, 130);
NEREID_ORT_INDEX(SessionOptionsAppendExecutionProvider_TensorRT_V2, 170);
NEREID_ORT_INDEX(UpdateTensorRTProviderOptions, 172);
NEREID_ORT_INDEX(ReleaseTensorRTProviderOptions, 174);
NEREID_ORT_INDEX(SessionOptionsAppendExecutionProvider_CUDA_V2, 204);
NEREID_ORT_INDEX(UpdateCUDAProviderOptions, 206);
NEREID_ORT_INDEX(ReleaseCUDAProviderOptions, 208);
NEREID_ORT_INDEX(SessionOptionsAppendExecutionProvider_OpenVINO_V2, 275);
#undef NEREID_ORT_INDEX

// OrtApiBase: what OrtGetApiBase() returns.
struct ApiBase {
  const Api* (*GetApi)(uint32_t version) noexcept;
  const char* (*GetVersionString)() noexcept;
};

}  // namespace nereid::ort
