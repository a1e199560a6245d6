// Energy attribution with fake meters: conservation per scope, splitting across overlapping
// batches, calibration, counter wrap and reset, RAPL zones from a fake powercap tree.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "energy/carbon.h"
#include "energy/energy_counter.h"
#include "energy/energy_ledger.h"
#include "energy/meter.h"

namespace nereid::energy {
namespace {

constexpr uint64_t kMs = 1'000'000;

// A meter whose scope draws 'floor' watts plus, per running batch, its 'active' watts: the test
// tells it what runs and it integrates.
class FakeMeter final : public Meter {
 public:
  explicit FakeMeter(Scope scope) { scopes_.push_back(std::move(scope)); }
  const std::vector<Scope>& scopes() const override { return scopes_; }
  std::vector<double> Read() override { return {joules}; }
  std::chrono::milliseconds period() const override { return std::chrono::milliseconds(100); }
  double joules = 0;

 private:
  std::vector<Scope> scopes_;
};

ExecutionRecord Batch(uint64_t start_ns, uint64_t end_ns, int64_t rows,
                      NereidInstanceKind kind = NEREID_INSTANCE_GPU, int device = 0) {
  ExecutionRecord r;
  static const std::string name = "i";
  r.instance = &name;
  r.kind = kind;
  r.device = device;
  r.start_ns = start_ns;
  r.end_ns = end_ns;
  r.rows = rows;
  r.requests = 1;
  return r;
}

double Sum(const std::vector<ModelEnergy>& models, const std::string& scope) {
  double sum = 0;
  for (const auto& m : models)
    if (m.scope == scope) sum += m.active_joules + m.idle_joules;
  return sum;
}

// A copy: callers pass the temporary that Models() returns.
ModelEnergy Find(const std::vector<ModelEnergy>& models, const std::string& model,
                 const std::string& scope = "gpu0") {
  for (const auto& m : models)
    if (m.model == model && m.scope == scope) return m;
  return ModelEnergy{};
}

struct Rig {
  FakeMeter* gpu = nullptr;
  FakeMeter* cpu = nullptr;
  std::unique_ptr<EnergyLedger> ledger;
  uint64_t t0 = 0;
  Rig() {
    auto g = std::make_unique<FakeMeter>(Scope{"gpu0", "nvml", 0, true});
    auto c = std::make_unique<FakeMeter>(Scope{"process-cpu", "estimate", -1, false});
    gpu = g.get(), cpu = c.get();
    std::vector<std::unique_ptr<Meter>> meters;
    meters.push_back(std::move(g));
    meters.push_back(std::move(c));
    EnergyLedger::Options options;
    options.start_ns = 0;
    ledger = std::make_unique<EnergyLedger>(std::move(meters), options);
    t0 = 0;
  }
};

TEST(CounterTrackerTest, CountsWrapsAndResets) {
  CounterTracker rapl(1e-6, 1000);  // wraps at 1000 uJ
  EXPECT_EQ(rapl.Advance(900), 0);  // the origin
  EXPECT_DOUBLE_EQ(rapl.Advance(950), 50e-6);
  EXPECT_DOUBLE_EQ(rapl.Advance(20), 70e-6);  // 50 to the range, 20 past it
  EXPECT_DOUBLE_EQ(rapl.total(), 120e-6);
  CounterTracker nvml(1e-3, 0);  // no wrap: a smaller value is a reset
  nvml.Advance(5000);
  EXPECT_DOUBLE_EQ(nvml.Advance(5100), 0.1);
  EXPECT_DOUBLE_EQ(nvml.Advance(40), 0.04);  // counts from the reset
  EXPECT_DOUBLE_EQ(nvml.total(), 0.14);
}

TEST(RaplMeterTest, ReadsPackagesNotSubZonesAndWraps) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("nereid_powercap_" + std::to_string(getpid()));
  auto zone = [&](const std::string& name, uint64_t energy, uint64_t range) {
    fs::create_directories(root / name);
    std::ofstream(root / name / "energy_uj") << energy;
    std::ofstream(root / name / "max_energy_range_uj") << range;
  };
  zone("intel-rapl:0", 1'000'000, 2'000'000);
  zone("intel-rapl:0:0", 900'000, 2'000'000);  // a sub-zone: already in its package
  zone("intel-rapl:1", 500'000, 2'000'000);
  auto meter = MakeRaplMeter(root.string());
  ASSERT_NE(meter, nullptr);
  ASSERT_EQ(meter->scopes().size(), 1u);
  EXPECT_EQ(meter->scopes()[0].source, "rapl");
  EXPECT_EQ(meter->Read()[0], 0);
  zone("intel-rapl:0", 1'500'000, 2'000'000);    // +0.5 J
  zone("intel-rapl:0:0", 1'900'000, 2'000'000);  // ignored
  zone("intel-rapl:1", 100'000, 2'000'000);      // wrapped: +1.6 J
  EXPECT_NEAR(meter->Read()[0], 2.1, 1e-9);
  fs::remove_all(root);
  EXPECT_EQ(MakeRaplMeter(root.string()), nullptr);  // nothing readable: no meter
}

TEST(EnergyLedgerTest, ConservesEveryJouleOfEachScope) {
  Rig rig;
  auto a = rig.ledger->ObserverFor("a", 1);
  auto b = rig.ledger->ObserverFor("b", 2);
  std::mt19937 rng(7);
  uint64_t now = 0;
  double metered = 0;
  for (int tick = 1; tick <= 100; ++tick) {
    const uint64_t start = now;
    now += 100 * kMs;
    // A few batches per tick on the GPU and the CPU, some spanning the tick boundary.
    for (int k = 0; k < 3; ++k) {
      const uint64_t s = start + rng() % (100 * kMs);
      const uint64_t e = s + rng() % (150 * kMs);
      (k % 2 ? a : b)->OnExecution(Batch(s, e, 1 + rng() % 8));
      a->OnExecution(Batch(s, e, 1, NEREID_INSTANCE_CPU));
    }
    const double j = 10 + rng() % 20;
    rig.gpu->joules += j;
    rig.cpu->joules += j / 10;
    metered += j;
    rig.ledger->Poll(now);
  }
  rig.ledger->Poll(now + 1000 * kMs);  // past the lag: every tick attributed
  const auto models = rig.ledger->Models();
  for (const auto& s : rig.ledger->Scopes()) {
    EXPECT_NEAR(Sum(models, s.scope.name) + s.unattributed_idle, s.metered_joules, 1e-6)
        << s.scope.name;
  }
  const auto scopes = rig.ledger->Scopes();
  EXPECT_NEAR(scopes[0].metered_joules, metered, 1e-6);
  EXPECT_NEAR(scopes[1].metered_joules, metered / 10, 1e-6);
  EXPECT_EQ(Find(models, "a", "process-cpu").idle_joules, 0);  // an estimate has no floor
}

TEST(EnergyLedgerTest, SplitsOverlappingBatchesByCalibratedPower) {
  Rig rig;
  auto heavy = rig.ledger->ObserverFor("heavy", 1);
  auto light = rig.ledger->ObserverFor("light", 1);
  const double floor = 100;  // watts
  uint64_t now = 0;
  auto tick = [&](double active_joules) {
    now += 100 * kMs;
    rig.gpu->joules += floor * 0.1 + active_joules;
    rig.ledger->Poll(now);
  };
  auto idle_second = [&] {  // nothing runs for 1 s: every earlier tick gets attributed
    now += 1000 * kMs;
    rig.gpu->joules += floor;
    rig.ledger->Poll(now);
  };
  tick(0);  // an idle tick: the floor
  // Each model alone, busy the whole tick: heavy draws 300 W above the floor, light 100 W.
  for (int i = 0; i < 5; ++i) {
    heavy->OnExecution(Batch(now, now + 100 * kMs, 4));
    tick(30);
  }
  for (int i = 0; i < 5; ++i) {
    light->OnExecution(Batch(now, now + 100 * kMs, 4));
    tick(10);
  }
  idle_second();
  const auto before = rig.ledger->Models();
  const double heavy_before = Find(before, "heavy").active_joules;
  const double light_before = Find(before, "light").active_joules;
  EXPECT_NEAR(heavy_before, 150, 1e-6);
  EXPECT_NEAR(light_before, 50, 1e-6);
  // Both busy the whole of one tick: 40 J active splits 3:1 by the calibrated powers, and so does
  // the floor's 10 J.
  heavy->OnExecution(Batch(now, now + 100 * kMs, 4));
  light->OnExecution(Batch(now, now + 100 * kMs, 4));
  tick(40);
  idle_second();
  const auto after = rig.ledger->Models();
  EXPECT_NEAR(Find(after, "heavy").active_joules - heavy_before, 30, 1e-6);
  EXPECT_NEAR(Find(after, "light").active_joules - light_before, 10, 1e-6);
  EXPECT_NEAR(Find(after, "heavy").idle_joules - Find(before, "heavy").idle_joules, 7.5, 1e-6);
  EXPECT_NEAR(rig.ledger->Scopes()[0].floor_watts, floor, 1e-6);
  EXPECT_EQ(Find(after, "heavy").inferences, 24u);
}

// The device run's shape (bench/energy_attribution.py): a light model in many small batches of
// varying size and a heavy one in few large batches, each alone and then together, on a floor far
// above both. Each model's active energy per inference in the mix stays within 10% of its own
// alone, because the fitted powers come from every tick, mixed ones included.
TEST(EnergyLedgerTest, MixedModelsKeepTheirSoloEnergyPerInference) {
  Rig rig;
  auto light = rig.ledger->ObserverFor("light", 1);
  auto heavy = rig.ledger->ObserverFor("heavy", 1);
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> noise(-0.01, 0.01);
  const double floor = 120, light_watts = 40, heavy_watts = 300;
  uint64_t now = 0;
  auto run = [&](int ticks, bool with_light, bool with_heavy) {
    for (int t = 0; t < ticks; ++t) {
      const uint64_t start = now;
      double joules = floor * 0.1;
      for (int k = 0; with_light && k < 20; ++k) {  // 1-4 rows, 0.5-2 ms each
        const uint64_t s = start + k * 5 * kMs;
        const uint64_t rows = 1 + rng() % 4;
        const uint64_t e = s + rows * 500'000;
        light->OnExecution(Batch(s, e, static_cast<int64_t>(rows)));
        joules += light_watts * (e - s) / 1e9;
      }
      for (int k = 0; with_heavy && k < 2; ++k) {  // 1024 rows, 6-9 ms each
        const uint64_t s = start + 2 * kMs + k * 50 * kMs;
        const uint64_t e = s + (6 + rng() % 4) * kMs;
        heavy->OnExecution(Batch(s, e, 1024));
        joules += heavy_watts * (e - s) / 1e9;
      }
      now += 100 * kMs;
      rig.gpu->joules += joules * (1 + noise(rng));
      rig.ledger->Poll(now);
    }
    for (int t = 0; t < 10; ++t) {  // a second of nothing: the floor, and every tick attributed
      now += 100 * kMs;
      rig.gpu->joules += floor * 0.1;
      rig.ledger->Poll(now);
    }
  };
  auto per_inference = [&](const std::string& model, auto phase) {
    const auto before = Find(rig.ledger->Models(), model);
    phase();
    const auto after = Find(rig.ledger->Models(), model);
    return (after.active_joules - before.active_joules) /
           static_cast<double>(after.inferences - before.inferences);
  };
  run(5, false, false);
  const double light_alone = per_inference("light", [&] { run(100, true, false); });
  const double heavy_alone = per_inference("heavy", [&] { run(100, false, true); });
  double light_mixed = 0, heavy_mixed = 0;
  const auto before = rig.ledger->Models();
  run(100, true, true);
  const auto after = rig.ledger->Models();
  auto delta = [&](const std::string& m) {
    return (Find(after, m).active_joules - Find(before, m).active_joules) /
           static_cast<double>(Find(after, m).inferences - Find(before, m).inferences);
  };
  light_mixed = delta("light"), heavy_mixed = delta("heavy");
  EXPECT_NEAR(light_mixed / light_alone, 1.0, 0.10) << light_mixed << " vs " << light_alone;
  EXPECT_NEAR(heavy_mixed / heavy_alone, 1.0, 0.10) << heavy_mixed << " vs " << heavy_alone;
  // And the heavy model near its true active energy: 300 W x 7.5 ms per 1024 rows.
  EXPECT_NEAR(heavy_alone, heavy_watts * 0.0075 / 1024, 0.15 * heavy_watts * 0.0075 / 1024);
}

// Two models on one device stretch each other's intervals: a light batch queued behind a heavy
// one is "busy" on its stream while it waits, drawing nothing of its own. Weighed by its stretched
// interval, the light model took the heavy one's joules in the mix (the H200 run: 1.24x alone);
// weighed by its uncontended time it keeps its own.
TEST(EnergyLedgerTest, AStretchedBatchWeighsItsUncontendedTime) {
  Rig rig;
  auto light = rig.ledger->ObserverFor("light", 1);
  auto heavy = rig.ledger->ObserverFor("heavy", 1);
  std::mt19937 rng(5);
  const double floor = 120, light_watts = 60, heavy_watts = 250;
  uint64_t now = 0;
  auto run = [&](int ticks, bool with_light, bool with_heavy) {
    for (int t = 0; t < ticks; ++t) {
      const uint64_t start = now;
      double joules = floor * 0.1;
      // Heavy: 8 ms batches at 10 and 60 ms into the tick.
      for (int k = 0; with_heavy && k < 2; ++k) {
        const uint64_t s = start + 10 * kMs + k * 50 * kMs;
        heavy->OnExecution(Batch(s, s + 8 * kMs, 1024));
        joules += heavy_watts * 0.008;
      }
      // Light: 1 ms of work every 4 ms; one that starts while a heavy batch runs waits for it.
      for (int k = 0; with_light && k < 25; ++k) {
        const uint64_t s = start + k * 4 * kMs;
        uint64_t work_from = s;
        for (int h = 0; with_heavy && h < 2; ++h) {
          const uint64_t hs = start + 10 * kMs + h * 50 * kMs;
          if (s >= hs && s < hs + 8 * kMs) work_from = hs + 8 * kMs;
        }
        const int64_t rows = 1 + static_cast<int64_t>(rng() % 2);
        light->OnExecution(Batch(s, work_from + kMs, rows));
        joules += light_watts * 0.001;
      }
      now += 100 * kMs;
      rig.gpu->joules += joules;
      rig.ledger->Poll(now);
    }
    for (int t = 0; t < 10; ++t) {
      now += 100 * kMs;
      rig.gpu->joules += floor * 0.1;
      rig.ledger->Poll(now);
    }
  };
  auto per_inference = [&](const std::string& model, auto phase) {
    std::map<std::string, ModelEnergy> before;
    for (const char* m : {"light", "heavy"}) before[m] = Find(rig.ledger->Models(), m);
    phase();
    std::map<std::string, double> out;
    for (const char* m : {"light", "heavy"}) {
      const auto after = Find(rig.ledger->Models(), m);
      out[m] = (after.active_joules - before[m].active_joules) /
               static_cast<double>(after.inferences - before[m].inferences);
    }
    return out[model];
  };
  run(5, false, false);
  const double light_alone = per_inference("light", [&] { run(50, true, false); });
  const double heavy_alone = per_inference("heavy", [&] { run(50, false, true); });
  std::map<std::string, ModelEnergy> before;
  for (const char* m : {"light", "heavy"}) before[m] = Find(rig.ledger->Models(), m);
  run(50, true, true);
  auto mixed = [&](const char* m) {
    const auto after = Find(rig.ledger->Models(), m);
    return (after.active_joules - before[m].active_joules) /
           static_cast<double>(after.inferences - before[m].inferences);
  };
  EXPECT_NEAR(mixed("light") / light_alone, 1.0, 0.05) << mixed("light") << " vs " << light_alone;
  EXPECT_NEAR(mixed("heavy") / heavy_alone, 1.0, 0.05) << mixed("heavy") << " vs " << heavy_alone;
}

TEST(EnergyLedgerTest, ABatchSpanningTicksGetsEachTicksShare) {
  Rig rig;
  auto m = rig.ledger->ObserverFor("m", 1);
  uint64_t now = 0;
  m->OnExecution(Batch(50 * kMs, 250 * kMs, 2));  // half of tick 1, all of 2, half of 3
  for (int i = 0; i < 3; ++i) {
    now += 100 * kMs;
    rig.gpu->joules += 7;
    rig.ledger->Poll(now);
  }
  rig.ledger->Poll(now + 1000 * kMs);
  const auto& e = Find(rig.ledger->Models(), "m");
  EXPECT_NEAR(e.active_joules + e.idle_joules, 21, 1e-6);
  EXPECT_EQ(e.inferences, 2u);
}

// A batch whose backend reported its device time (NereidRequestSetDeviceTime) occupies the device
// for that long before its end, not for the host's whole interval around it.
TEST(EnergyLedgerTest, DeviceTimePlacesTheBatchAtTheEndOfItsHostInterval) {
  Rig rig;
  auto m = rig.ledger->ObserverFor("m", 1);
  ExecutionRecord r = Batch(50 * kMs, 150 * kMs, 1);
  r.device_busy_ns = 20 * kMs;  // on the device during [130, 150] ms
  m->OnExecution(r);
  for (uint64_t now : {100 * kMs, 200 * kMs, 1200 * kMs}) {
    rig.gpu->joules += 10;
    rig.ledger->Poll(now);
  }
  const auto& e = Find(rig.ledger->Models(), "m");
  EXPECT_NEAR(e.active_joules + e.idle_joules, 10, 1e-9);            // the second tick only
  EXPECT_NEAR(rig.ledger->Scopes()[0].unattributed_idle, 10, 1e-9);  // the first
}

TEST(EnergyLedgerTest, EntriesAreBoundedAndTheTextIsPrometheus) {
  auto meter = std::make_unique<FakeMeter>(Scope{"gpu0", "nvml", 0, true});
  std::vector<std::unique_ptr<Meter>> meters;
  meters.push_back(std::move(meter));
  EnergyLedger::Options options;
  options.max_entries = 4;
  options.start_ns = 0;
  EnergyLedger ledger(std::move(meters), options);
  for (int i = 0; i < 50; ++i) ledger.ObserverFor("model\"" + std::to_string(i), 1);
  EXPECT_EQ(ledger.Models().size(), 5u);  // 4 and the shared overflow entry
  const std::string text = ledger.PrometheusText();
  EXPECT_NE(
      text.find("nereid_energy_joules_total{model=\"model\\\"0\",version=\"1\",scope=\"gpu0\","
                "source=\"nvml\",kind=\"active\"} 0"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE nereid_energy_metered_joules_total counter"), std::string::npos);
}

TEST(CarbonTest, ParsesTimesAndRefusesGarbage) {
  auto table = CarbonIntensity::Parse(
      "# grid export\n1796148000,300\n2026-12-01T18:00:00Z, 250\n\n1764600000,400\n");
  ASSERT_TRUE(table.ok()) << table.status().message();
  ASSERT_EQ(table->size(), 3u);
  // Sorted by time; 2026-12-01T18:00:00Z is Unix 1796148000, the same as the second line's.
  EXPECT_EQ((*table)[0], std::make_pair(1764600000.0, 400.0));
  EXPECT_EQ((*table)[1], std::make_pair(1796148000.0, 250.0));
  EXPECT_EQ((*table)[2], std::make_pair(1796148000.0, 300.0));
  for (const char* bad : {"noon,300\n", "1796148000\n", "1796148000,-5\n", "1796148000,x\n",
                          "2026-12-01T18:00:00,300\n"})
    EXPECT_FALSE(CarbonIntensity::Parse(bad).ok()) << bad;
}

TEST(CarbonTest, GramsFollowTheIntensityInForceAndTheFileWhenItChanges) {
  CarbonIntensity fixed(400, "", 1.5);
  EXPECT_TRUE(fixed.known());
  EXPECT_NEAR(fixed.Grams(3.6e6, 0), 600, 1e-9);  // 1 kWh x 400 g x PUE 1.5
  EXPECT_FALSE(CarbonIntensity(-1, "", 1.0).known());
  const std::string file = std::filesystem::temp_directory_path() /
                           ("nereid_carbon_" + std::to_string(getpid()) + ".csv");
  std::ofstream(file) << "100,200\n200,50\n";
  CarbonIntensity from_file(-1, file, 1.0);
  ASSERT_TRUE(from_file.known());
  EXPECT_EQ(from_file.At(50), 200);  // before the first: the first
  EXPECT_EQ(from_file.At(150), 200);
  EXPECT_EQ(from_file.At(250), 50);
  std::ofstream(file) << "100,999\n";
  std::filesystem::last_write_time(
      file, std::filesystem::last_write_time(file) + std::chrono::seconds(5));
  from_file.Refresh();
  EXPECT_EQ(from_file.At(250), 999);
  std::ofstream(file) << "garbage\n";
  std::filesystem::last_write_time(
      file, std::filesystem::last_write_time(file) + std::chrono::seconds(10));
  from_file.Refresh();
  EXPECT_EQ(from_file.At(250), 999);  // a bad file keeps the previous table
  std::filesystem::remove(file);
}

TEST(CarbonTest, TheLedgerCountsGramsPerModelAndForIdleTicks) {
  Rig rig;
  rig.ledger->SetCarbon(std::make_shared<CarbonIntensity>(360, "", 1.0));  // 0.1 mg per J
  auto m = rig.ledger->ObserverFor("m", 1);
  m->OnExecution(Batch(100 * kMs, 200 * kMs, 1));
  for (uint64_t now : {100 * kMs, 200 * kMs, 1200 * kMs}) {
    rig.gpu->joules += 10;
    rig.ledger->Poll(now);
  }
  EXPECT_NEAR(Find(rig.ledger->Models(), "m").carbon_grams, 10 * 1e-4, 1e-12);
  EXPECT_NEAR(rig.ledger->Scopes()[0].unattributed_carbon, 10 * 1e-4, 1e-12);
  EXPECT_NE(rig.ledger->PrometheusText().find("nereid_carbon_intensity_grams_per_kwh 360"),
            std::string::npos);
}

// Each finished batch goes into the J-per-inference histogram once per row; the histogram's sum is
// the energy attributed to those batches, and its count their rows.
TEST(EnergyLedgerTest, TheHistogramCountsRowsAndSumsTheirJoules) {
  Rig rig;
  auto m = rig.ledger->ObserverFor("m", 1);
  uint64_t now = 0;
  for (int tick = 0; tick < 20; ++tick) {
    m->OnExecution(Batch(now + 10 * kMs, now + 30 * kMs, 4));  // 4 rows
    m->OnExecution(Batch(now + 50 * kMs, now + 60 * kMs, 1));  // 1 row
    now += 100 * kMs;
    rig.gpu->joules += 30;
    rig.ledger->Poll(now);
  }
  rig.ledger->Poll(now + 1000 * kMs);
  const ModelEnergy e = Find(rig.ledger->Models(), "m");
  EXPECT_EQ(e.per_inference_count, 20u * 5);
  EXPECT_EQ(e.inferences, 20u * 5);
  EXPECT_NEAR(e.per_inference_sum, e.active_joules + e.idle_joules, 1e-9);
  EXPECT_NEAR(e.per_inference_sum, 20 * 30, 1e-9);  // no tick without a batch
  uint64_t counted = 0;
  for (uint64_t c : e.per_inference_buckets) counted += c;
  EXPECT_EQ(counted, e.per_inference_count);
  // 30 J a tick over 5 rows: the 4-row batch (twice the busy time) gets 20 J (5 J a row), the
  // one-row batch 10 J: 80 rows in the bucket up to 10 J, 20 in the one above it.
  EXPECT_EQ(e.per_inference_buckets[kJoulesPerInferenceBounds.size() - 1], 80u);
  EXPECT_EQ(e.per_inference_buckets[kJoulesPerInferenceBounds.size()], 20u);
  const std::string text = rig.ledger->PrometheusText();
  EXPECT_NE(text.find("# TYPE nereid_energy_joules_per_inference histogram"), std::string::npos);
  EXPECT_NE(text.find("nereid_energy_joules_per_inference_bucket{model=\"m\",version=\"1\","
                      "scope=\"gpu0\",source=\"nvml\",le=\"+Inf\"} 100"),
            std::string::npos);
}

// The energy model the batcher reads: the fitted power x the busy time measured per batch size;
// and a request's estimate: its rows' share of that, plus the recent idle share per row.
TEST(EnergyLedgerTest, PricesBatchSizesAndRequestsFromWhatItMeasured) {
  Rig rig;
  rig.ledger->SetCarbon(std::make_shared<CarbonIntensity>(360, "", 1.0));  // 0.1 mg per J
  auto m = rig.ledger->ObserverFor("m", 1);
  EXPECT_LT(m->JoulesPerRow(1), 0);  // nothing measured
  const double floor = 100;
  uint64_t now = 0;
  // An empty tick sets the floor; then per tick a 1-row batch busy 10 ms and an 8-row one busy
  // 20 ms, drawing 200 W above the floor while busy.
  now += 100 * kMs;
  rig.gpu->joules += floor * 0.1;
  rig.ledger->Poll(now);
  for (int tick = 0; tick < 50; ++tick) {
    m->OnExecution(Batch(now + 10 * kMs, now + 20 * kMs, 1));
    m->OnExecution(Batch(now + 40 * kMs, now + 60 * kMs, 8));
    now += 100 * kMs;
    rig.gpu->joules += floor * 0.1 + 200 * 0.030;
    rig.ledger->Poll(now);
  }
  rig.ledger->Poll(now + 1000 * kMs);
  EXPECT_NEAR(Find(rig.ledger->Models(), "m").active_watts, 200, 1);
  // Active: 200 W x the size's busy time, per row; idle: 10 J of floor a tick over 9 rows.
  EXPECT_NEAR(m->JoulesPerRow(1), 200 * 0.010 + 10.0 / 9, 0.05);
  EXPECT_NEAR(m->JoulesPerRow(8), 200 * 0.020 / 8 + 10.0 / 9, 0.05);
  EXPECT_LT(m->JoulesPerRow(4), 0);  // a size never run
  // Two rows of the 8-row batch: a quarter of its 4 J active, and two rows' idle share (10 J of
  // floor a tick over 9 rows).
  ExecutionRecord r = Batch(0, 20 * kMs, 8);
  const RequestEnergy e = m->EstimateRequest(r, 2);
  EXPECT_NEAR(e.joules, 200 * 0.020 / 4 + 2 * 10.0 / 9, 0.05);
  EXPECT_NEAR(e.carbon_grams, e.joules * 1e-4, 1e-9);
  EXPECT_EQ(e.source, "nvml");
  EXPECT_EQ(e.scope, "gpu0");
}

}  // namespace
}  // namespace nereid::energy
