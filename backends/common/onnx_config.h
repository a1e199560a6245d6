// What a backend serving ONNX graphs needs from config.pbtxt, shared by the native engine and the
// ONNX Runtime backend: the config's inputs and outputs read from Triton's JSON, Triton's
// auto-complete from the graph's inputs and outputs, and the check of the config against the graph
// (names, types, ranks and fixed dimensions), with messages that name the fix.
#pragma once

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "common/onnx_value_info.h"
#include "nereid/backend_util.h"

namespace nereid::backend::onnx {

// One input or output of config.pbtxt.
struct IoSpec {
  std::string name;
  DataType type = DataType::kInvalid;
  std::vector<int64_t> dims;
  bool has_reshape = false;
  std::vector<int64_t> reshape;
};

// The parts of a model's config the ONNX checks read.
struct ModelIo {
  std::string name;
  int64_t max_batch_size = 0;
  std::map<std::string, IoSpec> inputs;
  std::map<std::string, IoSpec> outputs;
};

inline DataType ConfigType(const std::string& name) {
  if (name == "TYPE_STRING") return DataType::kBytes;
  return name.rfind("TYPE_", 0) == 0 ? DataTypeFromName(name.substr(5)) : DataType::kInvalid;
}
inline std::string ConfigTypeName(DataType t) {
  return t == DataType::kBytes ? "TYPE_STRING" : "TYPE_" + std::string(DataTypeName(t));
}

inline std::vector<int64_t> IntArray(const rapidjson::Value& obj, const char* key) {
  std::vector<int64_t> out;
  if (!obj.IsObject() || !obj.HasMember(key) || !obj[key].IsArray()) return out;
  for (const auto& v : obj[key].GetArray())
    out.push_back(v.IsInt64() ? v.GetInt64() : v.IsString() ? std::stoll(v.GetString()) : 0);
  return out;
}
inline std::string StringField(const rapidjson::Value& obj, const char* key) {
  return obj.IsObject() && obj.HasMember(key) && obj[key].IsString() ? obj[key].GetString() : "";
}
// A config parameter's string_value ("" when absent).
inline std::string Parameter(const rapidjson::Value& config, const char* key) {
  if (!config.IsObject() || !config.HasMember("parameters") || !config["parameters"].IsObject() ||
      !config["parameters"].HasMember(key))
    return "";
  return StringField(config["parameters"][key], "string_value");
}

// An integer config parameter: 'fallback' where absent (or empty), else a whole number from 'min'
// to 'max' or an error naming the model and the parameter.
inline StatusOr<int> IntParameter(const std::string& model, const rapidjson::Value& config,
                                  const char* key, int min, int max, int fallback) {
  const std::string text = Parameter(config, key);
  if (text.empty()) return fallback;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || value < min || value > max)
    return InvalidArgument("model '" + model + "': parameter '" + key +
                           "' must be an integer from " + std::to_string(min) + " to " +
                           std::to_string(max) + ", got '" + text + "'");
  return static_cast<int>(value);
}

inline std::map<std::string, IoSpec> ReadIo(const rapidjson::Value& config, const char* key) {
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

inline ModelIo ReadModelIo(const std::string& name, const rapidjson::Value& config) {
  ModelIo io;
  io.name = name;
  io.max_batch_size = config.HasMember("max_batch_size") && config["max_batch_size"].IsInt64()
                          ? config["max_batch_size"].GetInt64()
                          : 0;
  io.inputs = ReadIo(config, "input");
  io.outputs = ReadIo(config, "output");
  return io;
}

// Fills inputs, outputs and max_batch_size that the config leaves out, the way Triton's ONNX
// Runtime backend auto-completes: a graph whose every input and output has a dynamic first
// dimension batches (max_batch_size 'default_max_batch_size' unless given), and dims are the graph
// dims without that batch dimension. Returns whether anything changed.
inline bool AutoComplete(const std::vector<ValueInfo>& graph_inputs,
                         const std::vector<ValueInfo>& graph_outputs, rapidjson::Document& config,
                         int64_t default_max_batch_size = 4) {
  auto& alloc = config.GetAllocator();
  const bool need_inputs = !config.HasMember("input") || config["input"].Empty();
  const bool need_outputs = !config.HasMember("output") || config["output"].Empty();
  if (!need_inputs && !need_outputs) return false;
  int64_t mbs = config.HasMember("max_batch_size") ? config["max_batch_size"].GetInt64() : 0;
  bool batchable = true;
  for (const auto* list : {&graph_inputs, &graph_outputs})
    for (const auto& v : *list)
      if (!v.has_default && (v.dims.empty() || v.dims[0] != -1)) batchable = false;
  if (mbs == 0 && batchable && need_inputs && need_outputs) mbs = default_max_batch_size;
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
  if (need_inputs) fill("input", graph_inputs);
  if (need_outputs) fill("output", graph_outputs);
  return true;
}

inline std::string ToJson(const rapidjson::Value& config) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  config.Accept(writer);
  return buffer.GetString();
}

