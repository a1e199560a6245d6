// The ONNX Runtime backend: serves models configured for Triton's onnxruntime backend
// (platform "onnxruntime_onnx", backend "onnxruntime", or a lone model.onnx) on ONNX Runtime's CPU
// execution provider, through ORT's C API. The runtime is not linked: NereidBackendInitialize
// loads libonnxruntime.so (docs/onnxruntime.md says where it looks), so the server runs without it
// and falls back to the native engine when it is missing.
//
// One ORT session per instance (Triton's layout: each instance has its own intra-op thread pool).
// Inputs are handed to ORT in place when a request runs alone; a batch of requests is joined once.
// Outputs whose shape the graph fixes are allocated in the response first and ORT writes straight
// into them; other outputs are copied from ORT's tensors into the responses.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/batching.h"
#include "common/config_json.h"
#include "common/graph_check.h"
#include "execution_providers.h"
#include "nereid/backend.h"
#include "ort_api.h"

namespace nereid::onnxruntime {
namespace {

using backend::DataType;
using backend::FromError;
using backend::Status;
using backend::StatusOr;

void Log(NereidLogLevel level, const std::string& message) { backend::Log(level, message); }

// ---- The runtime: the loaded library, its API table and the process-wide environment ------------

struct Runtime {
  void* handle = nullptr;
  const ort::Api* api = nullptr;
  ort::OrtEnv* env = nullptr;
  ort::OrtAllocator* allocator = nullptr;  // ORT's default CPU allocator (not owned)
  ort::OrtMemoryInfo* cpu = nullptr;       // describes host buffers handed to ORT
  std::string version;
  std::string path;
  // The execution providers the library offers (GetAvailableProviders), where its API has the
  // providers' entries (kProvidersApiVersion); empty otherwise.
  bool providers_api = false;
  std::vector<std::string> providers;
  bool Offers(const std::string& provider) const {
    return std::find(providers.begin(), providers.end(), provider) != providers.end();
  }
  std::string ProviderList() const {
    std::string list;
    for (const auto& p : providers) list += (list.empty() ? "" : ", ") + p;
    return list;
  }
};
Runtime* g_ort = nullptr;

const ort::Api& Api() { return *g_ort->api; }

// Takes an OrtStatus (NULL is success) and returns it as a Status, prefixed with 'context'.
Status Check(ort::OrtStatus* status, const std::string& context) {
  if (status == nullptr) return Status::Ok();
  const int code = Api().GetErrorCode(status);
  std::string message = context + ": " + Api().GetErrorMessage(status);
  Api().ReleaseStatus(status);
  switch (code) {
    case 2:  // ORT_INVALID_ARGUMENT
      return backend::InvalidArgument(message);
    case 3:  // ORT_NO_SUCHFILE
      return backend::NotFound(message);
    case 9:  // ORT_NOT_IMPLEMENTED
      return backend::Unsupported(message);
    default:
      return backend::Internal(message);
  }
}

// ORT objects owned by unique_ptrs that release them through the API table.
template <typename T, void (*const ort::Api::*Release)(T*) noexcept>
struct Releaser {
  void operator()(T* p) const {
    if (p != nullptr) (Api().*Release)(p);
  }
};
using SessionPtr =
    std::unique_ptr<ort::OrtSession, Releaser<ort::OrtSession, &ort::Api::ReleaseSession>>;
using OptionsPtr =
    std::unique_ptr<ort::OrtSessionOptions,
                    Releaser<ort::OrtSessionOptions, &ort::Api::ReleaseSessionOptions>>;
using ValuePtr = std::unique_ptr<ort::OrtValue, Releaser<ort::OrtValue, &ort::Api::ReleaseValue>>;
using TypeInfoPtr =
    std::unique_ptr<ort::OrtTypeInfo, Releaser<ort::OrtTypeInfo, &ort::Api::ReleaseTypeInfo>>;
using ShapeInfoPtr = std::unique_ptr<
    ort::OrtTensorTypeAndShapeInfo,
    Releaser<ort::OrtTensorTypeAndShapeInfo, &ort::Api::ReleaseTensorTypeAndShapeInfo>>;

// The last error ORT logged on this thread (an execution provider's reason for failing, which its
// returned status may not carry: "Failed to load shared library" for an absent device).
thread_local std::string t_last_ort_error;

// ORT's log lines go to the server log.
void LogFromOrt(void*, ort::LoggingLevel severity, const char* category, const char*,
                const char* location, const char* message) {
  if (severity >= ort::kError && message != nullptr) t_last_ort_error = message;
  const NereidLogLevel level = severity >= ort::kError     ? NEREID_LOG_ERROR
                               : severity == ort::kWarning ? NEREID_LOG_WARNING
                                                           : NEREID_LOG_VERBOSE;
  NereidLog(
      level, location ? location : "onnxruntime", 0,
      (std::string("onnxruntime [") + (category ? category : "") + "] " + (message ? message : ""))
          .c_str());
}

// Where libonnxruntime.so is looked for, in order: $NEREID_ONNXRUNTIME_LIBRARY; the folder
// 'onnxruntime' next to this backend (the build copies the PyPI wheel's library there); the
// dynamic loader's search path.
std::vector<std::string> LibraryCandidates() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("NEREID_ONNXRUNTIME_LIBRARY"); env && *env)
    candidates.emplace_back(env);
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&LibraryCandidates), &self) && self.dli_fname) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::path(self.dli_fname).parent_path() / "onnxruntime";
    std::error_code ec;
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("libonnxruntime.so", 0) == 0) found.push_back(entry.path().string());
    }
    std::sort(found.begin(), found.end());  // libonnxruntime.so before libonnxruntime.so.1.x
    candidates.insert(candidates.end(), found.begin(), found.end());
  }
  candidates.emplace_back("libonnxruntime.so.1");
  candidates.emplace_back("libonnxruntime.so");
  return candidates;
}

