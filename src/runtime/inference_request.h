// InferenceRequest and InferenceResponse: the protocol-neutral request that frontends build and the
// scheduler, instances and backends consume. A request is move-only and travels by unique_ptr; its
// response comes back through the request's completion callback, on the instance thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/data_type.h"
#include "common/status.h"

namespace nereid {

class Model;

// One input tensor. 'data' points either into the request's payload (zero copy from the wire) or
// into 'owned' (data that had to be converted, e.g. from JSON).
struct InferInput {
  std::string name;
  DataType datatype = DataType::kInvalid;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t byte_size = 0;
  std::vector<uint8_t> owned;

  void Own(std::vector<uint8_t> bytes) {
    owned = std::move(bytes);
    data = owned.data();
    byte_size = owned.size();
  }
};

struct RequestedOutput {
  std::string name;
  bool binary = false;       // frontend hint: send as binary tensor data
  uint32_t class_count = 0;  // classification extension: top-k "score:index[:label]" strings
};

struct InferOutput {
  std::string name;
  DataType datatype = DataType::kInvalid;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // raw little-endian elements; BYTES are length-prefixed
  bool binary = false;
};

struct InferenceResponse {
  Status status;
  std::string model_name;
  int64_t model_version = 0;
  std::string id;
  std::vector<InferOutput> outputs;
};

using ResponseCallback = std::function<void(std::unique_ptr<InferenceResponse>)>;

// Timestamps in steady-clock nanoseconds, filled as the request moves; statistics read them.
struct RequestTimestamps {
  uint64_t received_ns = 0;
  uint64_t queued_ns = 0;
  uint64_t compute_start_ns = 0;
  uint64_t compute_end_ns = 0;
};

struct InferenceRequest {
  std::string model_name;
  int64_t model_version = -1;  // -1: the newest ready version
  std::string id;
  std::vector<InferInput> inputs;
  std::vector<RequestedOutput> outputs;    // empty: every output of the model
  bool binary_outputs_by_default = false;  // for outputs filled in because none were named
  // Schedule policy extension: 0 means the model's default priority level / timeout.
  uint64_t priority = 0;
  uint64_t timeout_us = 0;
  // Keeps the wire buffer that input 'data' pointers refer to alive until the request completes.
  std::shared_ptr<const void> payload;
  RequestTimestamps times;
  ResponseCallback on_complete;
  // Set by the core once the request is routed.
  std::shared_ptr<Model> model;
  int64_t batch_size = 1;

  const InferInput* FindInput(const std::string& input_name) const {
    for (const auto& in : inputs)
      if (in.name == input_name) return &in;
    return nullptr;
  }
};

// Completes 'request' with an error response (any thread).
void CompleteWithError(std::unique_ptr<InferenceRequest> request, Status status);

uint64_t SteadyNowNs();

}  // namespace nereid
