// The energy ledger's Prometheus families (docs/energy.md): joules and inferences per model
// version and scope, joules per inference, the meters' own figures, carbon where an intensity is
// known, and the batches whose reports were lost.
#pragma once

#include <string>

#include "energy/energy_ledger.h"

namespace nereid::energy {

// The text exposition of 'ledger' ("" before any scope has a meter).
std::string EnergyPrometheusText(const EnergyLedger& ledger);

}  // namespace nereid::energy
