// Config parsing, validation, JSON rendering and version policy.
#include <gtest/gtest.h>

#include "config/config_validator.h"
#include "config/model_config.h"
#include "repository/model_repository.h"

namespace nereid {
namespace {

StatusOr<ParsedModelConfig> Parse(const std::string& text) {
  return ParseModelConfigText(text, "m/config.pbtxt");
}

Status ParseAndValidate(const std::string& text) {
  auto parsed = Parse(text);
  if (!parsed.ok()) return parsed.status();
  FillConfigDefaults("m", &parsed->config);
  return ValidateModelConfig(parsed->config, "m", parsed->locator);
}

constexpr const char* kGood = R"(
name: "m"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] } ]
)";

TEST(ConfigTest, ParsesAndValidatesGoodConfig) {
  auto parsed = Parse(kGood);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->config.max_batch_size(), 8);
  EXPECT_TRUE(ParseAndValidate(kGood).ok());
}

TEST(ConfigTest, SyntaxErrorNamesFileLineAndColumn) {
  auto parsed = Parse("name: \"m\"\nmax_batch_size: eight\n");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("m/config.pbtxt:2:"), std::string::npos)
      << parsed.status().message();
}

TEST(ConfigTest, UnknownFieldIsASyntaxError) {
  auto parsed = Parse("name: \"m\"\nmax_batch: 4\n");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("max_batch"), std::string::npos);
}

TEST(ConfigTest, BadDimsNameModelFileLineAndField) {
  Status s = ParseAndValidate(R"(name: "m"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [
  { name: "OUT" data_type: TYPE_FP32
    dims: [ 0 ] }
]
)");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model 'm'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("m/config.pbtxt:6"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("output[0].dims"), std::string::npos) << s.message();
}

TEST(ConfigTest, PreferredBatchSizeAboveMaxIsRejected) {
  Status s = ParseAndValidate(std::string(kGood) +
                              "dynamic_batching { preferred_batch_size: [ 4, 16 ] }\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("preferred batch size 16"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("m/config.pbtxt:6"), std::string::npos) << s.message();
}

TEST(ConfigTest, NameMustMatchDirectory) {
  auto parsed = Parse(kGood);
  ASSERT_TRUE(parsed.ok());
  Status s = ValidateModelConfig(parsed->config, "other", parsed->locator);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("directory 'other'"), std::string::npos);
}

TEST(ConfigTest, MissingDataTypeAndDuplicateNames) {
  EXPECT_FALSE(
      ParseAndValidate(
          R"(name: "m" input [ { name: "IN" dims: [1] } ] output [ { name: "O" data_type: TYPE_FP32 dims: [1] } ])")
          .ok());
  Status dup = ParseAndValidate(R"(name: "m"
input [ { name: "IN" data_type: TYPE_FP32 dims: [1] }, { name: "IN" data_type: TYPE_FP32 dims: [1] } ]
output [ { name: "O" data_type: TYPE_FP32 dims: [1] } ])");
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.message().find("declared twice"), std::string::npos);
}

// Instance placement as Triton resolves it, for a machine with 'gpus' GPUs and a backend that does
// or does not run on them.
StatusOr<inference::ModelConfig> Resolve(const std::string& groups, int gpus, bool backend_gpu,
                                         bool gpu_fallback = false) {
  auto parsed = Parse(std::string(kGood) + groups);
  if (!parsed.ok()) return parsed.status();
  FillConfigDefaults("m", &parsed->config);
  RETURN_IF_ERROR(ResolveInstanceGroups(
      "m",
      GpuAvailability{gpus, gpus == 0 ? "no CUDA driver" : "", backend_gpu, "native", gpu_fallback},
      parsed->locator, &parsed->config));
  return parsed->config;
}

TEST(ConfigTest, KindAutoPicksTheGpusWhenTheBackendRunsOnThem) {
  using Group = inference::ModelInstanceGroup;
  auto on_gpu = Resolve("", 2, true);  // no instance_group: one KIND_AUTO group
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().message();
  EXPECT_EQ(on_gpu->instance_group(0).kind(), Group::KIND_GPU);
  EXPECT_EQ(on_gpu->instance_group(0).gpus_size(), 2);
  auto no_gpu = Resolve("instance_group [ { kind: KIND_AUTO count: 2 } ]\n", 0, true);
  ASSERT_TRUE(no_gpu.ok());
  EXPECT_EQ(no_gpu->instance_group(0).kind(), Group::KIND_CPU);
  auto cpu_backend = Resolve("", 4, false);
  ASSERT_TRUE(cpu_backend.ok());
  EXPECT_EQ(cpu_backend->instance_group(0).kind(), Group::KIND_CPU);
  auto listed = Resolve("instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]\n", 2, true);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->instance_group(0).gpus_size(), 1);
  EXPECT_EQ(listed->instance_group(0).gpus(0), 1);
}

