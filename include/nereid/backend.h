/* Nereid backend C ABI.
 *
 * A backend is a shared library named libnereid_backend_<name>.so that exports the functions in the
 * "Backend exports" section. The server exports the functions in the "Server API" section; a
 * backend calls them and must not link against any Nereid library itself (symbols resolve at dlopen
 * time).
 *
 * Conventions, which hold for every function below:
 *  - A NereidError* return of NULL means success. A non-NULL error returned by a backend export is
 *    owned by the server afterwards; a non-NULL error returned by a server function is owned by the
 *    caller, who releases it with NereidErrorDelete (or hands it on to the server, which takes it).
 *  - Handles (NereidModel, NereidInstance, NereidRequest) are owned by the server. They stay valid
 * for the duration described on the function that hands them out; a backend never frees them.
 *  - Strings returned by the server are NUL-terminated and live as long as the handle they came
 * from.
 *  - No function throws; C++ backends must catch everything at the boundary.
 *
 * Compared to tritonbackend.h this ABI is deliberately smaller: execution is synchronous (the
 * server completes every request when NereidInstanceExecute returns), outputs are allocated by the
 * server on request, and there is no separate response object.
 */
#ifndef NEREID_BACKEND_H_
#define NEREID_BACKEND_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change. The server refuses a backend whose NereidBackendApiVersion()
 * differs in the major part (the upper 16 bits). */
#define NEREID_BACKEND_API_VERSION ((1u << 16) | 0u)

#if defined(_WIN32)
#define NEREID_EXPORT __declspec(dllexport)
#else
#define NEREID_EXPORT __attribute__((visibility("default")))
#endif

/* Same numbering as Triton's model_config.proto DataType (TYPE_STRING is BYTES here). */
typedef enum {
  NEREID_TYPE_INVALID = 0,
  NEREID_TYPE_BOOL = 1,
  NEREID_TYPE_UINT8 = 2,
  NEREID_TYPE_UINT16 = 3,
  NEREID_TYPE_UINT32 = 4,
  NEREID_TYPE_UINT64 = 5,
  NEREID_TYPE_INT8 = 6,
  NEREID_TYPE_INT16 = 7,
  NEREID_TYPE_INT32 = 8,
  NEREID_TYPE_INT64 = 9,
  NEREID_TYPE_FP16 = 10,
  NEREID_TYPE_FP32 = 11,
  NEREID_TYPE_FP64 = 12,
  NEREID_TYPE_BYTES = 13,
  NEREID_TYPE_BF16 = 14
} NereidDataType;

typedef enum {
  NEREID_ERROR_INVALID_ARG = 1, /* client's fault: HTTP 400 */
  NEREID_ERROR_NOT_FOUND = 2,   /* HTTP 404 */
  NEREID_ERROR_UNAVAILABLE = 3, /* HTTP 503 */
  NEREID_ERROR_UNSUPPORTED = 4, /* HTTP 501 */
  NEREID_ERROR_INTERNAL = 5     /* HTTP 500 */
} NereidErrorCode;

typedef enum { NEREID_INSTANCE_CPU = 0, NEREID_INSTANCE_GPU = 1 } NereidInstanceKind;

typedef enum {
  NEREID_LOG_INFO = 0,
  NEREID_LOG_WARNING = 1,
  NEREID_LOG_ERROR = 2,
  NEREID_LOG_VERBOSE = 3
} NereidLogLevel;

typedef struct NereidError NereidError;
typedef struct NereidModel NereidModel;
typedef struct NereidInstance NereidInstance;
typedef struct NereidRequest NereidRequest;

/* A borrowed view of one tensor. 'data' is CPU memory, not necessarily aligned to the element size.
 */
typedef struct {
  const char* name;
  NereidDataType datatype;
  const int64_t* shape;
  uint32_t dims_count;
  const void* data;
  uint64_t byte_size;
} NereidTensor;

/* ---------------------------------------------------------------------------------------------
 * Server API (exported by the nereid process). Thread-safe unless noted.
 * ------------------------------------------------------------------------------------------- */

/* Creates an error; the caller owns it. 'message' is copied. */
NereidError* NereidErrorNew(NereidErrorCode code, const char* message);
NereidErrorCode NereidErrorGetCode(const NereidError* error);
const char* NereidErrorGetMessage(const NereidError* error);
void NereidErrorDelete(NereidError* error);

