// RepositoryPoller: Triton's poll mode (`--model-control-mode=poll`, `--repository-poll-secs`).
// Every period it fingerprints each model directory of the repository (every file's relative
// path, size and modification time) and loads the models that appeared, unloads the ones that
// went and reloads the ones that changed. A reload that fails keeps the versions that were
// serving (ModelRepository::Load's rule); each load runs on its own thread, so one that hangs
// delays only itself (bounded by the load timeout) and never the next poll.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace nereid {

class ModelRepository;

class RepositoryPoller {
 public:
  RepositoryPoller(ModelRepository* repository, std::chrono::milliseconds period);
  ~RepositoryPoller();  // stops polling; waits for the loads it started
  RepositoryPoller(const RepositoryPoller&) = delete;
  RepositoryPoller& operator=(const RepositoryPoller&) = delete;

  // Takes the repository as it is now as the starting point (the models loaded at start-up), then
  // polls every period until destruction.
  void Start();
  // One poll (tests): the changes since the previous one, their loads started.
  void Poll();

 private:
  std::map<std::string, uint64_t> Snapshot() const;
  void Apply(const std::string& name, bool present);
  void Reap(bool all);

  ModelRepository* repository_;
  const std::chrono::milliseconds period_;
  std::map<std::string, uint64_t> known_;  // the poll thread's (or Poll's caller's)
  struct Change {
    std::thread thread;
    std::shared_ptr<bool> done;  // set under mu_
  };
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::set<std::string> busy_;  // models with a load or unload in flight
  std::vector<Change> changes_;
  std::thread thread_;
};

}  // namespace nereid