Status LoadRuntime() {
  // The library stays loaded for the process: a second NereidBackendInitialize (another server
  // in the same process, as in the unit tests) finds it there.
  if (g_ort != nullptr) return Status::Ok();
  auto runtime = std::make_unique<Runtime>();
  std::string tried;
  for (const std::string& candidate : LibraryCandidates()) {
    runtime->handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (runtime->handle != nullptr) {
      runtime->path = candidate;
      break;
    }
    tried += "\n  " + candidate + ": " + dlerror();
  }
  if (runtime->handle == nullptr)
    return backend::Unavailable(
        "the ONNX Runtime library was not found (set NEREID_ONNXRUNTIME_LIBRARY to "
        "libonnxruntime.so; `pip install onnxruntime` ships one in onnxruntime/capi/). Tried:" +
        tried);
  using GetApiBase = const ort::ApiBase* (*)();
  auto get_base = reinterpret_cast<GetApiBase>(dlsym(runtime->handle, "OrtGetApiBase"));
  if (get_base == nullptr)
    return backend::Unavailable(runtime->path + " does not export OrtGetApiBase");
  const ort::ApiBase* base = get_base();
  runtime->version = base->GetVersionString();
  runtime->api = base->GetApi(ort::kApiVersion);
  if (runtime->api == nullptr)
    return backend::Unavailable("ONNX Runtime " + runtime->version + " at " + runtime->path +
                                " does not offer C API version " +
                                std::to_string(ort::kApiVersion) + " (1.13 or newer is needed)");
  g_ort = runtime.get();
  Status status = Check(
      Api().CreateEnvWithCustomLogger(&LogFromOrt, nullptr, ort::kWarning, "nereid", &runtime->env),
      "creating the ONNX Runtime environment");
  // ONNX Runtime's own usage telemetry (on by default in recent releases, uploaded over HTTPS):
  // a server sends nothing its operator did not ask for.
  if (status.ok())
    status =
        Check(Api().DisableTelemetryEvents(runtime->env), "disabling ONNX Runtime's telemetry");
  if (status.ok())
    status = Check(Api().GetAllocatorWithDefaultOptions(&runtime->allocator),
                   "getting ONNX Runtime's CPU allocator");
  if (status.ok())
    status =
        Check(Api().CreateCpuMemoryInfo(ort::kDeviceAllocator, ort::kMemTypeDefault, &runtime->cpu),
              "describing host memory for ONNX Runtime");
  if (status.ok() && base->GetApi(ort::kProvidersApiVersion) != nullptr) {
    runtime->providers_api = true;
    char** names = nullptr;
    int count = 0;
    status = Check(Api().GetAvailableProviders(&names, &count), "listing execution providers");
    for (int i = 0; status.ok() && i < count; ++i) runtime->providers.emplace_back(names[i]);
    if (status.ok()) Api().ReleaseAvailableProviders(names, count);
  }
  if (!status.ok()) {
    g_ort = nullptr;
    return status;
  }
  Log(NEREID_LOG_INFO, "ONNX Runtime " + runtime->version + " loaded from " + runtime->path +
                           "; execution providers: " +
                           (runtime->providers_api ? runtime->ProviderList()
                                                   : std::string("CPU (a library before 1.17: "
                                                                 "no execution accelerators)")));
  static_cast<void>(runtime.release());  // g_ort keeps it for the process's life
  return Status::Ok();
}

// ---- Types --------------------------------------------------------------------------------------

DataType FromOrt(ort::ElementType t) {
  switch (t) {
    case ort::kFloat:
      return DataType::kFp32;
    case ort::kUint8:
      return DataType::kUint8;
    case ort::kInt8:
      return DataType::kInt8;
    case ort::kUint16:
      return DataType::kUint16;
    case ort::kInt16:
      return DataType::kInt16;
    case ort::kInt32:
      return DataType::kInt32;
    case ort::kInt64:
      return DataType::kInt64;
    case ort::kString:
      return DataType::kBytes;
    case ort::kBool:
      return DataType::kBool;
    case ort::kFloat16:
      return DataType::kFp16;
    case ort::kDouble:
      return DataType::kFp64;
    case ort::kUint32:
      return DataType::kUint32;
    case ort::kUint64:
      return DataType::kUint64;
    case ort::kBfloat16:
      return DataType::kBf16;
    default:
      return DataType::kInvalid;
  }
}

ort::ElementType ToOrt(DataType t) {
  switch (t) {
    case DataType::kFp32:
      return ort::kFloat;
    case DataType::kUint8:
      return ort::kUint8;
    case DataType::kInt8:
      return ort::kInt8;
    case DataType::kUint16:
      return ort::kUint16;
    case DataType::kInt16:
      return ort::kInt16;
    case DataType::kInt32:
      return ort::kInt32;
    case DataType::kInt64:
      return ort::kInt64;
    case DataType::kBytes:
      return ort::kString;
    case DataType::kBool:
      return ort::kBool;
    case DataType::kFp16:
      return ort::kFloat16;
    case DataType::kFp64:
      return ort::kDouble;
    case DataType::kUint32:
      return ort::kUint32;
    case DataType::kUint64:
      return ort::kUint64;
    case DataType::kBf16:
      return ort::kBfloat16;
    default:
      return ort::kUndefined;
  }
}

// ---- Sessions -----------------------------------------------------------------------------------

// Triton's ONNX Runtime backend settings (config parameters and optimization.graph.level).
struct SessionSettings {
  int intra_op_threads = 0;  // 0: ORT's default (one per physical core)
  int inter_op_threads = 0;
  ort::ExecutionMode mode = ort::kSequential;
  ort::GraphOptimizationLevel level = ort::kEnableAll;
  int mem_arena = -1;    // -1: ORT's default
  int mem_pattern = -1;  // -1: ORT's default
  std::string device_allocator_for_initializers;
  std::string Describe() const {
    const char* level_name = level == ort::kEnableAll        ? "all"
                             : level == ort::kEnableExtended ? "extended"
                             : level == ort::kEnableBasic    ? "basic"
                                                             : "disabled";
    return "intra_op_thread_count " + std::to_string(intra_op_threads) +
           ", inter_op_thread_count " + std::to_string(inter_op_threads) + ", execution_mode " +
           (mode == ort::kParallel ? "parallel" : "sequential") + ", graph optimization " +
           level_name;
  }
};

