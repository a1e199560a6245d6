// Energy meters: where joules come from. Each meter has one or more scopes (a GPU, a CPU package,
// the process's CPU time) and reports, per read, the cumulative joules of each since it started.
// Every figure carries its source (nvml, rapl, estimate) and its scope. Reads happen on the energy
// poller's thread only, never on a request's path.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace nereid::energy {

struct Scope {
  std::string name;    // the metrics' scope label: "gpu0", "package-0", "process-cpu"
  std::string source;  // "nvml", "rapl" or "estimate"
  int gpu = -1;        // the CUDA ordinal a GPU scope measures; -1 for CPU scopes
  // Whether the scope draws power when nothing runs (a GPU's or a package's floor); the estimate
  // counts busy CPU time only, so it has none.
  bool has_floor = true;
};

class Meter {
 public:
  virtual ~Meter() = default;
  virtual const std::vector<Scope>& scopes() const = 0;
  // Joules of each scope (in scopes() order) since the meter's first read.
  virtual std::vector<double> Read() = 0;
  // How often its counters change: the poller reads no more often than this.
  virtual std::chrono::milliseconds period() const = 0;
};

// NVML's total-energy counter (millijoules, updated every ~100 ms) per GPU that CUDA sees; null
// without NVML or GPUs. 'cuda_uuids' are the CUDA devices' UUIDs ("GPU-..."), by ordinal, so that a
// scope names the device its instances run on.
std::unique_ptr<Meter> MakeNvmlMeter(const std::vector<std::string>& cuda_uuids);

// RAPL through powercap: one scope per package zone (intel-rapl:N, never its sub-zones, which the
// package already counts), wrap-safe at max_energy_range_uj; null when no zone is readable (the
// files are root-only on many systems, absent on these machines and in most containers).
std::unique_ptr<Meter> MakeRaplMeter(const std::string& powercap_root = "/sys/class/powercap");

// The estimate where nothing measures: this process's CPU time (user + system) x 'watts_per_core'.
// Labelled source="estimate", scope "process-cpu"; it has no floor (idle costs nothing in it).
std::unique_ptr<Meter> MakeEstimateMeter(double watts_per_core);

}  // namespace nereid::energy
