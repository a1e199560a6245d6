#include "energy/energy_ledger.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "common/logging.h"
#include "energy/energy_prometheus.h"
#include "gpu/cuda_driver.h"
#include "metrics/prometheus.h"
#include "request/inference_request.h"

namespace nereid::energy {

// ---- Ring ---------------------------------------------------------------------------------------

EnergyLedger::Ring::Ring(size_t capacity_pow2)
    : slots_(new Slot[capacity_pow2]), mask_(capacity_pow2 - 1) {
  for (size_t i = 0; i < capacity_pow2; ++i) slots_[i].sequence.store(i, std::memory_order_relaxed);
}

bool EnergyLedger::Ring::Push(const Event& e) {
  size_t pos = head_.load(std::memory_order_relaxed);
  for (;;) {
    Slot& slot = slots_[pos & mask_];
    const size_t seq = slot.sequence.load(std::memory_order_acquire);
    const auto diff = static_cast<std::ptrdiff_t>(seq) - static_cast<std::ptrdiff_t>(pos);
    if (diff == 0) {
      if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        slot.event = e;
        slot.sequence.store(pos + 1, std::memory_order_release);
        return true;
      }
    } else if (diff < 0) {
      return false;  // full
    } else {
      pos = head_.load(std::memory_order_relaxed);
    }
  }
}

bool EnergyLedger::Ring::Pop(Event* e) {
  size_t pos = tail_.load(std::memory_order_relaxed);
  for (;;) {
    Slot& slot = slots_[pos & mask_];
    const size_t seq = slot.sequence.load(std::memory_order_acquire);
    const auto diff = static_cast<std::ptrdiff_t>(seq) - static_cast<std::ptrdiff_t>(pos + 1);
    if (diff == 0) {
      if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        *e = slot.event;
        slot.sequence.store(pos + mask_ + 1, std::memory_order_release);
        return true;
      }
    } else if (diff < 0) {
      return false;  // empty
    } else {
      pos = tail_.load(std::memory_order_relaxed);
    }
  }
}

// ---- Observer -----------------------------------------------------------------------------------

class EnergyLedger::Observer final : public EnergyObserver {
 public:
  Observer(EnergyLedger* ledger, std::vector<uint32_t> entries, std::vector<Entry*> by_domain)
      : ledger_(ledger), entries_(std::move(entries)), by_domain_(std::move(by_domain)) {}
  void OnExecution(const ExecutionRecord& record) override {
    if (record.instance == nullptr) return;  // an ensemble's: its steps' models hold the joules
    const size_t domain = ledger_->DomainOf(record);
    last_domain_.store(domain, std::memory_order_relaxed);
    ledger_->Record(entries_[domain], record);
  }
  double JoulesPerRow(int64_t rows) const override {
    const Entry& e = *by_domain_[last_domain_.load(std::memory_order_relaxed)];
    const std::atomic<float>* busy = e.busy_by_rows.load(std::memory_order_acquire);
    const double watts = e.watts.load(std::memory_order_relaxed);
    if (busy == nullptr || watts <= 0 || rows <= 0 || rows > kMaxTrackedRows) return -1;
    const double seconds = busy[rows].load(std::memory_order_relaxed);
    if (seconds <= 0) return -1;
    return watts * seconds / static_cast<double>(rows) +
           e.idle_per_row.load(std::memory_order_relaxed);
  }
  void OnRequestEnd(const RequestRecord&) override {}
  // A request that asked for its energy ("nereid.energy") gets it with its final response.
  void OnFinalResponse(const RequestRecord& record, InferenceResponse& response) override {
    if (!record.request->report_energy || record.execution == nullptr) return;
    const RequestEnergy e = EstimateRequest(*record.execution, record.request->batch_size);
    auto add = [&](const char* name, RequestParameter::Type type) -> RequestParameter& {
      RequestParameter& p = response.parameters.emplace_back();
      p.name = name;
      p.type = type;
      return p;
    };
    add("energy_joules", RequestParameter::Type::kDouble).double_value = e.joules;
    if (e.carbon_grams >= 0)
      add("carbon_grams", RequestParameter::Type::kDouble).double_value = e.carbon_grams;
    add("energy_source", RequestParameter::Type::kString).string_value = e.source;
    add("energy_scope", RequestParameter::Type::kString).string_value = e.scope;
  }
  RequestEnergy EstimateRequest(const ExecutionRecord& record, int64_t rows) const override {
    const Entry& e = *by_domain_[ledger_->DomainOf(record)];
    const uint64_t busy = record.BusyNs();
    const double share =
        record.rows > 0 ? static_cast<double>(rows) / static_cast<double>(record.rows) : 1.0;
    RequestEnergy out;
    out.joules = busy / 1e9 * e.watts.load(std::memory_order_relaxed) * share +
                 e.idle_per_row.load(std::memory_order_relaxed) * static_cast<double>(rows);
    const double grams_per_joule = ledger_->grams_per_joule_.load(std::memory_order_relaxed);
    if (grams_per_joule >= 0) out.carbon_grams = out.joules * grams_per_joule;
    out.source = e.totals.source;
    out.scope = e.totals.scope;
    return out;
  }

