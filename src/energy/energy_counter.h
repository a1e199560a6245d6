// A hardware energy counter as joules: the raw value counts up in fixed units (NVML's millijoules,
// RAPL's microjoules) and may wrap (RAPL, at the zone's max_energy_range_uj) or start again from
// zero (a driver reload). The tracker turns each reading into the joules since the previous one.
#pragma once

#include <cstdint>
#include <optional>

namespace nereid::energy {

class CounterTracker {
 public:
  // 'range': the raw value at which the counter wraps to 0 (0: it does not wrap, a smaller reading
  // is a reset).
  CounterTracker(double joules_per_unit, uint64_t range)
      : joules_per_unit_(joules_per_unit), range_(range) {}

  // Joules since the previous reading (0 for the first one). A wrap counts the units up to the
  // range and past it; a reset counts the units since the reset (what ran between the last reading
  // and the reset is not known, and not invented).
  double Advance(uint64_t raw) {
    if (!last_) {
      last_ = raw;
      return 0;
    }
    uint64_t units = 0;
    if (raw >= *last_)
      units = raw - *last_;
    else if (range_ > 0 && *last_ <= range_)
      units = (range_ - *last_) + raw;
    else
      units = raw;
    last_ = raw;
    const double joules = static_cast<double>(units) * joules_per_unit_;
    total_ += joules;
    return joules;
  }
  double total() const { return total_; }

 private:
  double joules_per_unit_;
  uint64_t range_;
  std::optional<uint64_t> last_;
  double total_ = 0;
};

}  // namespace nereid::energy