TEST(ConfigTest, GpuInstancesNeedGpusAndABackendThatRunsOnThem) {
  auto none = Resolve("instance_group [ { kind: KIND_GPU } ]\n", 0, true);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("m/config.pbtxt:6"), std::string::npos)
      << none.status().message();
  EXPECT_NE(none.status().message().find("no GPU is available (no CUDA driver)"), std::string::npos)
      << none.status().message();
  auto missing = Resolve("instance_group [ { kind: KIND_GPU gpus: [ 0, 3 ] } ]\n", 2, true);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("instance_group[0].gpus"), std::string::npos);
  EXPECT_NE(missing.status().message().find("GPU 3 does not exist: this machine has 2 GPUs"),
            std::string::npos)
      << missing.status().message();
  auto cpu_only = Resolve("instance_group [ { kind: KIND_GPU } ]\n", 1, false);
  ASSERT_FALSE(cpu_only.ok());
  EXPECT_NE(cpu_only.status().message().find("backend 'native' runs no KIND_GPU instances"),
            std::string::npos)
      << cpu_only.status().message();
  // A backend that falls back itself (NereidBackendGpuFallback) takes explicit KIND_GPU groups,
  // on the GPUs asked for; KIND_AUTO still resolves to the CPU; no GPU at all still fails.
  using Group = inference::ModelInstanceGroup;
  auto fallback = Resolve("instance_group [ { kind: KIND_GPU } ]\n", 2, false, true);
  ASSERT_TRUE(fallback.ok()) << fallback.status().message();
  EXPECT_EQ(fallback->instance_group(0).kind(), Group::KIND_GPU);
  EXPECT_EQ(fallback->instance_group(0).gpus_size(), 2);
  auto automatic = Resolve("", 2, false, true);
  ASSERT_TRUE(automatic.ok());
  EXPECT_EQ(automatic->instance_group(0).kind(), Group::KIND_CPU);
  EXPECT_FALSE(Resolve("instance_group [ { kind: KIND_GPU } ]\n", 0, false, true).ok());
}

// One case per class of config Triton rejects: the snippet is appended to a valid config (or
// replaces its tensors), the error must name the field and say what is wrong.
struct InvalidCase {
  const char* what;
  std::string text;
  const char* field;
  const char* message;
};

constexpr const char* kHead = "name: \"m\"\nmax_batch_size: 8\n";
constexpr const char* kIo =
    "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ 16 ] } ]\n"
    "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ 16 ] } ]\n";

std::string WithIo(const std::string& extra) { return std::string(kHead) + kIo + extra; }

