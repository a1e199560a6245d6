#include "energy/meter.h"

#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "energy/energy_counter.h"
#include "gpu/nvml.h"

namespace nereid::energy {
namespace {

class NvmlMeter final : public Meter {
 public:
  NvmlMeter(std::vector<Scope> scopes, std::vector<size_t> nvml_index)
      : scopes_(std::move(scopes)), nvml_index_(std::move(nvml_index)) {
    for (size_t i = 0; i < scopes_.size(); ++i) trackers_.emplace_back(1e-3, 0);
  }
  const std::vector<Scope>& scopes() const override { return scopes_; }
  std::vector<double> Read() override {
    std::vector<double> joules(scopes_.size());
    for (size_t i = 0; i < scopes_.size(); ++i) {
      uint64_t mj = 0;
      if (gpu::Nvml::Get().TotalEnergyMillijoules(nvml_index_[i], &mj)) trackers_[i].Advance(mj);
      joules[i] = trackers_[i].total();
    }
    return joules;
  }
  std::chrono::milliseconds period() const override { return std::chrono::milliseconds(100); }

 private:
  std::vector<Scope> scopes_;
  std::vector<size_t> nvml_index_;
  std::vector<CounterTracker> trackers_;
};

class RaplMeter final : public Meter {
 public:
  struct Zone {
    std::string energy_file;
    CounterTracker tracker;
  };
  explicit RaplMeter(std::vector<Zone> zones) : zones_(std::move(zones)) {
    scopes_.push_back({"cpu-packages", "rapl", -1, true});
  }
  const std::vector<Scope>& scopes() const override { return scopes_; }
  std::vector<double> Read() override {
    double total = 0;
    for (auto& zone : zones_) {
      if (auto uj = ReadNumber(zone.energy_file)) zone.tracker.Advance(*uj);
      total += zone.tracker.total();
    }
    return {total};
  }
  std::chrono::milliseconds period() const override { return std::chrono::milliseconds(100); }

  static std::optional<uint64_t> ReadNumber(const std::string& file) {
    std::ifstream in(file);
    uint64_t value = 0;
    if (!(in >> value)) return std::nullopt;
    return value;
  }

 private:
  std::vector<Zone> zones_;
  std::vector<Scope> scopes_;
};

class EstimateMeter final : public Meter {
 public:
  explicit EstimateMeter(double watts_per_core) : watts_per_core_(watts_per_core) {
    scopes_.push_back({"process-cpu", "estimate", -1, false});
    start_ = CpuSeconds();
  }
  const std::vector<Scope>& scopes() const override { return scopes_; }
  std::vector<double> Read() override {
    return {std::max(0.0, CpuSeconds() - start_) * watts_per_core_};
  }
  std::chrono::milliseconds period() const override { return std::chrono::milliseconds(100); }

 private:
  static double CpuSeconds() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
    return seconds(usage.ru_utime) + seconds(usage.ru_stime);
  }
  double watts_per_core_;
  double start_ = 0;
  std::vector<Scope> scopes_;
};

}  // namespace

std::unique_ptr<Meter> MakeNvmlMeter(const std::vector<std::string>& cuda_uuids) {
  auto& nvml = gpu::Nvml::Get();
  if (!nvml.available()) return nullptr;
  std::vector<Scope> scopes;
  std::vector<size_t> index;
  for (size_t ordinal = 0; ordinal < cuda_uuids.size(); ++ordinal) {
    const auto found = nvml.IndexOfUuid(cuda_uuids[ordinal]);
    if (!found) continue;  // a device NVML does not list (or whose UUID CUDA did not give)
    scopes.push_back({"gpu" + std::to_string(ordinal), "nvml", static_cast<int>(ordinal), true});
    index.push_back(*found);
  }
  if (scopes.empty()) return nullptr;
  auto meter = std::make_unique<NvmlMeter>(std::move(scopes), std::move(index));
  meter->Read();  // the first reading sets each counter's origin
  return meter;
}

std::unique_ptr<Meter> MakeRaplMeter(const std::string& powercap_root) {
  namespace fs = std::filesystem;
  std::vector<RaplMeter::Zone> zones;
  std::error_code ec;
  std::vector<fs::path> packages;
  for (const auto& entry : fs::directory_iterator(powercap_root, ec)) {
    const std::string name = entry.path().filename().string();
    // intel-rapl:N is a package; intel-rapl:N:M its sub-zones (cores, uncore, dram), which the
    // package's counter already includes.
    if (name.rfind("intel-rapl:", 0) == 0 && name.find(':', 11) == std::string::npos)
      packages.push_back(entry.path());
  }
  std::sort(packages.begin(), packages.end());
  for (const auto& dir : packages) {
    const std::string energy = (dir / "energy_uj").string();
    const auto range = RaplMeter::ReadNumber((dir / "max_energy_range_uj").string());
    if (!RaplMeter::ReadNumber(energy)) continue;  // unreadable (root-only) or absent
    zones.push_back({energy, CounterTracker(1e-6, range.value_or(0))});
  }
  if (zones.empty()) return nullptr;
  auto meter = std::make_unique<RaplMeter>(std::move(zones));
  meter->Read();  // the first reading sets each zone's origin
  return meter;
}

std::unique_ptr<Meter> MakeEstimateMeter(double watts_per_core) {
  return std::make_unique<EstimateMeter>(watts_per_core);
}

}  // namespace nereid::energy