 private:
  EnergyLedger* ledger_;
  std::vector<uint32_t> entries_;  // by domain
  std::vector<Entry*> by_domain_;  // the same entries (stable: the ledger's deque only grows)
  std::atomic<size_t> last_domain_{0};
};

// ---- Ledger -------------------------------------------------------------------------------------

EnergyLedger::EnergyLedger(std::vector<std::unique_ptr<Meter>> meters, Options options)
    : meters_(std::move(meters)), options_(options), ring_(1 << 16) {
  bool have_cpu = false;
  for (size_t m = 0; m < meters_.size(); ++m) {
    const auto& scopes = meters_[m]->scopes();
    for (size_t i = 0; i < scopes.size(); ++i) {
      Domain d;
      d.energy.scope = scopes[i];
      d.meter = m, d.index = i;
      if (scopes[i].gpu >= 0) {
        if (domain_of_gpu_.size() <= static_cast<size_t>(scopes[i].gpu))
          domain_of_gpu_.resize(scopes[i].gpu + 1, -1);
        domain_of_gpu_[scopes[i].gpu] = static_cast<int>(domains_.size());
      } else if (!have_cpu) {
        cpu_domain_ = domains_.size();
        have_cpu = true;
      }
      domains_.push_back(std::move(d));
    }
  }
  // The first reading is each domain's origin.
  const uint64_t now = options_.start_ns.value_or(SteadyNowNs());
  for (auto& d : domains_) d.last_ns = now;
}

