// Carbon intensity: grams of CO2e per kWh drawn from the grid, from a flag or from a file of
// time-stamped intensities (a grid operator's or Electricity Maps' export), and the data centre's
// PUE. grams CO2e = joules / 3.6e6 x intensity x PUE, integrated tick by tick so that an intensity
// that changes over the day weighs each tick's energy at its own time.
#pragma once

#include <cstdint>
#include <ctime>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace nereid::energy {

// Seconds since the Unix epoch: the clock intensities are stamped in.
double WallSeconds();

class CarbonIntensity {
 public:
  // 'fixed_g_per_kwh' < 0: none (then 'file' must give it); 'file' empty: the fixed value only.
  CarbonIntensity(double fixed_g_per_kwh, std::string file, double pue);

  // Whether any intensity is known (no carbon figures otherwise).
  bool known() const;
  // Whether one was asked for (a value, or a file that may become readable later).
  bool configured() const { return fixed_ >= 0 || !file_.empty(); }
  // Grams CO2e for 'joules' drawn at Unix time 'at' (seconds).
  double Grams(double joules, double at) const;
  // Grams CO2e per joule drawn at 'at' (intensity x PUE / 3.6e6), or -1 where none is known.
  double GramsPerJoule(double at) const;
  // Re-reads the file when its modification time changed (the poller calls it every few seconds);
  // a file that does not parse keeps the previous table and says why once.
  void Refresh();
  double pue() const { return pue_; }
  // The intensity in force at 'at' (g/kWh), or -1.
  double At(double at) const;

  // "unix_seconds,g_per_kwh" or "YYYY-MM-DDTHH:MM:SSZ,g_per_kwh" per line, '#' comments; sorted
  // by time on return. Exposed for tests.
  static StatusOr<std::vector<std::pair<double, double>>> Parse(const std::string& text);

 private:
  double fixed_;
  std::string file_;
  double pue_;
  mutable std::mutex mu_;
  std::vector<std::pair<double, double>> table_;  // (unix seconds, g/kWh), ascending
  std::optional<int64_t> mtime_;
  std::string last_error_;
};

}  // namespace nereid::energy
