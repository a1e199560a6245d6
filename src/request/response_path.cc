#include "request/response_path.h"

#include <utility>

namespace nereid {

ResponsePath& ResponsePath::Of(InferenceRequest& request) {
  if (!request.path) {
    auto path = std::make_shared<ResponsePath>();
    path->sink_ = std::move(request.on_complete);
    // The callback owns the path too: it may be moved out of a request that then goes
    // (CompleteWithError) before it runs.
    request.on_complete = [path](std::unique_ptr<InferenceResponse> response) {
      path->Run(0, std::move(response));
    };
    request.path = std::move(path);
  }
  return *request.path;
}

void ResponsePath::Set(ResponseStage stage, Stage run, std::function<void()> refused) {
  const size_t i = static_cast<size_t>(stage);
  if (i >= stages_.size()) return;  // the sink is the request's own callback
  stages_[i] = std::move(run);
  refused_[i] = stages_[i] ? std::move(refused) : nullptr;
}

ResponseCallback ResponsePath::After(ResponseStage stage) {
  return [path = shared_from_this(), next = static_cast<size_t>(stage) + 1](
             std::unique_ptr<InferenceResponse> response) { path->Run(next, std::move(response)); };
}

void ResponsePath::Unwind(InferenceRequest& request) {
  std::shared_ptr<ResponsePath> path = std::move(request.path);
  if (!path) return;
  for (auto& refused : path->refused_)
    if (refused) std::exchange(refused, nullptr)();
  request.on_complete = std::move(path->sink_);
}

void ResponsePath::Run(size_t from, std::unique_ptr<InferenceResponse> response) {
  for (size_t i = from; i < stages_.size(); ++i) {
    if (!stages_[i]) continue;
    stages_[i](response, *this);
    if (!response) return;  // held by the stage, to go on later
  }
  if (sink_) sink_(std::move(response));
}

}  // namespace nereid
