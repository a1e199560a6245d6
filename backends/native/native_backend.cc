// The native backend: serves ONNX models on Nereid's own CPU engine through
// include/nereid/backend.h. It also serves configs written for Triton's ONNX Runtime backend when
// every op of the graph is implemented, and auto-completes inputs, outputs and max_batch_size from
// the graph.
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cpu/gemm.h"
#include "graph.h"
#ifdef NEREID_NATIVE_GPU
#include "gpu_engine.h"
#endif
#include "nereid/backend.h"

namespace nereid::native {
namespace {

using backend::FromError;
using backend::ToError;

void Log(NereidLogLevel level, const std::string& message) { backend::Log(level, message); }

DataType ConfigType(const std::string& name) {
  if (name == "TYPE_STRING") return DataType::kBytes;
  return name.rfind("TYPE_", 0) == 0 ? DataTypeFromName(name.substr(5)) : DataType::kInvalid;
}
std::string ConfigTypeName(DataType t) {
  return t == DataType::kBytes ? "TYPE_STRING" : "TYPE_" + std::string(DataTypeName(t));
}

std::vector<int64_t> IntArray(const rapidjson::Value& obj, const char* key) {
  std::vector<int64_t> out;
  if (!obj.IsObject() || !obj.HasMember(key) || !obj[key].IsArray()) return out;
  for (const auto& v : obj[key].GetArray())
    out.push_back(v.IsInt64() ? v.GetInt64() : v.IsString() ? std::stoll(v.GetString()) : 0);
  return out;
}
std::string StringField(const rapidjson::Value& obj, const char* key) {
  return obj.IsObject() && obj.HasMember(key) && obj[key].IsString() ? obj[key].GetString() : "";
}

struct IoSpec {
  std::string name;
  DataType type = DataType::kInvalid;
  std::vector<int64_t> dims;
  bool has_reshape = false;
  std::vector<int64_t> reshape;
};

struct ModelState {
  std::string name;
  std::unique_ptr<Graph> graph;
  int64_t max_batch_size = 0;
  std::map<std::string, IoSpec> inputs;
  std::map<std::string, IoSpec> outputs;
  std::string precision = "fp32";  // config parameter "precision" (the GPU engine's float math)
  std::string path;                // the ONNX file
#ifdef NEREID_NATIVE_GPU
  // The graph compiled for each device, shared by that device's instances.
  std::mutex gpu_mu;
  std::map<int, std::shared_ptr<const GpuModel>> gpu_models;
#endif
};

struct InstanceState {
#ifdef NEREID_NATIVE_GPU
  GpuInstancePtr gpu;  // set for KIND_GPU instances
#endif
};

std::map<std::string, IoSpec> ReadIo(const rapidjson::Value& config, const char* key) {
  std::map<std::string, IoSpec> specs;
  if (!config.HasMember(key) || !config[key].IsArray()) return specs;
  for (const auto& v : config[key].GetArray()) {
    IoSpec s;
    s.name = StringField(v, "name");
    s.type = ConfigType(StringField(v, "data_type"));
    s.dims = IntArray(v, "dims");
    if (v.HasMember("reshape") && v["reshape"].IsObject()) {
      s.has_reshape = true;
      s.reshape = IntArray(v["reshape"], "shape");
    }
    specs[s.name] = s;
  }
  return specs;
}

// Fills inputs, outputs and max_batch_size that the config leaves out, the way Triton's ONNX
// Runtime backend auto-completes: a graph whose every input and output has a dynamic first
// dimension batches (max_batch_size 4 unless given), and dims are the graph dims without that batch
// dimension.
bool AutoComplete(const Graph& graph, rapidjson::Document& config) {
  auto& alloc = config.GetAllocator();
  const bool need_inputs = !config.HasMember("input") || config["input"].Empty();
  const bool need_outputs = !config.HasMember("output") || config["output"].Empty();
  if (!need_inputs && !need_outputs) return false;
  int64_t mbs = config.HasMember("max_batch_size") ? config["max_batch_size"].GetInt64() : 0;
  bool batchable = true;
  for (const auto* list : {&graph.inputs(), &graph.outputs()})
    for (const auto& v : *list)
      if (!v.has_default && (v.dims.empty() || v.dims[0] != -1)) batchable = false;
  if (mbs == 0 && batchable && need_inputs && need_outputs) mbs = 4;
  if (!config.HasMember("max_batch_size")) config.AddMember("max_batch_size", mbs, alloc);
  config["max_batch_size"].SetInt64(mbs);
  auto fill = [&](const char* key, const std::vector<ValueInfo>& values) {
    rapidjson::Value array(rapidjson::kArrayType);
    for (const auto& v : values) {
      if (v.has_default) continue;  // optional: the initializer serves when a request omits it
      rapidjson::Value entry(rapidjson::kObjectType);
      entry.AddMember("name", rapidjson::Value(v.name.c_str(), alloc), alloc);
      entry.AddMember("data_type", rapidjson::Value(ConfigTypeName(v.type).c_str(), alloc), alloc);
      rapidjson::Value dims(rapidjson::kArrayType);
      for (size_t i = mbs > 0 ? 1 : 0; i < v.dims.size(); ++i) dims.PushBack(v.dims[i], alloc);
      entry.AddMember("dims", dims, alloc);
      array.PushBack(entry, alloc);
    }
    if (config.HasMember(key)) config.RemoveMember(key);
    config.AddMember(rapidjson::Value(key, alloc), array, alloc);
  };
  if (need_inputs) fill("input", graph.inputs());
  if (need_outputs) fill("output", graph.outputs());
  return true;
}

// What a config tensor's dims should be for a graph tensor of shape 'graph', given whether the
// model batches: advice for a shape error that names the fix.
std::string DimsAdvice(const std::vector<int64_t>& graph, bool batching) {
  const bool graph_batches = !graph.empty() && graph[0] == -1;
  if (batching && graph_batches)
    return " With max_batch_size > 0 the graph's first dimension is the batch: dims should be " +
           ShapeString(std::vector<int64_t>(graph.begin() + 1, graph.end())) + ".";
  if (batching)
    return " The graph has no variable first (batch) dimension: set max_batch_size: 0 and dims: " +
           ShapeString(graph) + ".";
  std::string advice =
      " With max_batch_size 0, dims should be the graph's shape " + ShapeString(graph);
  if (!graph.empty() && graph[0] == -1)
    advice += " (or, to batch, max_batch_size > 0 and dims " +
              ShapeString(std::vector<int64_t>(graph.begin() + 1, graph.end())) + ")";
  return advice + ".";
}

// A config tensor must have the graph tensor's type and, with the batch dimension added when the
// model batches, its rank and every fixed dimension.
Status CheckTensor(const ModelState& m, const char* kind, const IoSpec& spec, const ValueInfo& g) {
  const std::string who = "model '" + m.name + "': " + kind + " '" + spec.name + "' ";
  if (g.type != spec.type)
    return InvalidArgument(who + "is " + std::string(ConfigTypeName(spec.type)) +
                           " in config.pbtxt but " + std::string(ConfigTypeName(g.type)) +
                           " in the ONNX graph");
  if (!g.has_shape) return Status::Ok();  // nothing to compare with
  const auto& dims = spec.has_reshape ? spec.reshape : spec.dims;
  const bool batching = m.max_batch_size > 0;
  std::vector<int64_t> full = dims;
  if (batching) full.insert(full.begin(), -1);
  bool fits = full.size() == g.dims.size();
  for (size_t i = batching ? 1 : 0; fits && i < full.size(); ++i)
    fits = full[i] == -1 || g.dims[i] == -1 || full[i] == g.dims[i];
  if (batching && fits && g.dims[0] > 0 && g.dims[0] < m.max_batch_size)
    return InvalidArgument(who + "has a batch dimension fixed at " + std::to_string(g.dims[0]) +
                           " in the ONNX graph, but max_batch_size is " +
                           std::to_string(m.max_batch_size) + "." + DimsAdvice(g.dims, batching));
  if (!fits)
    return InvalidArgument(who + "has " + (spec.has_reshape ? "reshape " : "dims ") +
                           ShapeString(dims) + " and max_batch_size " +
                           std::to_string(m.max_batch_size) + ", a full shape of " +
                           ShapeString(full) + ", but the ONNX graph's shape is " +
                           ShapeString(g.dims) + "." + DimsAdvice(g.dims, batching));
  return Status::Ok();
}

std::string Names(const std::vector<ValueInfo>& values) {
  std::string out;
  for (const auto& v : values) out += (out.empty() ? "" : ", ") + v.name;
  return out;
}

const ValueInfo* Find(const std::vector<ValueInfo>& values, const std::string& name) {
  for (const auto& v : values)
    if (v.name == name) return &v;
  return nullptr;
}

Status CheckAgainstGraph(const ModelState& m) {
  const std::string who = "model '" + m.name + "': ";
  // A name the graph lacks is checked first: when one name is misspelled, that name is the error,
  // not the graph input it leaves undeclared.
  for (const auto& [name, spec] : m.inputs)
    if (Find(m.graph->inputs(), name) == nullptr)
      return InvalidArgument(
          who + "config input '" + name +
          "' is not an input of the ONNX graph (graph inputs: " + Names(m.graph->inputs()) + ")");
  for (const auto& [name, spec] : m.outputs)
    if (Find(m.graph->outputs(), name) == nullptr)
      return InvalidArgument(who + "config output '" + name +
                             "' is not an output of the ONNX graph (graph outputs: " +
                             Names(m.graph->outputs()) + ")");
  for (const auto& g : m.graph->inputs())
    if (!g.has_default && !m.inputs.count(g.name))
      return InvalidArgument(who + "the ONNX graph has input '" + g.name +
                             "' which config.pbtxt does not declare");
  for (const auto& [name, spec] : m.inputs)
    RETURN_IF_ERROR(CheckTensor(m, "input", spec, *Find(m.graph->inputs(), name)));
  for (const auto& [name, spec] : m.outputs)
    RETURN_IF_ERROR(CheckTensor(m, "output", spec, *Find(m.graph->outputs(), name)));
  return Status::Ok();
}

Status InitializeModel(NereidModel* model) {
  auto state = std::make_unique<ModelState>();
  state->name = NereidModelName(model);
  rapidjson::Document config;
  config.Parse(NereidModelConfigJson(model));
  if (config.HasParseError() || !config.IsObject())
    return Internal("model config JSON is malformed");
  std::string file = StringField(config, "default_model_filename");
  if (file.empty()) file = "model.onnx";
  const std::string path = (std::filesystem::path(NereidModelVersionPath(model)) / file).string();
  state->path = path;
  auto graph = Graph::Load(path);
  if (!graph.ok())
    return Status(graph.status().code(),
                  "model '" + state->name + "': " + graph.status().message());
  state->graph = std::move(graph).value();

  if (AutoComplete(*state->graph, config)) {
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
    config.Accept(writer);
    RETURN_IF_ERROR(FromError(NereidModelSetConfigJson(model, buffer.GetString())));
    Log(NEREID_LOG_INFO,
        "model '" + state->name + "': auto-completed inputs/outputs/max_batch_size from " + file);
  }
  state->max_batch_size =
      config.HasMember("max_batch_size") ? config["max_batch_size"].GetInt64() : 0;
  state->inputs = ReadIo(config, "input");
  state->outputs = ReadIo(config, "output");
  RETURN_IF_ERROR(CheckAgainstGraph(*state));

  if (config.HasMember("parameters") && config["parameters"].IsObject() &&
      config["parameters"].HasMember("precision"))
    state->precision = StringField(config["parameters"]["precision"], "string_value");
#ifdef NEREID_NATIVE_GPU
  RETURN_IF_ERROR(ParsePrecision(state->precision).status());
#else
  // Without the GPU engine the parameter changes nothing (CPU math is fp32), but it must be valid.
  if (state->precision != "fp32" && state->precision != "tf32" && state->precision != "bf16" &&
      state->precision != "fp16")
    return InvalidArgument("model '" + state->name +
                           "': parameter 'precision' must be fp32, tf32, bf16 or fp16, got '" +
                           state->precision + "'");
#endif

  const std::string backend = StringField(config, "backend");
  Log(NEREID_LOG_INFO, "model '" + state->name + "'" +
                           (backend == "onnxruntime" ? " (configured for onnxruntime)" : "") +
                           " runs on the native engine: all ops of its " +
                           std::to_string(state->graph->node_count()) +
                           " nodes are supported (opset " + std::to_string(state->graph->opset()) +
                           "); SGEMM micro-kernel " + kernels::SgemmKernelName());
  NereidModelSetState(model, state.release());
  return Status::Ok();
}

std::vector<int64_t> BatchPrefixed(const std::vector<int64_t>& request_shape, bool batching,
                                   const std::vector<int64_t>& dims) {
  std::vector<int64_t> shape;
  if (batching) shape.push_back(request_shape.empty() ? 1 : request_shape[0]);
  shape.insert(shape.end(), dims.begin(), dims.end());
  return shape;
}

// Resolves at most one -1 in 'shape' from 'bytes', then requires shape x element size == bytes.
// 'type' has a fixed element size.
Status FitShape(const std::string& name, DataType type, size_t bytes, std::vector<int64_t>& shape) {
  const size_t element_size = DataTypeSize(type);
  if (bytes % element_size == 0)
    FillVariableDimension(shape, static_cast<int64_t>(bytes / element_size));
  const int64_t expected = TensorByteSize(type, shape);
  if (expected < 0 || static_cast<size_t>(expected) != bytes)
    return InvalidArgument("input '" + name + "' has " + std::to_string(bytes) +
                           " bytes, which do not make a tensor of shape " + ShapeString(shape) +
                           " of " + std::string(DataTypeName(type)));
  return Status::Ok();
}

// Byte offset of each row boundary of a serialized BYTES tensor with 'rows' rows.
std::vector<size_t> BytesRowOffsets(const uint8_t* data, size_t size, int64_t elements,
                                    int64_t rows) {
  std::vector<size_t> offsets(1, 0);
  const int64_t per_row = rows > 0 ? elements / rows : 0;
  int64_t e = 0;
  backend::ForEachBytesElement(data, size, [&](std::string_view, size_t end) {
    if (per_row > 0 && ++e % per_row == 0) offsets.push_back(end);
    return e < elements;
  });
  return offsets;
}

// Runs 'count' requests as one execution: inputs are concatenated along the batch dimension (the
// scheduler only batches requests whose other dimensions agree), outputs split back by rows. A
// single request borrows its inputs without copying. A failure of one request's output lands in
// 'failed[r]'; a returned error fails them all.
Status ExecuteBatch(const ModelState& m, NereidRequest** requests, uint32_t count,
                    std::vector<Status>& failed) {
  const bool batching = m.max_batch_size > 0;
  if (count > 1 && !batching) return Internal("a batch of requests for a model without batching");
  std::vector<int64_t> rows(count, 1);
  std::vector<std::pair<std::string, Tensor>> feeds;
  // Joined BYTES inputs; results may be views of them, so they live until the outputs are copied.
  std::vector<std::shared_ptr<std::vector<uint8_t>>> keepalive;
  const uint32_t inputs = NereidRequestInputCount(requests[0]);
  for (uint32_t i = 0; i < inputs; ++i) {
    NereidTensor first;
    RETURN_IF_ERROR(FromError(NereidRequestInput(requests[0], i, &first)));
    const auto type = static_cast<DataType>(first.datatype);
    std::vector<NereidTensor> parts(count);
    parts[0] = first;
    int64_t total_rows = 0;
    size_t total_bytes = 0;
    for (uint32_t r = 0; r < count; ++r) {
      if (r > 0)
        RETURN_IF_ERROR(FromError(NereidRequestInputByName(requests[r], first.name, &parts[r])));
      if (batching && parts[r].dims_count > 0) rows[r] = parts[r].shape[0];
      total_rows += rows[r];
      total_bytes += parts[r].byte_size;
    }
    std::vector<int64_t> shape(first.shape, first.shape + first.dims_count);
    if (batching && !shape.empty()) shape[0] = total_rows;
    auto spec = m.inputs.find(first.name);
    if (spec != m.inputs.end() && spec->second.has_reshape)
      shape = BatchPrefixed(shape, batching, spec->second.reshape);
    // The server checked each request's bytes against its shape; the backend checks again that
    // what it is about to read (after any reshape) is exactly what it was given.
    if (type != DataType::kBytes) RETURN_IF_ERROR(FitShape(first.name, type, total_bytes, shape));
    const size_t align = std::max<size_t>(DataTypeSize(type), 1);
    if (count == 1 &&
        (type == DataType::kBytes || reinterpret_cast<uintptr_t>(first.data) % align == 0)) {
      feeds.emplace_back(first.name, Tensor::Borrow(type, shape, first.data, first.byte_size));
      continue;
    }
    Tensor joined = type == DataType::kBytes ? Tensor() : Tensor::Allocate(type, shape);
    std::vector<uint8_t>* bytes_storage = nullptr;
    std::shared_ptr<std::vector<uint8_t>> serialized;
    if (type == DataType::kBytes) {
      serialized = std::make_shared<std::vector<uint8_t>>(total_bytes);
      bytes_storage = serialized.get();
    }
    uint8_t* dst = type == DataType::kBytes ? bytes_storage->data() : joined.mutable_raw();
    for (const auto& part : parts) {
      std::memcpy(dst, part.data, part.byte_size);
      dst += part.byte_size;
    }
    if (type == DataType::kBytes) {
      joined = Tensor::Borrow(type, shape, bytes_storage->data(), total_bytes);
      keepalive.push_back(std::move(serialized));
    }
    feeds.emplace_back(first.name, std::move(joined));
  }

  // Every output any request asked for, computed once.
  std::vector<std::vector<std::string>> wanted(count);
  std::vector<std::string> fetch;
  for (uint32_t r = 0; r < count; ++r) {
    wanted[r] = backend::RequestedOutputs(requests[r]);
    for (const std::string& name : wanted[r])
      if (std::find(fetch.begin(), fetch.end(), name) == fetch.end()) fetch.push_back(name);
  }
  std::vector<Tensor> results;
  const uint64_t compute_start = NereidNowNs();
  RETURN_IF_ERROR(m.graph->Run(feeds, fetch, &results));
  const uint64_t compute_end = NereidNowNs();
  for (uint32_t r = 0; r < count; ++r)
    NereidRequestSetComputeTimes(requests[r], compute_start, compute_end);

  int64_t total_rows = 0;
  for (int64_t r : rows) total_rows += r;
  for (size_t i = 0; i < fetch.size(); ++i) {
    const Tensor& result = results[i];
    if (batching && (result.shape().empty() || result.shape()[0] != total_rows))
      return Internal("output '" + fetch[i] + "' has shape " + ShapeString(result.shape()) +
                      " but the batch has " + std::to_string(total_rows) + " rows");
    std::vector<size_t> row_offsets;  // BYTES: byte offset of each row
    if (result.type() == DataType::kBytes)
      row_offsets = BytesRowOffsets(result.raw(), result.bytes(), result.elements(),
                                    batching ? total_rows : 1);
    const size_t row_bytes = result.type() == DataType::kBytes
                                 ? 0
                                 : result.bytes() / std::max<int64_t>(batching ? total_rows : 1, 1);
    int64_t row = 0;
    for (uint32_t r = 0; r < count; ++r) {
      const int64_t first_row = row;
      row += rows[r];
      if (std::find(wanted[r].begin(), wanted[r].end(), fetch[i]) == wanted[r].end()) continue;
      std::vector<int64_t> shape = result.shape();
      if (batching) shape[0] = rows[r];
      const size_t begin = result.type() == DataType::kBytes
                               ? row_offsets[std::min<size_t>(first_row, row_offsets.size() - 1)]
                               : static_cast<size_t>(first_row) * row_bytes;
      const size_t end = result.type() == DataType::kBytes
                             ? row_offsets[std::min<size_t>(row, row_offsets.size() - 1)]
                             : static_cast<size_t>(row) * row_bytes;
      const size_t size = batching ? end - begin : result.bytes();
      auto spec = m.outputs.find(fetch[i]);
      if (spec != m.outputs.end() && spec->second.has_reshape) {
        shape = BatchPrefixed({rows[r]}, batching, spec->second.dims);
        const int64_t elements = ElementCount(result.shape().data(), result.shape().size()) /
                                 std::max<int64_t>(batching ? total_rows : 1, 1) *
                                 (batching ? rows[r] : 1);
        FillVariableDimension(shape, elements);  // if none fits, the allocation below refuses
      }
      if (!failed[r].ok()) continue;
      auto buffer = backend::AllocateOutput(requests[r], fetch[i], result.type(), shape, size);
      if (!buffer.ok()) {
        failed[r] = buffer.status();
        continue;
      }
      std::memcpy(buffer->data, result.raw() + (batching ? begin : 0), size);
    }
  }
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
  std::shared_ptr<const GpuModel> compiled;
  {
    std::lock_guard lock(m.gpu_mu);
    auto it = m.gpu_models.find(device);
    if (it == m.gpu_models.end()) {
      ASSIGN_OR_RETURN(Precision precision, ParsePrecision(m.precision));
      // The CPU graph holds its weights packed for the CPU kernels; the GPU compiler reads the
      // file's weights from a graph of its own, dropped once they are on the device.
      auto unpacked = Graph::Load(m.path, GraphOptions{.pack_weights = false});
      if (!unpacked.ok()) return unpacked.status();
      auto made = CompileForGpu(**unpacked, device, precision);
      if (!made.ok())
        return Status(made.status().code(), who + " (KIND_GPU): " + made.status().message());
      it = m.gpu_models.emplace(device, std::move(made).value()).first;
      Log(NEREID_LOG_INFO, "model '" + m.name + "' on GPU " + std::to_string(device) +
                               ": native GPU engine, " + Describe(*it->second) +
                               "; a CUDA graph per batch size");
    }
    compiled = it->second;
  }
  auto gpu = CreateGpuInstance(std::move(compiled));
  if (!gpu.ok()) return Status(gpu.status().code(), who + ": " + gpu.status().message());
  state.gpu = std::move(gpu).value();
  Log(NEREID_LOG_INFO, who + " on GPU " + std::to_string(device) + ": " + GemmTuning(*state.gpu));
  return Status::Ok();
}

// The GPU path of ExecuteBatch: each request's rows are gathered straight into the instance's
// pinned staging buffers, the graph runs on the device, and each request's rows of every output it
// asked for are copied into its response.
Status ExecuteBatchGpu(const ModelState& m, NereidInstance* instance, GpuInstance& gpu,
                       NereidRequest** requests, uint32_t count, std::vector<Status>& failed) {
  std::vector<GpuFeed> feeds;
  std::vector<int64_t> rows(count, 0);
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
      if (t.memory_type == NEREID_MEMORY_GPU && t.device_id != NereidInstanceDeviceId(instance))
        return Unsupported("input '" + feed.name + "' is in the memory of GPU " +
                           std::to_string(t.device_id) + ", this instance runs on GPU " +
                           std::to_string(NereidInstanceDeviceId(instance)));
      const int64_t n = t.dims_count > 0 ? t.shape[0] : 1;
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
  // A request alone in its batch gets its outputs allocated first, for the device to write them
  // straight there: its CUDA shared-memory region, else pinned host memory.
  const std::vector<GpuOutputInfo> outputs = GpuOutputs(gpu);
  std::vector<GpuDestination> destinations(outputs.size());
  std::vector<void*> allocated_data(outputs.size(), nullptr);
  if (count == 1) {
    for (const std::string& name : backend::RequestedOutputs(requests[0]))
      for (size_t o = 0; o < outputs.size(); ++o) {
        if (outputs[o].name != name) continue;
        std::vector<int64_t> shape = {total_rows};
        shape.insert(shape.end(), outputs[o].dims.begin(), outputs[o].dims.end());
        NereidBuffer buffer{};
        RETURN_IF_ERROR(FromError(NereidRequestOutputAllocate(
            requests[0], name.c_str(), static_cast<NereidDataType>(outputs[o].type), shape.data(),
            static_cast<uint32_t>(shape.size()), outputs[o].row_bytes * total_rows,
            NEREID_MEMORY_GPU, NereidInstanceDeviceId(instance), &buffer)));
        allocated_data[o] = buffer.data;
        if (buffer.memory_type == NEREID_MEMORY_GPU) {
          if (buffer.device_id != NereidInstanceDeviceId(instance))
            return Unsupported("output '" + name + "' goes to a region on another GPU");
          destinations[o] = {buffer.data, true};
        } else if (buffer.memory_type == NEREID_MEMORY_CPU_PINNED) {
          destinations[o] = {buffer.data, false};
        }
      }
  }
  std::vector<GpuResult> results;
  uint64_t start = 0, end = 0;
  RETURN_IF_ERROR(RunOnGpu(gpu, total_rows, feeds, destinations, &results, &start, &end));
  int64_t row = 0;
  for (uint32_t r = 0; r < count; ++r) {
    NereidRequestSetComputeTimes(requests[r], start, end);
    for (const std::string& name : backend::RequestedOutputs(requests[r])) {
      const GpuResult* result = nullptr;
      size_t index = 0;
      for (size_t o = 0; o < results.size(); ++o)
        if (results[o].name == name) result = &results[o], index = o;
      if (result == nullptr || !failed[r].ok()) continue;
      if (allocated_data[index] != nullptr) {  // a request alone in its batch
        // Already allocated: the device wrote it there, or it is copied there from staging.
        if (!result->in_destination)
          std::memcpy(allocated_data[index], result->data, result->bytes);
        continue;
      }
      const size_t row_bytes = result->bytes / static_cast<size_t>(total_rows);
      std::vector<int64_t> shape = result->shape;
      shape[0] = rows[r];
      auto buffer = backend::AllocateOutput(requests[r], name, result->type, shape,
                                            row_bytes * static_cast<size_t>(rows[r]));
      if (!buffer.ok()) {
        failed[r] = buffer.status();
        continue;
      }
      std::memcpy(buffer->data, result->data + row_bytes * static_cast<size_t>(row),
                  row_bytes * static_cast<size_t>(rows[r]));
    }
    row += rows[r];
  }
  return Status::Ok();
}
#endif

}  // namespace
}  // namespace nereid::native

