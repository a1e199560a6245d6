/* Nereid backend C ABI. Its version is NEREID_BACKEND_API_VERSION below, stated nowhere else
 * (`nereid --version` prints it); each addition says "since" the minor version that brought it.
 *
 * A backend is a shared library named libnereid_backend_<name>.so that exports the functions in the
 * "Backend exports" section. The server exports the functions in the "Server API" section; a
 * backend calls them and links against no Nereid library (symbols resolve at dlopen time). The
 * header-only C++ helper nereid/backend_util.h wraps this ABI; docs/backend-abi.md walks through a
 * minimal backend.
 *
 * Conventions, which hold for every function below:
 *  - A NereidError* return of NULL means success. A non-NULL error returned by a backend export is
 *    owned by the server afterwards; a non-NULL error returned by a server function is owned by the
 *    caller, who releases it with NereidErrorDelete (or hands it on to the server, which takes it).
 *  - Handles (NereidModel, NereidInstance, NereidRequest) are owned by the server. They stay valid
 *    for the duration described on the function that hands them out; a backend never frees them.
 *  - Strings returned by the server are NUL-terminated and live as long as the handle they came
 *    from.
 *  - No function throws; C++ backends must catch everything at the boundary.
 *
 * Life of a request: the server hands a batch to NereidInstanceExecute. If Execute returns an
 * error, the backend has taken none of the requests and the server fails them all. If it returns
 * NULL, the backend owns every request of the batch and finishes each exactly once with
 * NereidRequestComplete, from any thread, before or after Execute returns. Until then the request
 * handle, its inputs and its allocated outputs stay valid.
 */
#ifndef NEREID_BACKEND_H_
#define NEREID_BACKEND_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Major in the upper 16 bits (bumped on any incompatible change), minor in the lower 16 (bumped
 * when functions are added). Both sides check: the server refuses a backend of another major or of
 * a newer minor than its own; a backend built with backend_util.h refuses a server of another
 * major or an older minor (NereidServerApiVersion). */
#define NEREID_BACKEND_API_VERSION ((2u << 16) | 10u)
#define NEREID_API_MAJOR(v) ((v) >> 16)
#define NEREID_API_MINOR(v) ((v)&0xffffu)

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
  NEREID_ERROR_INTERNAL = 5,    /* HTTP 500 */
  NEREID_ERROR_CANCELLED = 6    /* the client went away or cancelled */
} NereidErrorCode;

/* Where a buffer lives. CPU, CPU_PINNED (page-locked host memory) and SHM (a client's registered
 * shared-memory region) are host-addressable; GPU memory is on device 'device_id'. */
typedef enum {
  NEREID_MEMORY_CPU = 0,
  NEREID_MEMORY_CPU_PINNED = 1,
  NEREID_MEMORY_GPU = 2,
  NEREID_MEMORY_SHM = 3
} NereidMemoryType;

/* From the instance_group the instance was created for. MODEL (since 2.9): a KIND_MODEL group,
 * whose backend places the model itself (the ONNX Runtime backend on the accelerator that the
 * config parameter "nereid.device" names); backends that do not place models run it as CPU. */
typedef enum {
  NEREID_INSTANCE_CPU = 0,
  NEREID_INSTANCE_GPU = 1,
  NEREID_INSTANCE_MODEL = 2
} NereidInstanceKind;

typedef enum {
  NEREID_LOG_INFO = 0,
  NEREID_LOG_WARNING = 1,
  NEREID_LOG_ERROR = 2,
  NEREID_LOG_VERBOSE = 3
} NereidLogLevel;

/* Request flags (NereidRequestFlags): the client's sequence_start / sequence_end. */
#define NEREID_REQUEST_FLAG_SEQUENCE_START 1u
#define NEREID_REQUEST_FLAG_SEQUENCE_END 2u

/* NereidRequestSend flags. */
#define NEREID_RESPONSE_FINAL 1u

