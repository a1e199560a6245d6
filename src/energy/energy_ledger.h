// EnergyLedger: the joules each meter counted, attributed to the model versions whose batches ran
// while it counted. Batches reach it through an ExecutionObserver (a lock-free ring, nothing read
// or allocated on the instance's thread); a poller thread reads the meters at their own period and
// attributes each tick once the batches that overlap it have all been reported (a short lag):
//  - a tick with no batch is idle energy of its scope (and refines the scope's floor power);
//  - otherwise the floor power x the tick's length is the idle part, the rest is active, and both
//    are split over the tick's batches by weight = busy time in the tick x the active power of the
//    batch's model version while busy. Those powers are fitted per scope by recursive least squares
//    over every tick with batches (active joules = sum of power x busy seconds), so ticks where
//    models overlap refine them too; the batch size shows in the busy time.
// Per scope, the model versions' active + idle plus the scope's unattributed idle equal the meter's
// joules over every attributed tick (tested).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "energy/carbon.h"
#include "energy/meter.h"
#include "runtime/execution_observer.h"

namespace nereid::energy {

// The upper bounds of the J-per-inference histogram's buckets (1 and 3 per decade, 1 uJ .. 10 J).
inline constexpr std::array<double, 15> kJoulesPerInferenceBounds = {
    1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3, 10};

struct ModelEnergy {
  std::string model;
  int64_t version = 0;
  std::string scope, source;
  double active_joules = 0;
  double idle_joules = 0;   // its share of the floor power while its batches ran
  uint64_t inferences = 0;  // rows of its batches on this scope
  double carbon_grams = 0;  // CO2e of its active and idle joules (CarbonIntensity), 0 without one
  // Each finished batch's (active + idle) joules per row, counted once per row: the count is the
  // rows of the batches whose every tick has been attributed, the sum their joules. Per bucket
  // (not cumulative), the last one past the largest bound.
  std::array<uint64_t, kJoulesPerInferenceBounds.size() + 1> per_inference_buckets{};
  uint64_t per_inference_count = 0;
  double per_inference_sum = 0;
  double active_watts = 0;  // the fitted power while its batches are busy (0: not fitted yet)
};

struct ScopeEnergy {
  Scope scope;
  double metered_joules = 0;       // the meter's joules over the attributed ticks
  double unattributed_idle = 0;    // of ticks in which nothing ran
  double unattributed_carbon = 0;  // grams CO2e of those ticks
  double floor_watts = 0;          // the current floor estimate (0 without one)
};

class EnergyLedger {
 public:
  struct Options {
    // How long after a tick ends it is attributed: batches report when they end.
    std::chrono::milliseconds lag{300};
    // Distinct (model, version, scope) entries; more fold into model "" (bounded cardinality).
    size_t max_entries = 1024;
    // The time of the meters' first read (their origin); unset: now (tests set it).
    std::optional<uint64_t> start_ns;
    // How often the poller reads the meters; 0: at the fastest meter's own update period.
    std::chrono::milliseconds period{0};
  };
  // 'meters': GPU meters' scopes serve KIND_GPU instances of their device; the first scope without
  // a GPU serves CPU instances (and GPU instances whose device no meter measures).
  EnergyLedger(std::vector<std::unique_ptr<Meter>> meters, Options options);
  ~EnergyLedger();
  EnergyLedger(const EnergyLedger&) = delete;
  EnergyLedger& operator=(const EnergyLedger&) = delete;

  // Runs the poller until destruction. Without Start, Poll drives the ledger (tests).
  void Start();
  // One poller step at time 'now_ns' (the steady clock of ExecutionRecord's times).
  void Poll(uint64_t now_ns);

  // Grams CO2e from here on (before Start; null: none).
  void SetCarbon(std::shared_ptr<CarbonIntensity> carbon) { carbon_ = std::move(carbon); }

  // The observer of one model version's batches.
  std::shared_ptr<EnergyObserver> ObserverFor(const std::string& model, int64_t version);

