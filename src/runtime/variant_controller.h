// VariantController: a model's precision variants at run time (docs/precision.md). The backend
// declares its variants and their accuracy (NereidModelSetVariants); before the model is READY the
// controller measures each admitted one per batch size on the model's first instance (execution
// time and, on a GPU with NVML, the device's power), then a thread of its own feeds the policy one
// window per tick (arrival rate, p99 latency, device power over the last second) and publishes the
// variant every execution runs in. Switching is a store to an atomic: no reload, nothing in flight
// is touched.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "config/model_config.h"
#include "scheduler/variant_policy.h"

namespace nereid {

class Model;
class ModelInstance;

// A variant as the backend declared it.
struct VariantInfo {
  std::string name;
  bool admitted = false;
  double top1_agreement = -1, max_abs_error = -1, max_rel_error = -1;
  std::string detail;
};

// The controller's parameters from the config ("nereid.*" keys; errors name the key).
struct VariantSettings {
  VariantPolicyOptions policy;
  uint64_t profile_ns = 0;  // per measured cell
  uint64_t tick_ns = 25'000'000;
  uint64_t rise_ns = 50'000'000;  // a rising load is read over this newest span
  uint64_t window_ns = 1'000'000'000;
};
StatusOr<VariantSettings> ReadVariantSettings(const inference::ModelConfig& config,
                                              bool gpu_instances);

class VariantController {
 public:
  VariantController(std::string model, int64_t version, std::vector<VariantInfo> declared,
                    VariantSettings settings);
  ~VariantController();
  VariantController(const VariantController&) = delete;
  VariantController& operator=(const VariantController&) = delete;

  // Measures every admitted variant on 'instance' with zero inputs of 'model's config, for batch
  // sizes 1, 2, 4, ... up to max_batch_size, then starts the policy's thread.
  Status ProfileAndStart(const std::shared_ptr<Model>& model, ModelInstance* instance);
  void Stop();

  // The declared index executions run in now (lock-free).
  uint32_t active() const { return active_.load(std::memory_order_relaxed); }
  void OnArrival(int64_t rows) { arrived_rows_.fetch_add(rows, std::memory_order_relaxed); }
  void OnCompletion(uint64_t end_ns, uint64_t latency_ns);

  const std::vector<VariantInfo>& declared() const { return declared_; }
  uint64_t switches() const { return switches_.load(std::memory_order_relaxed); }
  // The statistics extension's "variants" object (JSON): the policy, the guard results, the
  // measured table with each cell's predicted operating point at the current load.
  std::string Json() const;

 private:
  void Run();
  void Tick(uint64_t now_ns);

  const std::string model_, version_;
  const std::vector<VariantInfo> declared_;
  const VariantSettings settings_;
  std::vector<uint32_t> admitted_;  // declared indices of the policy's variants, in its order
  std::unique_ptr<VariantPolicy> policy_;
  std::atomic<uint32_t> active_{0};
  std::atomic<int64_t> arrived_rows_{0};
  std::atomic<uint64_t> switches_{0};
  int nvml_index_ = -1;  // the first GPU instance's device, where NVML meters it

  mutable std::mutex mu_;
  std::deque<std::pair<uint64_t, uint64_t>> latencies_;  // (end, latency), the last window
  std::deque<std::pair<uint64_t, int64_t>> arrivals_;    // (tick, rows arrived so far)
  std::deque<std::pair<uint64_t, uint64_t>> energy_;     // (tick, millijoules)
  VariantWindow last_window_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace nereid
