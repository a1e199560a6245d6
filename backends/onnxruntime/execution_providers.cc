#include "execution_providers.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

namespace nereid::onnxruntime {
namespace {

using backend::InvalidArgument;
using backend::Status;
using backend::StatusOr;

// The accelerators of one list (cpu_execution_accelerator or gpu_execution_accelerator) as
// {name, {key: value}}, in the config's order.
std::vector<std::pair<std::string, std::map<std::string, std::string>>> Accelerators(
    const rapidjson::Value& config, const char* list) {
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> out;
  if (!config.HasMember("optimization") || !config["optimization"].IsObject()) return out;
  const auto& opt = config["optimization"];
  if (!opt.HasMember("execution_accelerators") || !opt["execution_accelerators"].IsObject())
    return out;
  const auto& eas = opt["execution_accelerators"];
  if (!eas.HasMember(list) || !eas[list].IsArray()) return out;
  for (const auto& ea : eas[list].GetArray()) {
    std::map<std::string, std::string> params;
    if (ea.HasMember("parameters") && ea["parameters"].IsObject())
      for (const auto& p : ea["parameters"].GetObject())
        params[p.name.GetString()] = p.value.IsString() ? p.value.GetString() : "";
    out.emplace_back(backend::StringField(ea, "name"), std::move(params));
  }
  return out;
}

// Triton's parsers: "true"/"false" (and 1/0) for booleans, whole numbers for counts and sizes.
Status CheckBool(const std::string& value) {
  static const std::set<std::string> kBools = {"true", "false", "True", "False", "1", "0"};
  if (!kBools.count(value))
    return InvalidArgument("failed to convert '" + value + "' to boolean value");
  return Status::Ok();
}

Status CheckUnsigned(const std::string& value) {
  char* end = nullptr;
  errno = 0;
  static_cast<void>(std::strtoull(value.c_str(), &end, 10));  // (only whether it parses)
  if (value.empty() || value[0] == '-' || errno != 0 || *end != '\0')
    return InvalidArgument("failed to convert '" + value +
                           "' to unsigned long long integral number");
  return Status::Ok();
}

Status CheckInt(const std::string& value) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || errno != 0 || *end != '\0' || v < -(1L << 31) || v >= (1L << 31))
    return InvalidArgument("failed to convert '" + value + "' to int integral number");
  return Status::Ok();
}

// A cache folder a provider writes: relative to the model's version directory and inside it
// (absolute paths and '..' that leave it are refused: a config never points a write elsewhere).
StatusOr<std::string> CachePath(const std::string& model_dir, const std::string& key,
                                const std::string& value) {
  namespace fs = std::filesystem;
  const fs::path root = fs::weakly_canonical(fs::path(model_dir));
  const fs::path path = fs::weakly_canonical(root / fs::path(value));
  const auto [r, p] = std::mismatch(root.begin(), root.end(), path.begin(), path.end());
  if (fs::path(value).is_absolute() || r != root.end())
    return InvalidArgument("parameter '" + key +
                           "' must be a folder inside the model's version "
                           "directory (a relative path), got '" +
                           value + "'");
  return path.string();
}

StatusOr<ProviderRequest> OpenVino(const std::map<std::string, std::string>& params,
                                   const std::string& model_dir, std::string origin) {
  ProviderRequest r;
  r.kind = ProviderRequest::Kind::kOpenVino;
  r.origin = std::move(origin);
  std::string device = "CPU";
  for (const auto& [key, value] : params) {
    if (key == "device_type") {
      if (value.empty()) return InvalidArgument("parameter 'device_type' is empty");
      device = value;
    } else if (key == "precision") {
      static const std::set<std::string> kPrecisions = {"FP32", "FP16", "ACCURACY"};
      if (!kPrecisions.count(value))
        return InvalidArgument("unsupported precision '" + value +
                               "' is requested for OpenVINO Execution Accelerator (FP32, FP16 "
                               "or ACCURACY)");
      r.options.emplace_back("precision", value);
    } else if (key == "cache_dir") {
      ASSIGN_OR_RETURN(std::string path, CachePath(model_dir, key, value));
      r.options.emplace_back("cache_dir", path);
    } else if (key == "num_of_threads" || key == "num_streams") {
      RETURN_IF_ERROR(CheckUnsigned(value));
      r.options.emplace_back(key, value);
    } else {
      return InvalidArgument("unknown parameter '" + key +
                             "' is provided for OpenVINO Execution Accelerator (device_type, "
                             "precision, cache_dir, num_of_threads, num_streams)");
    }
  }
  r.options.insert(r.options.begin(), {"device_type", device});
  return r;
}