  std::vector<ModelEnergy> Models() const;
  // Whether grams CO2e are being counted (an intensity is known).
  bool carbon_known() const { return carbon_ && carbon_->known(); }
  // The carbon intensity in force (null: none), and the batch reports lost to a full ring.
  const CarbonIntensity* carbon() const { return carbon_.get(); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  std::vector<ScopeEnergy> Scopes() const;
  // Prometheus text of both (nereid_energy_* families).
  // The Prometheus families (energy_prometheus.h).
  std::string PrometheusText() const;

 private:
  struct Event {
    uint32_t entry = 0;
    uint32_t rows = 0;
    uint64_t start_ns = 0, end_ns = 0;
  };
  // Vyukov's bounded multi-producer queue: a push is two atomics on a preallocated slot.
  class Ring {
   public:
    explicit Ring(size_t capacity_pow2);
    bool Push(const Event& e);
    bool Pop(Event* e);

   private:
    struct Slot {
      std::atomic<size_t> sequence;
      Event event;
    };
    std::unique_ptr<Slot[]> slots_;
    size_t mask_;
    alignas(64) std::atomic<size_t> head_{0};
    alignas(64) std::atomic<size_t> tail_{0};
  };
  // Batch sizes whose busy time is kept (the latency-goal modes allow max_batch_size up to this).
  static constexpr uint32_t kMaxTrackedRows = 4096;
  struct Entry {
    ModelEnergy totals;
    size_t domain = 0;
    // Published by the poller for the request path and the batcher (relaxed atomics).
    std::atomic<double> watts{0};             // fitted active power while busy
    std::atomic<double> idle_per_row{0};      // recent batches' idle joules per row
    double recent_idle = 0, recent_rows = 0;  // the poller's averages behind it
    // Busy seconds of a batch by its rows (EWMA; 0: no batch of that size yet), allocated with
    // the entry's first batch.
    std::atomic<std::atomic<float>*> busy_by_rows{nullptr};
    std::unique_ptr<std::atomic<float>[]> busy_storage;
    // The poller's estimate of a batch's uncontended busy seconds by its rows: a tracker of the
    // low end of what each size took (it falls fast and rises slowly). A batch that shared its
    // device with another model's waited part of its interval; it is weighed by this time, not by
    // its stretched interval (0: no batch of that size yet).
    std::unique_ptr<float[]> quick_busy;
  };
  // The active watts of each model version busy on one scope, fitted by recursive least squares
  // with forgetting (about the last 100 ticks count). Up to kSlots model versions at once; the one
  // idle longest gives up its slot.
  class PowerFit {
   public:
    static constexpr int kSlots = 16;
    PowerFit();
    int Slot(uint32_t entry, uint64_t tick);
    double watts(int slot) const { return watts_[slot]; }
    // One tick: 'busy' seconds per slot, 'active' joules.
    void Update(const std::array<double, kSlots>& busy, double active);

   private:
    std::array<int64_t, kSlots> entry_;
    std::array<uint64_t, kSlots> used_{};
    std::array<double, kSlots> watts_{};
    std::array<std::array<double, kSlots>, kSlots> p_{};
  };
  struct Tick {
    uint64_t start_ns, end_ns;
    double joules;
    double wall_end;  // Unix seconds at the tick's end (the carbon intensity's clock)
  };
  struct Batch {
    uint32_t entry;
    uint32_t rows;
    uint64_t start_ns, end_ns;
    double active = 0, idle = 0;  // attributed so far
    bool attributed = false;      // by at least one tick
    // Its uncontended busy time over its interval (<= 1): the share of each overlap it weighs.
    double weight = 1;
  };
  struct Domain {
    ScopeEnergy energy;
    size_t meter = 0, index = 0;  // which meter and scope
    double last_joules = 0;
    uint64_t last_ns = 0;
    double floor = -1;      // EWMA of empty ticks' power; -1 before the first
    double min_power = -1;  // the lowest tick power seen (the floor until an empty tick)
    std::deque<Tick> ticks;
    std::vector<Batch> batches;
    PowerFit fit;
    uint64_t ticks_attributed = 0;
  };
  class Observer;

  uint32_t EntryFor(const std::string& model, int64_t version, size_t domain);
  void Record(uint32_t entry, const ExecutionRecord& record);
  size_t DomainOf(const ExecutionRecord& record) const;
  void Attribute(Domain& domain, const Tick& tick);
  // A batch every tick of which has been attributed: its joules per row into its entry's
  // histogram, batch fit and idle share.
  void Finish(const Batch& batch);
  // Keeps the busy time of the event's batch size (the energy model's per-size part); returns the
  // batch's weight (Batch::weight).
  double TrackBusy(Entry& entry, const Event& e);
  void Run();

  std::vector<std::unique_ptr<Meter>> meters_;
  Options options_;
  Ring ring_;
  std::atomic<uint64_t> dropped_{0};
  std::vector<int> domain_of_gpu_;  // by CUDA ordinal; -1: the CPU domain
  size_t cpu_domain_ = 0;
  mutable std::mutex mu_;  // the poller's state, against snapshots and new entries
  std::vector<Domain> domains_;
  std::deque<Entry> entries_;  // stable addresses; index = Event::entry
  friend class Observer;
  std::shared_ptr<CarbonIntensity> carbon_;
  std::atomic<double> grams_per_joule_{-1};  // the intensity in force x PUE / 3.6e6; -1: none
  std::thread poller_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
};

// The server's ledger: NVML for the GPUs CUDA sees, RAPL for the CPU packages where readable, else
// the CPU-time estimate at 'watts_per_core'; its poller started. Logs what measures what.
// 'carbon': the intensity and PUE for gCO2e figures (null or unknown: none).
// 'period': how often the meters are read (0: at their own update period).
std::unique_ptr<EnergyLedger> MakeServerLedger(double watts_per_core,
                                               std::chrono::milliseconds period,
                                               std::shared_ptr<CarbonIntensity> carbon);

}  // namespace nereid::energy
