// The native backend: serves ONNX models on Nereid's own CPU engine through
// include/nereid/backend.h. It also serves configs written for Triton's ONNX Runtime backend when
// every op of the graph is implemented, and auto-completes inputs, outputs and max_batch_size from
// the graph.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/batching.h"
#include "common/config_json.h"
#include "common/graph_check.h"
#include "cpu/gemm.h"
#include "cpu/parallel.h"
#include "graph.h"
#include "variants.h"
#ifdef NEREID_NATIVE_GPU
#include <cuda_runtime.h>

#include "gpu_engine.h"
#endif
#include "nereid/backend.h"

namespace nereid::native {
namespace {

using backend::FromError;
using backend::ToError;

using backend::IoSpec;
using backend::StringField;

void Log(NereidLogLevel level, const std::string& message) { backend::Log(level, message); }

// The config's inputs, outputs and batch size (ModelIo), the loaded graph, and the GPU builds.
struct ModelState : backend::ModelIo {
  std::unique_ptr<Graph> graph;
  int intra_op_threads = 1;
  // CPU executions of several rows run row by row (ChooseRowSplit measured it faster at load).
  bool split_rows = false;
  std::string precision = "fp32";  // config parameter "precision" (the GPU engine's float math)
  std::string path;                // the ONNX file
  // Precision variants ("nereid.precision_variants"; docs/precision.md): the server picks one per
  // execution. Without them 'precision' alone. 'graph' is then fp32 and 'int8_graph' serves the
  // int8 variant of CPU instances.
  std::vector<std::string> variants;
  std::vector<bool> admitted;
  std::unique_ptr<Graph> int8_graph;
  // The precisions instances run: the variants, or 'precision'.
  std::vector<std::string> Precisions() const {
    return variants.empty() ? std::vector<std::string>{precision} : variants;
  }
  const Graph& CpuGraph(uint32_t variant) const {
    return variant < variants.size() && variants[variant] == "int8" ? *int8_graph : *graph;
  }
  // "nereid.open_dims": the values the config's open dimensions (-1 after the batch) take on the
  // GPU, ascending; one compiled plan per value. Empty: the config fixes every dimension.
  std::vector<int64_t> open_dims;
  // Ragged batching of token inputs (allow_ragged_batch on inputs the graph takes as [batch,
  // tokens]; docs/ragged-batching.md): each request's sequences at their own length, at most this
  // many tokens ("nereid.max_sequence_length"); 0: not. A GPU instance runs a batch's sequences
  // packed end to end (a ragged plan), a CPU instance each request alone.
  int64_t ragged_max_length = 0;
  // The plans the GPU instances hold per precision: one per open_dims value, or one.
  size_t GpuPlanCount() const { return std::max<size_t>(open_dims.size(), 1); }
#ifdef NEREID_NATIVE_GPU
  // The graph compiled per device, precision and open_dims value (0: none), shared by that
  // device's instances; the plans of one device and precision share their weights.
  std::mutex gpu_mu;
  std::map<std::tuple<int, std::string, int64_t>, std::shared_ptr<const GpuModel>> gpu_models;
  std::map<std::pair<int, std::string>, std::shared_ptr<GpuWeightStore>> gpu_weights;
  // The file's weights as the GPU compiler reads them, kept while a device still lacks one of
  // the precisions its instances run (one parse for all of them).
  std::unique_ptr<Graph> unpacked;
#endif
};

// Where a KIND_GPU instance's batches of several requests spend their time on the host, summed
// until --log-verbose reports them (a line per 8 such batches): each request's inputs found, its
// outputs allocated, the run (RunOnGpu: staging, the device and the wait for it) and the copies
// from staging into outputs after it. (The responses' time after that is the statistics'
// compute_output.)
struct BatchPhases {
  uint64_t batches = 0, requests = 0, read_ns = 0, allocate_ns = 0, run_ns = 0, after_ns = 0;
};

struct InstanceState {
  // CPU instances with intra_op_thread_count > 1: the threads the kernels split their loops over.
  std::unique_ptr<kernels::ThreadTeam> team;
#ifdef NEREID_NATIVE_GPU
  // KIND_GPU instances: per precision, one plan per open_dims value (none: refused by the guard).
  std::vector<std::vector<GpuInstancePtr>> gpus;
  BatchPhases phases;  // (an instance runs one batch at a time)
#endif
};

constexpr const char* kPrecisions[] = {"fp32", "tf32", "bf16", "fp16", "int8"};

constexpr const char* kModelFile = "model.onnx";

#ifdef NEREID_NATIVE_GPU
// The open_dims value of plan 'plan' (0: the model has none).
int64_t OpenValue(const ModelState& m, size_t plan) {
  return plan < m.open_dims.size() ? m.open_dims[plan] : 0;
}

// A tensor's dims as the config lists them: without the batch where the model batches.
std::vector<int64_t> ConfigDims(const ModelState& m, const int64_t* shape, size_t count) {
  const size_t skip = m.max_batch_size > 0 && count > 0 ? 1 : 0;
  return std::vector<int64_t>(shape + skip, shape + count);
}

// Which plan runs inputs of these dims (after the batch; 'dims_of' by input name): the one whose
// open_dims value every open dimension holds. InvalidArgument naming the input otherwise.
template <typename DimsOf>
StatusOr<size_t> PlanFor(const ModelState& m, const DimsOf& dims_of) {
  if (m.open_dims.empty()) return size_t{0};
  int64_t value = 0;
  std::string where;
  for (const auto& [name, io] : m.inputs) {
    const std::vector<int64_t> dims = dims_of(name);
    // Without batching the config's first dimension is the rows, not an open one.
    for (size_t d = m.max_batch_size == 0 ? 1 : 0; d < io.dims.size() && d < dims.size(); ++d) {
      if (io.dims[d] != -1) continue;
      if (value != 0 && dims[d] != value)
        return InvalidArgument("input '" + name + "' has " + std::to_string(dims[d]) + " where " +
                               where + " has " + std::to_string(value) +
                               ": on the GPU every open dimension takes the same value "
                               "(parameter nereid.open_dims)");
      value = dims[d];
      where = "input '" + name + "'";
    }
  }
  for (size_t p = 0; p < m.open_dims.size(); ++p)
    if (m.open_dims[p] == value) return p;
  std::string list;
  for (size_t p = 0; p < m.open_dims.size(); ++p)
    list += (p == 0                        ? ""
             : p + 1 == m.open_dims.size() ? " or "
                                           : ", ") +
            std::to_string(m.open_dims[p]);
  return InvalidArgument(where + " has " + std::to_string(value) +
                         " in its open dimension: on the GPU this model takes " + list +
                         " (parameter nereid.open_dims); pad to one of them");
}

// The model compiled for 'device' in 'precision' for plan 'plan' (compiled once, shared by the
// device's instances).
StatusOr<std::shared_ptr<const GpuModel>> GpuModelFor(ModelState& m, int device,
                                                      const std::string& precision_name,
                                                      size_t plan) {
  std::lock_guard lock(m.gpu_mu);
  const int64_t open = OpenValue(m, plan);
  auto it = m.gpu_models.find({device, precision_name, open});
  if (it != m.gpu_models.end()) return it->second;
  ASSIGN_OR_RETURN(Precision precision, ParsePrecision(precision_name));
  // A GPU run gathers each request's rows straight into staging: no joins of 1-D ragged inputs or
  // batch inputs (ragged token inputs run on a ragged plan).
  bool ragged = !m.batch_inputs.empty() || !m.scatter_outputs.empty();
  for (const auto& [name, io] : m.inputs) ragged = ragged || io.ragged;
  if (ragged)
    return Unsupported(
        "ragged batching into 1-D inputs (allow_ragged_batch, batch_input, batch_output) runs on "
        "KIND_CPU instances only: on the GPU, ragged inputs are [batch, tokens] (a text "
        "encoder's; docs/ragged-batching.md)");
  // The CPU graph holds its weights packed for the CPU kernels; the GPU compiler reads the file's
  // weights from a graph of its own, dropped once they are on the device.
  if (!m.unpacked) {
    GraphOptions options{.pack_weights = false};
    for (const auto& [name, io] : m.inputs) options.declared_inputs.push_back(name);
    auto unpacked = Graph::Load(m.path, options);
    if (!unpacked.ok()) return unpacked.status();
    m.unpacked = std::move(unpacked).value();
  }
  // The config's dims (after the batch) fix what the file leaves open; without batching, a first
  // dimension every input fixes alike is the rows count.
  // (open dims: the plan's value.)
  GpuShapes shapes;
  int64_t first = -2;
  for (const auto& [name, io] : m.inputs) {
    std::vector<int64_t> d = io.has_reshape ? io.reshape : io.dims;
    if (m.max_batch_size == 0 && !d.empty()) {
      first = first == -2 || first == d[0] ? d[0] : -1;
      d.erase(d.begin());
    }
    if (open > 0) std::replace(d.begin(), d.end(), int64_t{-1}, open);
    shapes.input_dims[name] = d;
  }
  if (first > 0) shapes.fixed_rows = first;
  shapes.ragged_max_length = m.ragged_max_length;
  shapes.ragged_max_sequences = m.max_batch_size;
  std::shared_ptr<GpuWeightStore>& store = m.gpu_weights[{device, precision_name}];
  if (!store) store = MakeGpuWeightStore(device);
  shapes.weights = store;
  ASSIGN_OR_RETURN(std::shared_ptr<const GpuModel> made,
                   CompileForGpu(*m.unpacked, device, precision, shapes));
  std::string which;
  if (!m.variants.empty()) which = "variant " + precision_name;
  if (open > 0)
    which += (which.empty() ? "" : ", ") + std::string("open dims ") + std::to_string(open);
  Log(NEREID_LOG_INFO,
      "model '" + m.name + "' on GPU " + std::to_string(device) +
          (which.empty() ? "" : " (" + which + ")") + ": native GPU engine, " + Describe(*made) +
          (m.ragged_max_length > 0
               ? "; ragged: each batch's sequences packed end to end (up to " +
                     std::to_string(m.ragged_max_length) +
                     " tokens each), a CUDA graph per count of tokens rounded up by at most 1/16"
               : "; a CUDA graph per batch size") +
          (open > 0 ? "; weights shared by the open dims' plans: " +
                          std::to_string(StoredBytes(*store) >> 10) + " KiB on the device so far"
                    : std::string()));
  m.gpu_models.emplace(std::make_tuple(device, precision_name, open), made);
  const std::vector<std::string> precisions = m.Precisions();
  bool all = true;
  for (size_t v = 0; v < precisions.size(); ++v)
    for (size_t p = 0; p < m.GpuPlanCount(); ++p)
      all = all && ((v < m.admitted.size() && !m.admitted[v]) ||
                    m.gpu_models.count({device, precisions[v], OpenValue(m, p)}) > 0);
  if (all) m.unpacked.reset();
  return made;
}

// The calibration inputs through 'precision' on 'device', outputs in 'fetch' order.
StatusOr<std::vector<Tensor>> RunCalibrationOnGpu(
    ModelState& m, int device, const std::string& precision,
    const std::vector<std::pair<std::string, Tensor>>& inputs,
    const std::vector<std::string>& fetch) {
  ASSIGN_OR_RETURN(const size_t plan, PlanFor(m, [&](const std::string& name) {
                     for (const auto& [n, t] : inputs)
                       if (n == name) return ConfigDims(m, t.shape().data(), t.shape().size());
                     return std::vector<int64_t>();
                   }));
  ASSIGN_OR_RETURN(std::shared_ptr<const GpuModel> compiled,
                   GpuModelFor(m, device, precision, plan));
  ASSIGN_OR_RETURN(GpuInstancePtr gpu, CreateGpuInstance(std::move(compiled)));
  std::vector<GpuFeed> feeds;
  for (const auto& [name, t] : inputs)
    feeds.push_back({name, {{t.raw(), t.bytes(), false, false}}});
  std::vector<GpuResult> results;
  uint64_t start = 0, end = 0;
  const std::vector<int64_t>& shape = inputs.front().second.shape();
  int64_t rows = shape[0];
  std::vector<int64_t> sequences;  // a ragged plan: the rows' sequences of shape[1] tokens
  if (m.ragged_max_length > 0 && shape.size() == 2) {
    sequences.assign(static_cast<size_t>(shape[0]), shape[1]);
    rows = shape[0] * shape[1];
  }
  RETURN_IF_ERROR(RunOnGpu(*gpu, rows, feeds, {}, &results, &start, &end,
                           sequences.empty() ? nullptr : &sequences));
  std::vector<Tensor> out;
  for (const std::string& name : fetch) {
    const GpuResult* r = nullptr;
    for (const GpuResult& c : results)
      if (c.name == name) r = &c;
    if (r == nullptr) return Internal("the GPU engine produced no output '" + name + "'");
    Tensor t = Tensor::Allocate(r->type, r->shape);
    std::memcpy(t.mutable_raw(), r->data, std::min(t.bytes(), r->bytes));
    out.push_back(std::move(t));
  }
  return out;
}
#endif

// The first KIND_GPU group's first GPU (-1: none): where the accuracy guard measures the variants
// (a model whose instances run on the CPU is measured there).
int GuardDevice(const rapidjson::Value& config) {
  if (!config.HasMember("instance_group") || !config["instance_group"].IsArray()) return -1;
  for (const auto& group : config["instance_group"].GetArray()) {
    if (StringField(group, "kind") != "KIND_GPU") continue;
    if (group.HasMember("gpus") && group["gpus"].IsArray() && !group["gpus"].Empty() &&
        group["gpus"][0].IsInt())
      return group["gpus"][0].GetInt();
    return 0;
  }
  return -1;
}

// Whether any instance group runs on the CPU (no groups: the server's default, KIND_AUTO).
bool HasCpuInstances(const rapidjson::Value& config) {
  if (!config.HasMember("instance_group") || !config["instance_group"].IsArray() ||
      config["instance_group"].Empty())
    return true;
  for (const auto& group : config["instance_group"].GetArray())
    if (StringField(group, "kind") != "KIND_GPU") return true;
  return false;
}

// The model's calibration inputs ('nereid.calibration', by default calibration/ of the model's
// directory, one <input>.npy per input of 'graph'): none where that directory is absent, unless
// 'needed' or the parameter names it.
StatusOr<std::vector<std::pair<std::string, Tensor>>> CalibrationInputs(
    NereidModel* model, const std::string& name, const Graph& graph, const rapidjson::Value& config,
    bool needed) {
  std::string subdir = backend::Parameter(config, "nereid.calibration");
  const bool named = !subdir.empty();
  if (!named) subdir = "calibration";
  const std::filesystem::path model_dir =
      std::filesystem::path(NereidModelVersionPath(model)).parent_path();
  if (!needed && !named && !std::filesystem::is_directory(model_dir / subdir))
    return std::vector<std::pair<std::string, Tensor>>();
  std::vector<std::pair<std::string, DataType>> wanted;
  for (const ValueInfo& in : graph.inputs()) wanted.emplace_back(in.name, in.type);
  auto read = ReadCalibration(model_dir, subdir, wanted);
  if (!read.ok())
    return Status(read.status().code(), "model '" + name + "': " + read.status().message());
  return read;
}

// Measures every declared variant against fp32 on the calibration inputs, refuses those that
// miss the guard (logged), and declares them all to the server.
Status GuardVariants(NereidModel* model, ModelState& m, const rapidjson::Value& config) {
  AccuracyGuard guard;
  if (std::string text = backend::Parameter(config, "nereid.accuracy_guard"); !text.empty()) {
    auto parsed = ParseAccuracyGuard(text);
    if (!parsed.ok())
      return InvalidArgument("model '" + m.name + "': " + parsed.status().message());
    guard = *parsed;
  }
  using Feeds = std::vector<std::pair<std::string, Tensor>>;
  ASSIGN_OR_RETURN(Feeds inputs, CalibrationInputs(model, m.name, *m.graph, config, guard.any()));
  std::vector<std::string> fetch;
  for (const ValueInfo& out : m.graph->outputs()) fetch.push_back(out.name);
  std::vector<Tensor> reference;
  if (!inputs.empty()) RETURN_IF_ERROR(m.graph->Run(inputs, fetch, &reference));
  const int device = GuardDevice(config);
  std::vector<NereidVariant> declared(m.variants.size());
  std::vector<std::string> details(m.variants.size());
  m.admitted.assign(m.variants.size(), true);
  for (size_t v = 0; v < m.variants.size(); ++v) {
    NereidVariant& d = declared[v];
    d = NereidVariant{m.variants[v].c_str(), 1, -1, -1, -1, nullptr};
    if (inputs.empty()) continue;  // nothing to measure on: admitted unmeasured
    std::vector<Tensor> outputs;
    Status ran = Status::Ok();
    if (device >= 0) {
#ifdef NEREID_NATIVE_GPU
      auto got = RunCalibrationOnGpu(m, device, m.variants[v], inputs, fetch);
      ran = got.status();
      if (ran.ok()) outputs = std::move(got).value();
#else
      ran = Unsupported("the native backend was built without CUDA");
#endif
    } else {
      ran = m.CpuGraph(static_cast<uint32_t>(v)).Run(inputs, fetch, &outputs);
    }
    std::string failure;
    if (!ran.ok()) {
      failure = "it cannot run: " + ran.message();
    } else {
      const Accuracy a = Compare(reference, outputs);
      d.top1_agreement = a.top1_agreement;
      d.max_abs_error = a.max_abs_error;
      d.max_rel_error = a.max_rel_error;
      failure = GuardFailure(guard, a);
    }
    char measured[160];
    std::snprintf(measured, sizeof(measured),
                  "top-1 agreement %.4f, max abs error %.3g, max rel error %.3g on %lld "
                  "calibration rows",
                  d.top1_agreement, d.max_abs_error, d.max_rel_error,
                  static_cast<long long>(inputs.front().second.shape()[0]));
    if (failure.empty()) {
      Log(NEREID_LOG_INFO, "model '" + m.name + "' variant " + m.variants[v] +
                               " admitted: " + measured +
                               (device >= 0 ? " (GPU " + std::to_string(device) + ")" : ""));
    } else {
      m.admitted[v] = false;
      d.admitted = 0;
      details[v] = failure;
      d.detail = details[v].c_str();
      Log(NEREID_LOG_WARNING, "model '" + m.name + "' variant " + m.variants[v] +
                                  " refused by the accuracy guard: " + failure + " (" + measured +
                                  ")");
    }
  }
  return FromError(
      NereidModelSetVariants(model, declared.data(), static_cast<uint32_t>(declared.size())));
}

// The graph on 'rows' rows of zeros (the config's dims after the batch), on the current thread
// team, whole or row by row (Graph::RunRows): wall time in seconds, or a negative number where it
// fails or an output lacks the rows as its first dim.
double TimeRows(const ModelState& m, const Graph& graph, int64_t rows, bool by_row = false) {
  std::vector<std::pair<std::string, Tensor>> feeds;
  for (const ValueInfo& in : graph.inputs()) {
    const auto it = m.inputs.find(in.name);
    if (it == m.inputs.end()) return -1;
    std::vector<int64_t> shape = {rows};
    for (int64_t d : it->second.has_reshape ? it->second.reshape : it->second.dims) {
      if (d < 1) return -1;
      shape.push_back(d);
    }
    feeds.emplace_back(in.name, Tensor::Allocate(in.type, shape));  // zeros
  }
  std::vector<std::string> fetch;
  for (const ValueInfo& out : graph.outputs()) fetch.push_back(out.name);
  std::vector<Tensor> results;
  const auto start = std::chrono::steady_clock::now();
  if (!(by_row ? graph.RunRows(feeds, fetch, &results) : graph.Run(feeds, fetch, &results)).ok())
    return -1;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const Tensor& r : results)
    if (r.shape().empty() || r.shape()[0] != rows) return -1;
  return seconds;
}

// Whether a batch of several rows runs faster row by row: a network of memory-bound layers
// (MobileNetV2's depthwise and narrow 1x1 convolutions) keeps one image's activations in cache,
// where a batch's spill to memory (one thread, dev: MobileNetV2 8 images 65 ms as a batch, 8 x 6
// ms one by one). Measured at load on zeros, a batch of min(max_batch_size, 8) rows against that
// many single rows, for models of numeric inputs with fixed dims whose one row takes 0.5 to 20 ms
// (smaller ones gain nothing and measure noisily; larger ones are compute-bound, where a batch is
// never slower, and would cost seconds of load); chosen where 10% faster. With
// intra_op_thread_count > 1 the rows run side by side, one per thread, against the batch's ops
// split over the threads (small layers split poorly: the RapidOCR detector at 96x96, 8 images, 2
// threads, dev); measured on max(8, threads) rows, and batches with fewer rows than threads
// always run whole.
bool ChooseRowSplit(const ModelState& m) {
  const int threads = m.intra_op_threads;
  const int64_t rows = std::min<int64_t>(m.max_batch_size, std::max(8, threads));
  if (rows < 2 || rows < threads || !m.variants.empty()) return false;
  for (const ValueInfo& in : m.graph->inputs())
    if (in.type == DataType::kBytes) return false;
  std::unique_ptr<kernels::ThreadTeam> team;
  if (threads > 1) team = std::make_unique<kernels::ThreadTeam>(threads);
  kernels::ParallelScope scope(team.get());
  const double one = TimeRows(m, *m.graph, 1);  // (warms the graph's buffers too)
  if (one < 0) {
    Log(NEREID_LOG_INFO, "model '" + m.name +
                             "': a row cannot be timed at load (inputs of variable dims, or "
                             "outputs without the batch dimension): batches run whole");
    return false;
  }
  if (one < 5e-4 || one > 2e-2) {
    char line[160];
    std::snprintf(line, sizeof(line),
                  "one row %.2f ms (outside 0.5 to 20 ms): batches run whole, not measured",
                  one * 1e3);
    Log(NEREID_LOG_INFO, "model '" + m.name + "': " + line);
    return false;
  }
  if (TimeRows(m, *m.graph, rows) < 0 || TimeRows(m, *m.graph, rows, true) < 0)
    return false;  // (warm: every thread's buffers)
  const double batch = TimeRows(m, *m.graph, rows);
  const double split = TimeRows(m, *m.graph, rows, true);
  const bool chosen = batch > 0 && split > 0 && split < 0.9 * batch;
  char line[160];
  std::snprintf(line, sizeof(line), "%lld rows as one batch %.2f ms, one by one %.2f ms: %s",
                static_cast<long long>(rows), batch * 1e3, split * 1e3,
                chosen ? "batches run row by row" : "batches run whole");
  Log(NEREID_LOG_INFO, "model '" + m.name + "': " + line);
  return chosen;
}

// "nereid.open_dims": positive values, comma-separated, each once; at most 16 (a plan each).
StatusOr<std::vector<int64_t>> ParseOpenDims(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return InvalidArgument(
        "parameter 'nereid.open_dims' must list the values of the open "
        "dimensions, comma-separated (\"16,32,64,128\"): " +
        why + " in '" + text + "'");
  };
  std::vector<int64_t> values;
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(at, end - at);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item.empty() || item.size() > 7 ||
        !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return bad("'" + item + "' is not a whole number");
    const int64_t v = std::stoll(item);
    if (v < 1 || v > (1 << 20)) return bad(item + " is outside [1, 1048576]");
    if (std::find(values.begin(), values.end(), v) != values.end())
      return bad(item + " is listed twice");
    values.push_back(v);
    at = end + 1;
  }
  if (values.size() > 16) return bad("more than 16 values (each is a compiled plan)");
  std::sort(values.begin(), values.end());
  return values;
}