StatusOr<ProviderRequest> TensorRt(const std::map<std::string, std::string>& params,
                                   const std::string& model_dir) {
  ProviderRequest r;
  r.kind = ProviderRequest::Kind::kTensorRt;
  r.origin = "gpu_execution_accelerator 'tensorrt'";
  // Triton's names -> ORT's, and how each value is checked.
  enum class Check { kBool, kUnsigned, kInt, kText, kPath };
  static const std::map<std::string, std::pair<std::string, Check>> kKeys = {
      {"max_workspace_size_bytes", {"trt_max_workspace_size", Check::kUnsigned}},
      {"trt_max_partition_iterations", {"trt_max_partition_iterations", Check::kInt}},
      {"trt_min_subgraph_size", {"trt_min_subgraph_size", Check::kInt}},
      {"int8_calibration_table_name", {"trt_int8_calibration_table_name", Check::kText}},
      {"int8_use_native_calibration_table",
       {"trt_int8_use_native_calibration_table", Check::kBool}},
      {"trt_dla_enable", {"trt_dla_enable", Check::kBool}},
      {"trt_dla_core", {"trt_dla_core", Check::kInt}},
      {"trt_engine_cache_enable", {"trt_engine_cache_enable", Check::kBool}},
      {"trt_engine_cache_path", {"trt_engine_cache_path", Check::kPath}},
      {"trt_engine_cache_prefix", {"trt_engine_cache_prefix", Check::kText}},
      {"trt_force_sequential_engine_build", {"trt_force_sequential_engine_build", Check::kBool}},
      {"trt_context_memory_sharing_enable", {"trt_context_memory_sharing_enable", Check::kBool}},
      {"trt_layer_norm_fp32_fallback", {"trt_layer_norm_fp32_fallback", Check::kBool}},
      {"trt_timing_cache_enable", {"trt_timing_cache_enable", Check::kBool}},
      {"trt_timing_cache_path", {"trt_timing_cache_path", Check::kPath}},
      {"trt_force_timing_cache", {"trt_force_timing_cache", Check::kBool}},
      {"trt_detailed_build_log", {"trt_detailed_build_log", Check::kBool}},
      {"trt_build_heuristics_enable", {"trt_build_heuristics_enable", Check::kBool}},
      {"trt_sparsity_enable", {"trt_sparsity_enable", Check::kBool}},
      {"trt_builder_optimization_level", {"trt_builder_optimization_level", Check::kInt}},
      {"trt_auxiliary_streams", {"trt_auxiliary_streams", Check::kInt}},
      {"trt_cuda_graph_enable", {"trt_cuda_graph_enable", Check::kBool}},
  };
  for (const auto& [key, value] : params) {
    if (key == "precision_mode") {
      if (value == "FP16")
        r.options.emplace_back("trt_fp16_enable", "1");
      else if (value == "INT8")
        r.options.emplace_back("trt_int8_enable", "1");
      else if (value != "FP32")
        return InvalidArgument("unsupported precision mode '" + value + "' is requested");
      continue;
    }
    auto it = kKeys.find(key);
    if (it == kKeys.end())
      return InvalidArgument("unknown parameter '" + key +
                             "' is provided for TensorRT Execution Accelerator");
    std::string v = value;
    switch (it->second.second) {
      case Check::kBool:
        RETURN_IF_ERROR(CheckBool(value));
        break;
      case Check::kUnsigned:
        RETURN_IF_ERROR(CheckUnsigned(value));
        break;
      case Check::kInt:
        RETURN_IF_ERROR(CheckInt(value));
        break;
      case Check::kPath: {
        ASSIGN_OR_RETURN(v, CachePath(model_dir, key, value));
        break;
      }
      case Check::kText:
        break;
    }
    r.options.emplace_back(it->second.first, v);
  }
  return r;
}

StatusOr<ProviderRequest> Cuda(const std::map<std::string, std::string>& params) {
  ProviderRequest r;
  r.kind = ProviderRequest::Kind::kCuda;
  r.origin = "gpu_execution_accelerator 'cuda'";
  // ORT's CUDA provider options a config may set (device_id is the instance's).
  static const std::set<std::string> kKeys = {"cudnn_conv_algo_search",
                                              "gpu_mem_limit",
                                              "arena_extend_strategy",
                                              "do_copy_in_default_stream",
                                              "cudnn_conv_use_max_workspace",
                                              "cudnn_conv1d_pad_to_nc1d",
                                              "enable_cuda_graph",
                                              "use_tf32",
                                              "use_ep_level_unified_stream",
                                              "prefer_nhwc",
                                              "tunable_op_enable",
                                              "tunable_op_tuning_enable"};
  for (const auto& [key, value] : params) {
    if (!kKeys.count(key))
      return InvalidArgument("unknown parameter '" + key +
                             "' is provided for CUDA Execution Accelerator");
    if (key == "do_copy_in_default_stream" || key == "use_ep_level_unified_stream")
      RETURN_IF_ERROR(CheckBool(value));
    r.options.emplace_back(key, value);
  }
  return r;
}

}  // namespace

