// VariantPolicy: which precision variant of a model runs now (docs/precision.md). Pure decision
// logic over a measured table (per variant and batch size: execution time, busy power) and one
// window of what the server sees (arrival rate, p99 latency, device power); the controller that
// measures the table and feeds the windows is runtime/variant_controller.
//
// The goal rule (the default): the most accurate variant whose prediction at the window's load
// meets the latency goal, the power budget and the joules-per-inference goal. Moving to a more
// accurate variant needs the goals met with a margin; a window whose measured p99 or power breaks
// a goal counts its variant as failing (for a cool-off) whatever the prediction said, and may move
// off it after a quarter of the dwell time; other switches wait the whole dwell. The power the
// table predicts is scaled by a running ratio of measured to predicted active power (the table is
// measured with batches back to back; serving runs the batches the batcher forms). The article
// rule ("low precision at low load"):
// the least accurate variant while the most accurate one would be under half busy, else the most
// accurate, with the same dwell.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nereid {

// One measured cell: batches of 'batch' rows take 'exec_s' each; the device draws 'watts' while
// running them back to back (< 0: not metered).
struct VariantCell {
  int64_t batch = 0;
  double exec_s = 0;
  double watts = -1;
};

struct VariantProfile {
  std::string name;
  std::vector<VariantCell> cells;  // ascending batch
};

enum class VariantRule { kGoal, kLowLoadLowPrecision };

struct VariantPolicyOptions {
  VariantRule rule = VariantRule::kGoal;
  double latency_goal_s = 0;  // p99; 0: none (utilization alone bounds the load)
  double power_budget_w = 0;  // per device; 0: none
  double joules_goal = 0;     // per inference; 0: none
  double idle_watts = -1;     // the device's floor (< 0: not metered)
  double max_utilization = 0.8;
  double margin = 0.85;  // a move to a more accurate variant needs its goals met by this factor
  uint64_t dwell_ns = 2'000'000'000;
  uint64_t cooloff_ns = 10'000'000'000;  // a variant that broke a goal is not chosen for this long
  // The measuring window: a window's p99 and power are the active variant's only once it has run
  // for this long since the last switch (before that they mix in the one before).
  uint64_t window_ns = 1'000'000'000;
};

// What one window saw (the controller's 1-second windows).
struct VariantWindow {
  uint64_t now_ns = 0;
  double rows_per_s = 0;
  double p99_s = -1;  // < 0: too few completions to tell
  double watts = -1;  // < 0: not metered
};

// A variant's predicted operating point at a load.
struct VariantPrediction {
  int64_t batch = 0;       // the smallest measured batch size that carries the load in time
  double utilization = 0;  // of the instance at that batch size
  double p99_s = 0;        // predicted
  double watts = -1;       // predicted device power (< 0: not metered)
  double joules_per_row = -1;
  bool meets_latency = false, meets_power = true, meets_joules = true;
  bool Meets() const { return meets_latency && meets_power && meets_joules; }
};

class VariantPolicy {
 public:
  // 'variants': admitted ones, the most accurate first (index 0 is the default).
  VariantPolicy(std::vector<VariantProfile> variants, VariantPolicyOptions options);

  struct Decision {
    size_t variant = 0;
    bool switched = false;
    std::string reason;  // for the log, when switched
  };
  Decision OnWindow(const VariantWindow& window);

  VariantPrediction Predict(size_t variant, double rows_per_s, double margin = 1) const;
  size_t active() const { return active_; }
  // Measured / predicted active power (above the floor), a running average; 1 until measured.
  double power_scale() const { return power_scale_; }
  const std::vector<VariantProfile>& variants() const { return variants_; }
  const VariantPolicyOptions& options() const { return options_; }

 private:
  size_t Choose(const VariantWindow& w, std::string* why) const;

  std::vector<VariantProfile> variants_;
  VariantPolicyOptions options_;
  size_t active_ = 0;
  uint64_t last_switch_ns_ = 0;
  bool switched_once_ = false;
  double power_scale_ = 1;
  std::vector<uint64_t> failed_until_;  // per variant: cool-off end after a broken goal
};

const char* VariantRuleName(VariantRule rule);

}  // namespace nereid
