// The PyTorch backend: TorchScript models (`platform: "pytorch_libtorch"`, a model.pt saved with
// torch.jit.save) on libtorch, as Triton's pytorch backend serves them. Inputs bind to forward()'s
// arguments by Triton's naming convention (INPUT__0, INPUT__1, ... by index) or by name (the
// config's input names are forward()'s argument names); outputs OUTPUT__<i> are element i of what
// forward() returns (a tensor, or a tuple or list of tensors), other names go by config order.
// Each instance loads its own module on its device (KIND_CPU, or KIND_GPU where libtorch has CUDA).
// AOT-Inductor packages (`platform: "torch_aoti"`, model.pt2 from
// torch._inductor.aoti_compile_and_package) run where libtorch has AOTInductor (2.6 on): inputs
// go in config order, outputs come back in config order; each instance loads the package for its
// device, which must be the device it was compiled for.
#include <ATen/Parallel.h>
#include <rapidjson/document.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/version.h>
#if __has_include( \
    <c10/cuda/CUDACachingAllocator.h>) && __has_include(<c10/cuda/impl/cuda_cmake_macros.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define NEREID_TORCH_CUDA_ALLOCATOR 1
#endif
// AOT-Inductor packages (platform "torch_aoti"), where libtorch has them (2.6 on).
#if __has_include(<torch/csrc/inductor/aoti_package/model_package_loader.h>)
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#define NEREID_TORCH_AOTI 1
#endif

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/batching.h"
#include "common/config_json.h"
#include "nereid/backend.h"

namespace nereid::pytorch {
namespace {

using backend::DataType;
using backend::FromError;
using backend::Status;
using backend::StatusOr;

void Log(NereidLogLevel level, const std::string& message) { backend::Log(level, message); }

std::optional<c10::ScalarType> TorchType(DataType t) {
  switch (t) {
    case DataType::kFp32:
      return torch::kFloat;
    case DataType::kFp64:
      return torch::kDouble;
    case DataType::kFp16:
      return torch::kHalf;
    case DataType::kBf16:
      return torch::kBFloat16;
    case DataType::kInt8:
      return torch::kChar;
    case DataType::kUint8:
      return torch::kByte;
    case DataType::kInt16:
      return torch::kShort;
    case DataType::kInt32:
      return torch::kInt;
    case DataType::kInt64:
      return torch::kLong;
    case DataType::kBool:
      return torch::kBool;
    default:
      return std::nullopt;
  }
}

// "<prefix>__<n>" -> n (Triton's naming convention), else -1.
int ConventionIndex(const std::string& name) {
  const size_t at = name.rfind("__");
  if (at == std::string::npos || at + 2 >= name.size()) return -1;
  int n = 0;
  for (size_t i = at + 2; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || n > 100000) return -1;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

// Triton's libtorch parameters (config.pbtxt `parameters`), read at load.
struct Options {
  bool inference_mode = true;       // INFERENCE_MODE (c10::InferenceMode, else NoGradGuard)
  bool optimized_execution = true;  // DISABLE_OPTIMIZED_EXECUTION inverted
  std::optional<bool> jit_executor, jit_profiling;  // ENABLE_JIT_EXECUTOR / _PROFILING
  bool cache_cleaning = false;                      // ENABLE_CACHE_CLEANING (GPU instances)
  bool weight_sharing = false;                      // ENABLE_WEIGHT_SHARING
};

struct ModelState : backend::ModelIo {
  std::string path;
  bool aoti = false;  // platform "torch_aoti": an AOT-Inductor package, not TorchScript
  std::vector<std::string> input_order;    // config order
  std::vector<std::string> output_order;   // config order
  std::map<std::string, size_t> argument;  // input name -> forward() argument position
  std::map<std::string, size_t> element;   // output name -> element of forward()'s result
  Options options;
  // ENABLE_WEIGHT_SHARING: one module per device, shared by that device's instances.
  std::mutex shared_mu;
  std::map<std::string, std::shared_ptr<torch::jit::Module>> shared;
};

struct InstanceState {
  std::shared_ptr<torch::jit::Module> module;
#ifdef NEREID_TORCH_AOTI
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> package;  // torch_aoti
#endif
  torch::Device device = torch::kCPU;
};

// A boolean parameter: absent -> nullopt; true/false/1/0/yes/no (any case); else an error.
StatusOr<std::optional<bool>> BoolParameter(const rapidjson::Value& config,
                                            const std::string& model, const char* key) {
  std::string v = backend::Parameter(config, key);
  if (v.empty()) return std::optional<bool>();
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "true" || v == "1" || v == "yes") return std::optional<bool>(true);
  if (v == "false" || v == "0" || v == "no") return std::optional<bool>(false);
  return backend::InvalidArgument("model '" + model + "': parameter '" + key +
                                  "' must be true or false, got '" +
                                  backend::Parameter(config, key) + "'");
}

// INTRA_OP_THREAD_COUNT, INTER_OP_THREAD_COUNT and DISABLE_CUDNN set libtorch's process-wide
// state: as in Triton, the first model that sets a thread count decides it.
Status ApplyGlobalParameters(const rapidjson::Value& config, const std::string& model) {
  static std::mutex mu;
  static bool intra_set = false, inter_set = false;
  ASSIGN_OR_RETURN(int intra,
                   backend::IntParameter(model, config, "INTRA_OP_THREAD_COUNT", 1, 4096, 0));
  ASSIGN_OR_RETURN(int inter,
                   backend::IntParameter(model, config, "INTER_OP_THREAD_COUNT", 1, 4096, 0));
  ASSIGN_OR_RETURN(std::optional<bool> no_cudnn, BoolParameter(config, model, "DISABLE_CUDNN"));
  std::lock_guard lock(mu);
  if (intra > 0 && !intra_set) {
    at::set_num_threads(intra);
    intra_set = true;
    Log(NEREID_LOG_INFO,
        "libtorch intra-op threads: " + std::to_string(intra) + " (model '" + model + "')");
  }
  if (inter > 0 && !inter_set) {
    inter_set = true;
    try {  // libtorch refuses once its inter-op pool has started
      at::set_num_interop_threads(inter);
      Log(NEREID_LOG_INFO,
          "libtorch inter-op threads: " + std::to_string(inter) + " (model '" + model + "')");
    } catch (const std::exception& e) {
      Log(NEREID_LOG_WARNING, "model '" + model +
                                  "': INTER_OP_THREAD_COUNT not applied (libtorch's inter-op "
                                  "pool is already running)");
    }
  }
  if (no_cudnn.value_or(false)) at::globalContext().setUserEnabledCuDNN(false);
  return Status::Ok();
}

Status ReadOptions(const rapidjson::Value& config, const std::string& model, Options& o) {
  ASSIGN_OR_RETURN(auto inference_mode, BoolParameter(config, model, "INFERENCE_MODE"));
  ASSIGN_OR_RETURN(auto no_optimization,
                   BoolParameter(config, model, "DISABLE_OPTIMIZED_EXECUTION"));
  ASSIGN_OR_RETURN(o.jit_executor, BoolParameter(config, model, "ENABLE_JIT_EXECUTOR"));
  ASSIGN_OR_RETURN(o.jit_profiling, BoolParameter(config, model, "ENABLE_JIT_PROFILING"));
  ASSIGN_OR_RETURN(auto cache_cleaning, BoolParameter(config, model, "ENABLE_CACHE_CLEANING"));
  ASSIGN_OR_RETURN(auto weight_sharing, BoolParameter(config, model, "ENABLE_WEIGHT_SHARING"));
  o.inference_mode = inference_mode.value_or(true);
  o.optimized_execution = !no_optimization.value_or(false);
  o.cache_cleaning = cache_cleaning.value_or(false);
  o.weight_sharing = weight_sharing.value_or(false);
  return ApplyGlobalParameters(config, model);
}

// TYPE_STRING travels as List[str] (TorchScript has no string tensors), so, as in Triton, only
// where the tensor is one-dimensional: dims [-1] or [n] without batching, dims [1] with it (one
// string per row).
bool StringShapeServed(const backend::IoSpec& spec, bool batching) {
  if (spec.dims.size() != 1) return false;
  return batching ? spec.dims[0] == 1 : true;
}

std::vector<std::string> Names(const rapidjson::Value& config, const char* key) {
  std::vector<std::string> names;
  if (config.HasMember(key) && config[key].IsArray())
    for (const auto& v : config[key].GetArray()) names.push_back(backend::StringField(v, "name"));
  return names;
}

// A libtorch error in one line: its first line, and for TorchScript's "The following operation
// failed in the TorchScript interpreter" (a traceback follows) the last line too, which holds
// the model's own exception and message ("builtins.ValueError: ..."). At most ~1000 characters.
std::string TorchMessage(const std::string& what) {
  auto trim = [](std::string_view line) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back())))
      line.remove_suffix(1);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front())))
      line.remove_prefix(1);
    return line;
  };
  std::string_view text(what);
  const std::string_view first = trim(text.substr(0, text.find('\n')));
  std::string_view last;
  for (size_t end = text.size(); end > 0 && last.empty();) {
    const size_t start = text.rfind('\n', end - 1);
    const size_t from = start == std::string_view::npos ? 0 : start + 1;
    last = trim(text.substr(from, end - from));
    end = start == std::string_view::npos ? 0 : start;
  }
  std::string message(first);
  if (!last.empty() && last != first)
    message += (message.empty() ? "" : " ... ") + std::string(last);
  if (message.size() > 1000) message = message.substr(0, 1000) + "...";
  return message;
}