typedef enum {
  NEREID_PARAMETER_BOOL = 0,
  NEREID_PARAMETER_INT64 = 1,
  NEREID_PARAMETER_DOUBLE = 2,
  NEREID_PARAMETER_STRING = 3
} NereidParameterType;

typedef struct NereidError NereidError;
typedef struct NereidModel NereidModel;
typedef struct NereidInstance NereidInstance;
typedef struct NereidRequest NereidRequest;

/* A borrowed view of one tensor. Host-addressable data is aligned to the element size. */
typedef struct {
  const char* name;
  NereidDataType datatype;
  const int64_t* shape;
  uint32_t dims_count;
  const void* data;
  uint64_t byte_size;
  NereidMemoryType memory_type;
  int64_t device_id;
} NereidTensor;

/* Where an output buffer was placed (NereidRequestOutputAllocate). */
typedef struct {
  void* data;
  NereidMemoryType memory_type;
  int64_t device_id;
} NereidBuffer;

/* One request parameter (KServe "parameters"). BOOL is bool_value; INT64 int_value; DOUBLE
 * double_value; STRING string_value. */
typedef struct {
  const char* name;
  NereidParameterType type;
  int bool_value;
  int64_t int_value;
  double double_value;
  const char* string_value;
} NereidParameter;

/* ---------------------------------------------------------------------------------------------
 * Server API (exported by the nereid process). Thread-safe unless noted.
 * ------------------------------------------------------------------------------------------- */

/* The server's NEREID_BACKEND_API_VERSION. */
uint32_t NereidServerApiVersion(void);
/* The server's steady clock in nanoseconds (the clock of NereidRequestSetComputeTimes). */
uint64_t NereidNowNs(void);

/* Creates an error; the caller owns it. 'message' is copied. */
NereidError* NereidErrorNew(NereidErrorCode code, const char* message);
NereidErrorCode NereidErrorGetCode(const NereidError* error);
const char* NereidErrorGetMessage(const NereidError* error);
void NereidErrorDelete(NereidError* error);

/* Writes one line to the server log. */
void NereidLog(NereidLogLevel level, const char* file, int line, const char* message);
/* Nonzero when lines of 'level' reach the log now (since 2.3): for work done only to log. */
int NereidLogEnabled(NereidLogLevel level);

/* Memory for the backend's own use (since 2.1): staging buffers in CPU_PINNED memory from the
 * server's pinned pool (--pinned-memory-pool-byte-size), device buffers in GPU memory from the
 * device's CUDA pool (--cuda-memory-pool-byte-size). When the pool is full or absent the server
 * falls back (CPU_PINNED to ordinary CPU memory, GPU to a direct device allocation) and 'buffer'
 * says where the bytes really are. Released with NereidMemoryRelease(buffer->data). */
NereidError* NereidMemoryAllocate(NereidMemoryType type, int64_t device_id, uint64_t byte_size,
                                  NereidBuffer* buffer);
void NereidMemoryRelease(void* data);

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
/* Whether the model is decoupled (model_transaction_policy { decoupled: true }). */
int NereidModelIsDecoupled(const NereidModel* model);
/* Precision variants (since 2.8, Nereid's extension). From NereidModelInitialize a backend
 * declares the variants its instances can run one model in (e.g. "tf32", "bf16", "int8"), each
 * with its accuracy against the model's reference precision as the backend measured it on the
 * model's calibration inputs, and whether it passed the model's accuracy guard. The server profiles
 * the admitted ones (latency and energy per batch size) before the model is READY and picks one per
 * execution by its policy (docs/precision.md); the backend runs the batch in
 * NereidInstanceVariant's. The first admitted variant is the most accurate and the default. */
typedef struct NereidVariant {
  const char* name; /* copied */
  int admitted;     /* passed the accuracy guard */
  double
      top1_agreement; /* share of calibration rows whose arg-max matches the reference; < 0: n/a */
  double max_abs_error; /* over every calibration output element; < 0: not measured */
  double max_rel_error; /* |error| / max(|reference|, 1e-6); < 0: not measured */
  const char* detail;   /* why it was refused, or NULL; copied */
} NereidVariant;
NereidError* NereidModelSetVariants(NereidModel* model, const NereidVariant* variants,
                                    uint32_t count);
