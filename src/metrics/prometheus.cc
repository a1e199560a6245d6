#include "metrics/prometheus.h"

#include <sstream>

#include "gpu/nvml.h"
#include "memory/buffer.h"
#include "metrics/custom_metrics.h"

namespace nereid {

namespace {

std::string Labels(const ModelMetricsSource& m, const std::string& extra = "") {
  std::string s =
      "{model=\"" + PrometheusEscape(m.name) + "\",version=\"" + std::to_string(m.version) + "\"";
  if (!extra.empty()) s += "," + extra;
  return s + "}";
}

void Family(std::ostringstream& out, const char* name, const char* type, const char* help) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
}

template <typename Fn>
void PerModel(std::ostringstream& out, const std::vector<ModelMetricsSource>& models,
              const char* name, const char* type, const char* help, Fn value) {
  Family(out, name, type, help);
  for (const auto& m : models) out << name << Labels(m) << " " << value(m) << "\n";
}

// Triton's GPU families, one sample per GPU labelled with its UUID; none where NVML is absent.
void RenderGpuMetrics(std::ostringstream& out) {
  const std::vector<gpu::GpuSample> gpus = gpu::Nvml::Get().Sample();
  if (gpus.empty()) return;
  auto family = [&](const char* name, const char* type, const char* help, auto value) {
    Family(out, name, type, help);
    for (const auto& g : gpus)
      out << name << "{gpu_uuid=\"" << g.uuid << "\"} " << value(g) << "\n";
  };
  family("nv_gpu_utilization", "gauge", "GPU utilization rate [0.0 - 1.0)",
         [](const gpu::GpuSample& g) { return g.utilization; });
  family("nv_gpu_memory_total_bytes", "gauge", "GPU total memory, in bytes",
         [](const gpu::GpuSample& g) { return g.memory_total; });
  family("nv_gpu_memory_used_bytes", "gauge", "GPU used memory, in bytes",
         [](const gpu::GpuSample& g) { return g.memory_used; });
  family("nv_gpu_power_usage", "gauge", "GPU power usage in watts",
         [](const gpu::GpuSample& g) { return g.power_watts; });
  family("nv_gpu_power_limit", "gauge", "GPU power management limit in watts",
         [](const gpu::GpuSample& g) { return g.power_limit_watts; });
  family("nv_energy_consumption", "counter",
         "GPU energy consumption in joules since the server started",
         [](const gpu::GpuSample& g) { return g.energy_joules; });
}

}  // namespace