using nereid::native::InstanceState;
using nereid::native::ModelState;
namespace backend = nereid::backend;

extern "C" {

NEREID_EXPORT uint32_t NereidBackendApiVersion(void) { return NEREID_BACKEND_API_VERSION; }

NEREID_EXPORT NereidError* NereidBackendInitialize(void) {
  return backend::Guard([] { return backend::CheckServerVersion(); });
}

// Configs written for Triton's ONNX Runtime backend run here when no ONNX Runtime backend is
// installed (and fail to load, naming the op, when the engine lacks one of the graph's ops).
NEREID_EXPORT const char* NereidBackendAliases(void) { return "onnxruntime"; }

NEREID_EXPORT NereidError* NereidModelInitialize(NereidModel* model) {
  return backend::Guard([&] { return nereid::native::InitializeModel(model); });
}

NEREID_EXPORT NereidError* NereidModelFinalize(NereidModel* model) {
  delete static_cast<ModelState*>(NereidModelState(model));
  NereidModelSetState(model, nullptr);
  return nullptr;
}

#ifdef NEREID_NATIVE_GPU
NEREID_EXPORT int NereidBackendSupportsGpu(void) { return 1; }
#endif

// CPU instances need no state (the graph is immutable and Run keeps all scratch on its own stack);
// GPU instances own a stream, device buffers and captured graphs.
NEREID_EXPORT NereidError* NereidInstanceInitialize(NereidInstance* instance) {
  return backend::Guard([&]() -> backend::Status {
    auto state = std::make_unique<InstanceState>();
    if (NereidInstanceGetKind(instance) == NEREID_INSTANCE_GPU) {
#ifdef NEREID_NATIVE_GPU
      auto* model = static_cast<ModelState*>(NereidModelState(NereidInstanceModel(instance)));
      RETURN_IF_ERROR(nereid::native::InitializeGpuInstance(*model, instance, *state));
#else
      return backend::Unsupported("the native backend was built without CUDA");
#endif
    }
    NereidInstanceSetState(instance, state.release());
    return backend::Status::Ok();
  });
}

NEREID_EXPORT NereidError* NereidInstanceFinalize(NereidInstance* instance) {
  delete static_cast<InstanceState*>(NereidInstanceState(instance));
  NereidInstanceSetState(instance, nullptr);
  return nullptr;
}

// Synchronous: every request is complete when Execute returns.
NEREID_EXPORT NereidError* NereidInstanceExecute(NereidInstance* instance, NereidRequest** requests,
                                                 uint32_t count) {
  const auto* state =
      static_cast<const ModelState*>(NereidModelState(NereidInstanceModel(instance)));
  std::vector<backend::Status> failed(count);
  [[maybe_unused]] auto* instance_state =
      static_cast<InstanceState*>(NereidInstanceState(instance));
  NereidError* error = backend::Guard([&] {
#ifdef NEREID_NATIVE_GPU
    if (instance_state != nullptr && instance_state->gpu)
      return nereid::native::ExecuteBatchGpu(*state, instance, *instance_state->gpu, requests,
                                             count, failed);
#endif
    return nereid::native::ExecuteBatch(*state, requests, count, failed);
  });
  if (error != nullptr) return error;  // the server fails the whole batch
  for (uint32_t r = 0; r < count; ++r) backend::Complete(requests[r], failed[r]);
  return nullptr;
}

}  // extern "C"