StatusOr<torch::jit::Module> Load(const std::string& name, const std::string& path,
                                  const torch::Device& device) {
  try {
    torch::jit::Module module = torch::jit::load(path, device);
    module.eval();
    return module;
  } catch (const std::exception& e) {
    return backend::InvalidArgument("model '" + name + "': libtorch cannot load " + path + ": " +
                                    TorchMessage(e.what()));
  }
}

// Binds the config's inputs to forward()'s arguments and its outputs to the result's elements.
Status Bind(ModelState& m, torch::jit::Module& module) {
  const auto& schema = module.get_method("forward").function().getSchema();
  std::vector<std::string> args;
  for (size_t i = 1; i < schema.arguments().size(); ++i)  // 0 is self
    args.push_back(schema.arguments()[i].name());
  std::string arg_list;
  for (const auto& a : args) arg_list += (arg_list.empty() ? "" : ", ") + a;
  const bool by_index = std::all_of(m.input_order.begin(), m.input_order.end(),
                                    [](const std::string& n) { return ConventionIndex(n) >= 0; });
  for (const std::string& name : m.input_order) {
    size_t position = 0;
    if (by_index) {
      position = static_cast<size_t>(ConventionIndex(name));
    } else {
      auto it = std::find(args.begin(), args.end(), name);
      if (it == args.end())
        return backend::InvalidArgument("model '" + m.name + "': input '" + name +
                                        "' is neither named <name>__<index> nor an "
                                        "argument of forward() (its arguments: " +
                                        arg_list + ")");
      position = static_cast<size_t>(it - args.begin());
    }
    if (position >= args.size())
      return backend::InvalidArgument("model '" + m.name + "': input '" + name + "' is argument " +
                                      std::to_string(position) + ", but forward() takes " +
                                      std::to_string(args.size()) + " (" + arg_list + ")");
    m.argument[name] = position;
  }
  if (m.argument.size() != args.size())
    return backend::InvalidArgument(
        "model '" + m.name + "': forward() takes " + std::to_string(args.size()) + " arguments (" +
        arg_list + ") but config.pbtxt declares " + std::to_string(m.argument.size()) + " inputs");
  for (size_t i = 0; i < m.output_order.size(); ++i) {
    const int n = ConventionIndex(m.output_order[i]);
    m.element[m.output_order[i]] = n >= 0 ? static_cast<size_t>(n) : i;
  }
  return Status::Ok();
}

