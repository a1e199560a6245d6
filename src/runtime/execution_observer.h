// ExecutionObserver: what sees every batch a ModelInstance executes (its device, when it ran, how
// many rows and requests). Model statistics are one observer (StatsObserver); energy attribution
// and tracing attach the same way, with no change to ModelInstance.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "metrics/model_stats.h"
#include "nereid/backend.h"
#include "scheduler/energy_model.h"

namespace nereid {

struct ExecutionRecord {
  const std::string* instance = nullptr;  // the instance's name (valid during OnExecution only)
  NereidInstanceKind kind = NEREID_INSTANCE_CPU;
  int32_t device = 0;
  uint64_t start_ns = 0;  // the backend's Execute call began (SteadyNowNs)
  uint64_t end_ns = 0;  // it returned, or the batch's first request completed, whichever came first
  int64_t rows = 0;     // the requests' batch sizes summed
  size_t requests = 0;
  uint64_t device_busy_ns = 0;  // the backend's device time for the batch; 0: not reported

  // How long the batch held its device: the backend's device time where it reported one shorter
  // than the host's interval (which also holds staging, launch and waiting on other work), else
  // that interval.
  uint64_t BusyNs() const {
    const uint64_t host = end_ns > start_ns ? end_ns - start_ns : 0;
    return device_busy_ns > 0 && device_busy_ns < host ? device_busy_ns : host;
  }
};

class ExecutionObserver {
 public:
  virtual ~ExecutionObserver() = default;
  // Once per executed batch, on whichever thread ends it first (the instance's, or a backend's
  // completing a request before Execute returned). Must not block.
  virtual void OnExecution(const ExecutionRecord& record) = 0;
};

// What a request that asked for its energy (the "nereid.energy" request parameter) is told with
// its response.
struct RequestEnergy {
  double joules = 0;         // its rows' share of the batch's active energy and of the floor's
  double carbon_grams = -1;  // < 0: no carbon intensity is known
  std::string_view source;   // "nvml", "rapl" or "estimate" (the observer's, lives as long)
  std::string_view scope;    // e.g. "gpu0", "cpu"
};

// An observer that also prices batches: the energy ledger's, one per model version. Its estimate
// for a request is a prediction from the ledger's fitted powers at the time the request completes
// (the meter's joules for that moment are attributed later, after the meter's next ticks).
class EnergyObserver : public ExecutionObserver, public BatchEnergyModel {
 public:
  // The energy of 'rows' rows of the batch 'record' describes.
  virtual RequestEnergy EstimateRequest(const ExecutionRecord& record, int64_t rows) const = 0;
};

// The statistics extension's execution count and per-batch-size compute times.
class StatsObserver : public ExecutionObserver {
 public:
  explicit StatsObserver(ModelStats* stats) : stats_(stats) {}
  void OnExecution(const ExecutionRecord& r) override {
    stats_->RecordExecution(r.rows, 0, r.end_ns - r.start_ns, 0);
  }

 private:
  ModelStats* stats_;
};

}  // namespace nereid
