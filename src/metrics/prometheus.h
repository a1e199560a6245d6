// Prometheus text exposition of the per-model counters (Triton's metric names) and Nereid's latency
// histograms, for whichever frontend serves the metrics port (HTTP today). Rendering reads the
// atomics; nothing on the request path formats or locks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/prometheus_escape.h"
#include "metrics/model_stats.h"

namespace nereid {

// What the text shows of one model version: its counters (kept alive by 'owner'), read as they
// are rendered, and its pending requests at the moment of the scrape.
struct ModelMetricsSource {
  std::string name;
  int64_t version = 0;
  const ModelStats* stats = nullptr;
  size_t pending = 0;
  // Precision variants (admitted ones), the one active and how often it changed; none: no rows.
  std::vector<std::string> variants;
  std::string active_variant;
  uint64_t variant_switches = 0;
  std::shared_ptr<const void> owner;
};

// 'gpu': add the per-GPU families (nv_gpu_*, nv_energy_consumption) read through NVML.
std::string RenderPrometheus(const std::vector<ModelMetricsSource>& models, bool gpu);

}  // namespace nereid