// Each instance has its own session with its own thread pools, so thread counts multiply with
// instances: a config (which a client may send) could otherwise start millions of threads. The
// threads one model may start are bounded by a multiple of the CPUs this process may run on.
Status CheckThreadBudget(const std::string& model, const rapidjson::Value& config,
                         const SessionSettings& s) {
  cpu_set_t set;
  const int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  const int64_t budget = std::max<int64_t>(64, int64_t{8} * cpus);
  int64_t instances = 0;
  if (config.HasMember("instance_group") && config["instance_group"].IsArray())
    for (const auto& group : config["instance_group"].GetArray()) {
      const int64_t count = group.HasMember("count") && group["count"].IsInt64()
                                ? std::max<int64_t>(group["count"].GetInt64(), 1)
                                : 1;
      instances += std::min<int64_t>(count, budget + 1);
    }
  instances = std::max<int64_t>(instances, 1);
  // 0 is ORT's default: a pool of one thread per core.
  int64_t per_instance = s.intra_op_threads ? s.intra_op_threads : cpus;
  if (s.inter_op_threads)
    per_instance += s.inter_op_threads;
  else if (s.mode == ort::kParallel)
    per_instance += cpus;
  if (instances * per_instance > budget)
    return backend::InvalidArgument(
        "model '" + model + "': " + std::to_string(instances) + " instance(s) x " +
        std::to_string(per_instance) +
        " ONNX Runtime threads (intra_op_thread_count, inter_op_thread_count in parallel "
        "execution_mode) is more than the " +
        std::to_string(budget) + " threads a model may start on " + std::to_string(cpus) +
        " CPU(s); lower the thread counts or the instance count");
  return Status::Ok();
}

StatusOr<SessionSettings> ReadSettings(const std::string& model, const rapidjson::Value& config) {
  using backend::IntParameter;
  SessionSettings s;
  ASSIGN_OR_RETURN(s.intra_op_threads,
                   IntParameter(model, config, "intra_op_thread_count", 0, 1024, 0));
  ASSIGN_OR_RETURN(s.inter_op_threads,
                   IntParameter(model, config, "inter_op_thread_count", 0, 1024, 0));
  ASSIGN_OR_RETURN(int mode, IntParameter(model, config, "execution_mode", 0, 1, 0));
  s.mode = mode == 1 ? ort::kParallel : ort::kSequential;
  RETURN_IF_ERROR(CheckThreadBudget(model, config, s));
  ASSIGN_OR_RETURN(s.mem_arena, IntParameter(model, config, "enable_mem_arena", 0, 1, -1));
  ASSIGN_OR_RETURN(s.mem_pattern, IntParameter(model, config, "enable_mem_pattern", 0, 1, -1));
  s.device_allocator_for_initializers =
      backend::Parameter(config, "session.use_device_allocator_for_initializers");
  // Triton's levels: -1 basic, 1 basic and extended, 2 none; 0 (or absent) all.
  if (config.HasMember("optimization") && config["optimization"].IsObject() &&
      config["optimization"].HasMember("graph") && config["optimization"]["graph"].IsObject() &&
      config["optimization"]["graph"].HasMember("level")) {
    const auto& level = config["optimization"]["graph"]["level"];
    const int64_t v = level.IsInt64() ? level.GetInt64() : 0;
    if (v == -1) {
      s.level = ort::kEnableBasic;
    } else if (v == 1) {
      s.level = ort::kEnableExtended;
    } else if (v == 2) {
      s.level = ort::kDisableAll;
    } else if (v != 0) {
      return backend::InvalidArgument(
          "model '" + model +
          "': optimization.graph.level must be -1 (basic), 0 (all), 1 "
          "(basic and extended) or 2 (none) for the onnxruntime backend, got " +
          std::to_string(v));
    }
  }
  return s;
}

// A provider whose options are an ORT object (TensorRT's, CUDA's): created, given 'keys' =
// 'values', appended to 'o', released.
template <typename Options, auto Create, auto Update, auto Append, auto Release>
Status AppendWithOptions(ort::OrtSessionOptions* o, const std::vector<const char*>& keys,
                         const std::vector<const char*>& values, const std::string& what) {
  Options* options = nullptr;
  RETURN_IF_ERROR(Check((Api().*Create)(&options), what));
  Status s = Check((Api().*Update)(options, keys.data(), values.data(), keys.size()), what);
  if (s.ok()) s = Check((Api().*Append)(o, options), what);
  (Api().*Release)(options);
  return s;
}

// Appends provider 'r' (on GPU 'device' for CUDA and TensorRT): OK, or why it cannot serve.
Status AppendProviderAs(ort::OrtSessionOptions* o, const ProviderRequest& r, int device) {
  if (!g_ort->providers_api)
    return backend::Unavailable("ONNX Runtime " + g_ort->version +
                                " predates 1.17: no execution providers but the CPU's");
  if (!g_ort->Offers(r.ProviderName()))
    return backend::Unavailable("the ONNX Runtime library at " + g_ort->path + " has no " +
                                r.ProviderName() + " (it offers " + g_ort->ProviderList() + ")");
  std::vector<std::pair<std::string, std::string>> options = r.options;
  if (r.kind != ProviderRequest::Kind::kOpenVino)
    options.emplace_back("device_id", std::to_string(device));
  std::vector<const char*> keys, values;
  for (const auto& [k, v] : options) keys.push_back(k.c_str()), values.push_back(v.c_str());
  const std::string what = r.Describe();
  switch (r.kind) {
    case ProviderRequest::Kind::kOpenVino:
      return Check(Api().SessionOptionsAppendExecutionProvider_OpenVINO_V2(
                       o, keys.data(), values.data(), keys.size()),
                   what);
    case ProviderRequest::Kind::kTensorRt:
      return AppendWithOptions<ort::OrtTensorRTProviderOptionsV2,
                               &ort::Api::CreateTensorRTProviderOptions,
                               &ort::Api::UpdateTensorRTProviderOptions,
                               &ort::Api::SessionOptionsAppendExecutionProvider_TensorRT_V2,
                               &ort::Api::ReleaseTensorRTProviderOptions>(o, keys, values, what);
    case ProviderRequest::Kind::kCuda:
      return AppendWithOptions<ort::OrtCUDAProviderOptionsV2, &ort::Api::CreateCUDAProviderOptions,
                               &ort::Api::UpdateCUDAProviderOptions,
                               &ort::Api::SessionOptionsAppendExecutionProvider_CUDA_V2,
                               &ort::Api::ReleaseCUDAProviderOptions>(o, keys, values, what);
  }
  return backend::Internal("unknown execution provider");
}