TEST(ConfigTest, EachInvalidCategoryIsRejectedWithItsField) {
  const std::vector<InvalidCase> cases = {
      {"reshape count",
       std::string(kHead) + "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ 2, 3 ] reshape { "
                            "shape: [ 5 ] } } ]\n"
                            "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ 16 ] } ]\n",
       "input[0].reshape", "different numbers of elements"},
      {"reshape variable",
       std::string(kHead) + "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ 4, -1 ] reshape { "
                            "shape: [ 4, 4 ] } } ]\n"
                            "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ 16 ] } ]\n",
       "input[0].reshape", "variable-size"},
      {"reshape zero",
       std::string(kHead) + "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ 16 ] } ]\n"
                            "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ 4, 4 ] reshape "
                            "{ shape: [ 0 ] } } ]\n",
       "output[0].reshape", "must be >= 1"},
      {"empty reshape without batching",
       "name: \"m\"\ninput [ { name: \"IN\" data_type: TYPE_FP32 dims: [ 1 ] reshape { } } ]\n"
       "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ 16 ] } ]\n",
       "input[0].reshape", "empty reshape"},
      {"batch input sources",
       WithIo("batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: \"N\" data_type: TYPE_FP32 } "
              "]\n"),
       "batch_input[0].source_input", "expects 1 source input, got 0"},
      {"batch input unknown source",
       WithIo("batch_input [ { kind: BATCH_ITEM_SHAPE target_name: \"N\" data_type: TYPE_INT32 "
              "source_input: \"NOPE\" } ]\n"),
       "batch_input[0].source_input", "unknown source input name 'NOPE'"},
      {"batch input type",
       WithIo("batch_input [ { kind: BATCH_ITEM_SHAPE target_name: \"N\" data_type: TYPE_INT8 "
              "source_input: \"IN\" } ]\n"),
       "batch_input[0].data_type", "TYPE_INT32 or TYPE_FP32"},
      {"batch output target twice",
       WithIo("batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: \"IN\" "
              "target_name: [ \"OUT\", \"OUT\" ] } ]\n"),
       "batch_output[0].target_name", "can only be specified once"},
      {"batch output unknown target",
       WithIo("batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: \"IN\" "
              "target_name: \"X\" } ]\n"),
       "batch_output[0].target_name", "unknown target output name 'X'"},
      {"model metrics family",
       WithIo("model_metrics { metric_control [ { metric_identifier { } histogram_options { "
              "buckets: [ 1 ] } } ] }\n"),
       "model_metrics.metric_control[0].metric_identifier.family", "non-empty 'family'"},
      {"model metrics buckets",
       WithIo("model_metrics { metric_control [ { metric_identifier { family: \"f\" } "
              "histogram_options { } } ] }\n"),
       "model_metrics.metric_control[0].histogram_options.buckets", "non-empty 'buckets'"},
      {"model metrics no histogram",
       WithIo("model_metrics { metric_control [ { metric_identifier { family: \"f\" } } ] }\n"),
       "model_metrics.metric_control[0].histogram_options", "must specify 'histogram_options'"},
      {"two START controls",
       WithIo("sequence_batching { control_input [\n"
              "  { name: \"S\" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] "
              "} ] },\n"
              "  { name: \"T\" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] "
              "} ] } ] }\n"),
       "sequence_batching.control_input[1].control", "multiple CONTROL_SEQUENCE_START"},
      {"one tensor two kinds",
       WithIo("sequence_batching { control_input [\n"
              "  { name: \"S\" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] "
              "} ] },\n"
              "  { name: \"S\" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } "
              "] } ] }\n"),
       "sequence_batching.control_input[1].name", "multiple control kinds"},
      {"control without values",
       WithIo("sequence_batching { control_input [ { name: \"R\" control [ { kind: "
              "CONTROL_SEQUENCE_READY } ] } ] }\n"),
       "sequence_batching.control_input[0].control", "exactly one of 'int32_false_true'"},
      {"corrid type",
       WithIo("sequence_batching { control_input [ { name: \"C\" control [ { kind: "
              "CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] } ] }\n"),
       "sequence_batching.control_input[0].control.data_type", "TYPE_UINT64"},
      {"preserve ordering with priorities",
       WithIo("dynamic_batching { preserve_ordering: true priority_levels: 2 "
              "default_priority_level: 1 }\n"),
       "dynamic_batching.preserve_ordering", "only one priority level"},
      {"preserve ordering with delay",
       WithIo("dynamic_batching { preserve_ordering: true default_queue_policy { timeout_action: "
              "DELAY default_timeout_microseconds: 10 } }\n"),
       "dynamic_batching.preserve_ordering", "DELAY"},
      {"priority policy level",
       WithIo("dynamic_batching { priority_levels: 3 default_priority_level: 1 "
              "priority_queue_policy { key: 4 value { max_queue_size: 1 } } }\n"),
       "dynamic_batching.priority_queue_policy", "level 4, outside the priority levels [1, 3]"},
      {"default priority level",
       WithIo("dynamic_batching { priority_levels: 3 default_priority_level: 0 }\n"),
       "dynamic_batching.default_priority_level", "[1, 3]"},
      {"runtime escape", WithIo("runtime: \"../x/libtriton_identity.so\"\n"), "runtime",
       "escapes the backend directory"},
      {"runtime unknown", WithIo("runtime: \"__nope__\"\n"), "runtime",
       "unable to find backend library"},
      {"ensemble scheduling without ensemble",
       WithIo("ensemble_scheduling { step [ { model_name: \"a\" model_version: -1 } ] }\n"),
       "ensemble_scheduling", "platform is not 'ensemble'"},
      {"negative gpu", WithIo("instance_group [ { kind: KIND_AUTO gpus: [ -1 ] } ]\n"),
       "instance_group[0].gpus", "invalid GPU id -1"},
  };
  for (const auto& c : cases) {
    Status s = ParseAndValidate(c.text);
    ASSERT_FALSE(s.ok()) << c.what;
    EXPECT_NE(s.message().find(std::string("field '") + c.field + "'"), std::string::npos)
        << c.what << ": " << s.message();
    EXPECT_NE(s.message().find(c.message), std::string::npos) << c.what << ": " << s.message();
    EXPECT_NE(s.message().find("m/config.pbtxt:"), std::string::npos)
        << c.what << ": " << s.message();
  }
}

