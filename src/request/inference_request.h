// InferenceRequest and InferenceResponse: the protocol-neutral request that frontends build and the
// scheduler, instances and backends consume. A request is move-only and travels by unique_ptr; its
// response comes back through the request's completion callback, on the instance thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/data_type.h"
#include "common/status.h"
#include "memory/buffer.h"

namespace nereid {

class Model;
class ResponsePath;
namespace trace {
class Trace;
}

// One input tensor. 'data' points into the request's payload (zero copy from the wire), into a
// registered shared-memory region, or into 'owned' (data that had to be converted, e.g. from JSON,
// or realigned). Host-addressable data is aligned to the element size once the request is
// validated (Model::ValidateRequest realigns what is not).
struct InferInput {
  std::string name;
  DataType datatype = DataType::kInvalid;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t byte_size = 0;
  MemoryLocation location;
  std::shared_ptr<const void> owned;  // keeps converted data or a shared-memory region alive
  // An ensemble step's input (InferenceRequest::ensemble_step): whether what wrote it (the
  // ensemble's client, or a step's model) batches. The receiving model adds or strips a batch
  // dimension of 1 where the two differ (EnsembleReshape).
  bool from_batching = false;

  // Takes converted bytes (not counted as a copy: the caller produced them from another form).
  void Own(std::vector<uint8_t> bytes);
  // Points at memory someone else keeps alive ('keepalive' may be null for the payload).
  void Borrow(const uint8_t* bytes, size_t size, MemoryLocation where,
              std::shared_ptr<const void> keepalive) {
    data = bytes;
    byte_size = size;
    location = where;
    owned = std::move(keepalive);
  }
};

struct RequestedOutput {
  std::string name;
  bool binary = false;       // frontend hint: send as binary tensor data
  uint32_t class_count = 0;  // classification extension: top-k "score:index[:label]" strings
  // Shared-memory extension: the output is written here instead of the response body.
  Buffer destination;
  bool has_destination = false;
  // Whoever reads this output takes device memory (an ensemble step feeding another model, never
  // a client): a backend that prefers GPU memory for it gets GPU memory, and it stays there.
  bool device_ok = false;
};

// Whether 'byte_size' bytes of output 'name' fit the client's region of 'wanted' (Triton's
// message when they do not).
Status CheckOutputRegion(const RequestedOutput& wanted, const std::string& name, size_t byte_size);

struct InferOutput {
  std::string name;
  DataType datatype = DataType::kInvalid;
  std::vector<int64_t> shape;
  Buffer buffer;  // raw little-endian elements; BYTES are length-prefixed
  bool binary = false;
  bool in_shared_memory = false;  // written into the client's region: not sent in the body
  // A client region the backend did not write itself (a CUDA region and a backend writing host
  // memory, or a region overlapping one of the request's inputs): 'buffer' is copied there when
  // the response is finished.
  Buffer destination;