// AppendProviderAs, its failure with the cause ORT logged (the last line's end: "[OpenVINO] Device
// NPU is not available").
Status AppendProvider(ort::OrtSessionOptions* o, const ProviderRequest& r, int device) {
  t_last_ort_error.clear();
  Status s = AppendProviderAs(o, r, device);
  if (s.ok() || t_last_ort_error.empty()) return s;
  std::string cause = t_last_ort_error;
  if (const size_t at = cause.rfind("] "); at != std::string::npos) cause = cause.substr(at + 2);
  while (!cause.empty() && (cause.back() == '\n' || cause.back() == ' ')) cause.pop_back();
  return Status(s.code(), s.message() + " (" + cause + ")");
}

// Where an instance's session runs: what the config asked, the providers that serve (ORT's CPU
// provider after them always), and why any asked for does not.
struct SessionPlacement {
  std::string requested = "cpu";  // "openvino:NPU", "cuda:0", ...
  std::string device = "cpu";     // the first provider that serves, the same way
  std::string providers = "CPU";  // "OpenVINO (device_type CPU), CPU"
  std::vector<std::string> fallbacks;
};

std::string DeviceName(const ProviderRequest& r, int device) {
  switch (r.kind) {
    case ProviderRequest::Kind::kOpenVino:
      return "openvino:" + r.Device();
    case ProviderRequest::Kind::kTensorRt:
      return "tensorrt:" + std::to_string(device);
    case ProviderRequest::Kind::kCuda:
      return "cuda:" + std::to_string(device);
  }
  return "cpu";
}

// Opens a session of 'path' with the execution providers 'wanted' (in order) before ORT's CPU
// provider. A provider that cannot serve (the library lacks it, its device is absent, it cannot
// take the model) is left out with its reason in 'placement', or, with 'refuse', fails the load.
StatusOr<SessionPtr> OpenSession(const std::string& model, const std::string& path,
                                 const SessionSettings& s,
                                 const std::vector<ProviderRequest>& wanted = {}, int device = 0,
                                 bool refuse = false, SessionPlacement* placement = nullptr) {
  const std::string who = "model '" + model + "'";
  auto options_for = [&](const std::vector<const ProviderRequest*>& providers,
                         std::vector<const ProviderRequest*>* appended,
                         std::vector<std::string>* failed) -> StatusOr<OptionsPtr> {
    ort::OrtSessionOptions* raw = nullptr;
    RETURN_IF_ERROR(Check(Api().CreateSessionOptions(&raw), who));
    OptionsPtr options(raw);
    RETURN_IF_ERROR(Check(Api().SetIntraOpNumThreads(raw, s.intra_op_threads), who));
    RETURN_IF_ERROR(Check(Api().SetInterOpNumThreads(raw, s.inter_op_threads), who));
    RETURN_IF_ERROR(Check(Api().SetSessionExecutionMode(raw, s.mode), who));
    RETURN_IF_ERROR(Check(Api().SetSessionGraphOptimizationLevel(raw, s.level), who));
    RETURN_IF_ERROR(Check(Api().SetSessionLogId(raw, model.c_str()), who));
    if (s.mem_arena == 1) RETURN_IF_ERROR(Check(Api().EnableCpuMemArena(raw), who));
    if (s.mem_arena == 0) RETURN_IF_ERROR(Check(Api().DisableCpuMemArena(raw), who));
    if (s.mem_pattern == 1) RETURN_IF_ERROR(Check(Api().EnableMemPattern(raw), who));
    if (s.mem_pattern == 0) RETURN_IF_ERROR(Check(Api().DisableMemPattern(raw), who));
    if (!s.device_allocator_for_initializers.empty())
      RETURN_IF_ERROR(
          Check(Api().AddSessionConfigEntry(raw, "session.use_device_allocator_for_initializers",
                                            s.device_allocator_for_initializers.c_str()),
                who));
    for (const ProviderRequest* r : providers) {
      Status added = AppendProvider(raw, *r, device);
      if (added.ok()) {
        appended->push_back(r);
        continue;
      }
      const std::string reason = r->origin + ": " + added.message();
      if (refuse)
        return Status(added.code(),
                      who + ": " + reason + " (parameter nereid.accelerator_fallback is refuse)");
      failed->push_back(reason);
    }
    return options;
  };
  std::vector<const ProviderRequest*> providers;
  for (const ProviderRequest& r : wanted) providers.push_back(&r);
  std::vector<const ProviderRequest*> appended;
  std::vector<std::string> failed;
  ASSIGN_OR_RETURN(OptionsPtr options, options_for(providers, &appended, &failed));
  // OpenVINO's session creation is not thread-safe (Triton serializes it the same way).
  static std::mutex openvino_mu;
  auto create = [&](ort::OrtSessionOptions* o, bool openvino) -> StatusOr<SessionPtr> {
    std::unique_lock lock(openvino_mu, std::defer_lock);
    if (openvino) lock.lock();
    ort::OrtSession* session = nullptr;
    RETURN_IF_ERROR(Check(Api().CreateSession(g_ort->env, path.c_str(), o, &session),
                          who + ": ONNX Runtime cannot load " + path));
    return SessionPtr(session);
  };
  auto uses_openvino = [](const std::vector<const ProviderRequest*>& list) {
    return std::any_of(list.begin(), list.end(), [](const ProviderRequest* r) {
      return r->kind == ProviderRequest::Kind::kOpenVino;
    });
  };
  auto session = create(options.get(), uses_openvino(appended));
  if (!session.ok() && !appended.empty()) {
    // A provider that refuses the model at session creation: the CPU provider alone, or refused.
    std::string names;
    for (const ProviderRequest* r : appended) names += (names.empty() ? "" : ", ") + r->origin;
    const std::string reason = names + ": " + session.status().message();
    if (refuse)
      return Status(session.status().code(),
                    reason + " (parameter nereid.accelerator_fallback is refuse)");
    failed.push_back(reason);
    appended.clear();
    std::vector<const ProviderRequest*> none;
    std::vector<std::string> ignored;
    ASSIGN_OR_RETURN(options, options_for(none, &appended, &ignored));
    session = create(options.get(), false);
  }
  if (!session.ok()) return session.status();
  if (placement != nullptr) {
    if (!wanted.empty()) placement->requested = DeviceName(wanted.front(), device);
    placement->device = appended.empty() ? "cpu" : DeviceName(*appended.front(), device);
    placement->providers.clear();
    for (const ProviderRequest* r : appended) placement->providers += r->Describe() + ", ";
    placement->providers += "CPU";
    placement->fallbacks = std::move(failed);
  }
  return session;
}