TEST(ConfigTest, ValidTritonFeaturesStillValidate) {
  // Valid for Triton and served by Nereid: these must not be caught by the rules above.
  for (const std::string& text :
       {WithIo("dynamic_batching { preserve_ordering: true default_queue_policy { timeout_action: "
               "REJECT default_timeout_microseconds: 10 } }\n"),
        WithIo("dynamic_batching { priority_levels: 3 default_priority_level: 2 "
               "priority_queue_policy { key: 3 value { max_queue_size: 1 } } }\n"),
        WithIo("platform: \"onnxruntime_onnx\"\nbackend: \"onnxruntime\"\n"),
        WithIo("platform: \"onnxruntime_onnx\"\nbackend: \"native\"\n"),
        WithIo("model_metrics { metric_control [ { metric_identifier { family: \"f\" } "
               "histogram_options { buckets: [ 1, 2 ] } } ] }\n"),
        std::string(kHead) +
            "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ 2, -1, 6 ] reshape { shape: [ 2, "
            "-1, 2, 3 ] } } ]\noutput [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ 1 ] reshape { "
            "} } ]\n"})
    EXPECT_TRUE(ParseAndValidate(text).ok()) << text << ParseAndValidate(text).message();
}

TEST(ConfigTest, EveryErrorIsReportedNotOnlyTheFirst) {
  auto parsed = Parse(std::string("name: \"m\"\n") +
                      "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ 0 ] } ]\n"
                      "output [ { name: \"OUT\" dims: [ 16 ] } ]\nmax_batch_size: -1\n");
  ASSERT_TRUE(parsed.ok());
  FillConfigDefaults("m", &parsed->config);
  const auto errors = ModelConfigErrors(parsed->config, "m", parsed->locator);
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_NE(errors[0].find("'max_batch_size'"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("'input[0].dims'"), std::string::npos) << errors[1];
  EXPECT_NE(errors[2].find("'output[0].data_type'"), std::string::npos) << errors[2];
}

TEST(ConfigTest, ListSyntaxKeepsLineNumbersOfEveryElement) {
  Status s = ParseAndValidate(R"(name: "m"
input [
  {
    name: "A"
    data_type: TYPE_FP32
    dims: [ 1 ]
  },
  {
    name: "B"
    data_type: TYPE_FP32
    dims: [ 0 ]
  }
]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] } ]
)");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("m/config.pbtxt:11: field 'input[1].dims'"), std::string::npos)
      << s.message();
}

TEST(ConfigTest, UnsupportedFeaturesAreRefusedNotIgnored) {
  // Batch inputs and outputs: made by the backends that join a batch themselves; refused for the
  // others (here: a model of no backend), accepted for onnxruntime.
  for (const std::string& extra :
       {std::string("batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: \"N\" data_type: "
                    "TYPE_FP32 source_input: \"IN\" } ]\n"),
        std::string("batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: \"OUT\" "
                    "source_input: \"IN\" } ]\n")}) {
    Status s = ParseAndValidate(WithIo(extra));
    ASSERT_FALSE(s.ok()) << extra;
    EXPECT_NE(s.message().find("served by the onnxruntime and pytorch backends only"),
              std::string::npos)
        << s.message();
    EXPECT_TRUE(ParseAndValidate(WithIo(extra + "backend: \"onnxruntime\"\n")).ok()) << extra;
  }
  // Sequence control inputs and implicit state are served (the sequence batcher).
  EXPECT_TRUE(ParseAndValidate(WithIo("sequence_batching { control_input [ { name: \"S\" control "
                                      "[ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 "
                                      "] } ] } ] }\n"))
                  .ok());
}

