// SchedulerFactory: makes a model's scheduler from its config's scheduling choice ("default",
// "dynamic"; the sequence batcher and the ensemble scheduler register under "sequence" and
// "ensemble"), so that a new scheduler is one Register call, never an edit of Model::Create.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "config/model_config.h"
#include "metrics/observers.h"
#include "request/infer_api.h"
#include "scheduler/energy_model.h"
#include "scheduler/scheduler.h"

namespace nereid {

// What a scheduler is made from: the model's final config, its instances (each driven by one
// thread of the scheduler), its statistics and the clock it batches by.
struct SchedulerContext {
  const inference::ModelConfig& config;
  std::vector<BatchExecutor*> instances;
  // Where the scheduler reports the requests that end in it (queue timeouts, an ensemble's
  // completion) and an ensemble its executions (the model's observers); null in config checks.
  RequestObserver* requests = nullptr;
  ExecutionObserver* executions = nullptr;
  const Clock* clock = &SteadyClock::Get();
  // The server's inference path, for a scheduler that sends requests of its own (an ensemble's
  // steps); null where the model has none (config checks).
  InferApiLink* infer = nullptr;
  // What the model's batches cost (the energy ledger's measurements); null without energy
  // accounting. Outlives the scheduler.
  const BatchEnergyModel* energy = nullptr;
  // The model's directory (files a scheduler reads: a sequence's initial_state data_file).
  std::string model_dir;
};

// The scheduling choice a config makes: "ensemble" for platform "ensemble", "sequence" with
// sequence_batching, "dynamic" with dynamic_batching, else "default".
std::string SchedulingChoice(const inference::ModelConfig& config);

class SchedulerFactory {
 public:
  using Maker = std::function<StatusOr<std::unique_ptr<Scheduler>>(SchedulerContext&)>;

  // The process's factory, with the built-in schedulers registered.
  static SchedulerFactory& Get();
  // Adds (or replaces) the scheduler made for 'choice'.
  void Register(const std::string& choice, Maker maker);
  // The scheduler for the context's config; UNSUPPORTED naming the choice when none is registered.
  StatusOr<std::unique_ptr<Scheduler>> Create(SchedulerContext& context) const;

 private:
  SchedulerFactory() = default;
  mutable std::mutex mu_;
  std::map<std::string, Maker> makers_;
};

}  // namespace nereid