// Ragged batching of token inputs: every input allows ragged batches and is [batch, tokens] in the
// graph (dims [ -1 ] in the config), no batch inputs or outputs (those are for models that take
// the joined elements as one 1-D tensor), no open_dims; "nereid.max_sequence_length" (default
// 512) bounds a sequence. Other ragged configs are left as they are.
Status ReadRaggedTokens(ModelState& m, const rapidjson::Value& config) {
  const std::string who = "model '" + m.name + "': ";
  std::string token_input, other;
  for (const auto& [name, io] : m.inputs) {
    bool two_d = false;
    for (const ValueInfo& g : m.graph->inputs())
      if (g.name == name) two_d = g.dims.size() == 2;
    (io.ragged && two_d && m.max_batch_size > 0 ? token_input : other) = name;
  }
  const bool named = !backend::Parameter(config, "nereid.max_sequence_length").empty();
  if (token_input.empty()) {
    if (named)
      return InvalidArgument(
          who +
          "parameter 'nereid.max_sequence_length' is set, but no input is a "
          "ragged [batch, tokens] input (allow_ragged_batch: true, dims [ -1 ])");
    return Status::Ok();
  }
  if (!other.empty())
    return InvalidArgument(who + "input '" + token_input +
                           "' is a ragged [batch, tokens] input, so every input must be one, "
                           "but input '" +
                           other +
                           "' is not (allow_ragged_batch: true, [batch, "
                           "tokens] in the graph)");
  if (!m.batch_inputs.empty() || !m.scatter_outputs.empty())
    return InvalidArgument(who +
                           "batch_input and batch_output serve models that take the joined "
                           "elements as one 1-D tensor; this one takes [batch, tokens] inputs");
  for (const auto& [name, io] : m.inputs)
    if (io.dims != std::vector<int64_t>{-1})
      return InvalidArgument(who + "ragged input '" + name +
                             "' must have dims [ -1 ] (its tokens)");
  if (!m.open_dims.empty())
    return InvalidArgument(who + "set 'nereid.open_dims' or ragged inputs, not both");
  ASSIGN_OR_RETURN(
      const int length,
      backend::IntParameter(m.name, config, "nereid.max_sequence_length", 1, 1 << 16, 512));
  m.ragged_max_length = length;
  for (auto& [name, io] : m.inputs) io.ragged = false;  // each request's [batch, tokens] as it is
  Log(NEREID_LOG_INFO, who +
                           "ragged token inputs: each request's sequences at their own length, "
                           "up to " +
                           std::to_string(length) + " tokens");
  return Status::Ok();
}

