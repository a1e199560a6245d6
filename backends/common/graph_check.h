// A config checked against the model file's own graph (ONNX, TorchScript or any framework that
// states its inputs and outputs): Triton's auto-complete from the graph's inputs and outputs, and
// the check of the config against them (names, types, ranks and fixed dimensions), with messages
// that name the fix. Shared by the native engine and the ONNX Runtime backend.
#pragma once

#include <rapidjson/document.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/config_json.h"
#include "nereid/backend_util.h"

namespace nereid::backend {

// One input or output of an ONNX graph as the backend's loader sees it.
struct ValueInfo {
  std::string name;
  DataType type = DataType::kInvalid;
  std::vector<int64_t> dims;  // -1 where the graph leaves a dimension symbolic or unknown
  // A graph input that is also an initializer: a request may send it (overriding the model's
  // value) or leave it out (the initializer is used). Triton serves these as optional inputs.
  bool has_default = false;
  bool has_shape = false;  // false when the graph states no shape (dims is then empty)
};

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
  // A ragged input reaches the model as one 1-D tensor of every request's elements; an output
  // scattered by an input's shape leaves it as [those elements, the dims after the first].
  const bool input = std::string(kind) == "input";
  if (batching && spec.ragged && g.dims.size() == (input ? 1 : std::max<size_t>(dims.size(), 1)))
    return Status::Ok();
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

}  // namespace nereid::backend
