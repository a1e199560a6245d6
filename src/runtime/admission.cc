#include "runtime/admission.h"

#include "config/model_parameters.h"
#include "request/response_path.h"

namespace nereid {

constexpr uint64_t kMaxLimit = uint64_t{1} << 62;

StatusOr<AdmissionLimits> ReadAdmissionLimits(const inference::ModelConfig& config) {
  AdmissionLimits limits;
  RETURN_IF_ERROR(
      WholeNumberParameter(config, "nereid.max_queued_requests", kMaxLimit, &limits.max_requests));
  RETURN_IF_ERROR(
      WholeNumberParameter(config, "nereid.max_queued_bytes", kMaxLimit, &limits.max_bytes));
  return limits;
}

Status Admission::Admit(InferenceRequest& request, const std::string& model) {
  uint64_t bytes = 0;
  for (const auto& input : request.inputs)
    bytes += input.byte_size;  // each bounded by the frontend
  const uint64_t requests = counters_->requests.fetch_add(1, std::memory_order_relaxed) + 1;
  const uint64_t total = counters_->bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  const bool over_requests = limits_.max_requests > 0 && requests > limits_.max_requests;
  const bool over_bytes = limits_.max_bytes > 0 && total > limits_.max_bytes && requests > 1;
  if (over_requests || over_bytes) {
    counters_->requests.fetch_sub(1, std::memory_order_relaxed);
    counters_->bytes.fetch_sub(bytes, std::memory_order_relaxed);
    return ResourceExhausted(
        "model '" + model + "' is at its limit of " +
        (over_requests ? std::to_string(limits_.max_requests) + " outstanding requests"
                       : std::to_string(limits_.max_bytes) + " outstanding input bytes") +
        " (nereid.max_queued_" + (over_requests ? "requests" : "bytes") + "); retry later");
  }
  // Released once: by the final response, or by the unwinding of a request refused later.
  auto release = [counters = counters_, bytes,
                  released = std::make_shared<std::atomic<bool>>(false)] {
    if (released->exchange(true)) return;
    counters->requests.fetch_sub(1, std::memory_order_relaxed);
    counters->bytes.fetch_sub(bytes, std::memory_order_relaxed);
  };
  ResponsePath::Of(request).Set(
      ResponseStage::kAdmission,
      [release](std::unique_ptr<InferenceResponse>& response, ResponsePath&) {
        if (response->final) release();
      },
      release);
  return Status::Ok();
}

}  // namespace nereid
