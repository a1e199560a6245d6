#include "metrics/custom_metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace nereid {

struct CustomMetrics::Metric {
  std::string labels;  // rendered: key="value",... in key order
  int handles = 0;
  double value = 0;              // counter, gauge
  std::vector<double> bounds;    // histogram: upper bounds, ascending
  std::vector<uint64_t> counts;  // histogram: per bucket (not cumulative), the last one +Inf
  double sum = 0;
  uint64_t count = 0;
};

struct CustomMetrics::Family {
  MetricKind kind;
  std::string name, description;
  int handles = 0;
  bool deleted = false;
  std::map<std::string, std::shared_ptr<Metric>> metrics;  // by rendered labels
};

namespace {

// Prometheus' metric names: [a-zA-Z_:][a-zA-Z0-9_:]*; label names the same without ':'.
bool ValidName(const std::string& s, bool colon) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    (colon && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// Escapes for the text format: a label value escapes \, " and newlines; HELP text \ and newlines.
std::string Escape(const std::string& s, bool quotes) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && quotes)
      out += "\\\"";
    else
      out += c;
  }
  return out;
}

// The shortest text that reads back as 'v' (2023, 7.55, 0.1); NaN and infinities as Prometheus
// spells them.
std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

const char* KindName(MetricKind k) {
  switch (k) {
    case MetricKind::kCounter:
      return "counter";
    case MetricKind::kGauge:
      return "gauge";
    case MetricKind::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string Braced(const std::string& labels, const std::string& extra = "") {
  std::string all = labels;
  if (!extra.empty()) all += (all.empty() ? "" : ",") + extra;
  return all.empty() ? "" : "{" + all + "}";
}

}  // namespace

CustomMetrics& CustomMetrics::Get() {
  static auto* metrics = new CustomMetrics();  // never destroyed: backends may outlive statics
  return *metrics;
}

StatusOr<std::unique_ptr<CustomMetrics::FamilyHandle>> CustomMetrics::NewFamily(
    MetricKind kind, const std::string& name, const std::string& description) {
  if (name.size() > kMaxNameBytes || !ValidName(name, true))
    return InvalidArgument("metric family name '" + name.substr(0, kMaxNameBytes) +
                           "' is not a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*, at most " +
                           std::to_string(kMaxNameBytes) + " characters)");
  if (name.rfind("nv_", 0) == 0)
    return InvalidArgument("metric family name '" + name +
                           "': the 'nv_' prefix belongs to the server's own metrics");
  if (description.size() > kMaxTextBytes)
    return InvalidArgument("metric family '" + name + "': description longer than " +
                           std::to_string(kMaxTextBytes) + " bytes");
  if (kind != MetricKind::kCounter && kind != MetricKind::kGauge && kind != MetricKind::kHistogram)
    return InvalidArgument("metric family '" + name + "': unknown kind");
  std::lock_guard lock(mu_);
  std::shared_ptr<Family>& family = families_[name];
  if (family == nullptr) {
    if (families_.size() > kMaxFamilies) {
      families_.erase(name);
      return Unavailable("too many custom metric families (at most " +
                         std::to_string(kMaxFamilies) + ")");
    }
    family = std::make_shared<Family>();
    family->kind = kind, family->name = name, family->description = description;
  } else if (family->kind != kind) {
    return InvalidArgument("metric family '" + name + "' already exists as a " +
                           KindName(family->kind) + ", not a " + KindName(kind));
  }
  ++family->handles;
  return std::make_unique<FamilyHandle>(FamilyHandle{family});
}

void CustomMetrics::DeleteFamily(std::unique_ptr<FamilyHandle> handle) {
  if (handle == nullptr) return;
  std::lock_guard lock(mu_);
  Family& f = *handle->family;
  if (--f.handles > 0) return;
  f.deleted = true;
  if (auto it = families_.find(f.name); it != families_.end() && it->second == handle->family)
    families_.erase(it);
}

StatusOr<std::unique_ptr<CustomMetrics::MetricHandle>> CustomMetrics::NewMetric(
    const FamilyHandle& handle, const std::vector<std::pair<std::string, std::string>>& labels,
    const std::optional<std::vector<double>>& buckets) {
  Family& f = *handle.family;
  if (labels.size() > kMaxLabels)
    return InvalidArgument("metric of '" + f.name + "': more than " + std::to_string(kMaxLabels) +
                           " labels");
  std::vector<std::pair<std::string, std::string>> sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  std::string rendered;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const auto& [key, value] = sorted[i];
    if (key.size() > kMaxNameBytes || !ValidName(key, false) || key.rfind("__", 0) == 0)
      return InvalidArgument("metric of '" + f.name + "': label name '" +
                             key.substr(0, kMaxNameBytes) + "' is not a Prometheus label name");
    if (i > 0 && sorted[i - 1].first == key)
      return InvalidArgument("metric of '" + f.name + "': label '" + key + "' given twice");
    if (value.size() > kMaxTextBytes)
      return InvalidArgument("metric of '" + f.name + "': label '" + key + "' longer than " +
                             std::to_string(kMaxTextBytes) + " bytes");
    if (key == "le" && f.kind == MetricKind::kHistogram)
      return InvalidArgument("metric of '" + f.name + "': 'le' is a histogram's own label");
    rendered += (i ? "," : "") + key + "=\"" + Escape(value, true) + "\"";
  }
  std::vector<double> bounds;
  if (f.kind == MetricKind::kHistogram) {
    if (!buckets) return InvalidArgument("metric of histogram '" + f.name + "' needs 'buckets'");
    if (buckets->size() > kMaxBuckets)
      return InvalidArgument("metric of '" + f.name + "': more than " +
                             std::to_string(kMaxBuckets) + " buckets");
    for (size_t i = 0; i < buckets->size(); ++i) {
      const double b = (*buckets)[i];
      if (std::isnan(b) || (i > 0 && !(b > (*buckets)[i - 1])))
        return InvalidArgument("metric of '" + f.name +
                               "': buckets must be distinct numbers in ascending order");
    }
    bounds = *buckets;
  }
  std::lock_guard lock(mu_);
  if (f.deleted)
    return InvalidArgument(
        "Invalid metric operation as the corresponding 'MetricFamily' has been deleted.");
  std::shared_ptr<Metric>& metric = f.metrics[rendered];
  if (metric == nullptr) {
    if (f.metrics.size() > kMaxMetricsPerFamily) {
      f.metrics.erase(rendered);
      return Unavailable("metric family '" + f.name + "' has too many metrics (at most " +
                         std::to_string(kMaxMetricsPerFamily) + ")");
    }
    metric = std::make_shared<Metric>();
    metric->labels = rendered;
    metric->bounds = std::move(bounds);
    metric->counts.assign(metric->bounds.size() + 1, 0);
  }
  ++metric->handles;
  return std::make_unique<MetricHandle>(MetricHandle{handle.family, metric});
}

