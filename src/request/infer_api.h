// InferApi: the server's inference path as the layers below it see it. A backend's own requests
// (Triton's BLS) and an ensemble's steps go through it and take a client's path: routing,
// validation, scheduling, statistics. InferenceServer implements it; the repository hands each
// model the link to the server that serves it (Services::infer_link; no process-wide handler).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>

#include "common/status.h"
#include "request/inference_request.h"

namespace nereid {

class InferApi {
 public:
  virtual ~InferApi() = default;
  // Routes 'request' by its model_name and model_version and enqueues it; its responses come
  // through request->on_complete. On error the caller still owns the request.
  virtual Status Submit(std::unique_ptr<InferenceRequest>& request) = 0;
};

// Where the models of one repository reach their server: set while a server serves them (a model
// loads before the server starts, and its backend may still call while the server stops), and
// shared by the models, so that none holds a server that has gone.
class InferApiLink {
 public:
  // Points the link at 'api'; with null, returns once the submissions under way have returned.
  void Set(InferApi* api) {
    std::unique_lock<std::mutex> lock(mu_);
    api_ = api;
    if (api == nullptr) idle_.wait(lock, [&] { return active_ == 0; });
  }
  Status Submit(std::unique_ptr<InferenceRequest>& request) {
    InferApi* api = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (api_ == nullptr) return Unavailable("the server is not serving requests");
      api = api_;
      ++active_;
    }
    // Not under the lock: a request that completes at once may have its callback submit another.
    Status s = api->Submit(request);
    std::lock_guard<std::mutex> lock(mu_);
    if (--active_ == 0) idle_.notify_all();
    return s;
  }

 private:
  std::mutex mu_;
  std::condition_variable idle_;
  InferApi* api_ = nullptr;
  int active_ = 0;
};

}  // namespace nereid
