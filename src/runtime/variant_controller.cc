#include "runtime/variant_controller.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "common/clock.h"
#include "common/logging.h"
#include "config/model_parameters.h"
#include "gpu/cuda_driver.h"
#include "gpu/nvml.h"
#include "runtime/model.h"
#include "runtime/warmup.h"
#include "scheduler/dynamic_batcher.h"

namespace nereid {
namespace {

constexpr uint64_t kMs = 1'000'000;

}  // namespace

StatusOr<VariantSettings> ReadVariantSettings(const inference::ModelConfig& config,
                                              bool gpu_instances) {
  VariantSettings s;
  ASSIGN_OR_RETURN(LatencyGoalConfig goal, ReadLatencyGoal(config));
  s.policy.latency_goal_s = static_cast<double>(goal.goal_us) * 1e-6;
  if (auto it = config.parameters().find("nereid.variant_policy");
      it != config.parameters().end()) {
    const std::string& v = it->second.string_value();
    if (v == "low_load_low_precision")
      s.policy.rule = VariantRule::kLowLoadLowPrecision;
    else if (v != "goal")
      return InvalidArgument("model '" + config.name() +
                             "': parameter 'nereid.variant_policy' must be 'goal' or "
                             "'low_load_low_precision', got '" +
                             v + "'");
  }
  RETURN_IF_ERROR(
      NumberParameter(config, "nereid.power_budget_w", 1, 1e5, &s.policy.power_budget_w));
  double mj = 0;
  RETURN_IF_ERROR(NumberParameter(config, "nereid.energy_goal_mj", 1e-6, 1e6, &mj));
  s.policy.joules_goal = mj * 1e-3;
  double dwell_ms = 2000, profile_ms = gpu_instances ? 400 : 50;
  RETURN_IF_ERROR(NumberParameter(config, "nereid.variant_dwell_ms", 0, 3.6e6, &dwell_ms));
  RETURN_IF_ERROR(NumberParameter(config, "nereid.variant_profile_ms", 1, 10000, &profile_ms));
  s.policy.dwell_ns = static_cast<uint64_t>(dwell_ms * 1e6);
  s.policy.window_ns = s.window_ns;
  s.profile_ns = static_cast<uint64_t>(profile_ms * 1e6);
  if (s.policy.power_budget_w > 0 && !gpu_instances)
    return InvalidArgument("model '" + config.name() +
                           "': parameter 'nereid.power_budget_w' needs KIND_GPU instances (the "
                           "budget is a GPU's watts, metered through NVML)");
  return s;
}

VariantController::VariantController(std::string model, int64_t version,
                                     std::vector<VariantInfo> declared, VariantSettings settings)
    : model_(std::move(model)),
      version_(std::to_string(version)),
      declared_(std::move(declared)),
      settings_(settings) {}

VariantController::~VariantController() { Stop(); }

Status VariantController::ProfileAndStart(const std::shared_ptr<Model>& model,
                                          ModelInstance* instance) {
  const inference::ModelConfig& config = model->config();
  const int64_t max_batch = config.max_batch_size();
  std::vector<int64_t> sizes;
  for (int64_t b = 1; b <= std::max<int64_t>(max_batch, 1); b *= 2) sizes.push_back(b);
  if (max_batch > 1 && sizes.back() != max_batch) sizes.push_back(max_batch);

  // Zero inputs of fixed shapes, one request of b rows per execution.
  auto sample_of = [&](int64_t rows) -> StatusOr<WarmupSample> {
    WarmupSample sample;
    sample.name = "variant_profile";
    sample.batch_size = 1;
    for (const auto& in : config.input()) {
      WarmupInput w;
      w.name = in.name();
      w.datatype = FromConfigType(in.data_type());
      if (max_batch > 0) w.shape.push_back(rows);
      for (int64_t d : in.dims()) {
        if (d < 0)
          return InvalidArgument("model '" + model_ +
                                 "': precision variants need fixed input "
                                 "dimensions to be measured; input '" +
                                 in.name() + "' has -1");
        w.shape.push_back(d);
      }
      const size_t element = DataTypeSize(w.datatype);
      if (element == 0)
        return InvalidArgument("model '" + model_ +
                               "': precision variants need fixed-size "
                               "inputs; input '" +
                               in.name() + "' is " + std::string(DataTypeName(w.datatype)));
      w.bytes = std::make_shared<std::vector<uint8_t>>(
          static_cast<size_t>(ElementCount(w.shape)) * element, 0);
      sample.inputs.push_back(std::move(w));
    }
    return sample;
  };

  auto& nvml = gpu::Nvml::Get();
  if (instance->kind() == NEREID_INSTANCE_GPU && nvml.available()) {
    const auto& devices = gpu::CudaDriver::Get().devices();
    const auto device = static_cast<size_t>(instance->device_id());
    if (device < devices.size())
      if (auto index = nvml.IndexOfUuid(devices[device].uuid))
        nvml_index_ = static_cast<int>(*index);
  }
  auto energy_mj = [&](uint64_t* mj) {
    return nvml_index_ >= 0 && nvml.TotalEnergyMillijoules(static_cast<size_t>(nvml_index_), mj);
  };
  VariantPolicyOptions options = settings_.policy;
  if (uint64_t before = 0, after = 0; energy_mj(&before)) {
    const uint64_t t0 = SteadyNowNs();
    std::this_thread::sleep_for(std::chrono::nanoseconds(settings_.profile_ns));
    if (energy_mj(&after))
      options.idle_watts = static_cast<double>(after - before) * 1e-3 /
                           (static_cast<double>(SteadyNowNs() - t0) * 1e-9);
  }
  std::vector<VariantProfile> profiles;
  for (uint32_t v = 0; v < declared_.size(); ++v) {
    if (!declared_[v].admitted) continue;
    admitted_.push_back(v);
    VariantProfile& profile = profiles.emplace_back();
    profile.name = declared_[v].name;
    instance->ForceVariant(static_cast<int32_t>(v));
    for (int64_t rows : sizes) {
      ASSIGN_OR_RETURN(WarmupSample sample, sample_of(rows));
      Status s = RunSampleOnce(model, sample, instance);  // the first run (graph capture)
      uint64_t mj0 = 0, mj1 = 0;
      const bool metered = energy_mj(&mj0);
      const uint64_t t0 = SteadyNowNs();
      uint64_t runs = 0, now = t0;
      while (s.ok() && (runs < 3 || now - t0 < settings_.profile_ns)) {
        s = RunSampleOnce(model, sample, instance);
        ++runs;
        now = SteadyNowNs();
      }
      if (!s.ok()) {
        instance->ForceVariant(-1);
        return Status(s.code(), "model '" + model_ + "': measuring variant '" + profile.name +
                                    "' at batch size " + std::to_string(rows) + ": " + s.message());
      }
      VariantCell cell;
      cell.batch = rows;
      const double seconds = static_cast<double>(now - t0) * 1e-9;
      cell.exec_s = seconds / static_cast<double>(runs);
      if (metered && energy_mj(&mj1)) cell.watts = static_cast<double>(mj1 - mj0) * 1e-3 / seconds;
      profile.cells.push_back(cell);
    }
  }
  instance->ForceVariant(-1);
  if (admitted_.empty()) return Status::Ok();  // the backend refused every variant it declared
  policy_ = std::make_unique<VariantPolicy>(std::move(profiles), options);
  active_.store(admitted_.front());
  for (const VariantProfile& p : policy_->variants()) {
    std::string line;
    for (const VariantCell& c : p.cells) {
      char cell[96];
      std::snprintf(cell, sizeof(cell), " %lld:%.1fus", static_cast<long long>(c.batch),
                    c.exec_s * 1e6);
      line += cell;
      if (c.watts >= 0) line += "@" + std::to_string(static_cast<int>(std::lround(c.watts))) + "W";
    }
    LOG_INFO << "model '" << model_ << "' variant " << p.name << " measured (batch:time):" << line;
  }
  LOG_INFO << "model '" << model_ << "' runs variant " << declared_[admitted_.front()].name
           << " first; policy " << VariantRuleName(options.rule);
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void VariantController::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void VariantController::OnCompletion(uint64_t end_ns, uint64_t latency_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  latencies_.emplace_back(end_ns, latency_ns);
  // Bounded whatever the rate: the window's p99 needs no more than the newest 100,000.
  if (latencies_.size() > 100'000) latencies_.pop_front();
}

void VariantController::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::nanoseconds(settings_.tick_ns), [&] { return stop_; });
    if (stop_) break;
    lock.unlock();
    try {
      Tick(SteadyNowNs());
    } catch (const std::exception& e) {
      LOG_ERROR << "model '" << model_ << "' variant policy: " << e.what();
    }
    lock.lock();
  }
}

