// Admission: Nereid's limits on a model's outstanding work (requests accepted and not yet
// answered, and their input bytes), beyond Triton's per-priority max_queue_size. A request over a
// limit is answered at once with RESOURCE_EXHAUSTED (HTTP 429 with Retry-After, gRPC
// RESOURCE_EXHAUSTED): the replica is full and the client, or its load balancer, should retry
// elsewhere or later, before queues grow and latency collapses. Configured per model through
// `parameters` (docs/scheduling.md):
//   nereid.max_queued_requests  requests accepted and not yet answered (0: no limit)
//   nereid.max_queued_bytes     their input bytes (0: no limit; one request is always admitted
//                               when nothing else is outstanding)
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "config/model_config.h"
#include "nereid/status.h"
#include "request/inference_request.h"

namespace nereid {

struct AdmissionLimits {
  uint64_t max_requests = 0;
  uint64_t max_bytes = 0;
  bool enabled() const { return max_requests > 0 || max_bytes > 0; }
};

// The limits a config declares; a malformed value names the model and the parameter.
StatusOr<AdmissionLimits> ReadAdmissionLimits(const inference::ModelConfig& config);

class Admission {
 public:
  explicit Admission(AdmissionLimits limits) : limits_(limits) {}

  // Admits 'request' or answers RESOURCE_EXHAUSTED. Admitted, the request holds its place until
  // its final response (its admission stage, request/response_path.h), or until it is refused
  // after all (ResponsePath::Unwind).
  Status Admit(InferenceRequest& request, const std::string& model);

  uint64_t requests() const { return counters_->requests.load(std::memory_order_relaxed); }
  uint64_t bytes() const { return counters_->bytes.load(std::memory_order_relaxed); }
  const AdmissionLimits& limits() const { return limits_; }

 private:
  struct Counters {
    std::atomic<uint64_t> requests{0};
    std::atomic<uint64_t> bytes{0};
  };
  AdmissionLimits limits_;
  // Shared with the admitted requests' callbacks, which may outlive the model and need only these.
  std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
};

}  // namespace nereid
