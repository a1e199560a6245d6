#include "repository/repository_poller.h"

#include <algorithm>
#include <filesystem>

#include "common/logging.h"
#include "repository/model_repository.h"

namespace nereid {
namespace fs = std::filesystem;

RepositoryPoller::RepositoryPoller(ModelRepository* repository, std::chrono::milliseconds period)
    : repository_(repository), period_(period) {}

RepositoryPoller::~RepositoryPoller() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  Reap(/*all=*/true);
}

std::map<std::string, uint64_t> RepositoryPoller::Snapshot() const {
  std::map<std::string, uint64_t> now;
  for (const std::string& name : repository_->ModelsOnDisk()) {
    auto dir = repository_->ModelDirectory(name);
    if (dir.ok()) now[name] = ModelStore::Fingerprint(*dir);
  }
  return now;
}

void RepositoryPoller::Start() {
  known_ = Snapshot();
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
      lock.unlock();
      Poll();
      lock.lock();
    }
  });
}

void RepositoryPoller::Poll() {
  Reap(/*all=*/false);
  std::map<std::string, uint64_t> now = Snapshot();
  std::vector<std::pair<std::string, bool>> todo;  // (model, present)
  for (const auto& [name, print] : now) {
    auto it = known_.find(name);
    if (it == known_.end() || it->second != print) todo.emplace_back(name, true);
  }
  for (const auto& [name, print] : known_)
    if (!now.count(name)) todo.emplace_back(name, false);
  std::map<std::string, uint64_t> next = now;
  for (const auto& [name, present] : todo) {
    {
      std::lock_guard lock(mu_);
      if (busy_.count(name)) {
        // Still loading from an earlier poll: look again next time.
        if (auto it = known_.find(name); it != known_.end())
          next[name] = it->second;
        else
          next.erase(name);
        continue;
      }
      busy_.insert(name);
    }
    Apply(name, present);
  }
  known_ = std::move(next);
}

void RepositoryPoller::Apply(const std::string& name, bool present) {
  auto done = std::make_shared<bool>(false);
  std::thread t([this, name, present, done] {
    LOG_INFO << "repository poll: " << (present ? "loading" : "unloading") << " '" << name << "'";
    const Status s = present ? repository_->Load(name, "") : repository_->Unload(name);
    if (!s.ok()) LOG_ERROR << "repository poll: " << s.message();
    std::lock_guard lock(mu_);
    busy_.erase(name);
    *done = true;
  });
  std::lock_guard lock(mu_);
  changes_.push_back({std::move(t), done});
}

void RepositoryPoller::Reap(bool all) {
  std::vector<Change> finished;
  {
    std::lock_guard lock(mu_);
    auto keep = std::partition(changes_.begin(), changes_.end(),
                               [&](const Change& c) { return !all && !*c.done; });
    std::move(keep, changes_.end(), std::back_inserter(finished));
    changes_.erase(keep, changes_.end());
  }
  for (Change& c : finished) c.thread.join();
}

}  // namespace nereid