TEST(ConfigTest, ImplicitStateErrorsAreTritons) {
  const std::string head =
      "sequence_batching { state [ { input_name: \"IS\" output_name: \"OS\" data_type: "
      "TYPE_INT32 dims: [ 2 ] ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"initial_state: [ { data_type: TYPE_INT32 dims: [ 2 ] zero_data: true name: \"a\" }, "
       "{ data_type: TYPE_INT32 dims: [ 2 ] zero_data: true name: \"b\" } ]",
       "initial_state field for state input 'IS' must contain exactly one or zero element. Found "
       "'2' elements."},
      {"initial_state: [ { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true name: \"a\" } ]",
       "The data type used for 'initial_state' field of state 'IS' does not match the state data "
       "type."},
      {"initial_state: [ { data_type: TYPE_INT32 dims: [ 2 ] zero_data: true } ]",
       "Field 'name' must be set when using initial_state for state input 'IS'."},
      {"initial_state: [ { data_type: TYPE_INT32 dims: [ 2, 1 ] zero_data: true name: \"a\" } ]",
       "Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions for "
       "state input 'IS'. 2 != 1"},
      {"initial_state: [ { data_type: TYPE_INT32 dims: [ 3 ] zero_data: true name: \"a\" } ]",
       "'initial_state' dim for input name 'IS' doesn't match 'state' dim description."},
      {"initial_state: [ { data_type: TYPE_INT32 dims: [ 2 ] name: \"a\" } ]",
       "initial_state setting expects state'IS' to have state_data set"},
      {"use_growable_memory: true",
       "In order to 'use_growable_memory', you must also enable 'use_single_buffer' for state "
       "input name 'IS'."},
  };
  for (const auto& [extra, message] : cases) {
    Status s = ParseAndValidate(WithIo(head + extra + " } ] }\n"));
    ASSERT_FALSE(s.ok()) << extra;
    EXPECT_NE(s.message().find(message), std::string::npos) << s.message();
  }
  Status twice = ParseAndValidate(
      WithIo("sequence_batching { state [ { input_name: \"IS\" output_name: \"OS\" data_type: "
             "TYPE_INT32 dims: [ 1 ] }, { input_name: \"IS\" output_name: \"OS2\" data_type: "
             "TYPE_INT32 dims: [ 1 ] } ] }\n"));
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.message().find("State input name 'IS' specified more than once."),
            std::string::npos)
      << twice.message();
  EXPECT_TRUE(ParseAndValidate(WithIo(head + "initial_state: [ { data_type: TYPE_INT32 dims: [ 2 "
                                             "] zero_data: true name: \"a\" } ] } ] }\n"))
                  .ok());
}

// Every top-level field of Triton's ModelConfig, several nested ones: all must parse.
TEST(ConfigTest, KitchenSinkTritonConfigParsesAndReportsIgnoredFields) {
  const char* text = R"(
name: "m"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
runtime: "libtriton_onnxruntime.so"
version_policy: { specific: { versions: [ 1, 3 ] } }
max_batch_size: 16
input [ { name: "IN" data_type: TYPE_FP16 format: FORMAT_NCHW dims: [ 3, 224, 224 ]
          reshape: { shape: [ 1, 3, 224, 224 ] } allow_ragged_batch: false optional: false } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1000 ] label_filename: "labels.txt" } ]
batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT32 source_input: "IN" } ]
batch_output [ { target_name: "OUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "IN" } ]
optimization { graph { level: 1 } priority: PRIORITY_MAX
  cuda { graphs: true busy_wait_events: true graph_spec [ { batch_size: 4 input { key: "IN" value { dim: [ 3, 224, 224 ] } } } ] }
  execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } } ] }
  input_pinned_memory { enable: true } output_pinned_memory { enable: false }
  gather_kernel_buffer_threshold: 2 eager_batching: true }
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 preserve_ordering: true
  priority_levels: 2 default_priority_level: 1
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 1000 allow_timeout_override: true max_queue_size: 8 }
  priority_queue_policy { key: 1 value { timeout_action: REJECT max_queue_size: 4 } } }
instance_group [ { name: "g" kind: KIND_CPU count: 2 rate_limiter { resources [ { name: "R" global: true count: 1 } ] priority: 2 }
  host_policy: "cpu" passive: false } ]
