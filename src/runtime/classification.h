// The classification extension, a stage of the response path (runtime/request_pipeline.cc), for
// every protocol: a numeric output the client asked to classify becomes its top-k entries as BYTES
// strings "score:index" or "score:index:label" (labels from the output's label_filename), per batch
// row when the model batches. The core (runtime, backends) never formats these.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "request/inference_request.h"

namespace nereid {

class Model;

// The outputs a request wants classified, and how many classes each.
using ClassificationRequest = std::vector<std::pair<std::string, uint32_t>>;
ClassificationRequest ClassificationOf(const std::vector<RequestedOutput>& outputs);

// Rewrites the named outputs of 'response' (no-op for an empty request or an error response).
void ApplyClassification(const ClassificationRequest& wanted, const Model& model,
                         InferenceResponse& response);

}  // namespace nereid