// One input or output of a session, as the config checks see it.
StatusOr<backend::ValueInfo> DescribeValue(const ort::OrtSession* session, size_t index,
                                           bool input) {
  backend::ValueInfo v;
  char* name = nullptr;
  RETURN_IF_ERROR(Check(input ? Api().SessionGetInputName(session, index, g_ort->allocator, &name)
                              : Api().SessionGetOutputName(session, index, g_ort->allocator, &name),
                        "reading the graph's names"));
  v.name = name;
  Api().AllocatorFree(g_ort->allocator, name);
  ort::OrtTypeInfo* raw = nullptr;
  RETURN_IF_ERROR(Check(input ? Api().SessionGetInputTypeInfo(session, index, &raw)
                              : Api().SessionGetOutputTypeInfo(session, index, &raw),
                        "reading the type of '" + v.name + "'"));
  TypeInfoPtr info(raw);
  ort::OnnxType kind = ort::kTypeUnknown;
  RETURN_IF_ERROR(Check(Api().GetOnnxTypeFromTypeInfo(raw, &kind), v.name));
  const std::string what = std::string(input ? "input '" : "output '") + v.name + "'";
  if (kind != ort::kTypeTensor)
    return backend::Unsupported(what +
                                " is not a tensor (sequences, maps and optionals are not "
                                "served)");
  const ort::OrtTensorTypeAndShapeInfo* tensor = nullptr;
  RETURN_IF_ERROR(Check(Api().CastTypeInfoToTensorInfo(raw, &tensor), v.name));
  ort::ElementType element = ort::kUndefined;
  RETURN_IF_ERROR(Check(Api().GetTensorElementType(tensor, &element), v.name));
  v.type = FromOrt(element);
  if (v.type == DataType::kInvalid)
    return backend::Unsupported(what + " has ONNX element type " + std::to_string(element) +
                                ", which has no Triton data type");
  size_t rank = 0;
  RETURN_IF_ERROR(Check(Api().GetDimensionsCount(tensor, &rank), v.name));
  v.dims.resize(rank);
  RETURN_IF_ERROR(Check(Api().GetDimensions(tensor, v.dims.data(), rank), v.name));
  for (int64_t& d : v.dims)
    if (d < 0) d = -1;     // symbolic or unknown
  v.has_shape = rank > 0;  // ORT reports an unknown shape like a scalar: nothing to compare
  return v;
}

// ---- Model and instance state -------------------------------------------------------------------

struct ModelState : backend::ModelIo {
  std::string path;
  SessionSettings settings;
  std::vector<backend::ValueInfo> graph_inputs;
  std::vector<backend::ValueInfo> graph_outputs;
  // Per graph output, whether a run has produced the shape the graph declares (1), another one
  // (-1: a graph that declares [4] and reshapes to [2, 2]), or not yet run (0). Only outputs
  // that matched are written by ORT straight into the response, whose shape is fixed before the
  // run; the others are returned as ORT produced them, as Triton does.
  mutable std::map<std::string, std::atomic<int>> declared_shape_holds;
  int64_t version = 0;
  Placement placement;  // execution accelerators, the accelerator kind's device
  std::mutex mu;
  SessionPtr spare;  // the session opened at load (CPU provider), taken by a first CPU instance
};

// The graph's declared shape of an output with the batch's rows in place of the batch dimension.
std::vector<int64_t> DeclaredShape(const backend::ValueInfo& g, bool batching, int64_t rows) {
  std::vector<int64_t> shape = g.dims;
  if (batching && !shape.empty()) shape[0] = rows;
  return shape;
}

// Metrics of where instances run (backend-made families, on the server's metrics endpoint).
struct PlacementMetrics {
  NereidMetricFamily* placement = nullptr;  // gauge: 1 per instance, labelled with its device
  NereidMetricFamily* fallbacks = nullptr;  // counter: instances that did not get their device
  PlacementMetrics() {
    backend::FromError(
        NereidMetricFamilyNew(NEREID_METRIC_GAUGE, "nereid_instance_placement",
                              "Where each instance of a model runs (1 per instance): the device "
                              "its config asked for and the one serving (an execution provider "
                              "that could not serve falls back to the CPU)",
                              &placement))
        .ok();
    backend::FromError(
        NereidMetricFamilyNew(NEREID_METRIC_COUNTER, "nereid_placement_fallback_total",
                              "Instances placed elsewhere than their config asked (the provider or "
                              "its device was missing, or it refused the model)",
                              &fallbacks))
        .ok();
  }
};

struct InstanceState {
  SessionPtr session;
  NereidMetric* placement = nullptr;  // (PlacementMetrics)
  NereidMetric* fallback = nullptr;
  InstanceState() = default;
  InstanceState(const InstanceState&) = delete;
  InstanceState& operator=(const InstanceState&) = delete;
  ~InstanceState() {
    for (NereidMetric* m : {placement, fallback})
      if (m != nullptr) NereidMetricDelete(m);
  }
};

std::string ModelFilePath(NereidModel* model, const rapidjson::Value& config) {
  namespace fs = std::filesystem;
  std::string file = backend::StringField(config, "default_model_filename");
  if (file.empty()) file = "model.onnx";
  fs::path path = fs::path(NereidModelVersionPath(model)) / file;
  // Triton also accepts a folder model.onnx/ holding model.onnx and its external weights.
  std::error_code ec;
  if (fs::is_directory(path, ec)) path /= "model.onnx";
  return path.string();
}