EnergyLedger::~EnergyLedger() {
  {
    std::lock_guard lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (poller_.joinable()) poller_.join();
}

void EnergyLedger::Start() {
  if (domains_.empty() || poller_.joinable()) return;
  poller_ = std::thread([this] { Run(); });
}

void EnergyLedger::Run() {
  auto period = std::chrono::milliseconds(100);
  for (const auto& m : meters_) period = std::min(period, m->period());
  if (options_.period.count() > 0) period = options_.period;
  // The carbon file is looked at about every 5 s, whatever the period.
  const uint64_t refresh = std::max<uint64_t>(1, 5000 / static_cast<uint64_t>(period.count()));
  std::unique_lock lock(stop_mu_);
  for (uint64_t polls = 0; !stop_cv_.wait_for(lock, period, [this] { return stop_; }); ++polls) {
    lock.unlock();
    if (carbon_ && polls % refresh == 0) carbon_->Refresh();
    Poll(SteadyNowNs());
    lock.lock();
  }
}

size_t EnergyLedger::DomainOf(const ExecutionRecord& record) const {
  if (record.kind == NEREID_INSTANCE_GPU && record.device >= 0 &&
      static_cast<size_t>(record.device) < domain_of_gpu_.size() &&
      domain_of_gpu_[record.device] >= 0)
    return static_cast<size_t>(domain_of_gpu_[record.device]);
  return cpu_domain_;
}

uint32_t EnergyLedger::EntryFor(const std::string& model, int64_t version, size_t domain) {
  for (size_t i = 0; i < entries_.size(); ++i) {
    const auto& t = entries_[i].totals;
    if (entries_[i].domain == domain && t.model == model && t.version == version)
      return static_cast<uint32_t>(i);
  }
  const bool overflow = entries_.size() >= options_.max_entries;
  if (overflow)  // past the cap every new model version shares one entry per domain
    for (size_t i = 0; i < entries_.size(); ++i)
      if (entries_[i].domain == domain && entries_[i].totals.model.empty())
        return static_cast<uint32_t>(i);
  Entry& e = entries_.emplace_back();
  e.domain = domain;
  e.totals.model = overflow ? "" : model;
  e.totals.version = overflow ? 0 : version;
  e.totals.scope = domains_[domain].energy.scope.name;
  e.totals.source = domains_[domain].energy.scope.source;
  return static_cast<uint32_t>(entries_.size() - 1);
}

std::shared_ptr<EnergyObserver> EnergyLedger::ObserverFor(const std::string& model,
                                                          int64_t version) {
  if (domains_.empty()) return nullptr;
  std::lock_guard lock(mu_);
  std::vector<uint32_t> entries;
  std::vector<Entry*> by_domain;
  for (size_t d = 0; d < domains_.size(); ++d) {
    entries.push_back(EntryFor(model, version, d));
    by_domain.push_back(&entries_[entries.back()]);
  }
  return std::make_shared<Observer>(this, std::move(entries), std::move(by_domain));
}

void EnergyLedger::Record(uint32_t entry, const ExecutionRecord& record) {
  Event e;
  e.entry = entry;
  e.rows = static_cast<uint32_t>(std::clamp<int64_t>(record.rows, 0, UINT32_MAX));
  e.end_ns = std::max(record.end_ns, record.start_ns);
  // The batch occupies its device for its busy time, ending when the host saw it end.
  e.start_ns = e.end_ns - record.BusyNs();
  if (!ring_.Push(e)) dropped_.fetch_add(1, std::memory_order_relaxed);
}

void EnergyLedger::Poll(uint64_t now_ns) {
  // The meters first (their reads may take milliseconds), then the ledger's state.
  std::vector<std::vector<double>> readings;
  for (auto& m : meters_) readings.push_back(m->Read());
  std::lock_guard lock(mu_);
  for (auto& d : domains_) {
    const double joules = readings[d.meter][d.index];
    if (now_ns > d.last_ns) {
      d.ticks.push_back({d.last_ns, now_ns, std::max(0.0, joules - d.last_joules), WallSeconds()});
      d.last_ns = now_ns;
    }
    d.last_joules = joules;
  }
  Event e;
  while (ring_.Pop(&e)) {
    Entry& entry = entries_[e.entry];
    entry.totals.inferences += e.rows;
    const double weight = TrackBusy(entry, e);
    Batch& b =
        domains_[entry.domain].batches.emplace_back(Batch{e.entry, e.rows, e.start_ns, e.end_ns});
    b.weight = weight;
  }
  if (carbon_)
    grams_per_joule_.store(carbon_->GramsPerJoule(WallSeconds()), std::memory_order_relaxed);
  const uint64_t lag = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.lag).count());
  for (auto& d : domains_) {
    while (!d.ticks.empty() && d.ticks.front().end_ns + lag <= now_ns) {
      Attribute(d, d.ticks.front());
      d.ticks.pop_front();
    }
    // Batches that ended before every tick still to come are done with.
    const uint64_t horizon = d.ticks.empty() ? d.last_ns : d.ticks.front().start_ns;
    std::erase_if(d.batches, [&](const Batch& b) {
      if (b.end_ns > horizon) return false;
      Finish(b);
      return true;
    });
  }
}

double EnergyLedger::TrackBusy(Entry& entry, const Event& e) {
  if (e.rows == 0 || e.rows > kMaxTrackedRows) return 1;
  std::atomic<float>* busy = entry.busy_by_rows.load(std::memory_order_relaxed);
  if (busy == nullptr) {
    entry.busy_storage = std::make_unique<std::atomic<float>[]>(kMaxTrackedRows + 1);
    busy = entry.busy_storage.get();
    for (uint32_t i = 0; i <= kMaxTrackedRows; ++i) busy[i].store(0, std::memory_order_relaxed);
    entry.busy_by_rows.store(busy, std::memory_order_release);
  }
  constexpr float kAlpha = 0.1f;
  const float seconds = static_cast<float>((e.end_ns - e.start_ns) / 1e9);
  const float before = busy[e.rows].load(std::memory_order_relaxed);
  busy[e.rows].store(before == 0 ? seconds : (1 - kAlpha) * before + kAlpha * seconds,
                     std::memory_order_relaxed);
  // The low end: 25% of the way down to a shorter batch, 1% up to a longer one, which settles
  // near the 4th percentile of a size's busy times.
  if (!entry.quick_busy) entry.quick_busy = std::make_unique<float[]>(kMaxTrackedRows + 1);
  float& quick = entry.quick_busy[e.rows];
  quick = quick == 0 ? seconds : quick + (seconds < quick ? 0.25f : 0.01f) * (seconds - quick);
  return seconds > 0 ? std::clamp(static_cast<double>(quick) / seconds, 0.0, 1.0) : 1.0;
}

// ---- Power fit ----------------------------------------------------------------------------------

namespace {
constexpr double kForget = 0.99;    // per tick: about the last 100 ticks (10 s) weigh
constexpr double kPrior = 1e6;      // the variance of a new slot's watts (W^2): it learns at once
constexpr double kMinWatts = 1e-3;  // a fitted power stays positive (a weight, not a sign)
}  // namespace

