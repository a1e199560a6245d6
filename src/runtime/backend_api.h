// The server side of include/nereid/backend.h: what a NereidRequest handle is while a backend
// executes, and the conversion of backend errors to Status.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nereid/backend.h"
#include "runtime/inference_request.h"

struct NereidError {
  NereidErrorCode code;
  std::string message;
};

namespace nereid {

// One request during NereidInstanceExecute: the request (inputs) and the response being filled.
struct BackendRequest {
  InferenceRequest* request = nullptr;
  std::unique_ptr<InferenceResponse> response;
  Status error;
  NereidRequest* handle() { return reinterpret_cast<NereidRequest*>(this); }
};

}  // namespace nereid
