// GPU metrics through NVML (libnvidia-ml.so.1, loaded at run time): utilization, memory, power and
// energy per GPU, for the metrics endpoint's nv_gpu_* families (Triton's names). Absent cleanly
// where there is no NVML: Sample() returns nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nereid::gpu {

struct GpuSample {
  std::string uuid;                            // "GPU-..."; the metrics' gpu_uuid label
  double utilization = 0;                      // 0..1, over NVML's last sample period
  uint64_t memory_total = 0, memory_used = 0;  // bytes
  double power_watts = 0, power_limit_watts = 0;
  double energy_joules = 0;  // since the server started
};

class Nvml {
 public:
  static Nvml& Get();
  bool available() const { return api_ != nullptr; }
  std::vector<GpuSample> Sample();
  // The NVML index of the GPU with this UUID, if NVML lists it.
  std::optional<size_t> IndexOfUuid(const std::string& uuid) const;
  // The GPU's total-energy counter (millijoules since the driver loaded). One read costs ~3 ms on
  // an H200 host: the energy poller's thread only.
  bool TotalEnergyMillijoules(size_t index, uint64_t* millijoules) const;

 private:
  Nvml();
  struct Api;
  Api* api_ = nullptr;
  std::vector<void*> devices_;
  std::vector<std::string> uuids_;
  std::vector<uint64_t> energy_at_start_mj_;
};

}  // namespace nereid::gpu
