// The GPU instance's two helpers around its stream: CUDA graphs captured once per (row count,
// copy mask) and replayed, and the phase log that says where a run's time goes.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "nereid/backend_util.h"

namespace nereid::native {

using backend::Status;
using backend::StatusOr;

inline Status CudaError(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::Ok();
  return backend::Internal(what + ": " + cudaGetErrorString(e));
}
#define CUDA_RETURN(expr, what) RETURN_IF_ERROR(::nereid::native::CudaError((expr), (what)))

// What 'enqueue' puts on 'stream', captured and instantiated as a CUDA graph.
template <typename Enqueue>
StatusOr<cudaGraphExec_t> CaptureGraph(cudaStream_t stream, const Enqueue& enqueue) {
  CUDA_RETURN(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
              "cudaStreamBeginCapture");
  const Status enqueued = enqueue();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (!enqueued.ok() && graph != nullptr) cudaGraphDestroy(graph);
  RETURN_IF_ERROR(enqueued);
  CUDA_RETURN(ended, "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_RETURN(made, "cudaGraphInstantiate");
  return exec;
}

// Instantiated graphs by (rows, direct-copy mask, part: 0 a whole run or a split run's first part,
// 2 the second part of a run split while its input crosses to the device). Not thread-safe: one
// instance's thread.
class GraphCache {
 public:
  using Key = std::tuple<int64_t, uint64_t, int>;
  GraphCache() = default;
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;
  ~GraphCache() { Clear(); }

  // Replays the graph of 'key' on 'stream', capturing what 'enqueue' puts there on first use.
  // Beyond kMaxGraphs keys it runs 'enqueue' uncaptured.
  template <typename Enqueue>
  Status Launch(const Key& key, cudaStream_t stream, const Enqueue& enqueue) {
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      if (graphs_.size() >= kMaxGraphs) return enqueue();
      ASSIGN_OR_RETURN(cudaGraphExec_t exec, CaptureGraph(stream, enqueue));
      it = graphs_.emplace(key, exec).first;
    }
    CUDA_RETURN(cudaGraphLaunch(it->second, stream), "cudaGraphLaunch");
    return Status::Ok();
  }
  // Destroys every graph (their buffers are about to move).
  void Clear() {
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
    graphs_.clear();
  }

 private:
  static constexpr size_t kMaxGraphs = 1024;

  std::map<Key, cudaGraphExec_t> graphs_;
};

// Where runs' time goes, per row count, logged at verbose level (--log-verbose=1) every 100 runs
// of that count; nothing is measured while verbose logging is off. On the host clock: inputs
// copied into staging (the batch gather), the copies and graph launch enqueued, the wait for the
// device. On the device (CUDA events, every 8th run): the copies in before the graph, the graph,
// the copies out after it.
class PhaseLog {
 public:
  PhaseLog() = default;
  PhaseLog(const PhaseLog&) = delete;
  PhaseLog& operator=(const PhaseLog&) = delete;
  ~PhaseLog();
  Status Init();

  // Called once at the start of each run: whether this run is measured, and whether its device
  // side is sampled (then Mark records events).
  bool Begin();
  // Records device mark 'i' (0: before the copies in, 1: before the graph, 2: after it, 3: after
  // the copies out) when this run is sampled.
  // Marks 0 and 3 are recorded on every run: they bracket the run's device time (DeviceNs).
  cudaError_t Mark(int i, cudaStream_t stream) {
    return sampled_ || i == 0 || i == 3 ? cudaEventRecord(events_[i], stream) : cudaSuccess;
  }
  // After the run's stream synchronized: its device time, mark 0 to mark 3 (0 if unknown).
  uint64_t DeviceNs() const {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, events_[0], events_[3]) != cudaSuccess) return 0;
    return static_cast<uint64_t>(static_cast<double>(ms) * 1e6);
  }
  // After the run's stream synchronized: 'host' holds its start, gathered, enqueued and end times.
  void Note(int64_t rows, uint64_t direct, bool copies_in_graph, std::array<uint64_t, 4> host);

 private:
  struct Phases {
    uint64_t runs = 0, gather_ns = 0, enqueue_ns = 0, wait_ns = 0;
    uint64_t sampled = 0;
    double in_ms = 0, graph_ms = 0, out_ms = 0;
  };
  std::map<int64_t, Phases> phases_;  // by row count, since it was last logged
  std::array<cudaEvent_t, 4> events_{};
  uint64_t runs_ = 0;
  bool sampled_ = false;
};

}  // namespace nereid::native