void CustomMetrics::DeleteMetric(std::unique_ptr<MetricHandle> handle) {
  if (handle == nullptr) return;
  std::lock_guard lock(mu_);
  if (--handle->metric->handles > 0) return;
  auto& metrics = handle->family->metrics;
  if (auto it = metrics.find(handle->metric->labels);
      it != metrics.end() && it->second == handle->metric)
    metrics.erase(it);
}

Status CustomMetrics::Usable(const MetricHandle& m) const {
  if (m.family->deleted)
    return InvalidArgument(
        "Invalid metric operation as the corresponding 'MetricFamily' has been deleted.");
  return Status::Ok();
}

Status CustomMetrics::Increment(const MetricHandle& m, double value) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(Usable(m));
  switch (m.family->kind) {
    case MetricKind::kHistogram:
      return InvalidArgument("increment() is not supported for a histogram; use observe()");
    case MetricKind::kCounter:
      if (!(value >= 0))
        return InvalidArgument("a counter can only be incremented by a non-negative number");
      break;
    case MetricKind::kGauge:
      break;
  }
  m.metric->value += value;
  return Status::Ok();
}

Status CustomMetrics::Set(const MetricHandle& m, double value) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(Usable(m));
  if (m.family->kind != MetricKind::kGauge)
    return InvalidArgument(std::string("set() is not supported for a ") + KindName(m.family->kind) +
                           "; only gauges are set");
  m.metric->value = value;
  return Status::Ok();
}

Status CustomMetrics::Observe(const MetricHandle& m, double value) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(Usable(m));
  if (m.family->kind != MetricKind::kHistogram)
    return InvalidArgument(std::string("observe() is not supported for a ") +
                           KindName(m.family->kind) + "; only histograms observe");
  Metric& h = *m.metric;
  const size_t bucket =
      std::lower_bound(h.bounds.begin(), h.bounds.end(), value) - h.bounds.begin();  // le
  ++h.counts[bucket];
  h.sum += value;
  ++h.count;
  return Status::Ok();
}

StatusOr<double> CustomMetrics::Value(const MetricHandle& m) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(Usable(m));
  if (m.family->kind == MetricKind::kHistogram)
    return InvalidArgument("value() is not supported for a histogram");
  return m.metric->value;
}

void CustomMetrics::Render(std::ostringstream& out) {
  std::lock_guard lock(mu_);
  for (const auto& [name, f] : families_) {
    out << "# HELP " << name << " " << Escape(f->description, false) << "\n# TYPE " << name << " "
        << KindName(f->kind) << "\n";
    for (const auto& [labels, m] : f->metrics) {
      if (f->kind != MetricKind::kHistogram) {
        out << name << Braced(labels) << " " << Number(m->value) << "\n";
        continue;
      }
      out << name << "_count" << Braced(labels) << " " << m->count << "\n";
      out << name << "_sum" << Braced(labels) << " " << Number(m->sum) << "\n";
      uint64_t cumulative = 0;
      for (size_t b = 0; b <= m->bounds.size(); ++b) {
        cumulative += m->counts[b];
        const std::string le = b < m->bounds.size() ? Number(m->bounds[b]) : "+Inf";
        out << name << "_bucket" << Braced(labels, "le=\"" + le + "\"") << " " << cumulative
            << "\n";
      }
    }
  }
}

}  // namespace nereid