/* Writes one line to the server log. */
void NereidLog(NereidLogLevel level, const char* file, int line, const char* message);

/* Model handle: valid from NereidModelInitialize until NereidModelFinalize returns. */
const char* NereidModelName(const NereidModel* model);
int64_t NereidModelVersion(const NereidModel* model);
/* Directory of this version: <repository>/<model>/<version>. */
const char* NereidModelVersionPath(const NereidModel* model);
/* The model configuration as Triton's JSON (the shape GET /v2/models/<m>/config returns). */
const char* NereidModelConfigJson(const NereidModel* model);
/* Replaces the configuration (auto-complete). Only allowed from NereidModelInitialize; the server
 * validates the result after NereidModelInitialize returns. 'json' is copied. */
NereidError* NereidModelSetConfigJson(NereidModel* model, const char* json);
/* One opaque pointer per model for the backend's own state; the backend frees it in Finalize. */
void NereidModelSetState(NereidModel* model, void* state);
void* NereidModelState(const NereidModel* model);

/* Instance handle: valid from NereidInstanceInitialize until NereidInstanceFinalize returns. Each
 * instance is driven by exactly one server thread, so instance calls never race with each other. */
NereidModel* NereidInstanceModel(const NereidInstance* instance);
const char* NereidInstanceName(const NereidInstance* instance);
NereidInstanceKind NereidInstanceGetKind(const NereidInstance* instance);
int32_t NereidInstanceDeviceId(const NereidInstance* instance);
void NereidInstanceSetState(NereidInstance* instance, void* state);
void* NereidInstanceState(const NereidInstance* instance);

/* Request handle: valid only inside the NereidInstanceExecute call that received it. Inputs have
 * already been validated against the model configuration (names, datatypes, shapes, byte sizes). */
uint32_t NereidRequestInputCount(const NereidRequest* request);
NereidError* NereidRequestInput(const NereidRequest* request, uint32_t index, NereidTensor* tensor);
NereidError* NereidRequestInputByName(const NereidRequest* request, const char* name,
                                      NereidTensor* tensor);
/* The outputs this request needs (all of the model's outputs when the client named none). */
uint32_t NereidRequestOutputCount(const NereidRequest* request);
const char* NereidRequestOutputName(const NereidRequest* request, uint32_t index);
/* Allocates the buffer for one output; the server owns it and sends it. For BYTES outputs
 * 'byte_size' is the serialized size (4-byte little-endian length before each element). Calling it
 * twice for one output is an error. */
NereidError* NereidRequestOutputAllocate(NereidRequest* request, const char* name,
                                         NereidDataType datatype, const int64_t* shape,
                                         uint32_t dims_count, uint64_t byte_size, void** buffer);
/* Fails this one request (the others in the batch still succeed). Takes ownership of 'error'. */
void NereidRequestSetError(NereidRequest* request, NereidError* error);

/* ---------------------------------------------------------------------------------------------
 * Backend exports. Required unless marked optional.
 * ------------------------------------------------------------------------------------------- */

/* Returns NEREID_BACKEND_API_VERSION as the backend was compiled. Called first, once. */
NEREID_EXPORT uint32_t NereidBackendApiVersion(void);
/* Optional. Called once after loading, before any model. */
NEREID_EXPORT NereidError* NereidBackendInitialize(void);
/* Optional. Called once before unloading the library. */
NEREID_EXPORT NereidError* NereidBackendFinalize(void);

/* Load one model version: read files, check them against the config, optionally auto-complete the
 * config with NereidModelSetConfigJson. Called from a loader thread; never concurrently for one
 * model. */
NEREID_EXPORT NereidError* NereidModelInitialize(NereidModel* model);
NEREID_EXPORT NereidError* NereidModelFinalize(NereidModel* model);

/* Create one execution instance of a model. Called after NereidModelInitialize succeeded. */
NEREID_EXPORT NereidError* NereidInstanceInitialize(NereidInstance* instance);
NEREID_EXPORT NereidError* NereidInstanceFinalize(NereidInstance* instance);

/* Execute 'count' requests (a batch; count >= 1). Per-request failures go through
 * NereidRequestSetError; a returned error fails every request of the call. Called from the
 * instance's own thread. */
NEREID_EXPORT NereidError* NereidInstanceExecute(NereidInstance* instance, NereidRequest** requests,
                                                 uint32_t count);

#ifdef __cplusplus
}
#endif

#endif /* NEREID_BACKEND_H_ */
