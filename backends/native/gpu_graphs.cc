#include "gpu_graphs.h"

#include <algorithm>
#include <cstdio>

namespace nereid::native {

PhaseLog::~PhaseLog() {
  for (cudaEvent_t e : events_)
    if (e != nullptr) cudaEventDestroy(e);
}

Status PhaseLog::Init() {
  for (cudaEvent_t& e : events_) CUDA_RETURN(cudaEventCreate(&e), "cudaEventCreate");
  return Status::Ok();
}

bool PhaseLog::Begin() {
  const bool measured = NereidLogEnabled(NEREID_LOG_VERBOSE) != 0;
  sampled_ = measured && ++runs_ % 8 == 0;
  return measured;
}

void PhaseLog::Note(int64_t rows, uint64_t direct, bool copies_in_graph,
                    std::array<uint64_t, 4> t) {
  Phases& p = phases_[rows];
  ++p.runs, p.gather_ns += t[1] - t[0], p.enqueue_ns += t[2] - t[1], p.wait_ns += t[3] - t[2];
  float ms[3] = {0, 0, 0};
  if (sampled_ && cudaEventElapsedTime(&ms[0], events_[0], events_[1]) == cudaSuccess &&
      cudaEventElapsedTime(&ms[1], events_[1], events_[2]) == cudaSuccess &&
      cudaEventElapsedTime(&ms[2], events_[2], events_[3]) == cudaSuccess)
    ++p.sampled, p.in_ms += ms[0], p.graph_ms += ms[1], p.out_ms += ms[2];
  if (p.runs < 100) return;
  const double n = static_cast<double>(std::max<uint64_t>(p.sampled, 1));
  char line[384];
  std::snprintf(line, sizeof(line),
                "GPU runs of %lld row(s), mean of %llu: inputs to staging %.1f us, copies and "
                "graph enqueued %.1f us, device wait %.1f us; on the device: copies in %.1f us, "
                "graph %.1f us, copies out %.1f us (direct copies mask 0x%llx, staging copies %s "
                "the graph)",
                static_cast<long long>(rows), static_cast<unsigned long long>(p.runs),
                p.gather_ns / 1e3 / p.runs, p.enqueue_ns / 1e3 / p.runs, p.wait_ns / 1e3 / p.runs,
                p.in_ms * 1e3 / n, p.graph_ms * 1e3 / n, p.out_ms * 1e3 / n,
                static_cast<unsigned long long>(direct), copies_in_graph ? "in" : "around");
  NereidLog(NEREID_LOG_VERBOSE, __FILE__, __LINE__, line);
  phases_.erase(rows);
}

}  // namespace nereid::native
