#include "scheduler/batch_policy.h"

#include <algorithm>

namespace nereid {

BatchDecision DecideBatch(const BatchLimits& limits, const std::vector<BatchCandidate>& candidates,
                          bool blocked, uint64_t now_ns, uint64_t delay_ns) {
  BatchDecision d;
  if (candidates.empty()) return d;
  const int64_t max_preferred = limits.preferred.empty() ? 0 : limits.preferred.back();
  int64_t total = 0;
  size_t best_preferred = 0;  // length of the longest prefix whose size is a preferred size
  uint64_t oldest = candidates[0].enqueue_ns;
  for (size_t i = 0; i < candidates.size(); ++i) {
    total += candidates[i].batch_size;
    oldest = std::min(oldest, candidates[i].enqueue_ns);
    if (std::binary_search(limits.preferred.begin(), limits.preferred.end(), total))
      best_preferred = i + 1;
    if (max_preferred > 0 && total == max_preferred) {
      d.take = i + 1;
      return d;
    }
  }
  if (blocked || total >= limits.max_batch_size) {
    d.take = best_preferred > 0 ? best_preferred : candidates.size();
    return d;
  }
  const bool delay_over = delay_ns == 0 || now_ns - oldest >= delay_ns;
  if (best_preferred > 0 && !delay_over) {
    d.take = best_preferred;
    return d;
  }
  if (delay_over) {
    d.take = candidates.size();
    return d;
  }
  d.wake_ns = oldest + delay_ns;
  return d;
}

}  // namespace nereid
