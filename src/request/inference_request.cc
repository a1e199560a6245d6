#include "request/inference_request.h"

#include <chrono>

#include "trace/trace.h"

namespace nereid {

void InferInput::Own(std::vector<uint8_t> bytes) {
  auto storage = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  data = storage->data();
  byte_size = storage->size();
  location = MemoryLocation{};
  owned = std::move(storage);
}

void InferOutput::SetBytes(std::vector<uint8_t> bytes) {
  auto storage = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  buffer = Buffer(storage->data(), storage->size(), MemoryLocation{}, storage);
  in_shared_memory = false;
}

uint64_t SteadyNowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

uint64_t UnixNowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

Status CheckOutputRegion(const RequestedOutput& wanted, const std::string& name, size_t byte_size) {
  if (byte_size <= wanted.destination.size()) return Status::Ok();
  return InvalidArgument("shared memory size specified with the request for output '" + name +
                         "' (" + std::to_string(wanted.destination.size()) +
                         " bytes) should be at least " + std::to_string(byte_size) +
                         " bytes to hold the results");
}

InferenceRequest::~InferenceRequest() { EndTrace(*this); }

void EndTrace(const InferenceRequest& r) {
  if (!r.trace) return;
  const RequestTimestamps& t = r.times;
  r.trace->EndRequest(t.received_ns, t.queued_ns, t.compute_start_ns, t.compute_input_end_ns,
                      t.compute_output_start_ns, t.compute_end_ns, SteadyNowNs());
}

std::unique_ptr<InferenceResponse> ErrorResponse(const InferenceRequest& request, Status status) {
  auto response = std::make_unique<InferenceResponse>();
  response->status = std::move(status);
  response->model_name = request.model_name;
  response->model_version = request.model_version;  // the routed version once routed
  response->id = request.id;
  return response;
}

void CompleteWithError(std::unique_ptr<InferenceRequest> request, Status status) {
  std::unique_ptr<InferenceResponse> response = ErrorResponse(*request, std::move(status));
  ResponseCallback callback = std::move(request->on_complete);
  request.reset();
  if (callback) callback(std::move(response));
}

}  // namespace nereid