void VariantController::Tick(uint64_t now_ns) {
  VariantWindow w;
  w.now_ns = now_ns;
  uint64_t mj = 0;
  const bool metered = nvml_index_ >= 0 && gpu::Nvml::Get().TotalEnergyMillijoules(
                                               static_cast<size_t>(nvml_index_), &mj);
  std::vector<uint64_t> window;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t since = now_ns > settings_.window_ns ? now_ns - settings_.window_ns : 0;
    while (!latencies_.empty() && latencies_.front().first < since) latencies_.pop_front();
    window.reserve(latencies_.size());
    for (const auto& [end, latency] : latencies_) window.push_back(latency);
    arrivals_.emplace_back(now_ns, arrived_rows_.load(std::memory_order_relaxed));
    while (arrivals_.size() > 1 && arrivals_[1].first <= since) arrivals_.pop_front();
    if (metered) energy_.emplace_back(now_ns, mj);
    while (energy_.size() > 1 && energy_[1].first <= since) energy_.pop_front();
    // The load: the larger of the rate over the window and over its newest rise_ns, so that a
    // rising load is acted on within a few ticks while a falling one must show over the whole
    // window. (Each 1 s window's power includes the ticks before a switch: at a step from 10% to
    // 90% of capacity a 100 ms reaction alone put 25 W of a 510 W budget into the step's window.)
    auto rate = [&](size_t from) {
      const auto& [t0, rows0] = arrivals_[from];
      const double span = static_cast<double>(now_ns - t0) * 1e-9;
      return span > 0 ? static_cast<double>(arrivals_.back().second - rows0) / span : 0.0;
    };
    if (arrivals_.size() > 1) {
      size_t newest = arrivals_.size() - 2;
      const uint64_t rise_from = now_ns > settings_.rise_ns ? now_ns - settings_.rise_ns : 0;
      while (newest > 0 && arrivals_[newest].first > rise_from) --newest;
      w.rows_per_s = std::max(rate(0), rate(newest));
    }
    if (energy_.size() > 1 && energy_.back().first > energy_.front().first)
      w.watts = static_cast<double>(energy_.back().second - energy_.front().second) * 1e-3 /
                (static_cast<double>(energy_.back().first - energy_.front().first) * 1e-9);
  }
  if (window.size() >= 20) {
    const size_t k =
        std::min(window.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(window.size())));
    std::nth_element(window.begin(), window.begin() + static_cast<std::ptrdiff_t>(k), window.end());
    w.p99_s = static_cast<double>(window[k]) * 1e-9;
  }
  VariantPolicy::Decision d;
  {
    std::lock_guard<std::mutex> lock(mu_);
    d = policy_->OnWindow(w);
    last_window_ = w;
  }
  active_.store(admitted_[d.variant], std::memory_order_relaxed);
  if (d.switched) {
    switches_.fetch_add(1, std::memory_order_relaxed);
    LOG_INFO << "model '" << model_ << "' version " << version_ << " switches variant " << d.reason;
  }
}

