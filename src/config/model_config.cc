#include "config/model_config.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/util/json_util.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <map>
#include <set>

namespace nereid {
namespace {

namespace pb = google::protobuf;

class CollectingErrors : public pb::io::ErrorCollector {
 public:
  explicit CollectingErrors(std::string file) : file_(std::move(file)) {}
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (!first_.empty()) return;
    first_ =
        file_ + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " + message;
  }
  void AddWarning(int, pb::io::ColumnNumber, const std::string&) override {}
  const std::string& first() const { return first_; }

 private:
  std::string file_;
  std::string first_;
};

bool Is64BitInteger(const pb::FieldDescriptor* field) {
  switch (field->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT64:
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      return true;
    default:
      return false;
  }
}

// Protobuf's JSON printer writes 64-bit integers as strings; Triton's JSON has numbers. Walk the
// message descriptor alongside the JSON tree and rewrite exactly those values.
void NumbersFor64BitFields(const pb::Descriptor* descriptor, rapidjson::Value& object);

void RewriteValue(const pb::FieldDescriptor* field, rapidjson::Value& value) {
  if (Is64BitInteger(field) && value.IsString()) {
    const std::string s = value.GetString();
    if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_INT64)
      value.SetInt64(std::stoll(s));
    else
      value.SetUint64(std::stoull(s));
  } else if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE && value.IsObject()) {
    NumbersFor64BitFields(field->message_type(), value);
  }
}

void NumbersFor64BitFields(const pb::Descriptor* descriptor, rapidjson::Value& object) {
  for (auto& member : object.GetObject()) {
    const pb::FieldDescriptor* field = descriptor->FindFieldByName(member.name.GetString());
    if (field == nullptr) continue;
    if (field->is_map()) {
      const pb::FieldDescriptor* value_field = field->message_type()->FindFieldByName("value");
      for (auto& entry : member.value.GetObject()) RewriteValue(value_field, entry.value);
    } else if (field->is_repeated() && member.value.IsArray()) {
      for (auto& element : member.value.GetArray()) RewriteValue(field, element);
    } else {
      RewriteValue(field, member.value);
    }
  }
}

int FirstLine(const pb::TextFormat::ParseInfoTree& tree, const pb::Descriptor* descriptor) {
  int first = -1;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const pb::FieldDescriptor* f = descriptor->field(i);
    const int line = tree.GetLocation(f, f->is_repeated() ? 0 : -1).line;
    if (line >= 0 && (first < 0 || line < first)) first = line;
  }
  return first;
}

}  // namespace

std::string ConfigLocator::Where(const std::vector<Step>& path) const {
  if (!tree_) return file_;
  const pb::Descriptor* descriptor = inference::ModelConfig::descriptor();
  const pb::TextFormat::ParseInfoTree* tree = tree_.get();
  int line = -1;
  for (const Step& step : path) {
    if (descriptor == nullptr || tree == nullptr) break;
    const pb::FieldDescriptor* field = descriptor->FindFieldByName(step.field);
    if (field == nullptr) break;
    const int index = field->is_repeated() ? std::max(step.index, 0) : -1;
    pb::TextFormat::ParseLocation loc = tree->GetLocation(field, index);
    const bool is_message = field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE;
    const pb::TextFormat::ParseInfoTree* nested =
        is_message ? tree->GetTreeForNested(field, index) : nullptr;
    // List syntax ("input [ {..}, {..} ]") records one location for the whole list; an element
    // after the first is found by the earliest field written inside it.
    if (loc.line < 0 && nested != nullptr) loc.line = FirstLine(*nested, field->message_type());
    if (loc.line < 0) break;
    line = loc.line;
    if (!is_message) break;
    tree = nested;
    descriptor = field->message_type();
  }
  return line >= 0 ? file_ + ":" + std::to_string(line + 1) : file_;
}