constexpr const char* kModelFile = "model.pt";
constexpr const char* kPackageFile = "model.pt2";  // torch_aoti

StatusOr<std::unique_ptr<ModelState>> InitializeModel(NereidModel* model) {
  auto m = std::make_unique<ModelState>();
  rapidjson::Document config;
  config.Parse(NereidModelConfigJson(model));
  if (config.HasParseError() || !config.IsObject())
    return backend::Internal("model config JSON is malformed");
  static_cast<backend::ModelIo&>(*m) = backend::ReadModelIo(NereidModelName(model), config);
  // Triton's PyTorch backend also serves AOT-Inductor packages (model.pt2); that needs
  // torch::inductor::AOTIModelPackageLoader, which libtorch has from 2.6 on.
  m->aoti = backend::StringField(config, "platform") == "torch_aoti";
#ifndef NEREID_TORCH_AOTI
  if (m->aoti)
    return backend::Unsupported(
        "model '" + m->name +
        "': platform 'torch_aoti' (an AOT-Inductor package, model.pt2) needs a libtorch with "
        "AOTInductor (2.6 or later); this pytorch backend is built against libtorch " +
        std::string(TORCH_VERSION) + ", which serves TorchScript (platform 'pytorch_libtorch')");
#endif
  m->input_order = Names(config, "input");
  // Batch inputs (ragged batching) are forward()'s arguments too, after the config's inputs.
  for (const backend::BatchTensor& t : m->batch_inputs)
    m->input_order.insert(m->input_order.end(), t.targets.begin(), t.targets.end());
  m->output_order = Names(config, "output");
  if (m->input_order.empty() || m->output_order.empty())
    return backend::InvalidArgument(
        "model '" + m->name +
        "': a TorchScript model does not describe its inputs and outputs; "
        "config.pbtxt must list them (INPUT__0 ... / OUTPUT__0 ... or forward()'s argument names)");
  for (const auto* specs : {&m->inputs, &m->outputs})
    for (const auto& [name, spec] : *specs) {
      if (spec.type == DataType::kBytes) {
        // An AOT-Inductor package's call takes and gives flat lists of tensors.
        if (m->aoti)
          return backend::Unsupported("model '" + m->name + "': '" + name +
                                      "' is TYPE_STRING; an AOT-Inductor package takes and "
                                      "gives tensors only");
        if (!StringShapeServed(spec, m->max_batch_size > 0))
          return backend::Unsupported(
              "model '" + m->name + "': '" + name +
              "' is TYPE_STRING, which TorchScript takes as List[str]: it must be "
              "one-dimensional (dims [-1] or [n] without batching, dims [1] with it)");
        continue;
      }
      if (!TorchType(spec.type))
        return backend::Unsupported("model '" + m->name + "': '" + name + "' is " +
                                    backend::ConfigTypeName(spec.type) +
                                    ", which the pytorch backend does not serve");
    }
  std::string file = backend::StringField(config, "default_model_filename");
  if (file.empty()) file = m->aoti ? kPackageFile : kModelFile;
  m->path = (std::filesystem::path(NereidModelVersionPath(model)) / file).string();
  if (!std::filesystem::exists(m->path))
    return backend::NotFound("model '" + m->name + "': no model file at " + m->path);
  RETURN_IF_ERROR(ReadOptions(config, m->name, m->options));
  if (m->aoti) {
    // The package's call takes the inputs and gives the outputs as flat lists: config order.
    for (size_t i = 0; i < m->input_order.size(); ++i) m->argument[m->input_order[i]] = i;
    for (size_t i = 0; i < m->output_order.size(); ++i) m->element[m->output_order[i]] = i;
    Log(NEREID_LOG_INFO, "model '" + m->name + "' runs on libtorch " + TORCH_VERSION +
                             " (AOT-Inductor package " + file + ", inputs in config order)");
    return m;
  }
  ASSIGN_OR_RETURN(torch::jit::Module module, Load(m->name, m->path, torch::kCPU));
  RETURN_IF_ERROR(Bind(*m, module));
  Log(NEREID_LOG_INFO, "model '" + m->name + "' runs on libtorch " + TORCH_VERSION +
                           " (TorchScript " + file + ", inputs bound " +
                           (ConventionIndex(m->input_order[0]) >= 0 ? "by index" : "by name") +
                           ")");
  return m;
}

