#include "runtime/inference_request.h"

#include <chrono>

#include "runtime/model.h"

namespace nereid {

uint64_t SteadyNowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

void CompleteWithError(std::unique_ptr<InferenceRequest> request, Status status) {
  auto response = std::make_unique<InferenceResponse>();
  response->status = std::move(status);
  response->model_name = request->model_name;
  response->model_version = request->model ? request->model->version() : request->model_version;
  response->id = request->id;
  ResponseCallback callback = std::move(request->on_complete);
  request.reset();
  if (callback) callback(std::move(response));
}

}  // namespace nereid