// A request's sequences in a model with ragged token inputs: every input [batch, tokens] of the
// same shape, 1 to ragged_max_length tokens. *batch and *tokens get them.
Status RequestSequences(const ModelState& m, NereidRequest* request, int64_t* batch,
                        int64_t* tokens) {
  const uint32_t inputs = NereidRequestInputCount(request);
  std::string first;
  for (uint32_t i = 0; i < inputs; ++i) {
    NereidTensor t;
    RETURN_IF_ERROR(FromError(NereidRequestInput(request, i, &t)));
    if (t.dims_count != 2)
      return InvalidArgument("input '" + std::string(t.name) + "' must be [batch, tokens]");
    if (i == 0) {
      *batch = t.shape[0], *tokens = t.shape[1], first = t.name;
    } else if (t.shape[0] != *batch || t.shape[1] != *tokens) {
      return InvalidArgument("inputs of one request must have one shape [batch, tokens]: '" +
                             first + "' is [" + std::to_string(*batch) + ", " +
                             std::to_string(*tokens) + "], '" + t.name + "' [" +
                             std::to_string(t.shape[0]) + ", " + std::to_string(t.shape[1]) + "]");
    }
  }
  if (*tokens < 1 || *tokens > m.ragged_max_length)
    return InvalidArgument("input '" + first + "' has " + std::to_string(*tokens) +
                           " tokens: this model takes 1 to " + std::to_string(m.ragged_max_length) +
                           " (parameter nereid.max_sequence_length)");
  return Status::Ok();
}

