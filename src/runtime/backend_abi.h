// The server side of include/nereid/backend.h: what a NereidRequest handle is while a backend holds
// it, and the conversions between backend errors and Status.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "nereid/backend.h"
#include "request/infer_api.h"
#include "request/inference_request.h"
#include "runtime/execution_observer.h"

struct NereidError {
  NereidErrorCode code;
  std::string message;
};

namespace nereid {

class ModelInstance;
class ModelStats;

// One backend execution (a batch), reported to the instance's execution observers once: when its
// first request completes or when Execute returns, whichever comes first, so that no request is
// counted before the execution it ran in.
struct BatchExecution {
  const ModelInstance* instance = nullptr;
  int64_t rows = 0;
  size_t requests = 0;
  uint64_t start_ns = 0;
  std::atomic<uint64_t> device_busy_ns{0};  // NereidRequestSetDeviceTime (0: not reported)
  std::atomic<bool> recorded{false};
  std::atomic<uint64_t> end_ns{0};  // as Record saw it (0 before)
  void Record(uint64_t end_ns);
  ExecutionRecord AsRecord(uint64_t end_ns) const;
  // Guarded by the instance's mutex: requests of this batch not yet completed, whether Execute
  // has returned (from then on they count as the instance's released requests), and the
  // latencies of the requests that succeeded before it did (for the scheduler's summary).
  size_t outstanding = 0;
  bool returned = false;
  std::vector<uint64_t> latencies_ns;
};

// One request from NereidInstanceExecute until NereidRequestComplete: the request (inputs) and the
// response being built. Heap-allocated; NereidRequestComplete deletes it.
struct BackendRequest {
  std::unique_ptr<InferenceRequest> request;
  std::unique_ptr<InferenceResponse> response;
  ModelInstance* instance = nullptr;
  std::shared_ptr<BatchExecution> execution;
  uint64_t exec_start_ns = 0;
  uint64_t compute_start_ns = 0;  // reported by the backend; 0 when it did not
  uint64_t compute_end_ns = 0;
  bool final_sent = false;  // decoupled: NEREID_RESPONSE_FINAL went out

  NereidRequest* handle() { return reinterpret_cast<NereidRequest*>(this); }
  static BackendRequest* From(const NereidRequest* r) {
    return reinterpret_cast<BackendRequest*>(const_cast<NereidRequest*>(r));
  }
};

// Where a backend's request made without a caller (NereidInferRequestNew, ABI 2.2) goes: the
// link of the server started last (InferenceServer sets it; a request made on behalf of a model,
// NereidModelInferRequestNew, goes to that model's own server).
void SetDefaultInferLink(std::shared_ptr<InferApiLink> link);

// Converts a backend-owned error into a Status and frees it (NULL -> Ok).
Status StatusFromBackend(NereidError* error);
// A new error for the backend (NULL for Ok).
NereidError* ErrorFromStatus(const Status& status);

}  // namespace nereid