/* One opaque pointer per model for the backend's own state; the backend frees it in Finalize. */
void NereidModelSetState(NereidModel* model, void* state);
void* NereidModelState(const NereidModel* model);

/* Instance handle: valid from NereidInstanceInitialize until NereidInstanceFinalize returns. Each
 * instance is driven by exactly one server thread, so Execute calls of one instance never overlap.
 * The server calls NereidInstanceFinalize only after every request it handed to the instance was
 * completed. */
NereidModel* NereidInstanceModel(const NereidInstance* instance);
/* "<group name>_<index>", as Triton names instances. */
const char* NereidInstanceName(const NereidInstance* instance);
NereidInstanceKind NereidInstanceGetKind(const NereidInstance* instance);
/* The GPU of a GPU instance; 0 for CPU instances. */
int32_t NereidInstanceDeviceId(const NereidInstance* instance);
/* During NereidInstanceExecute (since 2.8): the index, among the variants the model declared with
 * NereidModelSetVariants, of the one this execution runs in; 0 when none were declared. */
uint32_t NereidInstanceVariant(const NereidInstance* instance);
/* During NereidInstanceInitialize (since 2.9): where the instance runs, for the statistics,
 * traces and logs ("openvino:CPU", "cuda:0", "cpu"), and what its config asked for; NULL
 * 'requested': the same. Without it the kind and device say ("cpu", "gpu:0", "model"). */
NereidError* NereidInstanceSetPlacement(NereidInstance* instance, const char* device,
                                        const char* requested);
void NereidInstanceSetState(NereidInstance* instance, void* state);
void* NereidInstanceState(const NereidInstance* instance);

/* Request handle: valid from NereidInstanceExecute until NereidRequestComplete. Inputs have been
 * validated against the model configuration (names, datatypes, shapes, byte sizes). */
const char* NereidRequestId(const NereidRequest* request);
uint32_t NereidRequestFlags(const NereidRequest* request);
/* The sequence the request belongs to (since 2.5; Triton's correlation id, the client's sequence_id
 * parameter): 0 when it names none; 1 with '*number' set for a numeric id; 2 with '*text' set
 * (valid with the request, at most 128 bytes) for a string id. Either output may be NULL. */
int NereidRequestCorrelationId(const NereidRequest* request, uint64_t* number, const char** text);
/* True once the client cancelled or went away: the backend may stop early and complete the request
 * with NEREID_ERROR_CANCELLED. */
int NereidRequestIsCancelled(const NereidRequest* request);
uint32_t NereidRequestParameterCount(const NereidRequest* request);
NereidError* NereidRequestParameter(const NereidRequest* request, uint32_t index,
                                    NereidParameter* parameter);
uint32_t NereidRequestInputCount(const NereidRequest* request);
NereidError* NereidRequestInput(const NereidRequest* request, uint32_t index, NereidTensor* tensor);
NereidError* NereidRequestInputByName(const NereidRequest* request, const char* name,
                                      NereidTensor* tensor);
/* The outputs this request needs (all of the model's outputs when the client named none). */
uint32_t NereidRequestOutputCount(const NereidRequest* request);
const char* NereidRequestOutputName(const NereidRequest* request, uint32_t index);
/* Allocates the buffer for one output of the response being built; the server owns it and sends
 * it. The server places it in 'preferred' memory when it can (a client's shared-memory region when
 * the client asked for one, pinned memory) and says where in 'buffer'; the backend writes there.
 * Device memory is given only for a client's CUDA region and only when 'preferred' is GPU
 * (otherwise the backend writes pinned host memory that the server copies into the region); a GPU
 * preference without a CUDA region gets pinned host memory. For BYTES outputs 'byte_size' is the
 * serialized size (a 4-byte little-endian length before each element). Allocating one output twice
 * for one response is an error. */