// What a config tensor's dims should be for a graph tensor of shape 'graph', given whether the
// model batches: advice for a shape error that names the fix.
inline std::string DimsAdvice(const std::vector<int64_t>& graph, bool batching) {
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
inline Status CheckTensor(const ModelIo& m, const char* kind, const IoSpec& spec,
                          const ValueInfo& g) {
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

inline std::string Names(const std::vector<ValueInfo>& values) {
  std::string out;
  for (const auto& v : values) out += (out.empty() ? "" : ", ") + v.name;
  return out;
}

inline const ValueInfo* Find(const std::vector<ValueInfo>& values, const std::string& name) {
  for (const auto& v : values)
    if (v.name == name) return &v;
  return nullptr;
}

inline Status CheckAgainstGraph(const ModelIo& m, const std::vector<ValueInfo>& graph_inputs,
                                const std::vector<ValueInfo>& graph_outputs) {
  const std::string who = "model '" + m.name + "': ";
  // A name the graph lacks is checked first: when one name is misspelled, that name is the error,
  // not the graph input it leaves undeclared.
  for (const auto& [name, spec] : m.inputs)
    if (Find(graph_inputs, name) == nullptr)
      return InvalidArgument(
          who + "config input '" + name +
          "' is not an input of the ONNX graph (graph inputs: " + Names(graph_inputs) + ")");
  for (const auto& [name, spec] : m.outputs)
    if (Find(graph_outputs, name) == nullptr)
      return InvalidArgument(
          who + "config output '" + name +
          "' is not an output of the ONNX graph (graph outputs: " + Names(graph_outputs) + ")");
  for (const auto& g : graph_inputs)
    if (!g.has_default && !m.inputs.count(g.name))
      return InvalidArgument(who + "the ONNX graph has input '" + g.name +
                             "' which config.pbtxt does not declare");
  for (const auto& [name, spec] : m.inputs)
    RETURN_IF_ERROR(CheckTensor(m, "input", spec, *Find(graph_inputs, name)));
  for (const auto& [name, spec] : m.outputs)
    RETURN_IF_ERROR(CheckTensor(m, "output", spec, *Find(graph_outputs, name)));
  return Status::Ok();
}

// ---- Batching: what the backends share to join requests and split results by rows ----------

inline std::vector<int64_t> BatchPrefixed(const std::vector<int64_t>& request_shape, bool batching,
                                          const std::vector<int64_t>& dims) {
  std::vector<int64_t> shape;
  if (batching) shape.push_back(request_shape.empty() ? 1 : request_shape[0]);
  shape.insert(shape.end(), dims.begin(), dims.end());
  return shape;
}

// Resolves at most one -1 in 'shape' from 'bytes', then requires shape x element size == bytes.
// 'type' has a fixed element size.
inline Status FitShape(const std::string& name, DataType type, size_t bytes,
                       std::vector<int64_t>& shape) {
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
inline std::vector<size_t> BytesRowOffsets(const uint8_t* data, size_t size, int64_t elements,
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

// One input of a batch of requests: every request's part, the batch's rows per request, and the
// shape of the joined tensor (batch dimension summed, the config's reshape applied), checked
// against the bytes it will hold.
struct BatchInput {
  NereidTensor first{};
  std::vector<NereidTensor> parts;
  std::vector<int64_t> shape;
  size_t total_bytes = 0;
};

// Gathers input 'index' of requests[0] (by name in the others) and fills 'rows' (per request).
inline StatusOr<BatchInput> GatherInput(const ModelIo& m, NereidRequest** requests, uint32_t count,
                                        uint32_t index, std::vector<int64_t>& rows) {
  const bool batching = m.max_batch_size > 0;
  BatchInput in;
  RETURN_IF_ERROR(FromError(NereidRequestInput(requests[0], index, &in.first)));
  const auto type = static_cast<DataType>(in.first.datatype);
  in.parts.resize(count);
  in.parts[0] = in.first;
  int64_t total_rows = 0;
  for (uint32_t r = 0; r < count; ++r) {
    if (r > 0)
      RETURN_IF_ERROR(
          FromError(NereidRequestInputByName(requests[r], in.first.name, &in.parts[r])));
    if (batching && in.parts[r].dims_count > 0) rows[r] = in.parts[r].shape[0];
    total_rows += rows[r];
    in.total_bytes += in.parts[r].byte_size;
  }
  in.shape.assign(in.first.shape, in.first.shape + in.first.dims_count);
  if (batching && !in.shape.empty()) in.shape[0] = total_rows;
  auto spec = m.inputs.find(in.first.name);
  if (spec != m.inputs.end() && spec->second.has_reshape)
    in.shape = BatchPrefixed(in.shape, batching, spec->second.reshape);
  // The server checked each request's bytes against its shape; the backend checks again that
  // what it is about to read (after any reshape) is exactly what it was given.
  if (type != DataType::kBytes)
    RETURN_IF_ERROR(FitShape(in.first.name, type, in.total_bytes, in.shape));
  return in;
}

// The outputs each request asked for ('wanted', per request) and their union, in first-asked order:
// what one execution of the batch computes.
inline std::vector<std::string> OutputsToFetch(NereidRequest** requests, uint32_t count,
                                               std::vector<std::vector<std::string>>& wanted) {
  wanted.assign(count, {});
  std::vector<std::string> fetch;
  for (uint32_t r = 0; r < count; ++r) {
    wanted[r] = RequestedOutputs(requests[r]);
    for (const std::string& name : wanted[r])
      if (std::find(fetch.begin(), fetch.end(), name) == fetch.end()) fetch.push_back(name);
  }
  return fetch;
}

// Splits one output of a batch run back into the requests: each request that asked for 'name'
// (and has not failed) gets its rows of 'data' in a response buffer, its shape the result's with
// its own row count, or the config's reshape. BYTES results are split at element boundaries. An
// allocation that fails lands in 'failed[r]'; a result without the batch's rows fails them all.
inline Status ScatterOutput(const ModelIo& m, NereidRequest** requests, uint32_t count,
                            const std::vector<int64_t>& rows,
                            const std::vector<std::vector<std::string>>& wanted,
                            const std::string& name, DataType type,
                            const std::vector<int64_t>& result_shape, const uint8_t* data,
                            size_t bytes, std::vector<Status>& failed) {
  const bool batching = m.max_batch_size > 0;
  int64_t total_rows = 0;
  for (int64_t r : rows) total_rows += r;
  if (batching && (result_shape.empty() || result_shape[0] != total_rows))
    return Internal("output '" + name + "' has shape " + ShapeString(result_shape) +
                    " but the batch has " + std::to_string(total_rows) + " rows");
  const int64_t divisor = std::max<int64_t>(batching ? total_rows : 1, 1);
  const int64_t elements = ElementCount(result_shape);
  std::vector<size_t> row_offsets;  // BYTES: byte offset of each row
  if (type == DataType::kBytes) row_offsets = BytesRowOffsets(data, bytes, elements, divisor);
  const size_t row_bytes = type == DataType::kBytes ? 0 : bytes / static_cast<size_t>(divisor);
  auto spec = m.outputs.find(name);
  const bool reshape = spec != m.outputs.end() && spec->second.has_reshape;
  int64_t row = 0;
  for (uint32_t r = 0; r < count; ++r) {
    const int64_t first_row = row;
    row += rows[r];
    if (std::find(wanted[r].begin(), wanted[r].end(), name) == wanted[r].end()) continue;
    if (!failed[r].ok()) continue;
    std::vector<int64_t> shape = result_shape;
    if (batching) shape[0] = rows[r];
    size_t begin = 0, end = bytes;
    if (batching && type == DataType::kBytes) {
      begin = row_offsets[std::min<size_t>(first_row, row_offsets.size() - 1)];
      end = row_offsets[std::min<size_t>(row, row_offsets.size() - 1)];
    } else if (batching) {
      begin = static_cast<size_t>(first_row) * row_bytes;
      end = static_cast<size_t>(row) * row_bytes;
    }
    if (reshape) {
      shape = BatchPrefixed({rows[r]}, batching, spec->second.dims);
      // if no dimension fits, the allocation below refuses
      FillVariableDimension(shape, elements / divisor * (batching ? rows[r] : 1));
    }
    auto buffer = AllocateOutput(requests[r], name, type, shape, end - begin);
    if (!buffer.ok()) {
      failed[r] = buffer.status();
      continue;
    }
    if (end > begin) std::memcpy(buffer->data, data + begin, end - begin);
  }
  return Status::Ok();
}

}  // namespace nereid::backend::onnx