StatusOr<std::unique_ptr<InstanceState>> InitializeInstance(NereidInstance* instance,
                                                            ModelState* m) {
  auto state = std::make_unique<InstanceState>();
  if (NereidInstanceGetKind(instance) == NEREID_INSTANCE_GPU) {
    if (!torch::cuda::is_available())
      return backend::Unavailable("model '" + m->name +
                                  "': KIND_GPU, but this libtorch has no "
                                  "CUDA device");
    state->device = torch::Device(torch::kCUDA, NereidInstanceDeviceId(instance));
  }
#ifdef NEREID_TORCH_AOTI
  if (m->aoti) {
    try {
      state->package = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
          m->path, "model", false, 1,
          state->device.is_cuda() ? state->device.index() : c10::DeviceIndex{-1});
    } catch (const std::exception& e) {
      return backend::InvalidArgument("model '" + m->name +
                                      "': cannot load the AOT-Inductor package " + m->path + ": " +
                                      TorchMessage(e.what()));
    }
    const auto metadata = state->package->get_metadata();
    const auto key = metadata.find("AOTI_DEVICE_KEY");
    const std::string compiled_for = key == metadata.end() ? "cpu" : key->second;
    if ((compiled_for == "cuda") != state->device.is_cuda())
      return backend::Unsupported("model '" + m->name + "': the package was compiled for " +
                                  compiled_for + " but instance '" + NereidInstanceName(instance) +
                                  "' is on " + state->device.str() +
                                  "; compile it with example inputs on the instance's device");
    Log(NEREID_LOG_INFO, "model '" + m->name + "' instance '" + NereidInstanceName(instance) +
                             "' on " + state->device.str() + " (AOT-Inductor package)");
    return state;
  }