// "nereid.int8_smoothing": auto (the default: each int8 layer smoothed or not as its calibration
// inputs show, GraphOptions::int8_smoothing below 0), off (NaN here: no calibration for it), or
// SmoothQuant's alpha from 0 to 1 for every layer.
StatusOr<float> ParseInt8Smoothing(const std::string& name, const rapidjson::Value& config) {
  const std::string text = backend::Parameter(config, "nereid.int8_smoothing");
  if (text.empty() || text == "auto") return -1.f;
  if (text == "off") return std::numeric_limits<float>::quiet_NaN();
  char* end = nullptr;
  const float alpha = std::strtof(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !(alpha >= 0.f && alpha <= 1.f))
    return InvalidArgument("model '" + name +
                           "': parameter 'nereid.int8_smoothing' must be auto, off or an alpha "
                           "from 0 to 1, got '" +
                           text + "'");
  return alpha;
}

// 'loaded': the graph as 'options' loads it (fp32, or int8 with 'precision: int8'), unsmoothed.
// The int8 graph with its activations smoothed per channel (GraphOptions::int8_calibration:
// SmoothQuant's factors, per layer where they lower that layer's error on the calibration
// inputs), kept only where the whole model's outputs on (up to 64 of) the calibration inputs
// come closer to fp32's (the calibration run's own outputs) than the int8 graph's without it: less
// rms error and no less top-1 agreement. Null without calibration inputs or where it is not kept;
// the load logs which. RapidOCR's recogniser on rendered text lines: per-step agreement with
// fp32 96.5% -> 97.2%; on synthetic strokes 92-97% against 96% without, where this drops it.
StatusOr<std::unique_ptr<Graph>> SmoothedInt8Graph(NereidModel* model, const std::string& name,
                                                   const std::string& path, GraphOptions options,
                                                   const rapidjson::Value& config,
                                                   const Graph& loaded) {
  using Feeds = std::vector<std::pair<std::string, Tensor>>;
  ASSIGN_OR_RETURN(const Feeds files, CalibrationInputs(model, name, loaded, config, false));
  if (files.empty()) return std::unique_ptr<Graph>();
  const int64_t rows = std::min<int64_t>(files.front().second.shape()[0], 64);
  Feeds calibration;  // the first rows: they lie first in each file
  for (const auto& [input, t] : files) {
    std::vector<int64_t> shape = t.shape();
    const size_t bytes = t.bytes() / static_cast<size_t>(shape[0]) * static_cast<size_t>(rows);
    shape[0] = rows;
    calibration.emplace_back(input, Tensor::Borrow(t.type(), shape, t.raw(), bytes));
  }
  auto fail = [&](const Status& s) {
    return Status(s.code(), "model '" + name + "': int8 calibration: " + s.message());
  };
  std::vector<Tensor> results[3];  // fp32 (the calibration's own run), int8, int8 smoothed
  auto measured = CalibrateInt8(path, options, calibration, &results[0]);
  if (!measured.ok()) return fail(measured.status());
  std::vector<std::string> fetch;
  for (const ValueInfo& out : loaded.outputs()) fetch.push_back(out.name);
  const bool loaded_int8 = options.int8_weights;  // 'precision: int8': 'loaded' is unsmoothed int8
  options.int8_weights = true;
  auto load = [&](std::shared_ptr<const Int8Calibration> with) {
    options.int8_calibration = std::move(with);
    return Graph::Load(path, options);
  };
  std::unique_ptr<Graph> plain_graph;
  if (!loaded_int8) {
    auto graph = load(nullptr);
    if (!graph.ok()) return fail(graph.status());
    plain_graph = std::move(graph).value();
  }
  auto smoothed_graph = load(*measured);
  if (!smoothed_graph.ok()) return fail(smoothed_graph.status());
  const Graph* plain_int8 = loaded_int8 ? &loaded : plain_graph.get();
  if (Status ran = plain_int8->Run(calibration, fetch, &results[1]); !ran.ok()) return fail(ran);
  if (Status ran = (*smoothed_graph)->Run(calibration, fetch, &results[2]); !ran.ok())
    return fail(ran);
  const Accuracy plain = Compare(results[0], results[1]),
                 smoothed = Compare(results[0], results[2]);
  const bool keep = smoothed.rms_rel_error < plain.rms_rel_error &&
                    smoothed.top1_agreement >= plain.top1_agreement;
  std::string layers = "activations smoothed on no layer";
  for (const std::string& line : (*smoothed_graph)->pass_log())
    if (line.rfind("int8 activations smoothed", 0) == 0) layers = line.substr(5);
  char why[200];
  std::snprintf(why, sizeof(why),
                "rms error %.4g against %.4g without, top-1 agreement %.4f against %.4f, on %lld "
                "calibration rows",
                smoothed.rms_rel_error, plain.rms_rel_error, smoothed.top1_agreement,
                plain.top1_agreement, static_cast<long long>(rows));
  Log(NEREID_LOG_INFO,
      "model '" + name + "': int8 " + layers + (keep ? ": kept (" : ": dropped (") + why + ")");
  if (!keep) return std::unique_ptr<Graph>();
  return std::move(smoothed_graph).value();
}

