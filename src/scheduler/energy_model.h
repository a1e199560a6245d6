// BatchEnergyModel: what a model version's batches cost in joules, as measured (the energy
// ledger's attribution of a meter's joules to batches). The energy-aware batching objective reads
// it to decide whether waiting for a larger batch saves energy. Thread-safe, lock-free reads.
#pragma once

#include <cstdint>

namespace nereid {

class BatchEnergyModel {
 public:
  virtual ~BatchEnergyModel() = default;
  // Joules per row of a batch of 'rows' rows: its active energy (above the floor) per row, from
  // the power fitted to the model version and the busy time measured for that size, plus the
  // floor's recent share per row (which no batching changes, but which sets how much a saving in
  // active energy is worth); < 0 while that size has not been measured.
  virtual double JoulesPerRow(int64_t rows) const = 0;
};

}  // namespace nereid