default_model_filename: "model.onnx"
cc_model_filenames { key: "7.5" value: "model_75.onnx" }
metric_tags { key: "team" value: "search" }
parameters { key: "threads" value: { string_value: "4" } }
model_warmup [ { name: "w" batch_size: 1 count: 2 inputs { key: "IN" value: { data_type: TYPE_FP16 dims: [ 3, 224, 224 ] zero_data: true } } } ]
model_operations { op_library_filename: [ "libcustom.so" ] }
model_transaction_policy { decoupled: false }
model_repository_agents { agents [ { name: "checksum" parameters { key: "MD5:model.onnx" value: "abc" } } ] }
response_cache { enable: true }
model_metrics { metric_control [ { metric_identifier { family: "nv_inference_request_duration" }
  histogram_options { buckets: [ 1, 10, 100 ] } } ] }
)";
  auto parsed = Parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  const auto ignored = IgnoredConfigFields(parsed->config);
  EXPECT_EQ(std::find(ignored.begin(), ignored.end(), "dynamic_batching"), ignored.end());
  EXPECT_EQ(std::find(ignored.begin(), ignored.end(), "response_cache"), ignored.end());
  EXPECT_EQ(std::find(ignored.begin(), ignored.end(), "model_warmup"), ignored.end());
  // (An onnxruntime config: its backend acts on optimization's graph level and accelerators.)
  for (const char* f :
       {"optimization.priority", "optimization.cuda", "model_metrics", "runtime", "metric_tags"})
    EXPECT_NE(std::find(ignored.begin(), ignored.end(), f), ignored.end()) << f;
  for (const char* f :
       {"optimization", "optimization.graph", "optimization.execution_accelerators"})
    EXPECT_EQ(std::find(ignored.begin(), ignored.end(), f), ignored.end()) << f;
  EXPECT_EQ(std::find(ignored.begin(), ignored.end(), "input"), ignored.end());
  for (const char* f : {"batch_input", "batch_output", "input[0].allow_ragged_batch"})
    EXPECT_EQ(std::find(ignored.begin(), ignored.end(), f), ignored.end()) << f;
  // The rate limiter acts on rate_limiter (with --rate-limit=execution_count).
  EXPECT_EQ(std::find(ignored.begin(), ignored.end(), "instance_group[0].rate_limiter"),
            ignored.end());
  for (const char* f : {"input[0].format", "instance_group[0].host_policy"})
    EXPECT_NE(std::find(ignored.begin(), ignored.end(), f), ignored.end()) << f;
  EXPECT_EQ(std::find(ignored.begin(), ignored.end(), "input[0].reshape"), ignored.end());

  // Sequence batching and ensembles too (they are a oneof with dynamic_batching).
  EXPECT_TRUE(Parse(R"(name: "s" sequence_batching { max_sequence_idle_microseconds: 5000000
    control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
    state [ { input_name: "I" output_name: "O" data_type: TYPE_FP32 dims: [ -1 ]
              initial_state: [ { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "z" } ] } ]
    oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2 ] } })")
                  .ok());
  EXPECT_TRUE(Parse(R"(name: "e" platform: "ensemble" ensemble_scheduling { step [
    { model_name: "a" model_version: -1 input_map { key: "x" value: "IN" } output_map { key: "y" value: "MID" } } ]
    max_inflight_requests: 16 })")
                  .ok());
}

TEST(ConfigTest, JsonPrintsInt64AsNumbersAndRoundTrips) {
  auto parsed = Parse(std::string(kGood) + "version_policy { specific { versions: [ 2 ] } }\n");
  ASSERT_TRUE(parsed.ok());
  const std::string json = ModelConfigToJson(parsed->config);
  EXPECT_NE(json.find("\"dims\":[16]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"versions\":[2]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"max_batch_size\":8"), std::string::npos) << json;
  auto back = ModelConfigFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->input(0).dims(0), 16);
}

TEST(VersionPolicyTest, LatestAllSpecific) {
  const std::vector<int64_t> on_disk = {1, 2, 5, 7};
  inference::ModelVersionPolicy latest;
  latest.mutable_latest()->set_num_versions(2);
  EXPECT_EQ(*SelectVersions(latest, on_disk, "m"), (std::vector<int64_t>{5, 7}));
  inference::ModelVersionPolicy all;
  all.mutable_all();
  EXPECT_EQ(*SelectVersions(all, on_disk, "m"), on_disk);
  inference::ModelVersionPolicy specific;
  specific.mutable_specific()->add_versions(2);
  EXPECT_EQ(*SelectVersions(specific, on_disk, "m"), (std::vector<int64_t>{2}));
  specific.mutable_specific()->add_versions(3);  // absent: left out, as Triton does
  EXPECT_EQ(*SelectVersions(specific, on_disk, "m"), (std::vector<int64_t>{2}));
  inference::ModelVersionPolicy absent;
  absent.mutable_specific()->add_versions(3);
  EXPECT_FALSE(SelectVersions(absent, on_disk, "m").ok());
  EXPECT_EQ(*SelectVersions(inference::ModelVersionPolicy(), on_disk, "m"),
            (std::vector<int64_t>{7}));
  EXPECT_FALSE(SelectVersions(latest, {}, "m").ok());
}

}  // namespace
}  // namespace nereid
