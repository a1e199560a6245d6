#include "server/inference_server.h"

#include "common/logging.h"
#include "runtime/model.h"

namespace nereid {

InferenceServer::InferenceServer(ModelRepository* repository)
    : repository_(repository), control_thread_([this] { ControlLoop(); }) {}

InferenceServer::~InferenceServer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  control_thread_.join();
}

StatusOr<std::shared_ptr<Model>> InferenceServer::GetModel(const std::string& name,
                                                           int64_t version) const {
  return repository_->GetModel(name, version);
}

Status InferenceServer::Infer(std::unique_ptr<InferenceRequest>& request) {
  std::shared_ptr<Model> model = request->model;
  if (!model) return Internal("request was not routed to a model");
  return model->Enqueue(request);
}

void InferenceServer::RunControl(std::function<Status()> task,
                                 std::function<void(Status)> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    control_.push_back([task = std::move(task), done = std::move(done)] {
      Status s;
      try {
        s = task();
      } catch (const std::exception& e) {
        s = Internal(std::string("repository control failed: ") + e.what());
      }
      done(std::move(s));
    });
  }
  cv_.notify_one();
}

Status InferenceServer::LoadModel(const std::string& name, const std::string& config_json) {
  return repository_->Load(name, config_json);
}

Status InferenceServer::UnloadModel(const std::string& name) { return repository_->Unload(name); }

void InferenceServer::ControlLoop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !control_.empty(); });
      if (control_.empty()) return;
      task = std::move(control_.front());
      control_.pop_front();
    }
    try {
      task();
    } catch (...) {
      LOG_ERROR << "a repository control task threw";
    }
  }
}

}  // namespace nereid