EnergyLedger::PowerFit::PowerFit() { entry_.fill(-1); }

int EnergyLedger::PowerFit::Slot(uint32_t entry, uint64_t tick) {
  int free = -1, oldest = 0;
  for (int i = 0; i < kSlots; ++i) {
    if (entry_[i] == entry) {
      used_[i] = tick;
      return i;
    }
    if (entry_[i] < 0 && free < 0) free = i;
    if (used_[i] < used_[oldest]) oldest = i;
  }
  const int slot = free >= 0 ? free : oldest;
  entry_[slot] = entry;
  used_[slot] = tick;
  watts_[slot] = 0;  // set from its first tick (Update)
  for (int i = 0; i < kSlots; ++i) p_[slot][i] = p_[i][slot] = 0;
  p_[slot][slot] = kPrior;
  return slot;
}

void EnergyLedger::PowerFit::Update(const std::array<double, kSlots>& x, double y) {
  // A slot's first tick: its share of what the others' fitted powers leave, as a starting point.
  double known = 0, fresh = 0;
  for (int i = 0; i < kSlots; ++i) {
    if (x[i] <= 0) continue;
    if (watts_[i] > 0)
      known += watts_[i] * x[i];
    else
      fresh += x[i];
  }
  for (int i = 0; i < kSlots; ++i)
    if (x[i] > 0 && watts_[i] <= 0) watts_[i] = std::max(kMinWatts, (y - known) / fresh);
  std::array<double, kSlots> px{};
  double xpx = 0, predicted = 0;
  for (int i = 0; i < kSlots; ++i) {
    for (int j = 0; j < kSlots; ++j) px[i] += p_[i][j] * x[j];
    predicted += watts_[i] * x[i];
  }
  for (int i = 0; i < kSlots; ++i) xpx += x[i] * px[i];
  const double denominator = kForget + xpx;
  if (denominator <= 0) return;
  const double error = y - predicted;
  for (int i = 0; i < kSlots; ++i) {
    const double gain = px[i] / denominator;
    watts_[i] = std::max(kMinWatts, watts_[i] + gain * error);
  }
  for (int i = 0; i < kSlots; ++i)
    for (int j = 0; j < kSlots; ++j) p_[i][j] = (p_[i][j] - px[i] * px[j] / denominator) / kForget;
}

// ---- Attribution --------------------------------------------------------------------------------

void EnergyLedger::Attribute(Domain& d, const Tick& tick) {
  const double seconds = (tick.end_ns - tick.start_ns) / 1e9;
  const double power = tick.joules / seconds;
  d.energy.metered_joules += tick.joules;
  const uint64_t number = ++d.ticks_attributed;
  // Busy seconds of each model version within the tick, by fit slot, each batch's overlap weighed
  // by its uncontended share (Batch::weight); each batch's own part.
  std::array<double, PowerFit::kSlots> busy{};
  std::array<Entry*, PowerFit::kSlots> slot_entry{};
  struct Overlap {
    Batch* batch;
    int slot;
    double seconds;
  };
  std::vector<Overlap> overlaps;
  for (Batch& b : d.batches) {
    const uint64_t from = std::max(b.start_ns, tick.start_ns), to = std::min(b.end_ns, tick.end_ns);
    if (to <= from) continue;
    const int slot = d.fit.Slot(b.entry, number);
    const double weighed = (to - from) / 1e9 * b.weight;
    busy[slot] += weighed;
    slot_entry[slot] = &entries_[b.entry];
    overlaps.push_back({&b, slot, weighed});
  }
  const bool floor = d.energy.scope.has_floor;
  if (floor && (d.min_power < 0 || power < d.min_power)) d.min_power = power;
  auto grams = [&](double joules) { return carbon_ ? carbon_->Grams(joules, tick.wall_end) : 0; };
  if (overlaps.empty()) {
    d.energy.unattributed_idle += tick.joules;
    d.energy.unattributed_carbon += grams(tick.joules);
    if (floor) d.floor = d.floor < 0 ? power : 0.8 * d.floor + 0.2 * power;
    d.energy.floor_watts = std::max(0.0, d.floor);
    return;
  }
  const double floor_watts = !floor ? 0 : d.floor >= 0 ? d.floor : d.min_power;
  const double idle = std::min(tick.joules, floor_watts * seconds);
  const double active = tick.joules - idle;
  // Busy time overlapping on one device counts once per model version, capped at the tick.
  const std::array<double, PowerFit::kSlots> summed = busy;
  for (double& b : busy) b = std::min(b, seconds);
  d.fit.Update(busy, active);
  double total_weight = 0;
  std::array<double, PowerFit::kSlots> part{};
  int count = 0;
  for (int i = 0; i < PowerFit::kSlots; ++i) {
    if (busy[i] <= 0) continue;
    part[i] = d.fit.watts(i) * busy[i];
    total_weight += part[i];
    ++count;
  }
  for (int i = 0; i < PowerFit::kSlots; ++i) {
    if (busy[i] <= 0) continue;
    part[i] = total_weight > 0 ? part[i] / total_weight : 1.0 / count;
    Entry& e = *slot_entry[i];
    e.totals.active_joules += active * part[i];
    e.totals.idle_joules += idle * part[i];
    e.totals.carbon_grams += grams(tick.joules * part[i]);
    e.watts.store(d.fit.watts(i), std::memory_order_relaxed);
  }
  // A model version's share goes to its batches by their busy time in the tick.
  for (const Overlap& o : overlaps) {
    if (summed[o.slot] <= 0) continue;
    const double of_slot = o.seconds / summed[o.slot];
    o.batch->active += active * part[o.slot] * of_slot;
    o.batch->idle += idle * part[o.slot] * of_slot;
    o.batch->attributed = true;
  }
  d.energy.floor_watts = floor_watts;
}

