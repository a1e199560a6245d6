// Model warmup (config `model_warmup`), as Triton runs it: every sample on every instance, before
// the model is READY, straight to the instance (no scheduler). A sample of batch_size N is N
// batch-1 requests in one execution, run `count` times (0: once; batch_size 0 skips the sample);
// its inputs are zeros, random bytes (zeros for STRING) or a file from '<model>/warmup/'. A sample
// that fails fails the load with Triton's message. Bounded: batch_size at most max_batch_size (64
// for a model that does not batch), 2^20 requests per instance in all; an aborted load (past its
// timeout, or at shutdown) stops between iterations.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "common/status.h"
#include "config/model_config.h"

namespace nereid {

class Model;
class ModelInstance;

// The samples' input tensors, checked and read once (file sizes, variable dimensions).
struct WarmupInput {
  std::string name;
  DataType datatype = DataType::kInvalid;
  std::vector<int64_t> shape;  // with the batch dimension (1) when the model batches
  std::shared_ptr<std::vector<uint8_t>> bytes;
};
struct WarmupSample {
  std::string name;
  uint32_t batch_size = 0;
  uint32_t count = 1;
  std::vector<WarmupInput> inputs;
};
StatusOr<std::vector<WarmupSample>> ReadWarmupSamples(const inference::ModelConfig& config,
                                                      const std::filesystem::path& model_dir);

// Runs the sample once on 'instance' (its batch_size requests in one execution); the first
// request's error, if any. A request's batch size is its inputs' first dimension when the model
// batches.
Status RunSampleOnce(const std::shared_ptr<Model>& model, const WarmupSample& sample,
                     ModelInstance* instance);
// Runs every sample on every instance; the first failure is returned (INVALID_ARGUMENT:
// "failed to run warmup sample 'S': <error>; ").
Status RunWarmup(const std::shared_ptr<Model>& model, const std::vector<WarmupSample>& samples,
                 const std::vector<ModelInstance*>& instances);

}  // namespace nereid
