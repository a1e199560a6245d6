// Checks a ModelConfig the way Triton does before a model loads, with errors that name the model,
// the file and line, and the field. Also fills Triton's defaults (instance groups, version policy).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "config/model_config.h"

namespace nereid {

// Fills defaults that Triton fills: name from the directory, version policy latest(1), one CPU
// KIND_AUTO instance group when none is given (ResolveInstanceGroups places it), count 1 where
// count is 0.
void FillConfigDefaults(const std::string& model_name, inference::ModelConfig* config);

// What instance_group placement depends on besides the config.
struct GpuAvailability {
  int count = 0;                   // GPUs this server sees
  std::string unavailable_reason;  // why there are none
  bool backend_supports_gpu = false;
  std::string backend;  // the backend's name, for messages
  // The backend takes explicit KIND_GPU groups though it does not run on GPUs (it falls back,
  // logged): they are placed on the GPUs as asked, KIND_AUTO still on the CPU.
  bool backend_gpu_fallback = false;
};

// Resolves each instance group's kind as Triton does: KIND_AUTO becomes KIND_GPU when GPUs are
// available and the backend runs on them, else KIND_CPU; a KIND_GPU group without 'gpus' gets every
// GPU. Fails (file:line, field) for KIND_GPU without GPUs or GPU support, and for GPU ids that do
// not exist.
Status ResolveInstanceGroups(const std::string& model_name, const GpuAvailability& gpus,
                             const ConfigLocator& locator, inference::ModelConfig* config);

// kAsWritten: the config before any model file is opened (a backend may still auto-complete
// inputs, outputs and max_batch_size); kFinal: the config the model will run with.
enum class ConfigStage { kAsWritten, kFinal };

// Instances of one group run a thread each: more than this is a typo or an attack.
constexpr int32_t kMaxInstancesPerGroup = 1024;

// Every problem of a (defaulted) config, each naming the model, file:line and field ('locator'
// maps fields back to config.pbtxt lines); empty when the config is valid. Triton's rules, then
// what Nereid cannot serve yet (decoupled, batch inputs/outputs, sequence controls and state).
std::vector<std::string> ModelConfigErrors(const inference::ModelConfig& config,
                                           const std::string& model_name,
                                           const ConfigLocator& locator,
                                           ConfigStage stage = ConfigStage::kFinal);

// 'errors' (as ModelConfigErrors returns them) as one InvalidArgument status, joined by "; ";
// Ok when there are none.
// Triton's refusal of a response cache on a decoupled model (an ensemble becomes decoupled when a
// step is).
std::string DecoupledCacheError(const std::string& model_name);

Status ConfigErrorsStatus(const std::vector<std::string>& errors);

// ModelConfigErrors as one status (ConfigErrorsStatus).
Status ValidateModelConfig(const inference::ModelConfig& config, const std::string& model_name,
                           const ConfigLocator& locator, ConfigStage stage = ConfigStage::kFinal);

}  // namespace nereid
