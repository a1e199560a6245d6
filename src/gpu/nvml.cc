#include "gpu/nvml.h"

#include <dlfcn.h>

#include <memory>
#include <mutex>

namespace nereid::gpu {

// NVML's types and entry points used here, declared from the NVML API reference.
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};

struct Nvml::Api {
  void* lib = nullptr;
  nvmlReturn_t (*init)();
  nvmlReturn_t (*count)(unsigned*);
  nvmlReturn_t (*handle)(unsigned, nvmlDevice_t*);
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned);
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*);
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned*);             // milliwatts
  nvmlReturn_t (*power_limit)(nvmlDevice_t, unsigned*);       // milliwatts
  nvmlReturn_t (*energy)(nvmlDevice_t, unsigned long long*);  // millijoules since driver load
  template <typename F>
  bool Bind(F& fn, const char* name) {
    fn = reinterpret_cast<F>(dlsym(lib, name));
    return fn != nullptr;
  }
};

Nvml& Nvml::Get() {
  static Nvml* nvml = new Nvml();
  return *nvml;
}

Nvml::Nvml() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return;
  auto api = std::make_unique<Api>();
  api->lib = lib;
  if (!api->Bind(api->init, "nvmlInit_v2") || !api->Bind(api->count, "nvmlDeviceGetCount_v2") ||
      !api->Bind(api->handle, "nvmlDeviceGetHandleByIndex_v2") ||
      !api->Bind(api->uuid, "nvmlDeviceGetUUID") ||
      !api->Bind(api->utilization, "nvmlDeviceGetUtilizationRates") ||
      !api->Bind(api->memory, "nvmlDeviceGetMemoryInfo") ||
      !api->Bind(api->power, "nvmlDeviceGetPowerUsage") ||
      !api->Bind(api->power_limit, "nvmlDeviceGetEnforcedPowerLimit") ||
      !api->Bind(api->energy, "nvmlDeviceGetTotalEnergyConsumption") || api->init() != 0)
    return;
  unsigned count = 0;
  if (api->count(&count) != 0) return;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    if (api->handle(i, &device) != 0) continue;
    unsigned long long energy = 0;
    api->energy(device, &energy);
    char uuid[96] = {};
    if (api->uuid(device, uuid, sizeof(uuid) - 1) != 0) uuid[0] = '\0';
    uuids_.emplace_back(uuid);  // "" when NVML gave none: the device is left out of samples
    devices_.push_back(device);
    energy_at_start_mj_.push_back(energy);
  }
  api_ = api.release();
}

std::vector<GpuSample> Nvml::Sample() {
  std::vector<GpuSample> samples;
  if (api_ == nullptr) return samples;
  static std::mutex mu;  // NVML is thread-safe; this keeps samples of one scrape consistent
  std::lock_guard lock(mu);
  for (size_t i = 0; i < devices_.size(); ++i) {
    nvmlDevice_t d = devices_[i];
    if (uuids_[i].empty()) continue;
    GpuSample s;
    s.uuid = uuids_[i];
    nvmlUtilization_t util{};
    if (api_->utilization(d, &util) == 0) s.utilization = util.gpu / 100.0;
    nvmlMemory_t mem{};
    if (api_->memory(d, &mem) == 0) s.memory_total = mem.total, s.memory_used = mem.used;
    unsigned mw = 0;
    if (api_->power(d, &mw) == 0) s.power_watts = mw / 1000.0;
    if (api_->power_limit(d, &mw) == 0) s.power_limit_watts = mw / 1000.0;
    unsigned long long mj = 0;
    if (api_->energy(d, &mj) == 0 && mj >= energy_at_start_mj_[i])
      s.energy_joules = static_cast<double>(mj - energy_at_start_mj_[i]) / 1000.0;
    samples.push_back(std::move(s));
  }
  return samples;
}

std::optional<size_t> Nvml::IndexOfUuid(const std::string& uuid) const {
  for (size_t i = 0; i < uuids_.size(); ++i)
    if (!uuid.empty() && uuids_[i] == uuid) return i;
  return std::nullopt;
}

bool Nvml::TotalEnergyMillijoules(size_t index, uint64_t* millijoules) const {
  if (api_ == nullptr || index >= devices_.size()) return false;
  unsigned long long mj = 0;
  if (api_->energy(devices_[index], &mj) != 0) return false;
  *millijoules = mj;
  return true;
}

}  // namespace nereid::gpu
