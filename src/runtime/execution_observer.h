// The energy ledger's observer as the runtime sees it: it sees every batch (ExecutionObserver,
// metrics/observers.h), prices the final response of a request that asked for its energy
// (RequestObserver) and is the energy model the scheduler's energy objective reads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "metrics/observers.h"
#include "nereid/backend.h"
#include "scheduler/energy_model.h"

namespace nereid {

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
class EnergyObserver : public ExecutionObserver, public RequestObserver, public BatchEnergyModel {
 public:
  // The energy of 'rows' rows of the batch 'record' describes.
  virtual RequestEnergy EstimateRequest(const ExecutionRecord& record, int64_t rows) const = 0;
};

}  // namespace nereid
