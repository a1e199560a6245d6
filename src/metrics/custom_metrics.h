// Custom metrics registered by backends (Triton's custom metrics API; what the Python backend's
// pb_utils.MetricFamily and Metric stand on): counter, gauge and histogram families, each metric
// one set of labels, rendered on the metrics endpoint after the server's own families.
//
// Handles are counted: a family stays while any handle to it lives (two registrations of one name
// and kind share it; another kind under a taken name is refused), a metric while any handle to its
// labels lives. Once its family's last handle is gone a metric refuses every operation. Everything
// here comes from model code, so names, labels, bucket lists and counts are checked and bounded.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace nereid {

enum class MetricKind { kCounter = 0, kGauge = 1, kHistogram = 2 };

class CustomMetrics {
 public:
  struct Family;
  struct Metric;
  // What a backend holds (one per registration).
  struct FamilyHandle {
    std::shared_ptr<Family> family;
  };
  struct MetricHandle {
    std::shared_ptr<Family> family;
    std::shared_ptr<Metric> metric;
  };

  static CustomMetrics& Get();

  StatusOr<std::unique_ptr<FamilyHandle>> NewFamily(MetricKind kind, const std::string& name,
                                                    const std::string& description);
  void DeleteFamily(std::unique_ptr<FamilyHandle> handle);
  // 'buckets': a histogram's upper bounds, ascending (required for histograms, ignored otherwise).
  StatusOr<std::unique_ptr<MetricHandle>> NewMetric(
      const FamilyHandle& family, const std::vector<std::pair<std::string, std::string>>& labels,
      const std::optional<std::vector<double>>& buckets);
  void DeleteMetric(std::unique_ptr<MetricHandle> handle);

  Status Increment(const MetricHandle& m, double value);  // counters (value >= 0) and gauges
  Status Set(const MetricHandle& m, double value);        // gauges
  Status Observe(const MetricHandle& m, double value);    // histograms
  StatusOr<double> Value(const MetricHandle& m);          // counters and gauges

  // Appends every live family in Prometheus' text format.
  void Render(std::ostringstream& out);

  // Bounds on what model code may register.
  static constexpr size_t kMaxFamilies = 1024;
  static constexpr size_t kMaxMetricsPerFamily = 10000;
  static constexpr size_t kMaxLabels = 32;
  static constexpr size_t kMaxBuckets = 256;
  static constexpr size_t kMaxNameBytes = 256;
  static constexpr size_t kMaxTextBytes = 4096;  // a description or a label value

 private:
  Status Usable(const MetricHandle& m) const;  // under mu_

  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Family>> families_;  // live ones, by name
};

}  // namespace nereid
