// A Python model's custom metrics (pb_utils.MetricFamily / Metric).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "python/protocol.h"

namespace nereid::python {

// pb_utils.MetricFamily / Metric (custom metrics): the stub names its families and metrics by
// ids of its own; the proxy holds the server's handles under them until the stub deletes
// them or ends. 'metric_family_new', 'metric_new' and a metric's value() are answered like a BLS
// call (an error as 'error'); the stub checks kinds itself, so increments, sets and
// observations that fail here (a family deleted meanwhile) are dropped silently.
class MetricsProxy {
 public:
  ~MetricsProxy() { ReleaseAll(); }
  // One of the stub's metric messages ('metric_family_new', 'metric_new', 'metric', ...).
  void Handle(const std::shared_ptr<Channel>& channel, const Message& m);
  // The stub's metrics go with it (it ended, or the instance is unloaded): metrics first.
  void ReleaseAll();

 private:
  NereidError* NewMetric(const rapidjson::Value& h, uint64_t id);

  static constexpr size_t kMaxMetricHandles = 4096;  // families, and metrics, per stub
  std::mutex mu_;                                    // the stub's custom metrics, by the stub's ids
  std::map<uint64_t, NereidMetricFamily*> families_;
  std::map<uint64_t, NereidMetric*> metrics_;
};

}  // namespace nereid::python
