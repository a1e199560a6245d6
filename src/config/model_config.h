// Reading and writing Triton's ModelConfig: config.pbtxt (protobuf TextFormat) in, Triton's JSON
// out. Used by the repository when it loads a model and by the frontends' config endpoints.
#pragma once

#include <google/protobuf/text_format.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/data_type.h"
#include "common/status.h"
#include "config/model_config.pb.h"

namespace nereid {

// Where each field of a parsed config.pbtxt came from, so errors can name file and line.
class ConfigLocator {
 public:
  ConfigLocator() = default;
  ConfigLocator(std::string file, std::unique_ptr<google::protobuf::TextFormat::ParseInfoTree> tree)
      : file_(std::move(file)), tree_(std::move(tree)) {}

  // One step of a field path: a field name and, for repeated fields, the element index (-1 if not).
  struct Step {
    std::string field;
    int index = -1;
  };
  // "config.pbtxt:12" for the deepest step found, or just the file name when the field was not
  // written in the file (a default or an auto-completed value).
  std::string Where(const std::vector<Step>& path) const;
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::unique_ptr<google::protobuf::TextFormat::ParseInfoTree> tree_;
};

struct ParsedModelConfig {
  inference::ModelConfig config;
  ConfigLocator locator;
};

// Parses config.pbtxt text. Syntax errors name the file, line and column.
StatusOr<ParsedModelConfig> ParseModelConfigText(const std::string& text, const std::string& file);

// Triton's JSON rendering: proto field names, defaults printed, 64-bit integers as JSON numbers.
std::string ModelConfigToJson(const inference::ModelConfig& config);
// Accepts Triton's JSON (numbers or strings for 64-bit integers).
StatusOr<inference::ModelConfig> ModelConfigFromJson(const std::string& json);

// Top-level fields that are set in 'config' but that Nereid does not act on yet.
std::vector<std::string> IgnoredConfigFields(const inference::ModelConfig& config);

inline DataType FromConfigType(inference::DataType t) { return static_cast<DataType>(t); }
// Whether the model's instances read device memory as it is: the native engine with every
// instance a KIND_GPU one. Device inputs for other models are copied to the host first.
inline bool ReadsDeviceInputs(const inference::ModelConfig& config) {
  for (const auto& group : config.instance_group())
    if (group.kind() != inference::ModelInstanceGroup::KIND_GPU) return false;
  return config.instance_group_size() > 0 && config.backend() == "native";
}
inline inference::DataType ToConfigType(DataType t) { return static_cast<inference::DataType>(t); }
// "TYPE_FP32" -> kFp32; TYPE_STRING is BYTES on the wire.
std::string_view ConfigTypeName(inference::DataType t);

}  // namespace nereid