#endif
  // With ENABLE_WEIGHT_SHARING the module comes from (or goes to) the model's slot for this
  // device; otherwise the instance loads its own.
  std::unique_lock<std::mutex> lock(m->shared_mu, std::defer_lock);
  std::shared_ptr<torch::jit::Module>* slot = &state->module;
  if (m->options.weight_sharing) {
    lock.lock();
    slot = &m->shared[state->device.str()];
  }
  const bool shared = *slot != nullptr;
  if (!shared) {
    ASSIGN_OR_RETURN(torch::jit::Module loaded, Load(m->name, m->path, state->device));
    *slot = std::make_shared<torch::jit::Module>(std::move(loaded));
  }
  state->module = *slot;
  Log(NEREID_LOG_INFO, "model '" + m->name + "' instance '" + NereidInstanceName(instance) +
                           "' on " + state->device.str() +
                           (shared ? " (weights shared with another instance)" : ""));
  return state;
}

Status ExecuteBatch(const ModelState& m, InstanceState& s, NereidRequest** requests, uint32_t count,
                    std::vector<Status>& failed) {
  std::vector<torch::jit::IValue> args(m.argument.size());
  auto feed = [&](const backend::BatchInput& in) -> Status {
    auto position = m.argument.find(in.first.name);
    if (position == m.argument.end()) return Status::Ok();
    if (static_cast<DataType>(in.first.datatype) == DataType::kBytes) {
      c10::List<std::string> strings;
      for (const auto& part : in.parts)
        if (!backend::ForEachBytesElement(static_cast<const uint8_t*>(part.data), part.byte_size,
                                          [&](std::string_view e, size_t) {
                                            strings.push_back(std::string(e));
                                            return true;
                                          }))
          return backend::InvalidArgument("input '" + std::string(in.first.name) +
                                          "': malformed BYTES tensor data");
      args[position->second] = strings;
      return Status::Ok();
    }
    const auto type = *TorchType(static_cast<DataType>(in.first.datatype));
    torch::Tensor t;
    if (count == 1 && !s.device.is_cpu()) {  // read in place by the copy to the device
      t = torch::from_blob(const_cast<void*>(in.first.data), in.shape,
                           torch::TensorOptions().dtype(type));
    } else {
      // A copy on the CPU: forward() may write its inputs in place (x.mul_(2)), and the request's
      // bytes may be a client's shared-memory region, which the server only reads.
      t = torch::empty(in.shape, torch::TensorOptions().dtype(type));
      auto* dst = static_cast<uint8_t*>(t.data_ptr());
      for (const auto& part : in.parts) {
        if (part.byte_size) std::memcpy(dst, part.data, part.byte_size);
        dst += part.byte_size;
      }
    }
    args[position->second] = s.device.is_cpu() ? t : t.to(s.device);
    return Status::Ok();
  };
  ASSIGN_OR_RETURN(backend::Batch batch, backend::Batch::Gather(m, requests, count, failed, feed));
  const bool batching = batch.batching();
  const std::vector<std::string>& fetch = batch.fetch();

  // Each element of forward()'s result: a tensor, or a list of strings (a TYPE_STRING output).
  struct Result {
    torch::Tensor tensor;
    std::optional<std::vector<std::string>> strings;
  };
  std::vector<Result> results;
  auto add = [&](const torch::jit::IValue& e) {
    if (e.isTensor()) {
      results.push_back({e.toTensor().contiguous().to(torch::kCPU), std::nullopt});
    } else if (e.isList() && std::all_of(e.toListRef().begin(), e.toListRef().end(),
                                         [](const auto& v) { return v.isString(); })) {
      std::vector<std::string> strings;
      for (const auto& v : e.toListRef()) strings.push_back(v.toStringRef());
      results.push_back({torch::Tensor(), std::move(strings)});
    } else {
      throw std::runtime_error("an element of forward()'s result is " + e.tagKind() +
                               "; tensors and lists of strings are served");
    }
  };
  const uint64_t start = NereidNowNs();
  try {
    std::optional<c10::InferenceMode> inference;
    std::optional<torch::NoGradGuard> no_grad;
    if (m.options.inference_mode)
      inference.emplace();
    else
      no_grad.emplace();
    torch::jit::GraphOptimizerEnabledGuard optimizer(m.options.optimized_execution);
    if (m.options.jit_executor) torch::jit::getExecutorMode() = *m.options.jit_executor;
    if (m.options.jit_profiling) torch::jit::getProfilingMode() = *m.options.jit_profiling;
    if (m.aoti) {
#ifdef NEREID_TORCH_AOTI
      // The package's outputs: a flat list of tensors, in config order.
      std::vector<at::Tensor> inputs;
      inputs.reserve(args.size());
      for (const auto& a : args) inputs.push_back(a.toTensor());
      for (const auto& t : s.package->run(inputs))
        results.push_back({t.contiguous().to(torch::kCPU), std::nullopt});
#endif
    } else if (torch::jit::IValue out = s.module->forward(args); out.isTensor()) {
      add(out);
    } else if (out.isTuple()) {
      for (const auto& e : out.toTupleRef().elements()) add(e);
    } else if (out.isTensorList()) {
      for (const auto& e : out.toTensorVector())
        results.push_back({e.contiguous().to(torch::kCPU), std::nullopt});
    } else if (out.isList()) {
      // A list of tensors (several outputs), or a list of strings (one TYPE_STRING output).
      const auto& list = out.toListRef();
      if (!list.empty() && list[0].isString())
        add(out);
      else
        for (const auto& e : list) add(e);
    } else {
      return backend::Unsupported("model '" + m.name + "': forward() returned " + out.tagKind() +
                                  "; a tensor, a list of strings, or a tuple/list of them is "
                                  "served");
    }
#ifdef NEREID_TORCH_CUDA_ALLOCATOR
    if (m.options.cache_cleaning && s.device.is_cuda())
      c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  } catch (const std::exception& e) {
    return backend::InvalidArgument("model '" + m.name +
                                    "': forward() failed: " + TorchMessage(e.what()));
  }
  batch.SetComputeTimes(start, NereidNowNs());

  for (const std::string& name : fetch) {
    const size_t index = m.element.at(name);
    if (index >= results.size())
      return backend::Internal("model '" + m.name + "': output '" + name + "' is element " +
                               std::to_string(index) + " of forward()'s result, which has " +
                               std::to_string(results.size()));
    const backend::IoSpec& spec = m.outputs.at(name);
    if (spec.type == DataType::kBytes || results[index].strings) {
      if (spec.type != DataType::kBytes || !results[index].strings)
        return backend::Internal("model '" + m.name + "': output '" + name + "' is " +
                                 backend::ConfigTypeName(spec.type) +
                                 " in config.pbtxt but forward() " +
                                 (results[index].strings ? "returned a list of strings"
                                                         : "returned a tensor, not List[str]"));
      const auto& strings = *results[index].strings;
      std::string bytes;
      for (const std::string& e : strings) {
        const uint32_t n = static_cast<uint32_t>(e.size());
        const char len[4] = {static_cast<char>(n), static_cast<char>(n >> 8),
                             static_cast<char>(n >> 16), static_cast<char>(n >> 24)};
        bytes.append(len, 4).append(e);
      }
      std::vector<int64_t> shape{static_cast<int64_t>(strings.size())};
      if (batching) shape.push_back(1);  // dims [1]: one string per row
      RETURN_IF_ERROR(batch.Emit(name, spec.type, shape,
                                 reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
      continue;
    }
    const torch::Tensor& t = results[index].tensor;
    if (t.scalar_type() != *TorchType(spec.type))
      return backend::Internal("model '" + m.name + "': output '" + name + "' is " +
                               backend::ConfigTypeName(spec.type) +
                               " in config.pbtxt but forward() "
                               "returned " +
                               std::string(c10::toString(t.scalar_type())));
    RETURN_IF_ERROR(
        batch.Emit(name, spec.type, std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
                   static_cast<const uint8_t*>(t.data_ptr()), t.numel() * t.element_size()));
  }
  return Status::Ok();
}

}  // namespace
}  // namespace nereid::pytorch

