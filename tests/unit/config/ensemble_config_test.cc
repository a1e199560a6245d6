// Ensemble configs checked with Triton's messages (its QA's L0_model_config expected strings):
// the wiring on its own, then against the steps' models' configs.
#include "config/ensemble_config.h"

#include <gtest/gtest.h>

#include "config/config_validator.h"
#include "scheduler/ensemble_scheduler.h"

namespace nereid {
namespace {

inference::ModelConfig Config(const std::string& text, const std::string& name = "e") {
  auto parsed = ParseModelConfigText(text, name + "/config.pbtxt");
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  return parsed.ok() ? parsed->config : inference::ModelConfig();
}

// ModelConfigErrors on 'text' (model "e"), joined.
std::string Errors(const std::string& text) {
  auto parsed = ParseModelConfigText(text, "e/config.pbtxt");
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  FillConfigDefaults("e", &parsed->config);
  std::string all;
  for (const auto& e : ModelConfigErrors(parsed->config, "e", parsed->locator)) all += e + "\n";
  return all;
}

const std::string kHead = R"(name: "e" platform: "ensemble" max_batch_size: 4
input [ { name: "data" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "prob" data_type: TYPE_FP32 dims: [ 16 ] } ]
)";

std::string Step(const std::string& model, const std::string& in, const std::string& out,
                 const std::string& input = "INPUT0", const std::string& output = "OUTPUT0") {
  return "{ model_name: \"" + model + "\" input_map { key: \"" + input + "\" value: \"" + in +
         "\" } output_map { key: \"" + output + "\" value: \"" + out + "\" } }";
}

std::string Ensemble(const std::vector<std::string>& steps, const std::string& head = kHead) {
  std::string text = head + "ensemble_scheduling { step [ ";
  for (size_t i = 0; i < steps.size(); ++i) text += (i ? ", " : "") + steps[i];
  return text + " ] }\n";
}

TEST(EnsembleConfigTest, AWellWiredEnsembleHasNoErrorsAndNoDefaultInstanceGroup) {
  const std::string text = Ensemble({Step("m", "data", "t"), Step("m", "t", "prob")});
  EXPECT_EQ(Errors(text), "");
  auto config = Config(text);
  FillConfigDefaults("e", &config);
  EXPECT_EQ(config.instance_group_size(), 0);
  EXPECT_EQ(EnsembleDependencies(config), std::vector<std::string>{"m"});
}

TEST(EnsembleConfigTest, StructureErrorsCarryTritonsWordsAndTheLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {kHead + "backend: \"onnxruntime\"\nensemble_scheduling { step [ " +
           Step("m", "data", "prob") + " ] }",
       "Ensemble model 'e' must have platform type 'ensemble' and empty backend type"},
      {kHead, "ensemble scheduling must be set for ensemble e whose platform is ensemble"},
      {kHead + "ensemble_scheduling { }", "must specify 'step' for ensemble 'e'"},
      {Ensemble({"{ input_map { key: \"a\" value: \"data\" } }"}),
       "must specify 'model_name' in step 0 of ensemble 'e'"},
      {Ensemble({Step("m", "data", "prob"), "{ model_name: \"m\" }"}),
       "must specify 'input_map' in step 1 of ensemble 'e'"},
      {Ensemble({Step("m", "data", "t"), Step("m", "t", "t")}),
       "ensemble tensor 't' can appear in an output map only once for ensemble 'e'"},
      {Ensemble({Step("m", "other", "prob")}), "ensemble input 'data' for ensemble e' is not used"},
      {Ensemble({Step("m", "data", "t"), Step("m", "t", "u")}),
       "ensemble output 'prob' for ensemble e' is not used"},
      {Ensemble({Step("m", "data", "t"), Step("m", "t", "u"), Step("m", "prob", "prob", "I1")}),
       "output 'prob' for ensemble 'e' is not written"},
      {Ensemble({Step("m", "data", "t"), Step("m", "nowhere", "prob")}),
       "output 'prob' for ensemble 'e' is not written: at least one of its depending tensors, "
       "'nowhere', is not connected"},
      {Ensemble({Step("m", "data", "prob"), Step("m", "data", "spare")}),
       "ensemble tensor 'spare' is unused in ensemble 'e'"},
      {Ensemble({Step("m", "data", "prob")}) + "instance_group [ { kind: KIND_CPU } ]",
       "instance group should not be specified for ensemble 'e'"},
      {Ensemble({Step("m", "data", "prob")}) + "optimization { }",
       "optimization should not be specified for ensemble 'e'"},
      {Ensemble({Step("m", "data", "prob")}) +
           "model_warmup [ { name: \"w\" batch_size: 1 inputs { key: \"data\" value: { "
           "data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } } } ]",
       "model_warmup can not be specified for ensemble 'e'"},
  };
  for (const auto& [text, message] : cases) {
    const std::string errors = Errors(text);
    EXPECT_NE(errors.find(message), std::string::npos) << message << "\n got: " << errors;
    EXPECT_NE(errors.find("e/config.pbtxt"), std::string::npos) << errors;
  }
}

