// BatchEnergyModel: what a model version's batches cost in joules, as measured (the energy
// ledger's attribution of a meter's joules to batches). The energy-aware batching objective reads
// it to decide whether waiting for a larger batch saves energy. Thread-safe, lock-free reads.
#pragma once

#include <cstdint>

namespace nereid {

class BatchEnergyModel {
 public:
  virtual ~BatchEnergyModel() = default;
  // Active joules per row (idle apart) of a batch of 'rows' rows, from what the model version's
  // recent batches were attributed; < 0 while too few batch sizes have been measured to tell.
  virtual double ActiveJoulesPerRow(int64_t rows) const = 0;
};

}  // namespace nereid
