// ModelInstance: one execution instance of a model (instance_group count N gives N of them), bound
// to a device and driven by exactly one scheduler thread. It turns a batch of requests into one
// backend call and completes every request afterwards.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nereid/backend.h"
#include "runtime/inference_request.h"
#include "scheduler/scheduler.h"

namespace nereid {

class Model;

class ModelInstance : public BatchExecutor {
 public:
  ModelInstance(Model* model, std::string name, NereidInstanceKind kind, int32_t device_id)
      : model_(model), name_(std::move(name)), kind_(kind), device_id_(device_id) {}

  Status Initialize();
  void Finalize();
  // Executes the batch and completes every request in it (success or error).
  ExecutionSummary Execute(std::vector<std::unique_ptr<InferenceRequest>>& batch) override;

  Model* model() const { return model_; }
  const std::string& name() const { return name_; }
  NereidInstanceKind kind() const { return kind_; }
  int32_t device_id() const { return device_id_; }
  void* state = nullptr;  // backend-owned

 private:
  Model* model_;
  std::string name_;
  NereidInstanceKind kind_;
  int32_t device_id_;
  bool initialized_ = false;
};

}  // namespace nereid
