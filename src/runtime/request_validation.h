// A request checked against its model's config as it enters the model (the request pipeline's
// first step): input names, datatypes, shapes and their batch dimension, byte sizes and BYTES
// element counts, the outputs asked for (all of them when none is named), with Triton's messages.
// And an ensemble step's inputs fitted to the receiving model's batching.
#pragma once

#include "common/status.h"
#include "config/model_config.h"
#include "request/inference_request.h"

namespace nereid {

// Validates 'request' against model 'model_name''s 'config': sets its batch size and, when it names
// no output, every output of the model; realigns an input the wire left misaligned.
Status ValidateRequest(const inference::ModelConfig& config, const std::string& model_name,
                       InferenceRequest& request);

// An ensemble's step request: its inputs' shapes fitted to the model's batching (Triton's rule,
// EnsembleReshape).
void FitEnsembleStep(const inference::ModelConfig& config, InferenceRequest& request);

}  // namespace nereid
