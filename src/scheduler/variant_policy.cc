#include "scheduler/variant_policy.h"

#include <algorithm>
#include <cstdio>
#include <limits>

namespace nereid {

const char* VariantRuleName(VariantRule rule) {
  return rule == VariantRule::kGoal ? "goal" : "low_load_low_precision";
}

VariantPolicy::VariantPolicy(std::vector<VariantProfile> variants, VariantPolicyOptions options)
    : variants_(std::move(variants)), options_(options), failed_until_(variants_.size(), 0) {}

VariantPrediction VariantPolicy::Predict(size_t variant, double rows_per_s, double margin) const {
  VariantPrediction p;
  const std::vector<VariantCell>& cells = variants_[variant].cells;
  if (cells.empty()) return p;
  const double goal = options_.latency_goal_s * margin;
  const VariantCell* chosen = nullptr;
  if (rows_per_s <= 0) {
    chosen = &cells.front();
    p.batch = chosen->batch;
    p.p99_s = chosen->exec_s;
    p.meets_latency = options_.latency_goal_s <= 0 || p.p99_s <= goal;
  } else {
    // Among the batch sizes that keep the instance below its utilization bound and whose
    // predicted p99 (execution stretched by queueing, plus the time to gather the batch) meets the
    // goal: the smallest, or with a power budget or an energy goal the one drawing least power.
    // Failing all, the one that keeps it least busy.
    const bool by_power = options_.power_budget_w > 0 || options_.joules_goal > 0;
    const VariantCell* least_busy = nullptr;
    double least_u = std::numeric_limits<double>::infinity();
    double best_watts = std::numeric_limits<double>::infinity();
    for (const VariantCell& c : cells) {
      const double u = rows_per_s * c.exec_s / static_cast<double>(c.batch);
      if (u < least_u) least_u = u, least_busy = &c;
      if (u >= options_.max_utilization * margin) continue;
      const double p99 =
          c.exec_s * (1 + 2 * u / (1 - u)) + static_cast<double>(c.batch - 1) / rows_per_s;
      if (options_.latency_goal_s > 0 && p99 > goal) continue;
      const double watts = c.watts >= 0 ? u * c.watts : u;  // ordering only
      if (chosen != nullptr && (!by_power || watts >= best_watts)) continue;
      chosen = &c;
      best_watts = watts;
      p.utilization = u;
      p.p99_s = p99;
      p.meets_latency = true;
    }
    if (chosen == nullptr) {
      chosen = least_busy;
      p.utilization = least_u;
      p.p99_s = std::numeric_limits<double>::infinity();
    }
    p.batch = chosen->batch;
  }
  const double u = std::min(p.utilization, 1.0);
  if (chosen->watts >= 0)
    p.watts = options_.idle_watts >= 0
                  ? options_.idle_watts +
                        power_scale_ * u * std::max(0.0, chosen->watts - options_.idle_watts)
                  : power_scale_ * u * chosen->watts;
  if (p.watts >= 0 && rows_per_s > 0) p.joules_per_row = p.watts / rows_per_s;
  if (options_.power_budget_w > 0 && p.watts >= 0)
    p.meets_power = p.watts <= options_.power_budget_w * margin;
  if (options_.joules_goal > 0 && p.joules_per_row >= 0)
    p.meets_joules = p.joules_per_row <= options_.joules_goal * margin;
  return p;
}

size_t VariantPolicy::Choose(const VariantWindow& w, std::string* why) const {
  const size_t n = variants_.size();
  if (n <= 1) return 0;
  char text[256];
  if (options_.rule == VariantRule::kLowLoadLowPrecision) {
    const VariantPrediction ref = Predict(0, w.rows_per_s);
    std::snprintf(text, sizeof(text), "%.0f rows/s: %s would be %.0f%% busy", w.rows_per_s,
                  variants_[0].name.c_str(), 100 * ref.utilization);
    *why = text;
    return ref.utilization < 0.5 ? n - 1 : 0;
  }
  auto cooling = [&](size_t v) { return failed_until_[v] > w.now_ns; };
  for (size_t v = 0; v < n; ++v) {
    if (cooling(v)) continue;
    const VariantPrediction p = Predict(v, w.rows_per_s, v < active_ ? options_.margin : 1);
    if (!p.Meets()) continue;
    std::snprintf(text, sizeof(text),
                  "%.0f rows/s: %s meets the goals (batch %lld, %.0f%% busy, p99 %.2f ms, %.0f W)",
                  w.rows_per_s, variants_[v].name.c_str(), static_cast<long long>(p.batch),
                  100 * p.utilization, 1e3 * p.p99_s, p.watts);
    *why = text;
    return v;
  }
  // None meets them all: with a power budget, the lowest power among those that meet the latency
  // goal; else (or if none does) the least busy; ties go to the less accurate variant (the one
  // the declared order says is cheaper). Cooling off does not count here: a variant that broke a
  // goal may still be the one that comes closest (a budget's lowest-power variant).
  size_t best = n - 1;
  double best_key = std::numeric_limits<double>::infinity();
  for (size_t v = 0; v < n; ++v) {
    const VariantPrediction p = Predict(v, w.rows_per_s);
    const double key = options_.power_budget_w > 0 && p.meets_latency && p.watts >= 0
                           ? p.watts
                           : 1e12 + p.utilization;
    if (key <= best_key) best_key = key, best = v;  // ties: the cheaper, later one
  }
  std::snprintf(text, sizeof(text), "%.0f rows/s: no variant meets every goal; %s comes closest",
                w.rows_per_s, variants_[best].name.c_str());
  *why = text;
  return best;
}

VariantPolicy::Decision VariantPolicy::OnWindow(const VariantWindow& w) {
  Decision d;
  // Measurements count against the active variant only once the window holds nothing else.
  const bool owned = !switched_once_ || w.now_ns - last_switch_ns_ >= options_.window_ns;
  const bool late = owned && options_.latency_goal_s > 0 && w.p99_s > options_.latency_goal_s;
  const bool hot = owned && options_.power_budget_w > 0 && w.watts > options_.power_budget_w;
  if (options_.rule == VariantRule::kGoal && (late || hot))
    failed_until_[active_] = w.now_ns + options_.cooloff_ns;
  // What the window drew above the floor against what the table predicted for the active variant.
  if (owned && w.watts >= 0 && w.rows_per_s > 0 && options_.idle_watts >= 0) {
    const VariantPrediction p = Predict(active_, w.rows_per_s);
    const double predicted = (p.watts - options_.idle_watts) / power_scale_;
    if (p.watts >= 0 && predicted > 1) {
      const double ratio = std::clamp((w.watts - options_.idle_watts) / predicted, 0.25, 4.0);
      power_scale_ = 0.5 * power_scale_ + 0.5 * ratio;
    }
  }
  std::string why;
  const size_t chosen = Choose(w, &why);
  const uint64_t dwell =
      (late || hot) && chosen > active_ ? options_.dwell_ns / 4 : options_.dwell_ns;
  const bool dwelt = !switched_once_ || w.now_ns - last_switch_ns_ >= dwell;
  if (chosen != active_ && dwelt) {
    d.reason = variants_[active_].name + " -> " + variants_[chosen].name + ": ";
    if (late) d.reason += "measured p99 over the goal; ";
    if (hot) d.reason += "measured power over the budget; ";
    d.reason += why;
    active_ = chosen;
    last_switch_ns_ = w.now_ns;
    switched_once_ = true;
    d.switched = true;
  }
  d.variant = active_;
  return d;
}

}  // namespace nereid
