// The wiring of Triton's ensembles (platform "ensemble"): which step writes and which steps read
// each tensor of the config's data flow, the tensors one client request has reached, a step's
// request built from them, the client's response filled from them, and Triton's reshape between a
// batching and a non-batching side. The scheduler that runs requests through it is
// EnsembleScheduler (ensemble_scheduler.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "config/model_config.h"
#include "request/inference_request.h"

namespace nereid {

// An ensemble's steps and tensors as its config wires them: each tensor by index, the step that
// writes it and those that read it, and the ensemble's own inputs and outputs.
struct EnsembleWiring {
  struct Step {
    std::string model;
    int64_t version = -1;
    std::vector<std::pair<std::string, int>> inputs;   // model input -> tensor index
    std::vector<std::pair<std::string, int>> outputs;  // model output -> tensor index
    std::vector<int> reads;  // distinct tensors among 'inputs' (one may feed two model inputs)
  };
  std::vector<std::string> tensors;  // by index
  std::vector<Step> steps;
  std::vector<int> producer;                                // by tensor: the step writing it, or -1
  std::vector<std::vector<int>> readers;                    // by tensor: the steps reading it
  std::vector<std::pair<std::string, int>> inputs;          // ensemble input -> tensor
  std::map<std::string, int> outputs;                       // ensemble output -> tensor
  std::map<std::string, std::vector<int64_t>> output_dims;  // ensemble output -> config dims
  std::vector<char> is_output;                              // by tensor

  // From a config the repository has checked (ensemble_config.h).
  static EnsembleWiring Of(const inference::ModelConfig& config);
};

// An ensemble tensor of one request at one iteration: a view of a client's input or of a step's
// output buffer, kept alive by 'keep' (the client's payload, or the step's response). A step that
// left an output out writes a placeholder (data null), so that what reads it still runs.
struct EnsembleTensor {
  DataType datatype = DataType::kInvalid;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t byte_size = 0;
  MemoryLocation location;
  std::shared_ptr<const void> keep;
  bool present = false;
  bool from_batching = false;  // its writer batches: the client of a batching ensemble, or a step
};

// The values one client request has reached at one iteration, by tensor index (null: not yet).
using EnsembleValues = std::function<const EnsembleTensor*(int tensor)>;

// Step 'index''s request: the client's id, sequence, priority, timeout, parameters and trace (a
// child span), the step's present inputs borrowed from 'values' and the outputs 'needed' (by
// tensor) asks for. Its on_complete is the caller's.
std::unique_ptr<InferenceRequest> MakeStepRequest(const EnsembleWiring& wiring, int index,
                                                  const InferenceRequest& top,
                                                  const EnsembleValues& values,
                                                  const std::vector<char>& needed);

// The client's response from 'values': the requested outputs (reshaped, or copied into their
// shared-memory regions; one a step left out is left out), the sequence parameters every
// ensemble response carries, the model's name, version and the request's id ('batching': the
// ensemble has max_batch_size > 0).
Status FillEnsembleResponse(const EnsembleWiring& wiring, bool batching,
                            const InferenceRequest& request, const EnsembleValues& values,
                            InferenceResponse& response);

// Triton's shape rule between an ensemble tensor and its reader, where one batches and the other
// does not: a tensor from a non-batching writer that matches a batching reader's 'dims' gets a
// batch dimension of 1; a tensor of batch 1 from a batching writer that does not match a
// non-batching reader's 'dims' loses it. Any other shape passes as it is.
std::vector<int64_t> EnsembleReshape(const std::vector<int64_t>& shape, bool from_batching,
                                     bool reader_batches, const std::vector<int64_t>& dims);

}  // namespace nereid
