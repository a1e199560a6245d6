// config.pbtxt as a backend reads it: the model configuration's JSON (Triton's), its inputs and
// outputs, parameters, and back to JSON. Shared by every backend in the tree.
#pragma once

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "nereid/backend_util.h"

namespace nereid::backend {

// One input or output of config.pbtxt.
struct IoSpec {
  std::string name;
  DataType type = DataType::kInvalid;
  std::vector<int64_t> dims;
  bool has_reshape = false;
  std::vector<int64_t> reshape;
  // allow_ragged_batch: a batch joins the requests' tensors of different shapes end to end, and
  // the model sees one 1-D tensor of every element.
  bool ragged = false;
};

// A tensor the server makes for each batch (Triton's batch_input): of kind (BatchInput.Kind's
// name), computed from source_input's shape in each request, fed to the model as each target.
struct BatchTensor {
  std::string kind;
  std::vector<std::string> targets;
  DataType type = DataType::kInvalid;  // FP32 or INT32
  std::string source;
};

// The parts of a model's config the ONNX checks read.
struct ModelIo {
  std::string name;
  int64_t max_batch_size = 0;
  std::map<std::string, IoSpec> inputs;
  std::map<std::string, IoSpec> outputs;
  std::vector<BatchTensor> batch_inputs;
  // batch_output BATCH_SCATTER_WITH_INPUT_SHAPE: output name -> its source input (each request
  // gets the elements its source input's shape holds, in that shape).
  std::map<std::string, std::string> scatter_outputs;
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
    s.ragged = v.HasMember("allow_ragged_batch") && v["allow_ragged_batch"].IsBool() &&
               v["allow_ragged_batch"].GetBool();
    specs[s.name] = s;
  }
  return specs;
}

// The tensors the sequence batcher adds to a model's graph besides config.pbtxt's input and
// output: each control input (shape [1] per request; its type from int32_false_true,
// fp32_false_true, bool_false_true or CORRID's data_type) and each implicit state's input and
// output (the state's data_type and dims).
inline void AddSequenceTensors(const rapidjson::Value& config, ModelIo& io) {
  if (!config.HasMember("sequence_batching") || !config["sequence_batching"].IsObject()) return;
  const auto& sb = config["sequence_batching"];
  if (sb.HasMember("control_input") && sb["control_input"].IsArray())
    for (const auto& input : sb["control_input"].GetArray()) {
      IoSpec s;
      s.name = StringField(input, "name");
      s.dims = {1};
      if (input.HasMember("control") && input["control"].IsArray())
        for (const auto& c : input["control"].GetArray()) {
          auto has = [&](const char* key) {
            return c.HasMember(key) && c[key].IsArray() && !c[key].Empty();
          };
          s.type = has("int32_false_true")  ? DataType::kInt32
                   : has("fp32_false_true") ? DataType::kFp32
                   : has("bool_false_true") ? DataType::kBool
                                            : ConfigType(StringField(c, "data_type"));
        }
      if (!s.name.empty()) io.inputs.emplace(s.name, s);
    }
  if (sb.HasMember("state") && sb["state"].IsArray())
    for (const auto& state : sb["state"].GetArray()) {
      IoSpec s;
      s.type = ConfigType(StringField(state, "data_type"));
      s.dims = IntArray(state, "dims");
      s.name = StringField(state, "input_name");
      if (!s.name.empty()) io.inputs.emplace(s.name, s);
      s.name = StringField(state, "output_name");
      if (!s.name.empty()) io.outputs.emplace(s.name, s);
    }
}

// Triton's batch_input and batch_output: each batch input's targets become model inputs (1-D per
// batch, as the model sees them; BATCH_ITEM_SHAPE [items, the source's dims]).
inline void AddBatchTensors(const rapidjson::Value& config, ModelIo& io) {
  auto strings = [](const rapidjson::Value& v, const char* key) {
    std::vector<std::string> out;
    if (v.HasMember(key) && v[key].IsArray())
      for (const auto& e : v[key].GetArray())
        if (e.IsString()) out.push_back(e.GetString());
    return out;
  };
  if (config.HasMember("batch_input") && config["batch_input"].IsArray())
    for (const auto& b : config["batch_input"].GetArray()) {
      BatchTensor t;
      t.kind = StringField(b, "kind");
      if (t.kind.empty()) t.kind = "BATCH_ELEMENT_COUNT";  // the enum's zero (JSON leaves it out)
      t.type = ConfigType(StringField(b, "data_type"));
      t.targets = strings(b, "target_name");
      const auto sources = strings(b, "source_input");
      t.source = sources.empty() ? "" : sources[0];
      for (const std::string& target : t.targets) {
        IoSpec s;
        s.name = target;
        s.type = t.type;
        if (t.kind == "BATCH_ITEM_SHAPE")
          if (auto it = io.inputs.find(t.source); it != io.inputs.end())
            s.dims = {static_cast<int64_t>(it->second.dims.size())};
        io.inputs.emplace(target, s);
      }
      io.batch_inputs.push_back(std::move(t));
    }
  if (config.HasMember("batch_output") && config["batch_output"].IsArray())
    for (const auto& b : config["batch_output"].GetArray()) {
      const auto sources = strings(b, "source_input");
      for (const std::string& target : strings(b, "target_name")) {
        if (!sources.empty()) io.scatter_outputs[target] = sources[0];
        if (auto it = io.outputs.find(target); it != io.outputs.end()) it->second.ragged = true;
      }
    }
}

inline ModelIo ReadModelIo(const std::string& name, const rapidjson::Value& config) {
  ModelIo io;
  io.name = name;
  io.max_batch_size = config.HasMember("max_batch_size") && config["max_batch_size"].IsInt64()
                          ? config["max_batch_size"].GetInt64()
                          : 0;
  io.inputs = ReadIo(config, "input");
  io.outputs = ReadIo(config, "output");
  AddSequenceTensors(config, io);
  AddBatchTensors(config, io);
  return io;
}

inline std::string ToJson(const rapidjson::Value& config) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  config.Accept(writer);
  return buffer.GetString();
}

}  // namespace nereid::backend