void EnergyLedger::Finish(const Batch& batch) {
  if (!batch.attributed || batch.rows == 0) return;
  Entry& e = entries_[batch.entry];
  ModelEnergy& t = e.totals;
  const double joules = batch.active + batch.idle;
  const double per_row = joules / batch.rows;
  const size_t bucket =
      static_cast<size_t>(std::lower_bound(kJoulesPerInferenceBounds.begin(),
                                           kJoulesPerInferenceBounds.end(), per_row) -
                          kJoulesPerInferenceBounds.begin());
  t.per_inference_buckets[bucket] += batch.rows;
  t.per_inference_count += batch.rows;
  t.per_inference_sum += joules;
  // Recent idle joules per row: the ratio of the two averages, so that every row weighs alike.
  constexpr double kIdleAlpha = 0.05;
  e.recent_idle = (1 - kIdleAlpha) * e.recent_idle + kIdleAlpha * batch.idle;
  e.recent_rows = (1 - kIdleAlpha) * e.recent_rows + kIdleAlpha * batch.rows;
  e.idle_per_row.store(e.recent_idle / e.recent_rows, std::memory_order_relaxed);
}

std::vector<ModelEnergy> EnergyLedger::Models() const {
  std::lock_guard lock(mu_);
  std::vector<ModelEnergy> out;
  for (const auto& e : entries_) {
    ModelEnergy& m = out.emplace_back(e.totals);
    m.active_watts = e.watts.load(std::memory_order_relaxed);
  }
  return out;
}

std::string EnergyLedger::PrometheusText() const { return EnergyPrometheusText(*this); }

std::vector<ScopeEnergy> EnergyLedger::Scopes() const {
  std::lock_guard lock(mu_);
  std::vector<ScopeEnergy> out;
  for (const auto& d : domains_) out.push_back(d.energy);
  return out;
}

std::unique_ptr<EnergyLedger> MakeServerLedger(double watts_per_core,
                                               std::chrono::milliseconds period,
                                               std::shared_ptr<CarbonIntensity> carbon) {
  std::vector<std::unique_ptr<Meter>> meters;
  std::vector<std::string> uuids;
  for (const auto& d : gpu::CudaDriver::Get().devices()) uuids.push_back(d.uuid);
  if (auto nvml = MakeNvmlMeter(uuids)) meters.push_back(std::move(nvml));
  if (auto rapl = MakeRaplMeter())
    meters.push_back(std::move(rapl));
  else
    meters.push_back(MakeEstimateMeter(watts_per_core));
  for (const auto& m : meters)
    for (const auto& s : m->scopes())
      LOG_INFO << "energy: scope " << s.name << " measured by " << s.source
               << (s.source == "estimate"
                       ? " (this process's CPU time x " + std::to_string(watts_per_core) +
                             " W per core; no RAPL counter is readable)"
                       : "");
  EnergyLedger::Options options;
  options.period = period;
  auto ledger = std::make_unique<EnergyLedger>(std::move(meters), options);
  // A file unreadable now is re-read by the poller: its figures start when it parses.
  if (carbon && carbon->configured()) ledger->SetCarbon(std::move(carbon));
  ledger->Start();
  return ledger;
}

}  // namespace nereid::energy