StatusOr<std::unique_ptr<ModelState>> InitializeModel(NereidModel* model) {
  const std::string name = NereidModelName(model);
  rapidjson::Document config;
  config.Parse(NereidModelConfigJson(model));
  if (config.HasParseError() || !config.IsObject())
    return Internal("model config JSON is malformed");
  std::string file = StringField(config, "default_model_filename");
  if (file.empty()) file = kModelFile;
  const std::string path = (std::filesystem::path(NereidModelVersionPath(model)) / file).string();
  std::string precision = backend::Parameter(config, "precision");
  std::vector<std::string> variants;
  if (std::string list = backend::Parameter(config, "nereid.precision_variants"); !list.empty()) {
    auto parsed = ParseVariantList(list, {std::begin(kPrecisions), std::end(kPrecisions)});
    if (!parsed.ok()) return InvalidArgument("model '" + name + "': " + parsed.status().message());
    if (!precision.empty())
      return InvalidArgument("model '" + name +
                             "': set 'precision' or 'nereid.precision_variants', "
                             "not both");
    variants = std::move(parsed).value();
  }
  if (precision.empty()) precision = "fp32";
  if (std::find(std::begin(kPrecisions), std::end(kPrecisions), precision) == std::end(kPrecisions))
    return InvalidArgument(
        "model '" + name +
        "': parameter 'precision' must be fp32, tf32, bf16, fp16 or int8, got '" + precision + "'");
  // int8: the CPU instances' GEMM weights quantized per output channel at load. Weights the file
  // also lists as inputs (IR version 3) are constants unless the config declares them.
  GraphOptions options{.int8_weights = precision == "int8"};
  for (const auto& [input, io] : backend::ReadModelIo(name, config).inputs)
    options.declared_inputs.push_back(input);
  ASSIGN_OR_RETURN(options.int8_smoothing, ParseInt8Smoothing(name, config));
  auto graph = Graph::Load(path, options);
  if (!graph.ok())
    return Status(graph.status().code(), "model '" + name + "': " + graph.status().message());
  // With calibration inputs, the int8 graph whose activations are smoothed where that pays.
  std::unique_ptr<Graph> smoothed_int8;
  if ((precision == "int8" ||
       std::find(variants.begin(), variants.end(), "int8") != variants.end()) &&
      !std::isnan(options.int8_smoothing) && HasCpuInstances(config)) {
    ASSIGN_OR_RETURN(smoothed_int8, SmoothedInt8Graph(model, name, path, options, config, **graph));
    if (smoothed_int8 != nullptr && precision == "int8") *graph = std::move(smoothed_int8);
  }

  if (backend::AutoComplete((*graph)->inputs(), (*graph)->outputs(), config)) {
    RETURN_IF_ERROR(FromError(NereidModelSetConfigJson(model, backend::ToJson(config).c_str())));
    Log(NEREID_LOG_INFO,
        "model '" + name + "': auto-completed inputs/outputs/max_batch_size from " + file);
  }
  auto state = std::make_unique<ModelState>();
  static_cast<backend::ModelIo&>(*state) = backend::ReadModelIo(name, config);
  state->graph = std::move(graph).value();
  state->path = path;
  RETURN_IF_ERROR(
      backend::CheckAgainstGraph(*state, state->graph->inputs(), state->graph->outputs()));
  state->precision = precision;
  // Threads per CPU instance inside one op (the ONNX Runtime backend's parameter, so configs carry
  // over): absent or 0, one; instance_group counts scale across requests instead.
  ASSIGN_OR_RETURN(state->intra_op_threads,
                   backend::IntParameter(name, config, "intra_op_thread_count", 0, 256, 1));
  state->intra_op_threads = std::max(state->intra_op_threads, 1);
  state->variants = std::move(variants);
  if (std::string text = backend::Parameter(config, "nereid.open_dims"); !text.empty()) {
    auto parsed = ParseOpenDims(text);
    if (!parsed.ok()) return InvalidArgument("model '" + name + "': " + parsed.status().message());
    bool open = false;
    for (const auto& [input, io] : state->inputs)
      for (size_t d = state->max_batch_size == 0 ? 1 : 0; d < io.dims.size(); ++d)
        open = open || io.dims[d] == -1;
    if (!open)
      return InvalidArgument("model '" + name +
                             "': parameter 'nereid.open_dims' is set but no input's dims "
                             "(after the batch) hold -1");
    state->open_dims = std::move(parsed).value();
  }
  RETURN_IF_ERROR(ReadRaggedTokens(*state, config));
  // The CPU's int8 graph serves CPU instances and the guard where it measures on the CPU.
  if (HasCpuInstances(config) &&
      std::find(state->variants.begin(), state->variants.end(), "int8") != state->variants.end()) {
    if (smoothed_int8 != nullptr) {
      state->int8_graph = std::move(smoothed_int8);
    } else {
      GraphOptions int8_options = options;
      int8_options.int8_weights = true;
      auto int8 = Graph::Load(path, int8_options);
      if (!int8.ok()) return int8.status();
      state->int8_graph = std::move(int8).value();
    }
  }
  if (!state->variants.empty()) RETURN_IF_ERROR(GuardVariants(model, *state, config));

  const std::string backend = StringField(config, "backend");
  Log(NEREID_LOG_INFO,
      "model '" + state->name + "'" +
          (backend == "onnxruntime" ? " (configured for onnxruntime)" : "") +
          " runs on the native engine: all ops of its " +
          std::to_string(state->graph->node_count()) + " nodes are supported (opset " +
          std::to_string(state->graph->opset()) + "); " +
          (precision == "int8"
               ? std::string("int8 weights, int8 micro-kernel ") + kernels::GemmInt8KernelName()
               : std::string("SGEMM micro-kernel ") + kernels::SgemmKernelName() +
                     (state->int8_graph
                          ? std::string(", int8 micro-kernel ") + kernels::GemmInt8KernelName()
                          : std::string())) +
          "; " + std::to_string(state->intra_op_threads) + " intra-op thread(s) per CPU instance");
  // "nereid.split_batches": auto (measured at load, the default), true or false.
  const std::string split = backend::Parameter(config, "nereid.split_batches");
  if (!split.empty() && split != "auto" && split != "true" && split != "false")
    return InvalidArgument(
        "model '" + name +
        "': parameter 'nereid.split_batches' must be auto, true or false, got '" + split + "'");
  state->split_rows =
      split == "true" || (split != "false" && HasCpuInstances(config) && ChooseRowSplit(*state));
  if (split == "true")
    Log(NEREID_LOG_INFO, "model '" + name + "': batches run row by row (nereid.split_batches)");
  // What the graph passes did: folded, fused and converted groups (docs/native-engine.md).
  std::string passes;
  for (const auto& line : state->graph->pass_log()) passes += (passes.empty() ? "" : "; ") + line;
  if (state->int8_graph != nullptr)  // (the int8 variant's own graph: its smoothing)
    for (const auto& line : state->int8_graph->pass_log())
      if (line.rfind("int8 activations smoothed", 0) == 0) passes += "; int8 variant: " + line;
  if (!passes.empty())
    Log(NEREID_LOG_INFO,
        "model '" + state->name + "': graph passes: " + passes +
            (precision == "int8" ? " (int8: Gemm/MatMul weights and convolutions but depthwise "
                                   "ones; attention's products and depthwise convolutions fp32)"
                                 : ""));
  return state;
}