StatusOr<std::unique_ptr<ModelState>> InitializeModel(NereidModel* model) {
  const std::string name = NereidModelName(model);
  rapidjson::Document config;
  config.Parse(NereidModelConfigJson(model));
  if (config.HasParseError() || !config.IsObject())
    return backend::Internal("model config JSON is malformed");
  auto state = std::make_unique<ModelState>();
  state->path = ModelFilePath(model, config);
  if (!std::filesystem::exists(state->path))
    return backend::NotFound("model '" + name + "': no model file at " + state->path);
  ASSIGN_OR_RETURN(state->settings, ReadSettings(name, config));
  state->version = NereidModelVersion(model);
  ASSIGN_OR_RETURN(state->placement, ReadPlacement(name, config, NereidModelVersionPath(model)));
  ASSIGN_OR_RETURN(state->spare, OpenSession(name, state->path, state->settings));
  size_t inputs = 0, outputs = 0;
  RETURN_IF_ERROR(Check(Api().SessionGetInputCount(state->spare.get(), &inputs), name));
  RETURN_IF_ERROR(Check(Api().SessionGetOutputCount(state->spare.get(), &outputs), name));
  for (size_t i = 0; i < inputs; ++i) {
    auto v = DescribeValue(state->spare.get(), i, true);
    if (!v.ok()) return Status(v.status().code(), "model '" + name + "': " + v.status().message());
    state->graph_inputs.push_back(std::move(v).value());
  }
  for (size_t i = 0; i < outputs; ++i) {
    auto v = DescribeValue(state->spare.get(), i, false);
    if (!v.ok()) return Status(v.status().code(), "model '" + name + "': " + v.status().message());
    state->declared_shape_holds[v->name];
    state->graph_outputs.push_back(std::move(v).value());
  }
  if (backend::AutoComplete(state->graph_inputs, state->graph_outputs, config)) {
    RETURN_IF_ERROR(FromError(NereidModelSetConfigJson(model, backend::ToJson(config).c_str())));
    Log(NEREID_LOG_INFO, "model '" + name +
                             "': auto-completed inputs/outputs/max_batch_size from " +
                             std::filesystem::path(state->path).filename().string());
  }
  static_cast<backend::ModelIo&>(*state) = backend::ReadModelIo(name, config);
  RETURN_IF_ERROR(backend::CheckAgainstGraph(*state, state->graph_inputs, state->graph_outputs));
  Log(NEREID_LOG_INFO, "model '" + name + "' runs on ONNX Runtime " + g_ort->version + " (" +
                           state->settings.Describe() + ")");
  return state;
}

StatusOr<std::unique_ptr<InstanceState>> InitializeInstance(ModelState* model,
                                                            NereidInstance* instance) {
  auto state = std::make_unique<InstanceState>();
  const std::string name = NereidInstanceName(instance);
  const NereidInstanceKind kind = NereidInstanceGetKind(instance);
  const int device = NereidInstanceDeviceId(instance);
  const Placement& p = model->placement;
  std::vector<ProviderRequest> wanted;
  std::string kind_name = "KIND_CPU";
  if (kind == NEREID_INSTANCE_GPU) {
    kind_name = "KIND_GPU";
    wanted = p.gpu;
    if (std::none_of(wanted.begin(), wanted.end(), [](const ProviderRequest& r) {
          return r.kind == ProviderRequest::Kind::kCuda;
        })) {
      ProviderRequest cuda;
      cuda.kind = ProviderRequest::Kind::kCuda;
      cuda.origin = "KIND_GPU";
      wanted.push_back(cuda);
    }
  } else if (kind == NEREID_INSTANCE_MODEL) {
    kind_name = "KIND_MODEL";
    wanted = p.accelerator;
  } else {
    wanted = p.cpu;
  }
  if (kind != NEREID_INSTANCE_GPU && !p.gpu.empty())
    Log(NEREID_LOG_INFO, "model '" + model->name + "' instance '" + name + "' (" + kind_name +
                             "): gpu_execution_accelerator not applied (KIND_GPU instances "
                             "only)");
  if (wanted.empty()) {
    std::lock_guard lock(model->mu);
    if (kind == NEREID_INSTANCE_CPU) state->session = std::move(model->spare);
  }
  SessionPlacement placement;
  if (!state->session) {
    ASSIGN_OR_RETURN(state->session, OpenSession(model->name, model->path, model->settings, wanted,
                                                 device, p.refuse, &placement));
  }
  for (const std::string& reason : placement.fallbacks)
    Log(NEREID_LOG_WARNING, "model '" + model->name + "' instance '" + name + "' (" + kind_name +
                                "): falls back from " + reason);
  Log(NEREID_LOG_INFO,
      "model '" + model->name + "' instance '" + name + "' (" + kind_name +
          ") runs on ONNX Runtime's " + placement.providers + " execution provider(s); device " +
          placement.device +
          (placement.requested != placement.device ? " (asked for " + placement.requested + ")"
                                                   : std::string()));
  backend::FromError(NereidInstanceSetPlacement(instance, placement.device.c_str(),
                                                placement.requested.c_str()))
      .ok();  // (only what the statistics and traces show)
  static PlacementMetrics metrics;
  const std::string version = std::to_string(model->version);
  if (metrics.placement != nullptr) {
    const char* names[] = {"model", "version", "instance", "requested", "device"};
    const char* values[] = {model->name.c_str(), version.c_str(), name.c_str(),
                            placement.requested.c_str(), placement.device.c_str()};
    if (backend::FromError(
            NereidMetricNew(metrics.placement, names, values, 5, nullptr, 0, &state->placement))
            .ok())
      NereidMetricSet(state->placement, 1);
  }
  if (metrics.fallbacks != nullptr && !placement.fallbacks.empty()) {
    const char* names[] = {"model", "version", "requested"};
    const char* values[] = {model->name.c_str(), version.c_str(), placement.requested.c_str()};
    if (backend::FromError(
            NereidMetricNew(metrics.fallbacks, names, values, 3, nullptr, 0, &state->fallback))
            .ok())
      NereidMetricIncrement(state->fallback, 1);
  }
  return state;
}

