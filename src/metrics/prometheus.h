// Prometheus text exposition of the per-model counters (Triton's metric names) and Nereid's latency
// histograms, for whichever frontend serves the metrics port (HTTP today). Rendering reads the
// atomics; nothing on the request path formats or locks.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace nereid {

class Model;

// 'gpu': add the per-GPU families (nv_gpu_*, nv_energy_consumption) read through NVML.
std::string RenderPrometheus(const std::vector<std::shared_ptr<Model>>& models, bool gpu);

}  // namespace nereid