std::string VariantController::Json() const {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  std::lock_guard<std::mutex> lock(mu_);
  auto number = [&](double d) {
    if (std::isfinite(d))
      w.Double(d);
    else
      w.Null();
  };
  w.StartObject();
  w.Key("active");
  w.String(declared_[active()].name.c_str());
  w.Key("switches");
  w.Uint64(switches());
  if (policy_) {
    const VariantPolicyOptions& o = policy_->options();
    w.Key("policy");
    w.StartObject();
    w.Key("rule");
    w.String(VariantRuleName(o.rule));
    w.Key("latency_goal_us");
    number(o.latency_goal_s * 1e6);
    w.Key("power_budget_w");
    number(o.power_budget_w);
    w.Key("energy_goal_mj");
    number(o.joules_goal * 1e3);
    w.Key("dwell_ms");
    w.Uint64(o.dwell_ns / kMs);
    w.Key("idle_watts");
    number(o.idle_watts);
    w.EndObject();
    w.Key("window");
    w.StartObject();
    w.Key("rows_per_s");
    number(last_window_.rows_per_s);
    w.Key("p99_us");
    number(last_window_.p99_s * 1e6);
    w.Key("watts");
    number(last_window_.watts);
    w.EndObject();
  }
  w.Key("variants");
  w.StartArray();
  size_t position = 0;
  for (uint32_t v = 0; v < declared_.size(); ++v) {
    const VariantInfo& info = declared_[v];
    w.StartObject();
    w.Key("name");
    w.String(info.name.c_str());
    w.Key("admitted");
    w.Bool(info.admitted);
    w.Key("top1_agreement");
    number(info.top1_agreement);
    w.Key("max_abs_error");
    number(info.max_abs_error);
    w.Key("max_rel_error");
    number(info.max_rel_error);
    if (!info.detail.empty()) {
      w.Key("detail");
      w.String(info.detail.c_str());
    }
    if (policy_ && position < admitted_.size() && admitted_[position] == v) {
      const VariantProfile& p = policy_->variants()[position];
      w.Key("table");
      w.StartArray();
      for (const VariantCell& c : p.cells) {
        w.StartObject();
        w.Key("batch_size");
        w.Int64(c.batch);
        w.Key("exec_us");
        number(c.exec_s * 1e6);
        w.Key("watts");
        number(c.watts);
        w.Key("mj_per_inference");
        number(c.watts >= 0 ? c.watts * c.exec_s / static_cast<double>(c.batch) * 1e3 : -1);
        w.EndObject();
      }
      w.EndArray();
      const VariantPrediction pred = policy_->Predict(position, last_window_.rows_per_s);
      w.Key("prediction");
      w.StartObject();
      w.Key("batch_size");
      w.Int64(pred.batch);
      w.Key("utilization");
      number(pred.utilization);
      w.Key("p99_us");
      number(pred.p99_s * 1e6);
      w.Key("watts");
      number(pred.watts);
      w.Key("meets_goals");
      w.Bool(pred.Meets());
      w.EndObject();
      ++position;
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return buffer.GetString();
}

}  // namespace nereid
