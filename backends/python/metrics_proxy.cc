#include "python/metrics_proxy.h"

#include <string>
#include <vector>

namespace nereid::python {

void MetricsProxy::Handle(const std::shared_ptr<Channel>& channel, const Message& m) {
  const auto& h = m.header;
  const std::string op = m.op();
  const uint64_t id = h.HasMember("id") && h["id"].IsUint64() ? h["id"].GetUint64() : 0;
  const bool asked = h.HasMember("call") && h["call"].IsUint64();
  NereidError* error = nullptr;
  double value = 0;
  {
    std::lock_guard lock(mu_);
    if (op == "metric_family_new") {
      const int kind = h.HasMember("kind") && h["kind"].IsInt() ? h["kind"].GetInt() : -1;
      NereidMetricFamily* family = nullptr;
      if (families_.size() >= kMaxMetricHandles || families_.count(id))
        error = NereidErrorNew(NEREID_ERROR_INVALID_ARG, "too many metric families");
      else
        error = NereidMetricFamilyNew(static_cast<NereidMetricKind>(kind),
                                      StringField(h, "name").c_str(),
                                      StringField(h, "description").c_str(), &family);
      if (error == nullptr) families_[id] = family;
    } else if (op == "metric_family_delete") {
      if (auto it = families_.find(id); it != families_.end()) {
        NereidMetricFamilyDelete(it->second);
        families_.erase(it);
      }
    } else if (op == "metric_new") {
      error = NewMetric(h, id);
    } else if (op == "metric_delete") {
      if (auto it = metrics_.find(id); it != metrics_.end()) {
        NereidMetricDelete(it->second);
        metrics_.erase(it);
      }
    } else if (op == "metric") {
      auto it = metrics_.find(id);
      const std::string what = StringField(h, "what");
      const double v = h.HasMember("value") && h["value"].IsNumber() ? h["value"].GetDouble() : 0;
      if (it == metrics_.end())
        error = NereidErrorNew(NEREID_ERROR_INVALID_ARG, "no such metric");
      else if (what == "increment")
        error = NereidMetricIncrement(it->second, v);
      else if (what == "set")
        error = NereidMetricSet(it->second, v);
      else if (what == "observe")
        error = NereidMetricObserve(it->second, v);
      else if (what == "value")
        error = NereidMetricValue(it->second, &value);
      else
        error = NereidErrorNew(NEREID_ERROR_INVALID_ARG, "unknown metric operation");
    } else {
      error = NereidErrorNew(NEREID_ERROR_INVALID_ARG, ("unknown message '" + op + "'").c_str());
    }
  }
  if (asked) {
    rapidjson::Document reply = AnswerHeader(h["call"].GetUint64(), true);
    auto& a = reply.GetAllocator();
    if (error != nullptr)
      reply.AddMember("error", rapidjson::Value(NereidErrorGetMessage(error), a), a);
    else
      reply.AddMember("value", value, a);
    channel->Write(Json(reply));
  }
  if (error != nullptr) NereidErrorDelete(error);
}

NereidError* MetricsProxy::NewMetric(const rapidjson::Value& h, uint64_t id) {
  const uint64_t family_id =
      h.HasMember("family") && h["family"].IsUint64() ? h["family"].GetUint64() : 0;
  auto family = families_.find(family_id);
  if (family == families_.end())
    return NereidErrorNew(NEREID_ERROR_INVALID_ARG,
                          "Invalid metric operation as the corresponding 'MetricFamily' has "
                          "been deleted.");
  if (metrics_.size() >= kMaxMetricHandles || metrics_.count(id))
    return NereidErrorNew(NEREID_ERROR_INVALID_ARG, "too many metrics");
  std::vector<std::string> names, values;
  if (h.HasMember("labels") && h["labels"].IsObject())
    for (const auto& label : h["labels"].GetObject()) {
      if (!label.value.IsString())
        return NereidErrorNew(NEREID_ERROR_INVALID_ARG, "label values must be strings");
      names.emplace_back(label.name.GetString(), label.name.GetStringLength());
      values.emplace_back(label.value.GetString(), label.value.GetStringLength());
    }
  std::vector<const char*> name_ptrs, value_ptrs;
  for (size_t i = 0; i < names.size(); ++i)
    name_ptrs.push_back(names[i].c_str()), value_ptrs.push_back(values[i].c_str());
  std::vector<double> buckets;
  const bool has_buckets = h.HasMember("buckets") && h["buckets"].IsArray();
  if (has_buckets)
    for (const auto& b : h["buckets"].GetArray()) {
      if (!b.IsNumber()) return NereidErrorNew(NEREID_ERROR_INVALID_ARG, "buckets must be numbers");
      buckets.push_back(b.GetDouble());
    }
  NereidMetric* metric = nullptr;
  static const double kNoBuckets = 0;  // non-NULL: "given, and empty"
  NereidError* error = NereidMetricNew(
      family->second, name_ptrs.data(), value_ptrs.data(), static_cast<uint32_t>(names.size()),
      has_buckets ? (buckets.empty() ? &kNoBuckets : buckets.data()) : nullptr,
      static_cast<uint32_t>(buckets.size()), &metric);
  if (error == nullptr) metrics_[id] = metric;
  return error;
}

// The stub's metrics go with it (it ended, or the instance is unloaded): metrics first.
void MetricsProxy::ReleaseAll() {
  std::lock_guard lock(mu_);
  for (auto& [id, metric] : metrics_) NereidMetricDelete(metric);
  for (auto& [id, family] : families_) NereidMetricFamilyDelete(family);
  metrics_.clear(), families_.clear();
}

}  // namespace nereid::python