// ---- Execution ----------------------------------------------------------------------------------

// A BYTES tensor (4-byte little-endian length before each element) as ORT strings. ORT's strings
// are C strings: an element is cut at its first NUL byte.
StatusOr<ValuePtr> StringTensor(const std::string& name, const std::vector<int64_t>& shape,
                                const uint8_t* data, size_t size) {
  std::vector<std::string> elements;
  const bool ok = backend::ForEachBytesElement(data, size, [&](std::string_view e, size_t) {
    elements.emplace_back(e);
    return true;
  });
  if (!ok || static_cast<int64_t>(elements.size()) != backend::ElementCount(shape))
    return backend::InvalidArgument("input '" + name + "' does not hold " +
                                    backend::ShapeString(shape) + " BYTES elements");
  ort::OrtValue* value = nullptr;
  RETURN_IF_ERROR(Check(Api().CreateTensorAsOrtValue(g_ort->allocator, shape.data(), shape.size(),
                                                     ort::kString, &value),
                        "input '" + name + "'"));
  ValuePtr owned(value);
  std::vector<const char*> pointers;
  pointers.reserve(elements.size());
  for (const auto& e : elements) pointers.push_back(e.c_str());
  RETURN_IF_ERROR(Check(Api().FillStringTensor(value, pointers.data(), pointers.size()),
                        "input '" + name + "'"));
  return owned;
}

// A tensor over host bytes that stay owned by the caller (ORT neither frees nor copies them).
StatusOr<ValuePtr> BorrowedTensor(const std::string& name, DataType type,
                                  const std::vector<int64_t>& shape, void* data, size_t bytes) {
  ort::OrtValue* value = nullptr;
  RETURN_IF_ERROR(Check(Api().CreateTensorWithDataAsOrtValue(g_ort->cpu, data, bytes, shape.data(),
                                                             shape.size(), ToOrt(type), &value),
                        "'" + name + "'"));
  return ValuePtr(value);
}

// An ORT result: type, shape and host bytes (BYTES serialized as the protocol sends them).
struct Result {
  DataType type = DataType::kInvalid;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  std::vector<uint8_t> serialized;  // BYTES only
};

StatusOr<Result> ReadResult(const std::string& name, ort::OrtValue* value) {
  Result r;
  ort::OrtTensorTypeAndShapeInfo* raw = nullptr;
  RETURN_IF_ERROR(Check(Api().GetTensorTypeAndShape(value, &raw), "output '" + name + "'"));
  ShapeInfoPtr info(raw);
  ort::ElementType element = ort::kUndefined;
  size_t rank = 0, count = 0;
  RETURN_IF_ERROR(Check(Api().GetTensorElementType(raw, &element), name));
  RETURN_IF_ERROR(Check(Api().GetDimensionsCount(raw, &rank), name));
  r.shape.resize(rank);
  RETURN_IF_ERROR(Check(Api().GetDimensions(raw, r.shape.data(), rank), name));
  RETURN_IF_ERROR(Check(Api().GetTensorShapeElementCount(raw, &count), name));
  r.type = FromOrt(element);
  if (r.type == DataType::kInvalid)
    return backend::Internal("output '" + name + "' has an ONNX type with no Triton data type");
  if (r.type == DataType::kBytes) {
    size_t total = 0;
    RETURN_IF_ERROR(Check(Api().GetStringTensorDataLength(value, &total), name));
    std::string content(total, '\0');
    std::vector<size_t> offsets(count);
    if (count > 0)
      RETURN_IF_ERROR(Check(
          Api().GetStringTensorContent(value, content.data(), total, offsets.data(), count), name));
    r.serialized.reserve(total + 4 * count);
    for (size_t i = 0; i < count; ++i) {
      const size_t end = i + 1 < count ? offsets[i + 1] : total;
      backend::AppendBytesElement(r.serialized,
                                  std::string_view(content).substr(offsets[i], end - offsets[i]));
    }
    r.data = r.serialized.data();
    r.bytes = r.serialized.size();
    return r;
  }
  void* data = nullptr;
  RETURN_IF_ERROR(Check(Api().GetTensorMutableData(value, &data), name));
  r.data = static_cast<const uint8_t*>(data);
  r.bytes = count * backend::DataTypeSize(r.type);
  return r;
}