NereidError* NereidRequestOutputAllocate(NereidRequest* request, const char* name,
                                         NereidDataType datatype, const int64_t* shape,
                                         uint32_t dims_count, uint64_t byte_size,
                                         NereidMemoryType preferred, int64_t preferred_device_id,
                                         NereidBuffer* buffer);
/* Since 2.10. Output 'name' of 'count' requests of one batch, allocated at once in one block of the
 * server's host memory (pinned where the pool has room), request i's bytes right after request
 * i - 1's: a backend that produced the batch's rows side by side copies them out in one piece.
 * shapes holds count x dims_count values; buffers gets count places. All or nothing: where one of
 * the requests would be placed elsewhere (a client's shared-memory region, device memory for the
 * next step of an ensemble), allocated this output already, asks for BYTES or gives sizes that do
 * not match, it returns an error and allocates none; the backend then allocates each request's
 * with NereidRequestOutputAllocate (which says why, per request). */
NereidError* NereidRequestsOutputAllocate(NereidRequest* const* requests, uint32_t count,
                                          const char* name, NereidDataType datatype,
                                          const int64_t* shapes, uint32_t dims_count,
                                          const uint64_t* byte_sizes, NereidMemoryType preferred,
                                          NereidBuffer* buffers);
/* Decoupled models only: sends the outputs allocated since the last send as one response, and
 * starts a new one. With NEREID_RESPONSE_FINAL it is the request's last response (the backend
 * still calls NereidRequestComplete). */
NereidError* NereidRequestSend(NereidRequest* request, uint32_t flags);
/* When the backend's own computation ran (NereidNowNs clock); statistics use it for compute_infer
 * instead of the whole Execute call. Optional. */
void NereidRequestSetComputeTimes(NereidRequest* request, uint64_t start_ns, uint64_t end_ns);
/* Since 2.7, optional: how long the request's batch kept the instance's device busy (e.g. CUDA
 * events around its work on the instance's stream), for any one request of the batch, before the
 * first of them completes. Energy attribution then counts that time rather than the host's
 * interval around Execute, which other work on the device stretches. */
void NereidRequestSetDeviceTime(NereidRequest* request, uint64_t busy_ns);
/* Finishes the request; the handle is invalid afterwards. With 'error' NULL the response built so
 * far is sent (for a decoupled model: as its final response, or only the final flag when nothing
 * is pending); otherwise the error is (and the server takes 'error'). Exactly once per request. */
void NereidRequestComplete(NereidRequest* request, NereidError* error);

/* ---------------------------------------------------------------------------------------------
 * Inference from a backend (since 2.2): a backend sends requests to any model of this server, as
 * Triton's BLS does. Build a request, submit it with NereidInferAsync; the callback receives each
 * response (one for an ordinary model, several for a decoupled one, the last marked final) on
 * whichever thread completes it, and owns it (NereidInferResponseDelete). Thread-safe.
 * ------------------------------------------------------------------------------------------- */

typedef struct NereidInferRequest NereidInferRequest;
typedef struct NereidInferResponse NereidInferResponse;
typedef void (*NereidInferCallback)(void* user, NereidInferResponse* response);

/* A request for 'model' ('version' -1: the newest ready one); 'id' may be NULL. Since 2.5 it is
 * made on behalf of 'caller' (the calling backend's model) and goes to the server that serves
 * that model; NereidInferRequestNew, without a caller (2.2), goes to the server started last. */
NereidError* NereidModelInferRequestNew(NereidModel* caller, const char* model, int64_t version,
                                        const char* id, NereidInferRequest** request);
NereidError* NereidInferRequestNew(const char* model, int64_t version, const char* id,
                                   NereidInferRequest** request);
/* Adds an input; its bytes are copied (BYTES: 4-byte little-endian length before each element). */
NereidError* NereidInferRequestAddInput(NereidInferRequest* request, const char* name,
                                        NereidDataType datatype, const int64_t* shape,
                                        uint32_t dims_count, const void* data, uint64_t byte_size);