TEST(EnsembleConfigTest, StepsAreCheckedAgainstTheirModelsConfigs) {
  const auto model = Config(R"(name: "m" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ])",
                            "m");
  const auto small = Config(R"(name: "small" max_batch_size: 2
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ])",
                            "small");
  const auto ints = Config(R"(name: "ints" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ])",
                           "ints");
  const auto cube = Config(R"(name: "cube" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16, 16, 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16, 16, 16 ] } ])",
                           "cube");
  const auto flat = Config(R"(name: "flat" max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, 16 ] } ])",
                           "flat");
  const auto e = Config(Ensemble({Step("m", "data", "t"), Step("m", "t", "prob")}));
  EXPECT_TRUE(CheckEnsembleSteps(e, {&model, &model}).ok());
  auto message = [&](const inference::ModelConfig& ensemble,
                     std::vector<const inference::ModelConfig*> steps) {
    return CheckEnsembleSteps(ensemble, steps).message();
  };
  EXPECT_EQ(message(e, {&small, &model}),
            "ensemble e allows maximum batch size 4, but it contains model m which only allows "
            "maximum batch size to be 2");
  EXPECT_EQ(message(e, {&ints, &model}),
            "in ensemble e, ensemble tensor data: inconsistent data type: TYPE_FP32 is inferred "
            "from model e while TYPE_INT32 is inferred from model ints");
  EXPECT_EQ(message(e, {&model, &cube}),
            "in ensemble e, ensemble tensor t: inconsistent shape: [-1,16] is inferred from model "
            "m while [-1,16,16,16] is inferred from model cube");
  const auto unbatched = Config(Ensemble({Step("flat", "data", "t"), Step("flat", "t", "prob")},
                                         R"(name: "e" platform: "ensemble" max_batch_size: 0
input [ { name: "data" data_type: TYPE_FP32 dims: [ 2, 16 ] } ]
output [ { name: "prob" data_type: TYPE_FP32 dims: [ 2, 16 ] } ]
)"));
  EXPECT_TRUE(CheckEnsembleSteps(unbatched, {&flat, &flat}).ok());
  const auto bad_in = Config(Ensemble({Step("m", "data", "t", "IN9"), Step("m", "t", "prob")}));
  EXPECT_EQ(message(bad_in, {&model, &model}),
            "in ensemble e, ensemble tensor data is mapping to non-existing input IN9 in model m");
  const auto bad_out =
      Config(Ensemble({Step("m", "data", "t", "INPUT0", "OUT9"), Step("m", "t", "prob")}));
  EXPECT_EQ(message(bad_out, {&model, &model}),
            "in ensemble e, ensemble tensor t is mapped from non-existing output OUT9 in model m");
  const auto two_inputs = Config(R"(name: "two" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ])",
                                 "two");
  EXPECT_EQ(message(e, {&two_inputs, &model}),
            "in ensemble e, input INPUT1 in model m is not mapped to any ensemble tensors");
}

// Triton's shape rule between an ensemble tensor and the model reading it.
TEST(EnsembleReshapeTest, BatchDimensionOfOneAddedOrTakenWhereBatchingDiffers) {
  // Writer and reader agree: unchanged.
  EXPECT_EQ(EnsembleReshape({2, 16}, true, true, {16}), (std::vector<int64_t>{2, 16}));
  EXPECT_EQ(EnsembleReshape({16}, false, false, {16}), (std::vector<int64_t>{16}));
  // Non-batching writer, batching reader: a shape matching the reader's dims gets a batch of 1;
  // any other is taken as already batched.
  EXPECT_EQ(EnsembleReshape({16}, false, true, {-1}), (std::vector<int64_t>{1, 16}));
  EXPECT_EQ(EnsembleReshape({3, 16}, false, true, {16}), (std::vector<int64_t>{3, 16}));
  // Batching writer, non-batching reader: batch 1 is dropped unless the whole shape already fits.
  EXPECT_EQ(EnsembleReshape({1, 16}, true, false, {16}), (std::vector<int64_t>{16}));
  EXPECT_EQ(EnsembleReshape({1, 16}, true, false, {1, 16}), (std::vector<int64_t>{1, 16}));
  EXPECT_EQ(EnsembleReshape({2, 16}, true, false, {16}), (std::vector<int64_t>{2, 16}));
}

}  // namespace
}  // namespace nereid