std::string RenderPrometheus(const std::vector<ModelMetricsSource>& models, bool gpu) {
  std::ostringstream out;
  auto load = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  PerModel(out, models, "nv_inference_request_success", "counter",
           "Number of successful inference requests, all batch sizes",
           [&](const ModelMetricsSource& m) { return load(m.stats->success.count); });
  Family(out, "nv_inference_request_failure", "counter",
         "Number of failed inference requests, all batch sizes");
  static const char* kReasons[] = {"REJECTED", "CANCELED", "BACKEND", "OTHER"};
  for (const auto& m : models)
    for (size_t r = 0; r < 4; ++r)
      out << "nv_inference_request_failure"
          << Labels(m, std::string("reason=\"") + kReasons[r] + "\"") << " "
          << load(m.stats->failures[r]) << "\n";
  PerModel(out, models, "nv_inference_count", "counter",
           "Number of inferences performed (does not include cached requests)",
           [&](const ModelMetricsSource& m) { return load(m.stats->inference_count); });
  PerModel(out, models, "nv_inference_exec_count", "counter",
           "Number of model executions performed (does not include cached requests)",
           [&](const ModelMetricsSource& m) { return load(m.stats->execution_count); });
  PerModel(out, models, "nv_inference_pending_request_count", "gauge",
           "Instantaneous number of pending requests awaiting execution per-model.",
           [&](const ModelMetricsSource& m) { return m.pending; });
  PerModel(out, models, "nv_inference_request_duration_us", "counter",
           "Cumulative inference request duration in microseconds (includes cached requests)",
           [&](const ModelMetricsSource& m) {
             return (load(m.stats->success.ns) + load(m.stats->fail.ns)) / 1000;
           });
  PerModel(out, models, "nv_inference_queue_duration_us", "counter",
           "Cumulative inference queuing duration in microseconds (includes cached requests)",
           [&](const ModelMetricsSource& m) { return load(m.stats->queue.ns) / 1000; });
  PerModel(out, models, "nv_inference_compute_input_duration_us", "counter",
           "Cumulative compute input duration in microseconds (does not include cached requests)",
           [&](const ModelMetricsSource& m) { return load(m.stats->compute_input.ns) / 1000; });
  PerModel(
      out, models, "nv_inference_compute_infer_duration_us", "counter",
      "Cumulative compute inference duration in microseconds (does not include cached requests)",
      [&](const ModelMetricsSource& m) { return load(m.stats->compute_infer.ns) / 1000; });
  PerModel(out, models, "nv_inference_compute_output_duration_us", "counter",
           "Cumulative inference compute output duration in microseconds (does not include cached "
           "requests)",
           [&](const ModelMetricsSource& m) { return load(m.stats->compute_output.ns) / 1000; });

  // Triton's cache families, for the models that cache responses.
  std::vector<ModelMetricsSource> caching;
  for (const auto& m : models)
    if (m.stats->cache_enabled) caching.push_back(m);
  if (!caching.empty()) {
    PerModel(out, caching, "nv_cache_num_hits_per_model", "counter",
             "Number of cache hits per model",
             [&](const ModelMetricsSource& m) { return load(m.stats->cache_hit.count); });
    PerModel(out, caching, "nv_cache_num_misses_per_model", "counter",
             "Number of cache misses per model",
             [&](const ModelMetricsSource& m) { return load(m.stats->cache_miss.count); });
    PerModel(out, caching, "nv_cache_hit_duration_per_model", "counter",
             "Total cache hit duration per model, in microseconds",
             [&](const ModelMetricsSource& m) { return load(m.stats->cache_hit.ns) / 1000; });
    PerModel(out, caching, "nv_cache_miss_duration_per_model", "counter",
             "Total cache miss (insert + lookup) duration per model, in microseconds",
             [&](const ModelMetricsSource& m) { return load(m.stats->cache_miss.ns) / 1000; });
  }

  Family(out, "nereid_inference_request_duration_us", "histogram",
         "Latency of successful requests from receipt to response, in microseconds");
  for (const auto& m : models) {
    const auto counts = m.stats->latency.Counts();
    uint64_t cumulative = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      cumulative += counts[i];
      const std::string le = i < LatencyHistogram::kBoundsUs.size()
                                 ? std::to_string(LatencyHistogram::kBoundsUs[i])
                                 : "+Inf";
      out << "nereid_inference_request_duration_us_bucket" << Labels(m, "le=\"" + le + "\"") << " "
          << cumulative << "\n";
    }
    out << "nereid_inference_request_duration_us_sum" << Labels(m) << " "
        << m.stats->latency.sum_us() << "\n";
    out << "nereid_inference_request_duration_us_count" << Labels(m) << " " << cumulative << "\n";
  }
  // Nereid's own: the precision variant each model with variants runs in (docs/precision.md).
  bool variants = false;
  for (const auto& m : models) variants = variants || !m.variants.empty();
  if (variants) {
    Family(out, "nereid_model_variant_active", "gauge",
           "1 for the precision variant the model version runs in now, 0 for its others");
    for (const auto& m : models)
      for (const std::string& v : m.variants)
        out << "nereid_model_variant_active" << Labels(m, "variant=\"" + PrometheusEscape(v) + "\"")
            << " " << (v == m.active_variant ? 1 : 0) << "\n";
    Family(out, "nereid_model_variant_switches_total", "counter",
           "Times the variant policy changed the model version's precision variant");
    for (const auto& m : models)
      if (!m.variants.empty())
        out << "nereid_model_variant_switches_total" << Labels(m) << " " << m.variant_switches
            << "\n";
  }
  // Nereid's own: tensor bytes the server copied after they arrived (input) or after the backend
  // wrote them (output). A zero-copy path leaves these still.
  const CopyCounts copies = CopyCountsNow();
  Family(out, "nereid_tensor_copy_bytes", "counter",
         "Tensor bytes copied by the server after arrival (input) or after the backend wrote them "
         "(output)");
  out << "nereid_tensor_copy_bytes{direction=\"input\"} " << copies.input_bytes << "\n";
  out << "nereid_tensor_copy_bytes{direction=\"output\"} " << copies.output_bytes << "\n";
  Family(out, "nereid_tensor_copies", "counter", "Tensor copies made by the server");
  out << "nereid_tensor_copies{direction=\"input\"} " << copies.input_copies << "\n";
  out << "nereid_tensor_copies{direction=\"output\"} " << copies.output_copies << "\n";
  const HandoffCounts handoff = HandoffCountsNow();
  Family(out, "nereid_tensor_handoff_bytes", "counter",
         "Bytes the server handed from one execution to the next without a client (an ensemble "
         "step's output to the next step, a sequence's state to its next request), by where they "
         "were (device: left in GPU memory)");
  for (int k = 0; k < 2; ++k)
    for (int d = 0; d < 2; ++d)
      out << "nereid_tensor_handoff_bytes{kind=\"" << (k == 0 ? "ensemble" : "sequence_state")
          << "\",memory=\"" << (d == 1 ? "device" : "host") << "\"} " << handoff.bytes[k][d]
          << "\n";
  if (gpu) RenderGpuMetrics(out);
  CustomMetrics::Get().Render(out);  // families the backends registered (Python's pb_utils metrics)
  return out.str();
}

}  // namespace nereid