StatusOr<ParsedModelConfig> ParseModelConfigText(const std::string& text, const std::string& file) {
  ParsedModelConfig parsed;
  auto tree = std::make_unique<pb::TextFormat::ParseInfoTree>();
  CollectingErrors errors(file);
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(tree.get());
  if (!parser.ParseFromString(text, &parsed.config)) {
    return InvalidArgument("failed to parse " + (errors.first().empty() ? file : errors.first()));
  }
  parsed.locator = ConfigLocator(file, std::move(tree));
  return parsed;
}

std::string ModelConfigToJson(const inference::ModelConfig& config) {
  std::string json;
  pb::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  if (!pb::util::MessageToJsonString(config, &json, options).ok()) return "{}";
  rapidjson::Document doc;
  doc.Parse(json.c_str(), json.size());
  if (doc.HasParseError() || !doc.IsObject()) return json;
  NumbersFor64BitFields(inference::ModelConfig::descriptor(), doc);
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  doc.Accept(writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

StatusOr<inference::ModelConfig> ModelConfigFromJson(const std::string& json) {
  inference::ModelConfig config;
  pb::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = pb::util::JsonStringToMessage(json, &config, options);
  if (!status.ok()) return InvalidArgument("invalid model config JSON: " + status.ToString());
  return config;
}

std::vector<std::string> IgnoredConfigFields(const inference::ModelConfig& config) {
  // Fields the server acts on today, top-level and inside the repeated messages it reads; every
  // other field that is set gets reported, with its path ("input[0].format").
  static const std::set<std::string> kActedOn = {
      "name",
      "platform",
      "backend",
      "version_policy",
      "max_batch_size",
      "input",
      "output",
      "instance_group",
      "default_model_filename",
      "parameters",
      "dynamic_batching",
      "model_transaction_policy",
      "sequence_batching",
      "response_cache",
      "model_warmup",
      "ensemble_scheduling",
      "batch_input",
      "batch_output",
  };
  static const std::map<std::string, std::set<std::string>> kActedOnInside = {
      {"input", {"name", "data_type", "dims", "reshape", "optional", "allow_ragged_batch"}},
      {"output", {"name", "data_type", "dims", "reshape", "label_filename"}},
      {"instance_group", {"name", "kind", "count", "gpus", "rate_limiter"}},
  };
  std::vector<std::string> ignored;
  std::vector<const pb::FieldDescriptor*> fields;
  config.GetReflection()->ListFields(config, &fields);
  // The ONNX Runtime backend acts on optimization's graph level and execution accelerators.
  const bool onnxruntime =
      config.backend() == "onnxruntime" || config.platform() == "onnxruntime_onnx";
  for (const auto* field : fields) {
    if (field->name() == "optimization" && onnxruntime) {
      std::vector<const pb::FieldDescriptor*> sub;
      config.optimization().GetReflection()->ListFields(config.optimization(), &sub);
      for (const auto* f : sub)
        if (f->name() != "graph" && f->name() != "execution_accelerators")
          ignored.push_back("optimization." + f->name());
      continue;
    }
    if (!kActedOn.count(field->name())) {
      ignored.push_back(field->name());
      continue;
    }
    auto inside = kActedOnInside.find(field->name());
    if (inside == kActedOnInside.end()) continue;
    const pb::Reflection* reflection = config.GetReflection();
    for (int i = 0; i < reflection->FieldSize(config, field); ++i) {
      const pb::Message& element = reflection->GetRepeatedMessage(config, field, i);
      std::vector<const pb::FieldDescriptor*> sub;
      element.GetReflection()->ListFields(element, &sub);
      for (const auto* f : sub)
        if (!inside->second.count(f->name()))
          ignored.push_back(field->name() + "[" + std::to_string(i) + "]." + f->name());
    }
  }
  return ignored;
}

std::string_view ConfigTypeName(inference::DataType t) {
  const std::string& name = inference::DataType_Name(t);
  return name;
}

}  // namespace nereid
