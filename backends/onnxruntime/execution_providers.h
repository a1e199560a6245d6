// Where an ONNX Runtime model runs (docs/placement.md): Triton's
// optimization.execution_accelerators (cpu_execution_accelerator "openvino";
// gpu_execution_accelerator "tensorrt" and "cuda") and Nereid's accelerator instance kind (an
// instance_group of KIND_MODEL whose device the config parameter "nereid.device" names,
// "openvino:NPU"), read and checked at load into the execution providers each kind of instance asks
// ONNX Runtime for, in order, before its CPU provider. No ORT call here: the backend appends them
// (onnxruntime_backend.cc).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/config_json.h"

namespace nereid::onnxruntime {

// One execution provider as ONNX Runtime's C API takes it: its provider name (as
// GetAvailableProviders lists it) and its options by ORT's own keys.
struct ProviderRequest {
  enum class Kind { kOpenVino, kTensorRt, kCuda };
  Kind kind = Kind::kOpenVino;
  std::string origin;  // what asked: "cpu_execution_accelerator 'openvino'", "nereid.device ..."
  std::vector<std::pair<std::string, std::string>> options;
  const char* ProviderName() const;  // "OpenVINOExecutionProvider", ...
  // "OpenVINO (device_type NPU, precision FP16)".
  std::string Describe() const;
  // The device an OpenVINO request targets ("CPU", "NPU", "GPU.0"), else "".
  std::string Device() const;
};

// What a model's config asks of placement.
struct Placement {
  std::vector<ProviderRequest> cpu;          // KIND_CPU instances: the cpu_execution_accelerators
  std::vector<ProviderRequest> gpu;          // KIND_GPU instances: the gpu ones, then CUDA
  std::vector<ProviderRequest> accelerator;  // KIND_MODEL instances: nereid.device's provider
  std::string device;                        // nereid.device as written ("openvino:NPU"), or ""
  // "nereid.accelerator_fallback": where a provider cannot serve (the library lacks it, its device
  // is absent, it refuses the model), "cpu" (the default) serves on ORT's CPU provider with a
  // logged reason and a metric; "refuse" fails the load instead.
  bool refuse = false;
};

// Reads the config's placement for model 'model' whose version directory is 'model_dir' (cache
// paths must lie inside it). Triton's errors for unknown accelerators and parameters.
backend::StatusOr<Placement> ReadPlacement(const std::string& model, const rapidjson::Value& config,
                                           const std::string& model_dir);

}  // namespace nereid::onnxruntime
