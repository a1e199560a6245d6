// BatchPolicy: the dynamic batcher's decision, as a pure function of the queue's head and the time,
// so it is tested exactly. Semantics (Triton's, see docs/scheduling.md):
//  - candidates are the longest prefix of the queue (in scheduling order) whose requests have equal
//    non-batch shapes and whose batch sizes fit max_batch_size together;
//  - a prefix that reaches the largest preferred batch size is sent at once;
//  - a full batch (the next request does not fit, or has other shapes) is sent at once: its largest
//    preferred-size prefix if it has one, else all of it;
//  - a preferred-size prefix is sent at once while the oldest request is younger than the delay;
//  - otherwise the pending batch waits until the oldest request has waited 'delay', then goes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nereid {

struct BatchCandidate {
  uint64_t enqueue_ns = 0;
  int64_t batch_size = 1;
};

struct BatchDecision {
  size_t take = 0;       // > 0: send this many requests from the head now
  uint64_t wake_ns = 0;  // take == 0: re-decide at this time (0: only when a request arrives)
};

struct BatchLimits {
  int64_t max_batch_size = 1;
  std::vector<int64_t> preferred;  // ascending, each <= max_batch_size
};

// 'candidates' is the prefix described above; 'blocked' says a further request exists that could
// not join (it does not fit or has other shapes). 'delay_ns' is the queue delay in force.
BatchDecision DecideBatch(const BatchLimits& limits, const std::vector<BatchCandidate>& candidates,
                          bool blocked, uint64_t now_ns, uint64_t delay_ns);

}  // namespace nereid