// Runs 'count' requests as one ORT run: inputs joined along the batch dimension (the scheduler
// only batches requests whose other dimensions agree), outputs split back by rows. A failure of
// one request's output lands in 'failed[r]'; a returned error fails them all.
Status ExecuteBatch(const ModelState& m, InstanceState& instance, NereidRequest** requests,
                    uint32_t count, std::vector<Status>& failed) {
  std::vector<std::string> input_names;
  std::vector<ValuePtr> input_values;
  std::vector<std::vector<uint8_t>> joined;  // batches' inputs, alive until the run ends
  auto feed = [&](const backend::BatchInput& in) -> Status {
    const NereidTensor& first = in.first;
    const auto type = static_cast<DataType>(first.datatype);
    if (first.memory_type == NEREID_MEMORY_GPU)
      return backend::Unsupported("input '" + std::string(first.name) +
                                  "' is in GPU memory; the onnxruntime backend reads host memory");
    const uint8_t* data = static_cast<const uint8_t*>(first.data);
    if (count > 1) {
      auto& buffer = joined.emplace_back(in.total_bytes);
      size_t at = 0;
      for (const auto& part : in.parts) {
        if (part.byte_size) std::memcpy(buffer.data() + at, part.data, part.byte_size);
        at += part.byte_size;
      }
      data = buffer.data();
    }
    ValuePtr value;
    if (type == DataType::kBytes) {
      ASSIGN_OR_RETURN(value, StringTensor(first.name, in.shape, data, in.total_bytes));
    } else {
      // The server aligned host inputs to their element size; ORT reads them where they are.
      ASSIGN_OR_RETURN(value, BorrowedTensor(first.name, type, in.shape, const_cast<uint8_t*>(data),
                                             in.total_bytes));
    }
    input_names.emplace_back(first.name);
    input_values.push_back(std::move(value));
    return Status::Ok();
  };
  ASSIGN_OR_RETURN(backend::Batch batch, backend::Batch::Gather(m, requests, count, failed, feed));
  const bool batching = batch.batching();
  const int64_t total_rows = batch.total_rows();
  const std::vector<std::string>& fetch = batch.fetch();

  // A request alone in its batch gets outputs of a shape the graph fixes allocated in its response
  // now, and ORT writes them there.
  std::vector<ValuePtr> output_values(fetch.size());
  std::vector<bool> in_response(fetch.size(), false);
  if (count == 1) {
    for (size_t o = 0; o < fetch.size(); ++o) {
      const backend::ValueInfo* g = backend::Find(m.graph_outputs, fetch[o]);
      auto spec = m.outputs.find(fetch[o]);
      if (g == nullptr || !g->has_shape || g->type == DataType::kBytes ||
          (spec != m.outputs.end() && spec->second.has_reshape) ||
          m.declared_shape_holds.at(fetch[o]).load(std::memory_order_relaxed) != 1)
        continue;
      const std::vector<int64_t> shape = DeclaredShape(*g, batching, total_rows);
      if (std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; })) continue;
      const int64_t bytes = backend::TensorByteSize(g->type, shape);
      if (bytes < 0) continue;
      auto buffer = backend::AllocateOutput(requests[0], fetch[o], g->type, shape,
                                            static_cast<uint64_t>(bytes));
      if (!buffer.ok()) {
        failed[0] = buffer.status();
        return Status::Ok();
      }
      ASSIGN_OR_RETURN(output_values[o], BorrowedTensor(fetch[o], g->type, shape, buffer->data,
                                                        static_cast<size_t>(bytes)));
      in_response[o] = true;
    }
  }

  std::vector<const char*> in_names, out_names;
  std::vector<const ort::OrtValue*> in_values;
  for (size_t i = 0; i < input_names.size(); ++i) {
    in_names.push_back(input_names[i].c_str());
    in_values.push_back(input_values[i].get());
  }
  std::vector<ort::OrtValue*> outs(fetch.size(), nullptr);
  for (size_t o = 0; o < fetch.size(); ++o) {
    out_names.push_back(fetch[o].c_str());
    outs[o] = output_values[o].release();  // ORT fills the empty slots; we own all afterwards
  }
  const uint64_t compute_start = NereidNowNs();
  ort::OrtStatus* run =
      Api().Run(instance.session.get(), nullptr, in_names.data(), in_values.data(), in_names.size(),
                out_names.data(), out_names.size(), outs.data());
  const uint64_t compute_end = NereidNowNs();
  for (size_t o = 0; o < fetch.size(); ++o) output_values[o].reset(outs[o]);
  if (run != nullptr)  // perhaps a declared shape that does not hold for these inputs
    for (size_t o = 0; o < fetch.size(); ++o)
      if (in_response[o]) m.declared_shape_holds.at(fetch[o]).store(-1);
  RETURN_IF_ERROR(Check(run, "model '" + m.name + "'"));
  batch.SetComputeTimes(compute_start, compute_end);

  for (size_t i = 0; i < fetch.size(); ++i) {
    if (in_response[i]) continue;  // ORT wrote it into the response
    if (!output_values[i])
      return backend::Internal("ONNX Runtime gave no output '" + fetch[i] + "'");
    ASSIGN_OR_RETURN(Result result, ReadResult(fetch[i], output_values[i].get()));
    if (const backend::ValueInfo* g = backend::Find(m.graph_outputs, fetch[i]); g && g->has_shape) {
      std::atomic<int>& holds = m.declared_shape_holds.at(fetch[i]);
      if (DeclaredShape(*g, batching, total_rows) != result.shape)
        holds.store(-1);
      else if (holds.load(std::memory_order_relaxed) == 0)
        holds.store(1);
    }
    RETURN_IF_ERROR(batch.Emit(fetch[i], result.type, result.shape, result.data, result.bytes));
  }
  return Status::Ok();
}

}  // namespace
}  // namespace nereid::onnxruntime

namespace ortb = nereid::onnxruntime;
namespace backend = nereid::backend;

struct OnnxRuntimeBackend {
  using Model = ortb::ModelState;
  using Instance = ortb::InstanceState;
  static constexpr const char* kPlatforms = "onnxruntime_onnx";
  static constexpr const char* kModelFile = "model.onnx";
  // Fails (UNAVAILABLE) when no ONNX Runtime library loads: the server then serves onnxruntime
  // configs on the native engine, which answers for "onnxruntime" as an alias. The environment and
  // the library stay until exit: ORT's own static state is torn down then.
  static backend::Status Initialize() { return ortb::LoadRuntime(); }
  static backend::StatusOr<std::unique_ptr<Model>> LoadModel(NereidModel* model) {
    return ortb::InitializeModel(model);
  }
  static backend::StatusOr<std::unique_ptr<Instance>> CreateInstance(NereidInstance* instance,
                                                                     Model& model) {
    return ortb::InitializeInstance(&model, instance);
  }
  static backend::Status Execute(const Model& model, Instance& instance, NereidInstance*,
                                 NereidRequest** requests, uint32_t count,
                                 std::vector<backend::Status>& failed) {
    return ortb::ExecuteBatch(model, instance, requests, count, failed);
  }
};

NEREID_BATCH_BACKEND(OnnxRuntimeBackend)

extern "C" {

// KIND_GPU instances where the loaded library has CUDA's execution provider (onnxruntime-gpu).
NEREID_EXPORT int NereidBackendSupportsGpu(void) {
  return ortb::LoadRuntime().ok() && ortb::g_ort->Offers("CUDAExecutionProvider") ? 1 : 0;
}

// Without it, a config's explicit KIND_GPU instances still load: each asks for CUDA (and its
// TensorRT) and falls back to the CPU provider, logged and counted, or refuses the load as
// nereid.accelerator_fallback says (docs/placement.md).
NEREID_EXPORT int NereidBackendGpuFallback(void) { return 1; }

}  // extern "C"
