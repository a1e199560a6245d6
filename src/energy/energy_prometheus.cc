#include "energy/energy_prometheus.h"

#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "common/prometheus_escape.h"

namespace nereid::energy {

std::string EnergyPrometheusText(const EnergyLedger& ledger) {
  const std::vector<ModelEnergy> models = ledger.Models();
  const std::vector<ScopeEnergy> scopes = ledger.Scopes();
  if (scopes.empty()) return "";
  std::ostringstream out;
  out << std::setprecision(15);  // sums of the parts match the meter's figure
  auto family = [&](const char* name, const char* type, const char* help) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  };
  auto model_labels = [](const ModelEnergy& m) {
    return "model=\"" + PrometheusEscape(m.model) + "\",version=\"" + std::to_string(m.version) +
           "\",scope=\"" + m.scope + "\",source=\"" + m.source + "\"";
  };
  auto scope_labels = [](const ScopeEnergy& s) {
    return "{scope=\"" + s.scope.name + "\",source=\"" + s.scope.source + "\"}";
  };
  family("nereid_energy_joules_total", "counter",
         "Energy attributed to the model version on the scope: kind=active (above the floor) or "
         "idle (its share of the floor while its batches ran)");
  for (const auto& m : models) {
    out << "nereid_energy_joules_total{" << model_labels(m) << ",kind=\"active\"} "
        << m.active_joules << "\n";
    out << "nereid_energy_joules_total{" << model_labels(m) << ",kind=\"idle\"} " << m.idle_joules
        << "\n";
  }
  family("nereid_energy_inferences_total", "counter",
         "Inferences (batch rows) the model version ran on the scope, the divisor of J/inference");
  for (const auto& m : models)
    out << "nereid_energy_inferences_total{" << model_labels(m) << "} " << m.inferences << "\n";
  family("nereid_energy_joules_per_inference", "histogram",
         "Each finished batch's active and idle joules per row, counted once per row (_sum: "
         "their joules, _count: their rows)");
  for (const auto& m : models) {
    const std::string labels = model_labels(m);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < kJoulesPerInferenceBounds.size(); ++i) {
      cumulative += m.per_inference_buckets[i];
      out << "nereid_energy_joules_per_inference_bucket{" << labels << ",le=\""
          << kJoulesPerInferenceBounds[i] << "\"} " << cumulative << "\n";
    }
    out << "nereid_energy_joules_per_inference_bucket{" << labels << ",le=\"+Inf\"} "
        << m.per_inference_count << "\n";
    out << "nereid_energy_joules_per_inference_sum{" << labels << "} " << m.per_inference_sum
        << "\n";
    out << "nereid_energy_joules_per_inference_count{" << labels << "} " << m.per_inference_count
        << "\n";
  }
  family("nereid_energy_metered_joules_total", "counter",
         "The scope's meter reading over the attributed ticks: the sum of every model's active "
         "and idle joules and the unattributed idle joules");
  for (const auto& s : scopes)
    out << "nereid_energy_metered_joules_total" << scope_labels(s) << " " << s.metered_joules
        << "\n";
  family("nereid_energy_unattributed_idle_joules_total", "counter",
         "Energy of ticks in which no batch ran on the scope");
  for (const auto& s : scopes)
    out << "nereid_energy_unattributed_idle_joules_total" << scope_labels(s) << " "
        << s.unattributed_idle << "\n";
  family("nereid_energy_floor_watts", "gauge",
         "The scope's floor power estimate (what it draws with nothing running; 0 for estimates)");
  for (const auto& s : scopes)
    out << "nereid_energy_floor_watts" << scope_labels(s) << " " << s.floor_watts << "\n";
  if (const CarbonIntensity* carbon = ledger.carbon(); carbon != nullptr && carbon->known()) {
    family("nereid_carbon_grams_total", "counter",
           "Grams CO2e of the model version's active and idle joules on the scope: joules / 3.6e6 "
           "x the grid's carbon intensity at the time x PUE");
    for (const auto& m : models)
      out << "nereid_carbon_grams_total{" << model_labels(m) << "} " << m.carbon_grams << "\n";
    family("nereid_carbon_unattributed_grams_total", "counter",
           "Grams CO2e of the scope's ticks in which nothing ran");
    for (const auto& s : scopes)
      out << "nereid_carbon_unattributed_grams_total" << scope_labels(s) << " "
          << s.unattributed_carbon << "\n";
    family("nereid_carbon_intensity_grams_per_kwh", "gauge",
           "The grid's carbon intensity in force now (--carbon-intensity or its file)");
    out << "nereid_carbon_intensity_grams_per_kwh " << carbon->At(WallSeconds()) << "\n";
    family("nereid_pue", "gauge", "The power usage effectiveness carbon figures include (--pue)");
    out << "nereid_pue " << carbon->pue() << "\n";
  }
  family("nereid_energy_dropped_batches_total", "counter",
         "Batch reports lost to a full ring (their energy went to the other batches)");
  out << "nereid_energy_dropped_batches_total " << ledger.dropped() << "\n";
  return out.str();
}

}  // namespace nereid::energy