/* Asks for one output; a request that asks for none gets every output of the model. */
NereidError* NereidInferRequestAddOutput(NereidInferRequest* request, const char* name);
/* Since 2.4. A request that has not started executing 'timeout_us' microseconds after it was
 * created fails with "Request timeout expired" (UNAVAILABLE); the model's queue policy also sees
 * it as the request's timeout, as Triton's does. 0: no timeout. */
NereidError* NereidInferRequestSetTimeout(NereidInferRequest* request, uint64_t timeout_us);
/* Since 2.4. Adds a request parameter (copied), which the called model's backend sees as the
 * client's parameters. */
NereidError* NereidInferRequestAddParameter(NereidInferRequest* request,
                                            const NereidParameter* parameter);
/* Frees a request that was not submitted. */
void NereidInferRequestDelete(NereidInferRequest* request);
/* Submits the request (the server takes it on success; on an error the caller still owns it and
 * the callback is never called). */
NereidError* NereidInferAsync(NereidInferRequest* request, NereidInferCallback callback,
                              void* user);

/* The response's error as a new error the caller owns, or NULL when it succeeded. */
NereidError* NereidInferResponseError(const NereidInferResponse* response);
/* Nonzero for the request's last response. */
int NereidInferResponseIsFinal(const NereidInferResponse* response);
uint32_t NereidInferResponseOutputCount(const NereidInferResponse* response);
/* A view of one output (host memory), valid until NereidInferResponseDelete. */
NereidError* NereidInferResponseOutput(const NereidInferResponse* response, uint32_t index,
                                       NereidTensor* tensor);
void NereidInferResponseDelete(NereidInferResponse* response);

/* ---------------------------------------------------------------------------------------------
 * Custom metrics (since 2.3), Triton's custom metrics API: families of counters, gauges or
 * histograms, each metric one set of labels, shown on the metrics endpoint. Two families of one
 * name and kind are one family (another kind under a taken name is refused); two metrics of one
 * family and labels are one metric. A family lives while any handle to it does; once it is gone,
 * its metrics refuse every operation. Names follow Prometheus ([a-zA-Z_:][a-zA-Z0-9_:]*, not
 * starting with "nv_"). Thread-safe.
 * ------------------------------------------------------------------------------------------- */

typedef struct NereidMetricFamily NereidMetricFamily;
typedef struct NereidMetric NereidMetric;
typedef enum {
  NEREID_METRIC_COUNTER = 0,
  NEREID_METRIC_GAUGE = 1,
  NEREID_METRIC_HISTOGRAM = 2
} NereidMetricKind;

NereidError* NereidMetricFamilyNew(NereidMetricKind kind, const char* name, const char* description,
                                   NereidMetricFamily** family);
void NereidMetricFamilyDelete(NereidMetricFamily* family);
/* A metric of 'family' with 'label_count' labels (names and values as parallel arrays). A
 * histogram's 'buckets' are its upper bounds in ascending order ('bucket_count' may be 0; a
 * histogram needs 'buckets' non-NULL); other kinds ignore them. */
NereidError* NereidMetricNew(NereidMetricFamily* family, const char* const* label_names,
                             const char* const* label_values, uint32_t label_count,
                             const double* buckets, uint32_t bucket_count, NereidMetric** metric);
void NereidMetricDelete(NereidMetric* metric);
/* Counters: value >= 0; gauges: any value. */
NereidError* NereidMetricIncrement(NereidMetric* metric, double value);
/* Gauges only. */
NereidError* NereidMetricSet(NereidMetric* metric, double value);
/* Histograms only. */
NereidError* NereidMetricObserve(NereidMetric* metric, double value);
/* Counters and gauges. */
NereidError* NereidMetricValue(NereidMetric* metric, double* value);

/* ---------------------------------------------------------------------------------------------
 * Backend exports. Required unless marked optional.
 * ------------------------------------------------------------------------------------------- */