  const uint8_t* bytes() const { return buffer.data(); }
  size_t byte_size() const { return buffer.size(); }
  // Replaces the data by 'bytes' (heap, owned by the output).
  void SetBytes(std::vector<uint8_t> bytes);
};

// A KServe request or response parameter.
struct RequestParameter {
  enum class Type { kBool, kInt64, kDouble, kString };
  std::string name;
  Type type = Type::kString;
  bool bool_value = false;
  int64_t int_value = 0;
  double double_value = 0;
  std::string string_value;
};

struct InferenceResponse {
  Status status;
  std::string model_name;
  int64_t model_version = 0;
  std::string id;
  std::vector<InferOutput> outputs;
  // Decoupled models send several responses per request; the last one says final. A final
  // response may be empty (only the flag): 'empty_final'.
  bool final = true;
  bool empty_final = false;
  // An ensemble step's response: whether its model batches (what its outputs' shapes lead with).
  bool model_batches = false;
  // Parameters the server adds to the response (the energy of a request that asked for it).
  std::vector<RequestParameter> parameters;
};

// Called once per response: once for ordinary models, one or more times (the last with 'final') for
// decoupled ones, from whichever thread completes the request.
using ResponseCallback = std::function<void(std::unique_ptr<InferenceResponse>)>;

// The sequence a request belongs to (Triton's correlation id, the sequence_id parameter): a number
// or a string. Absent when the request names no sequence.
struct CorrelationId {
  bool present = false;
  bool is_text = false;
  uint64_t number = 0;
  std::string text;
};

// Shared between a request and the frontend that sent it: set when the client cancels or leaves,
// or answered by 'probe' (a frontend's own check, e.g. the gRPC call's IsCancelled).
struct CancelFlag {
  std::atomic<bool> cancelled{false};
  std::function<bool()> probe;
  bool IsSet() const { return cancelled.load(std::memory_order_relaxed) || (probe && probe()); }
};

// Timestamps in steady-clock nanoseconds, filled as the request moves; statistics read them.
struct RequestTimestamps {
  uint64_t received_ns = 0;
  uint64_t queued_ns = 0;
  uint64_t compute_start_ns = 0;
  uint64_t compute_end_ns = 0;
  // What the backend reported (its inputs staged, its outputs begun): tracing's
  // COMPUTE_INPUT_END and COMPUTE_OUTPUT_START (0: not reported).
  uint64_t compute_input_end_ns = 0;
  uint64_t compute_output_start_ns = 0;
};

struct InferenceRequest {
  InferenceRequest() = default;
  // A traced request that ends without reaching an instance's completion (refused, failed in a
  // queue) records its model timestamps here.
  ~InferenceRequest();
  InferenceRequest(const InferenceRequest&) = delete;
  InferenceRequest& operator=(const InferenceRequest&) = delete;
  InferenceRequest(InferenceRequest&&) = default;
  InferenceRequest& operator=(InferenceRequest&&) = default;

  std::string model_name;
  int64_t model_version = -1;  // -1: the newest ready version
  std::string id;
  std::vector<InferInput> inputs;
  std::vector<RequestedOutput> outputs;    // empty: every output of the model
  bool binary_outputs_by_default = false;  // for outputs filled in because none were named
  // Schedule policy extension: 0 means the model's default priority level / timeout.
  uint64_t priority = 0;
  uint64_t timeout_us = 0;
  // Its caller stops waiting then (a BLS timeout): not started by then, it fails (0: never).
  uint64_t deadline_ns = 0;
  // The client's parameters for the backend: every one but those the server acts on itself
  // (sequence_id, sequence_start, sequence_end, priority, timeout, binary_data_output, triton_*).
  std::vector<RequestParameter> parameters;
  uint32_t flags = 0;  // NEREID_REQUEST_FLAG_SEQUENCE_START / _END
  CorrelationId correlation_id;
  bool report_energy = false;  // the "nereid.energy" parameter: the response carries its energy
  bool ensemble_step = false;  // sent by an ensemble: its response says whether the model batches
  // A row the sequence batcher adds to fill a batch (READY false): executed, never answered or
  // counted as an inference.
  bool padding = false;
  std::shared_ptr<CancelFlag> cancel;  // null: cannot be cancelled
  // Keeps the wire buffer that input 'data' pointers refer to alive until the request completes.
  std::shared_ptr<const void> payload;
  RequestTimestamps times;
  // Sampled for tracing (trace/trace.h): null for most requests.
  std::shared_ptr<trace::Trace> trace;
  // Where its responses go: whoever asked sets it (the sink); once a stage is declared on the
  // request's response path (request/response_path.h) it enters that path, which ends in the sink.
  ResponseCallback on_complete;
  std::shared_ptr<ResponsePath> path;  // null until a stage is declared
  // Set by the core once the request is routed.
  std::shared_ptr<Model> model;
  int64_t batch_size = 1;

  bool cancelled() const { return cancel && cancel->IsSet(); }
  const InferInput* FindInput(const std::string& input_name) const {
    for (const auto& in : inputs)
      if (in.name == input_name) return &in;
    return nullptr;
  }
};

// Records a traced request's model timestamps (REQUEST_START ... REQUEST_END, now) on its trace,
// once; a no-op for untraced requests.
void EndTrace(const InferenceRequest& request);

// The error response to 'request' (its model, version and id).
std::unique_ptr<InferenceResponse> ErrorResponse(const InferenceRequest& request, Status status);
// Completes 'request' with an error response (any thread).
void CompleteWithError(std::unique_ptr<InferenceRequest> request, Status status);

uint64_t SteadyNowNs();
// Milliseconds since the Unix epoch (the statistics extension's last_inference).
uint64_t UnixNowMs();

}  // namespace nereid