const char* ProviderRequest::ProviderName() const {
  switch (kind) {
    case Kind::kOpenVino:
      return "OpenVINOExecutionProvider";
    case Kind::kTensorRt:
      return "TensorrtExecutionProvider";
    case Kind::kCuda:
      return "CUDAExecutionProvider";
  }
  return "";
}

std::string ProviderRequest::Describe() const {
  std::string out = kind == Kind::kOpenVino   ? "OpenVINO"
                    : kind == Kind::kTensorRt ? "TensorRT"
                                              : "CUDA";
  std::string list;
  for (const auto& [key, value] : options) list += (list.empty() ? "" : ", ") + key + " " + value;
  return list.empty() ? out : out + " (" + list + ")";
}

std::string ProviderRequest::Device() const {
  if (kind != Kind::kOpenVino) return "";
  for (const auto& [key, value] : options)
    if (key == "device_type") return value;
  return "CPU";
}

StatusOr<Placement> ReadPlacement(const std::string& model, const rapidjson::Value& config,
                                  const std::string& model_dir) {
  const std::string who = "model '" + model + "': ";
  auto fail = [&](const Status& s) { return Status(s.code(), who + s.message()); };
  Placement p;
  const auto cpu = Accelerators(config, "cpu_execution_accelerator");
  for (const auto& [name, params] : cpu) {
    if (name != "openvino")
      return fail(InvalidArgument("unknown Execution Accelerator '" + name + "' is requested"));
    auto r = OpenVino(params, model_dir, "cpu_execution_accelerator 'openvino'");
    if (!r.ok()) return fail(r.status());
    p.cpu.push_back(std::move(r).value());
  }
  for (const auto& [name, params] : Accelerators(config, "gpu_execution_accelerator")) {
    StatusOr<ProviderRequest> r =
        name == "tensorrt" ? TensorRt(params, model_dir)
        : name == "cuda"   ? Cuda(params)
                           : StatusOr<ProviderRequest>(InvalidArgument(
                                 "unknown Execution Accelerator '" + name + "' is requested"));
    if (!r.ok()) return fail(r.status());
    p.gpu.push_back(std::move(r).value());
  }
  // At most one TensorRT and one CUDA, TensorRT first (ORT tries providers in order).
  std::stable_sort(p.gpu.begin(), p.gpu.end(), [](const auto& a, const auto& b) {
    return a.kind == ProviderRequest::Kind::kTensorRt && b.kind != a.kind;
  });
  const std::string fallback = backend::Parameter(config, "nereid.accelerator_fallback");
  if (!fallback.empty() && fallback != "cpu" && fallback != "refuse")
    return fail(InvalidArgument(
        "parameter 'nereid.accelerator_fallback' must be cpu or refuse, got '" + fallback + "'"));
  p.refuse = fallback == "refuse";
  p.device = backend::Parameter(config, "nereid.device");
  if (!p.device.empty()) {
    // "openvino:<device_type>": OpenVINO's devices (CPU, GPU, GPU.0, NPU, AUTO:..., HETERO:...).
    const std::string prefix = "openvino:";
    if (p.device.rfind(prefix, 0) != 0 || p.device.size() == prefix.size())
      return fail(
          InvalidArgument("parameter 'nereid.device' must name an accelerator as "
                          "openvino:<device> (openvino:NPU, openvino:GPU, openvino:CPU), "
                          "got '" +
                          p.device + "'"));
    std::map<std::string, std::string> params = {{"device_type", p.device.substr(prefix.size())}};
    // The openvino cpu_execution_accelerator's other parameters apply to the accelerator too.
    for (const auto& [name, more] : cpu)
      for (const auto& [key, value] : more)
        if (key != "device_type") params.emplace(key, value);
    auto r = OpenVino(params, model_dir, "parameter nereid.device '" + p.device + "'");
    if (!r.ok()) return fail(r.status());
    p.accelerator.push_back(std::move(r).value());
  }
  bool model_kind = false;
  if (config.HasMember("instance_group") && config["instance_group"].IsArray())
    for (const auto& group : config["instance_group"].GetArray())
      model_kind = model_kind || backend::StringField(group, "kind") == "KIND_MODEL";
  if (!p.device.empty() && !model_kind)
    return fail(
        InvalidArgument("parameter 'nereid.device' places KIND_MODEL instances, but no "
                        "instance_group is KIND_MODEL"));
  return p;
}

}  // namespace nereid::onnxruntime