// Runs 'count' requests as one execution: inputs are concatenated along the batch dimension (the
// scheduler only batches requests whose other dimensions agree), outputs split back by rows. A
// single request borrows its inputs without copying. A failure of one request's output lands in
// 'failed[r]'; a returned error fails them all.
Status ExecuteBatch(const ModelState& m, const Graph& graph, NereidRequest** requests,
                    uint32_t count, std::vector<Status>& failed) {
  std::vector<std::pair<std::string, Tensor>> feeds;
  // Joined BYTES inputs; results may be views of them, so they live until the outputs are copied.
  std::vector<std::shared_ptr<std::vector<uint8_t>>> keepalive;
  auto feed = [&](const backend::BatchInput& in) -> Status {
    const NereidTensor& first = in.first;
    const auto type = static_cast<DataType>(first.datatype);
    const size_t align = std::max<size_t>(DataTypeSize(type), 1);
    if (count == 1 &&
        (type == DataType::kBytes || reinterpret_cast<uintptr_t>(first.data) % align == 0)) {
      feeds.emplace_back(first.name, Tensor::Borrow(type, in.shape, first.data, first.byte_size));
      return Status::Ok();
    }
    Tensor joined = type == DataType::kBytes ? Tensor() : Tensor::Allocate(type, in.shape);
    std::shared_ptr<std::vector<uint8_t>> serialized;
    if (type == DataType::kBytes)
      serialized = std::make_shared<std::vector<uint8_t>>(in.total_bytes);
    uint8_t* dst = type == DataType::kBytes ? serialized->data() : joined.mutable_raw();
    for (const auto& part : in.parts) {
      std::memcpy(dst, part.data, part.byte_size);
      dst += part.byte_size;
    }
    if (type == DataType::kBytes) {
      joined = Tensor::Borrow(type, in.shape, serialized->data(), in.total_bytes);
      keepalive.push_back(std::move(serialized));
    }
    feeds.emplace_back(first.name, std::move(joined));
    return Status::Ok();
  };
  ASSIGN_OR_RETURN(backend::Batch batch, backend::Batch::Gather(m, requests, count, failed, feed));
  std::vector<Tensor> results;
  const uint64_t compute_start = NereidNowNs();
  if (m.split_rows && &graph == m.graph.get()) {
    RETURN_IF_ERROR(graph.RunRows(feeds, batch.fetch(), &results));
  } else {
    RETURN_IF_ERROR(graph.Run(feeds, batch.fetch(), &results));
  }
  batch.SetComputeTimes(compute_start, NereidNowNs());
  for (size_t i = 0; i < batch.fetch().size(); ++i)
    RETURN_IF_ERROR(batch.Emit(batch.fetch()[i], results[i].type(), results[i].shape(),
                               results[i].raw(), results[i].bytes()));
  return Status::Ok();
}

#ifdef NEREID_NATIVE_GPU
Status InitializeGpuInstance(ModelState& m, NereidInstance* instance, InstanceState& state) {
  const int device = NereidInstanceDeviceId(instance);
  const std::string who = "model '" + m.name + "' instance '" + NereidInstanceName(instance) + "'";
  for (const auto* specs : {&m.inputs, &m.outputs})
    for (const auto& [name, spec] : *specs)
      if (spec.has_reshape)
        return Unsupported(who + ": '" + name + "' has a reshape, which the GPU engine lacks");
  const std::vector<std::string> precisions = m.Precisions();
  for (size_t v = 0; v < precisions.size(); ++v) {
    state.gpus.emplace_back();
    if (v < m.admitted.size() && !m.admitted[v]) continue;  // refused by the guard: never chosen
    for (size_t p = 0; p < m.GpuPlanCount(); ++p) {
      auto compiled = GpuModelFor(m, device, precisions[v], p);
      if (!compiled.ok())
        return Status(compiled.status().code(),
                      who + " (KIND_GPU): " + compiled.status().message());
      auto gpu = CreateGpuInstance(std::move(compiled).value());
      if (!gpu.ok()) return Status(gpu.status().code(), who + ": " + gpu.status().message());
      std::string which = precisions.size() > 1 ? precisions[v] : "";
      if (const int64_t open = OpenValue(m, p); open > 0)
        which += (which.empty() ? "" : ", ") + std::string("open dims ") + std::to_string(open);
      Log(NEREID_LOG_INFO, who + " on GPU " + std::to_string(device) +
                               (which.empty() ? "" : " (" + which + ")") + ": " +
                               GemmTuning(**gpu));
      state.gpus.back().push_back(std::move(gpu).value());
    }
  }
  return Status::Ok();
}