namespace pt = nereid::pytorch;
namespace backend = nereid::backend;

struct PyTorchBackend {
  using Model = pt::ModelState;
  using Instance = pt::InstanceState;
  static constexpr const char* kPlatforms = "pytorch_libtorch,torch_aoti";
  static constexpr const char* kModelFile = pt::kModelFile;
  static backend::Status Initialize() { return backend::Status::Ok(); }
  static backend::StatusOr<std::unique_ptr<Model>> LoadModel(NereidModel* model) {
    return pt::InitializeModel(model);
  }
  static backend::StatusOr<std::unique_ptr<Instance>> CreateInstance(NereidInstance* instance,
                                                                     Model& model) {
    return pt::InitializeInstance(instance, &model);
  }
  static backend::Status Execute(const Model& model, Instance& instance, NereidInstance*,
                                 NereidRequest** requests, uint32_t count,
                                 std::vector<backend::Status>& failed) {
    return pt::ExecuteBatch(model, instance, requests, count, failed);
  }
};

NEREID_BATCH_BACKEND(PyTorchBackend)

extern "C" {

// KIND_GPU where this libtorch was built with CUDA and sees a device.
NEREID_EXPORT int NereidBackendSupportsGpu(void) {
  try {
    return torch::cuda::is_available() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

}  // extern "C"