/* Returns NEREID_BACKEND_API_VERSION as the backend was compiled. Called first, once. */
NEREID_EXPORT uint32_t NereidBackendApiVersion(void);
/* Optional. Called once after loading, before any model. */
NEREID_EXPORT NereidError* NereidBackendInitialize(void);
/* Optional. Called once before unloading the library. */
NEREID_EXPORT NereidError* NereidBackendFinalize(void);
/* Optional. Other backend names this library serves, comma-separated (e.g. the native engine
 * answers for "onnxruntime" when no ONNX Runtime backend is installed). A library named after the
 * backend always wins over an alias. */
NEREID_EXPORT const char* NereidBackendAliases(void);

/* Optional (since 2.6). The Triton platforms this backend serves, comma-separated (e.g.
 * "onnxruntime_onnx"). A config that names a platform and no backend goes to the backend its
 * platform's name begins with (up to the first '_', as in all of Triton's platforms), which must
 * declare it; a config that names both must name one the backend declares. A backend without it
 * (or with "") takes any platform its configs write. */
NEREID_EXPORT const char* NereidBackendPlatforms(void);
/* Optional (since 2.6). The model file a version directory holds when the config's
 * default_model_filename is empty (e.g. "model.onnx"). A config that names neither backend nor
 * platform goes to the backend whose file (by extension) a version directory holds; a backend with
 * aliases claims its file for its first alias (the native engine's model.onnx names onnxruntime),
 * and when the config has no platform it gets the backend's first declared one, as Triton's
 * auto-complete fills it. */
NEREID_EXPORT const char* NereidBackendModelFile(void);

/* Optional (since 2.1). Nonzero when the backend runs KIND_GPU instances: the server then resolves
 * KIND_AUTO (and a config without instance_group) to the GPUs it finds. A backend without it gets
 * CPU instances only; a config asking it for KIND_GPU fails to load. */
NEREID_EXPORT int NereidBackendSupportsGpu(void);
/* Optional (since 2.9). Nonzero when a backend that does not run on GPUs (SupportsGpu 0) still
 * takes KIND_GPU instances a config asks for explicitly, and places them elsewhere itself with a
 * logged reason (the ONNX Runtime backend with a library without CUDA's provider: ORT's CPU
 * provider, or a refused load where the config says so). KIND_AUTO still resolves to the CPU. */
NEREID_EXPORT int NereidBackendGpuFallback(void);

/* Load one model version: read files, check them against the config, optionally auto-complete the
 * config with NereidModelSetConfigJson. Called from a loader thread; never concurrently for one
 * model. */
NEREID_EXPORT NereidError* NereidModelInitialize(NereidModel* model);
NEREID_EXPORT NereidError* NereidModelFinalize(NereidModel* model);
/* Optional (since 2.4). The server gave up waiting on this model: a load past its timeout, or an
 * unload whose requests did not finish in time. Make whatever its threads wait on give up (kill
 * its processes, cancel its work) so that NereidModelInitialize, NereidInstanceInitialize and
 * NereidInstanceExecute return soon, completing their requests with errors; later calls may fail
 * at once. The server still finalizes what initialized. Called from any thread, at any time
 * between NereidModelInitialize's start and NereidModelFinalize, concurrently with the other
 * functions of this model; must not block. */
NEREID_EXPORT void NereidModelAbort(NereidModel* model);

/* Create one execution instance of a model. Called after NereidModelInitialize succeeded. */
NEREID_EXPORT NereidError* NereidInstanceInitialize(NereidInstance* instance);
NEREID_EXPORT NereidError* NereidInstanceFinalize(NereidInstance* instance);

/* Execute 'count' requests (a batch; count >= 1) from the instance's own thread. See "Life of a
 * request" above: NULL means the backend now owns the requests and completes each one. */
NEREID_EXPORT NereidError* NereidInstanceExecute(NereidInstance* instance, NereidRequest** requests,
                                                 uint32_t count);

#ifdef __cplusplus
}
#endif

#endif /* NEREID_BACKEND_H_ */