// The GPU path of ExecuteBatch: the plan for the batch's open dims (its requests share their
// shapes), each request's rows gathered straight into the instance's pinned staging buffers, the
// graph run on the device, and each request's rows of every output it asked for copied into its
// response.
// Adds one batch's phases (t: its entry, inputs found, outputs allocated, run, end) and reports
// every 8th batch at verbose level.
void NoteBatchPhases(const ModelState& m, BatchPhases& p, uint32_t count,
                     const std::array<uint64_t, 5>& t) {
  ++p.batches, p.requests += count;
  p.read_ns += t[1] - t[0], p.allocate_ns += t[2] - t[1], p.run_ns += t[3] - t[2];
  p.after_ns += t[4] - t[3];
  if (p.batches < 8) return;
  const double n = static_cast<double>(p.batches);
  char line[320];
  std::snprintf(line, sizeof(line),
                "model '%s': GPU batches of %.1f requests, mean of %llu: inputs found %.1f us, "
                "outputs allocated %.1f us, run %.1f us, outputs from staging %.1f us",
                m.name.c_str(), static_cast<double>(p.requests) / n,
                static_cast<unsigned long long>(p.batches), p.read_ns / 1e3 / n,
                p.allocate_ns / 1e3 / n, p.run_ns / 1e3 / n, p.after_ns / 1e3 / n);
  Log(NEREID_LOG_VERBOSE, line);
  p = {};
}

Status ExecuteBatchGpu(const ModelState& m, NereidInstance* instance,
                       const std::vector<GpuInstancePtr>& plans, NereidRequest** requests,
                       uint32_t count, std::vector<Status>& failed, BatchPhases& phases) {
  const bool timed = count > 1 && NereidLogEnabled(NEREID_LOG_VERBOSE) != 0;
  std::array<uint64_t, 5> t{};
  if (timed) t[0] = NereidNowNs();
  ASSIGN_OR_RETURN(const size_t plan, PlanFor(m, [&](const std::string& name) {
                     NereidTensor t;
                     if (!FromError(NereidRequestInputByName(requests[0], name.c_str(), &t)).ok())
                       return std::vector<int64_t>();
                     return ConfigDims(m, t.shape, t.dims_count);
                   }));
  if (plan >= plans.size()) return Internal("no GPU plan for the batch's dims");
  GpuInstance& gpu = *plans[plan];
  // Ragged token inputs: each request's sequences (batch x tokens), packed end to end.
  const bool ragged = m.ragged_max_length > 0;
  std::vector<int64_t> sequences, batch(count, 0), tokens(count, 0);
  for (uint32_t r = 0; r < count && ragged; ++r) {
    RETURN_IF_ERROR(RequestSequences(m, requests[r], &batch[r], &tokens[r]));
    sequences.insert(sequences.end(), static_cast<size_t>(batch[r]), tokens[r]);
  }
  std::vector<GpuFeed> feeds;
  std::vector<int64_t> rows(count, 0);  // per request (ragged: its tokens)
  int64_t total_rows = 0;
  const uint32_t inputs = NereidRequestInputCount(requests[0]);
  for (uint32_t i = 0; i < inputs; ++i) {
    NereidTensor first;
    RETURN_IF_ERROR(FromError(NereidRequestInput(requests[0], i, &first)));
    GpuFeed feed;
    feed.name = first.name;
    int64_t input_rows = 0;
    for (uint32_t r = 0; r < count; ++r) {
      NereidTensor t;
      RETURN_IF_ERROR(FromError(NereidRequestInputByName(requests[r], first.name, &t)));
      // Device memory of any GPU is read with one cudaMemcpyAsync (cudaMemcpyDefault): from
      // another GPU's region (a CUDA shared-memory region on GPU 0 read by an instance on GPU 1)
      // the driver copies peer to peer, or stages it through the host where peers are off.
      const int64_t n = ragged ? batch[r] * tokens[r] : t.dims_count > 0 ? t.shape[0] : 1;
      if (i == 0) rows[r] = n;
      if (n != rows[r])
        return InvalidArgument("inputs of one request must agree on their first dimension");
      input_rows += n;
      feed.parts.push_back({t.data, t.byte_size, t.memory_type == NEREID_MEMORY_CPU_PINNED,
                            t.memory_type == NEREID_MEMORY_GPU});
    }
    total_rows = input_rows;
    feeds.push_back(std::move(feed));
  }
  if (timed) t[1] = NereidNowNs();
  // Every request's outputs are allocated first, each request's rows of an output side by side in
  // the run's order: where every request of the batch asked for an output and got its buffer, the
  // device writes each one's rows straight there (a batch of encoders' per-token outputs split
  // over its requests was a second pass over them on the host, into freshly faulted memory). The
  // server gives the whole batch one pinned block where it can (one allocation and one copy from
  // the device instead of one per request), else each request its own buffer (its CUDA
  // shared-memory region, pinned memory).
  const std::vector<GpuOutputInfo> outputs = GpuOutputs(gpu);
  std::vector<GpuDestination> destinations(outputs.size());
  std::vector<std::vector<NereidBuffer>> allocated(outputs.size(),
                                                   std::vector<NereidBuffer>(count));
  std::vector<std::vector<std::string>> wanted(count);  // the outputs each request asked for
  for (uint32_t r = 0; r < count; ++r) wanted[r] = backend::RequestedOutputs(requests[r]);
  // (Each request's place in the run's rows of an output, and its bytes.)
  std::vector<std::vector<std::pair<size_t, size_t>>> span(
      outputs.size(), std::vector<std::pair<size_t, size_t>>(count));
  std::vector<int64_t> shapes;  // per request, the output's shape (count x its rank)
  std::vector<uint64_t> sizes(count);
  std::vector<NereidRequest*> all(requests, requests + count);
  std::vector<char> takes(count);  // per request: it asked for the output and has not failed
  for (size_t o = 0; o < outputs.size(); ++o) {
    const GpuOutputInfo& out = outputs[o];
    bool every = true;
    size_t at = 0;
    shapes.clear();
    for (uint32_t r = 0; r < count; ++r) {
      // This request's rows: its own (ragged: its tokens, or its sequences for pooled outputs).
      int64_t n = rows[r];
      std::vector<int64_t> shape = {rows[r]};
      shape.insert(shape.end(), out.dims.begin(), out.dims.end());
      if (ragged && out.sequences) {
        n = batch[r], shape[0] = batch[r];
      } else if (ragged) {  // [tokens, 1, ...] -> [batch, tokens, ...]
        shape.erase(shape.begin());
        shape[0] = tokens[r];
        shape.insert(shape.begin(), batch[r]);
      }
      sizes[r] = out.row_bytes * static_cast<size_t>(n);
      span[o][r] = {at, sizes[r]};
      at += sizes[r];
      shapes.insert(shapes.end(), shape.begin(), shape.end());
      takes[r] = failed[r].ok() &&
                 std::find(wanted[r].begin(), wanted[r].end(), out.name) != wanted[r].end();
      every = every && takes[r];
    }
    const auto rank = static_cast<uint32_t>(shapes.size() / count);
    // Every request's rows in one block of the server's (one copy from the device for all of
    // them; the buffers are written only where it allocates), else each request's own buffer (a
    // CUDA region, pinned memory). (FromError frees the error that says it could not.)
    const bool in_block =
        every && count > 1 &&
        FromError(NereidRequestsOutputAllocate(
                      all.data(), count, out.name.c_str(), static_cast<NereidDataType>(out.type),
                      shapes.data(), rank, sizes.data(), NEREID_MEMORY_GPU, allocated[o].data()))
            .ok();
    if (!in_block) {
      for (uint32_t r = 0; r < count; ++r) {
        if (!takes[r]) continue;
        if (Status e = FromError(NereidRequestOutputAllocate(
                requests[r], out.name.c_str(), static_cast<NereidDataType>(out.type),
                shapes.data() + static_cast<size_t>(r) * rank, rank, sizes[r], NEREID_MEMORY_GPU,
                NereidInstanceDeviceId(instance), &allocated[o][r]));
            !e.ok()) {
          failed[r] = e;
          allocated[o][r] = {};
          every = false;
        }
      }
    }
    for (uint32_t r = 0; r < count && every; ++r) {
      const NereidBuffer& buffer = allocated[o][r];
      destinations[o].parts.push_back({buffer.data, sizes[r],
                                       buffer.memory_type == NEREID_MEMORY_GPU,
                                       buffer.memory_type == NEREID_MEMORY_CPU_PINNED});
    }
  }
  std::vector<GpuResult> results;
  uint64_t start = 0, end = 0;
  if (timed) t[2] = NereidNowNs();
  RETURN_IF_ERROR(RunOnGpu(gpu, total_rows, feeds, destinations, &results, &start, &end,
                           ragged ? &sequences : nullptr));
  if (timed) t[3] = NereidNowNs();
  NereidRequestSetDeviceTime(requests[0], LastDeviceNs(gpu));
  for (uint32_t r = 0; r < count; ++r) NereidRequestSetComputeTimes(requests[r], start, end);
  // The rows the device did not write straight into a request's buffer: from staging (into a
  // CUDA region, by a copy of the driver's).
  for (size_t o = 0; o < results.size() && o < outputs.size(); ++o) {
    if (results[o].in_destination) continue;
    for (uint32_t r = 0; r < count; ++r) {
      const NereidBuffer& buffer = allocated[o][r];
      if (buffer.data == nullptr || !failed[r].ok()) continue;
      const auto [offset, bytes] = span[o][r];
      const uint8_t* from = results[o].data + offset;
      if (buffer.memory_type == NEREID_MEMORY_GPU) {
        if (cudaError_t e = cudaMemcpy(buffer.data, from, bytes, cudaMemcpyDefault);
            e != cudaSuccess)
          failed[r] = Internal(std::string("copy into a CUDA region: ") + cudaGetErrorString(e));
      } else {
        std::memcpy(buffer.data, from, bytes);
      }
    }
  }
  if (timed) {
    t[4] = NereidNowNs();
    NoteBatchPhases(m, phases, count, t);
  }
  return Status::Ok();
}
#endif

}  // namespace
}  // namespace nereid::native

namespace native = nereid::native;
namespace backend = nereid::backend;

struct NativeBackend {
  using Model = native::ModelState;
  using Instance = native::InstanceState;
  static constexpr const char* kPlatforms = "onnxruntime_onnx";
  static constexpr const char* kModelFile = native::kModelFile;
  static backend::Status Initialize() { return backend::Status::Ok(); }
  static backend::StatusOr<std::unique_ptr<Model>> LoadModel(NereidModel* model) {
    return native::InitializeModel(model);
  }
  // CPU instances own only their intra-op thread team (the graph is immutable and Run keeps its
  // scratch per thread); GPU instances own a stream, device buffers and captured graphs.
  static backend::StatusOr<std::unique_ptr<Instance>> CreateInstance(
      NereidInstance* instance, [[maybe_unused]] Model& model) {
    auto state = std::make_unique<Instance>();
    if (NereidInstanceGetKind(instance) != NEREID_INSTANCE_GPU && model.intra_op_threads > 1)
      state->team = std::make_unique<nereid::kernels::ThreadTeam>(model.intra_op_threads);
    if (NereidInstanceGetKind(instance) == NEREID_INSTANCE_GPU) {
#ifdef NEREID_NATIVE_GPU
      RETURN_IF_ERROR(native::InitializeGpuInstance(model, instance, *state));
#else
      return backend::Unsupported("the native backend was built without CUDA");
#endif
    }
    return state;
  }
  static backend::Status Execute(const Model& model, [[maybe_unused]] Instance& instance,
                                 [[maybe_unused]] NereidInstance* handle, NereidRequest** requests,
                                 uint32_t count, std::vector<backend::Status>& failed) {
    const uint32_t variant = NereidInstanceVariant(handle);
    auto run = [&](NereidRequest** batch, uint32_t n, std::vector<backend::Status>& f) {
#ifdef NEREID_NATIVE_GPU
      if (!instance.gpus.empty()) {
        if (variant >= instance.gpus.size() || instance.gpus[variant].empty())
          return backend::Internal("precision variant " + std::to_string(variant) +
                                   " is not loaded");
        return native::ExecuteBatchGpu(model, handle, instance.gpus[variant], batch, n, f,
                                       instance.phases);
      }
#endif
      nereid::kernels::ParallelScope scope(instance.team.get());
      return native::ExecuteBatch(model, model.CpuGraph(variant), batch, n, f);
    };
    // Each request alone: every failure stays its own request's. Ragged token inputs on the CPU
    // run so always (each request's [batch, tokens] checked, then as it comes).
    const bool ragged_cpu = model.ragged_max_length > 0
#ifdef NEREID_NATIVE_GPU
                            && instance.gpus.empty()
#endif
        ;
    auto one_by_one = [&] {
      for (uint32_t r = 0; r < count; ++r) {
        int64_t batch = 0, tokens = 0;
        backend::Status alone = ragged_cpu
                                    ? native::RequestSequences(model, requests[r], &batch, &tokens)
                                    : backend::Status::Ok();
        std::vector<backend::Status> one(1);
        if (alone.ok()) alone = run(&requests[r], 1, one);
        failed[r] = alone.ok() ? one[0] : alone;
      }
      return backend::Status::Ok();
    };
    if (ragged_cpu) return one_by_one();
    backend::Status status = run(requests, count, failed);
    if (status.ok() || count == 1 || status.code() != backend::Status::Code::kInvalidArgument)
      return status;
    // One request's data failed the batch (a token id outside the embedding table): each runs
    // again alone, so that only the request at fault fails.
    return one_by_one();
  }
};

NEREID_BATCH_BACKEND(NativeBackend)

extern "C" {

// Configs written for Triton's ONNX Runtime backend run here when no ONNX Runtime backend is
// installed (and fail to load, naming the op, when the engine lacks one of the graph's ops).
NEREID_EXPORT const char* NereidBackendAliases(void) { return "onnxruntime"; }

#ifdef NEREID_NATIVE_GPU
NEREID_EXPORT int NereidBackendSupportsGpu(void) { return 1; }
#endif

}  // extern "C"
