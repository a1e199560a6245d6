// The dynamic batcher, deterministically: the batch decision as a pure function, the request
// queue's priorities/timeouts/limits with explicit times, and the threaded batcher driven by a
// ManualClock and the hold-until-N-queued hook, asserting exact batch compositions. CI runs this
// file 20 times in a row (ctest: batcher_repeat).
#include <gtest/gtest.h>
#include <sys/prctl.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "scheduler/batch_policy.h"
#include "scheduler/dynamic_batcher.h"
#include "scheduler/rate_limiter.h"
#include "scheduler/request_queue.h"

namespace nereid {
namespace {

constexpr uint64_t kUs = 1000;

std::vector<BatchCandidate> Candidates(std::initializer_list<int64_t> sizes,
                                       uint64_t enqueue_ns = 0) {
  std::vector<BatchCandidate> c;
  for (int64_t s : sizes) c.push_back({enqueue_ns, s});
  return c;
}

TEST(DecideBatchTest, EmptyQueueWaitsForArrivals) {
  const BatchDecision d = DecideBatch({8, {}}, {}, false, 0, 0);
  EXPECT_EQ(d.take, 0u);
  EXPECT_EQ(d.wake_ns, 0u);
}

TEST(DecideBatchTest, ZeroDelaySendsWhatIsThere) {
  EXPECT_EQ(DecideBatch({8, {}}, Candidates({1, 1, 1}), false, 0, 0).take, 3u);
}

TEST(DecideBatchTest, WaitsUntilTheOldestHasWaitedTheDelay) {
  const auto c = Candidates({1, 1}, 1000 * kUs);
  BatchDecision d = DecideBatch({8, {}}, c, false, 1050 * kUs, 100 * kUs);
  EXPECT_EQ(d.take, 0u);
  EXPECT_EQ(d.wake_ns, 1100 * kUs);
  d = DecideBatch({8, {}}, c, false, 1100 * kUs, 100 * kUs);
  EXPECT_EQ(d.take, 2u);
}

TEST(DecideBatchTest, FullOrBlockedBatchGoesAtOnce) {
  EXPECT_EQ(DecideBatch({4, {}}, Candidates({2, 2}), false, 0, 1'000'000 * kUs).take, 2u);
  EXPECT_EQ(DecideBatch({8, {}}, Candidates({1, 1}), true, 0, 1'000'000 * kUs).take, 2u);
}

TEST(DecideBatchTest, PreferredSizes) {
  const BatchLimits limits{16, {4, 8}};
  const uint64_t delay = 1'000'000 * kUs;
  // Largest preferred size reached: send exactly that, even with more queued.
  EXPECT_EQ(DecideBatch(limits, Candidates({1, 1, 1, 1, 1, 1, 1, 1, 1, 1}), false, 0, delay).take,
            8u);
  // A smaller preferred size goes at once while the delay has not expired ...
  EXPECT_EQ(DecideBatch(limits, Candidates({1, 1, 1, 1, 1}), false, 0, delay).take, 4u);
  // ... and after it expired the whole pending batch goes.
  EXPECT_EQ(DecideBatch(limits, Candidates({1, 1, 1, 1, 1}), false, delay, delay).take, 5u);
  // Batch sizes of requests add up: 2 + 2 is preferred 4.
  EXPECT_EQ(DecideBatch(limits, Candidates({2, 2, 3}), false, 0, delay).take, 2u);
  // No preferred prefix: wait.
  EXPECT_EQ(DecideBatch(limits, Candidates({3}), false, 0, delay).take, 0u);
  // A blocked batch keeps to its preferred prefix.
  EXPECT_EQ(DecideBatch(limits, Candidates({1, 1, 1, 1, 1, 1}), true, 0, delay).take, 4u);
}

std::unique_ptr<InferenceRequest> MakeRequest(const std::string& id, uint64_t priority = 0,
                                              uint64_t timeout_us = 0, int64_t width = 4,
                                              int64_t batch = 1) {
  auto r = std::make_unique<InferenceRequest>();
  r->model_name = "m";
  r->id = id;
  r->priority = priority;
  r->timeout_us = timeout_us;
  r->batch_size = batch;
  InferInput in;
  in.name = "IN";
  in.datatype = DataType::kFp32;
  in.shape = {batch, width};
  r->inputs.push_back(std::move(in));
  return r;
}

std::vector<std::string> WalkIds(const RequestQueue& q) {
  std::vector<std::string> ids;
  q.Walk([&](const RequestQueue::Entry& e) {
    ids.push_back(e.request->id);
    return true;
  });
  return ids;
}

inference::ModelDynamicBatching TwoLevels() {
  inference::ModelDynamicBatching db;
  db.set_priority_levels(2);
  db.set_default_priority_level(2);
  return db;
}

TEST(RequestQueueTest, PriorityLevelsOrderTheQueue) {
  RequestQueue q(TwoLevels());
  for (auto [id, p] :
       std::vector<std::pair<const char*, uint64_t>>{{"a", 2}, {"b", 1}, {"c", 0}, {"d", 1}}) {
    auto r = MakeRequest(id, p);
    ASSERT_TRUE(q.Enqueue(r, 0).ok());
  }
  EXPECT_EQ(WalkIds(q), (std::vector<std::string>{"b", "d", "a", "c"}));  // 0 -> default level 2
  auto r = MakeRequest("x", 3);
  EXPECT_FALSE(q.Enqueue(r, 0).ok());
  EXPECT_NE(r, nullptr);  // refused: the caller still owns it
}

TEST(RequestQueueTest, MaxQueueSizeRejectsWithUnavailable) {
  inference::ModelDynamicBatching db;
  db.mutable_default_queue_policy()->set_max_queue_size(2);
  RequestQueue q(db);
  for (const char* id : {"a", "b"}) {
    auto r = MakeRequest(id);
    ASSERT_TRUE(q.Enqueue(r, 0).ok());
  }
  auto r = MakeRequest("c");
  Status s = q.Enqueue(r, 0);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  EXPECT_NE(s.message().find("Exceeds maximum queue size"), std::string::npos);
}

TEST(RequestQueueTest, TimeoutRejectAndOverride) {
  inference::ModelDynamicBatching db;
  auto* policy = db.mutable_default_queue_policy();
  policy->set_default_timeout_microseconds(1000);
  policy->set_allow_timeout_override(true);
  RequestQueue q(db);
  auto a = MakeRequest("default");
  auto b = MakeRequest("shorter", 0, 100);
  auto c = MakeRequest("longer_ignored", 0, 5000);
  for (auto* r : {&a, &b, &c}) ASSERT_TRUE(q.Enqueue(*r, 0).ok());
  EXPECT_EQ(q.NextDeadline(), 100 * kUs);
  std::vector<std::unique_ptr<InferenceRequest>> rejected;
  q.ExpireTimeouts(500 * kUs, &rejected);
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0]->id, "shorter");
  rejected.clear();
  q.ExpireTimeouts(1000 * kUs, &rejected);
  EXPECT_EQ(rejected.size(), 2u);
  EXPECT_TRUE(q.empty());
}

TEST(RequestQueueTest, TimeoutOverrideNeedsPermission) {
  inference::ModelDynamicBatching db;
  db.mutable_default_queue_policy()->set_default_timeout_microseconds(1000);
  RequestQueue q(db);
  auto r = MakeRequest("r", 0, 10);
  ASSERT_TRUE(q.Enqueue(r, 0).ok());
  EXPECT_EQ(q.NextDeadline(), 1000 * kUs);
}

TEST(RequestQueueTest, TimeoutDelayMovesBehindItsLevel) {
  inference::ModelDynamicBatching db = TwoLevels();
  inference::ModelQueuePolicy delay;
  delay.set_timeout_action(inference::ModelQueuePolicy::DELAY);
  delay.set_default_timeout_microseconds(100);
  (*db.mutable_priority_queue_policy())[1] = delay;
  RequestQueue q(db);
  auto a = MakeRequest("late", 1);
  ASSERT_TRUE(q.Enqueue(a, 0).ok());
  auto low = MakeRequest("low", 2);
  ASSERT_TRUE(q.Enqueue(low, 0).ok());
  std::vector<std::unique_ptr<InferenceRequest>> rejected;
  q.ExpireTimeouts(200 * kUs, &rejected);
  EXPECT_TRUE(rejected.empty());
  auto b = MakeRequest("fresh", 1);
  ASSERT_TRUE(q.Enqueue(b, 200 * kUs).ok());
  // The delayed request follows every other level-1 request, but still precedes level 2.
  EXPECT_EQ(WalkIds(q), (std::vector<std::string>{"fresh", "late", "low"}));
  q.ExpireTimeouts(10'000 * kUs, &rejected);
  EXPECT_TRUE(rejected.empty());  // delayed requests never time out again
}

// Records every batch it executes (request ids) and completes each request successfully.
class RecordingExecutor : public BatchExecutor {
 public:
  ExecutionSummary Execute(std::vector<std::unique_ptr<InferenceRequest>>& batch) override {
    std::vector<std::string> ids;
    for (auto& r : batch) ids.push_back(r->id);
    timer_slack_ns = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);  // of the batcher's thread
    if (!ids.empty() && ids[0] == slow_id)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    {
      std::lock_guard<std::mutex> lock(mu);
      batches.push_back(ids);
    }
    for (auto& r : batch) {
      auto response = std::make_unique<InferenceResponse>();
      response->id = r->id;
      auto cb = std::move(r->on_complete);
      r.reset();
      cb(std::move(response));
    }
    return {};
  }
  std::mutex mu;
  std::vector<std::vector<std::string>> batches;
  std::string slow_id;
  std::atomic<long> timer_slack_ns{-1};
};

// Collects completions; Wait blocks until n have arrived.
struct Completions {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<std::string, Status>> done;
  ResponseCallback Callback(const std::string& id) {
    return [this, id](std::unique_ptr<InferenceResponse> r) {
      std::lock_guard<std::mutex> lock(mu);
      done.emplace_back(id, r->status);
      cv.notify_all();
    };
  }
  void Wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return done.size() >= n; }))
        << "only " << done.size() << " of " << n << " completed";
  }
};

inference::ModelConfig BatchingConfig(int max_batch, std::vector<int> preferred,
                                      uint64_t delay_us) {
  inference::ModelConfig c;
  c.set_name("m");
  c.set_max_batch_size(max_batch);
  auto* db = c.mutable_dynamic_batching();
  for (int p : preferred) db->add_preferred_batch_size(p);
  db->set_max_queue_delay_microseconds(delay_us);
  return c;
}

struct BatcherFixture {
  ManualClock clock;
  RecordingExecutor executor;
  Completions completions;
  std::unique_ptr<DynamicBatcher> batcher;

  void Start(const inference::ModelConfig& config, size_t hold, int instances = 1) {
    std::vector<BatchExecutor*> executors(instances, &executor);
    batcher = std::make_unique<DynamicBatcher>(config, executors, nullptr, &clock);
    batcher->HoldUntilQueued(hold);
  }
  Status Submit(std::unique_ptr<InferenceRequest> r) {
    r->on_complete = completions.Callback(r->id);
    return batcher->Enqueue(r);
  }
};

TEST(DynamicBatcherTest, ZeroDelayBatchesEverythingQueued) {
  BatcherFixture f;
  f.Start(BatchingConfig(8, {}, 0), 5);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(f.Submit(MakeRequest("r" + std::to_string(i))).ok());
  f.completions.Wait(5);
  f.batcher->Stop();
  EXPECT_EQ(f.executor.batches,
            (std::vector<std::vector<std::string>>{{"r0", "r1", "r2", "r3", "r4"}}));
}

// A 100 us max_queue_delay must not become 150: the batcher's threads ask for 1 ns of timer slack
// (Linux's default, which every other thread keeps, is 50 us).
TEST(DynamicBatcherTest, TheBatcherThreadWakesOnTime) {
  BatcherFixture f;
  f.Start(BatchingConfig(8, {}, 100), 1);
  ASSERT_TRUE(f.Submit(MakeRequest("r0")).ok());
  f.clock.Advance(100 * kUs);
  f.batcher->Poke();
  f.completions.Wait(1);
  f.batcher->Stop();
  EXPECT_EQ(f.executor.timer_slack_ns.load(), 1);
  EXPECT_NE(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), 1);  // the test's own thread is untouched
}

TEST(DynamicBatcherTest, MaxBatchSizeCutsBatches) {
  BatcherFixture f;
  f.Start(BatchingConfig(4, {}, 0), 6);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(f.Submit(MakeRequest("r" + std::to_string(i))).ok());
  f.completions.Wait(6);
  f.batcher->Stop();
  EXPECT_EQ(f.executor.batches,
            (std::vector<std::vector<std::string>>{{"r0", "r1", "r2", "r3"}, {"r4", "r5"}}));
}

TEST(DynamicBatcherTest, PreferredSizesThenDelayOnTheManualClock) {
  BatcherFixture f;
  f.Start(BatchingConfig(8, {2, 4}, 1'000'000), 7);  // delay 1 s of manual time
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(f.Submit(MakeRequest("r" + std::to_string(i))).ok());
  f.completions.Wait(6);  // 4 (largest preferred) then 2 (preferred, delay not over)
  {
    std::lock_guard<std::mutex> lock(f.executor.mu);
    EXPECT_EQ(f.executor.batches,
              (std::vector<std::vector<std::string>>{{"r0", "r1", "r2", "r3"}, {"r4", "r5"}}));
  }
  f.clock.Advance(1'000'000 * kUs);  // now the last request has waited the delay
  f.batcher->Poke();
  f.completions.Wait(7);
  f.batcher->Stop();
  EXPECT_EQ(f.executor.batches.back(), (std::vector<std::string>{"r6"}));
}

TEST(DynamicBatcherTest, PrioritiesGoFirst) {
  BatcherFixture f;
  inference::ModelConfig c = BatchingConfig(2, {}, 0);
  c.mutable_dynamic_batching()->set_priority_levels(2);
  c.mutable_dynamic_batching()->set_default_priority_level(2);
  f.Start(c, 4);
  ASSERT_TRUE(f.Submit(MakeRequest("low0", 2)).ok());
  ASSERT_TRUE(f.Submit(MakeRequest("low1")).ok());
  ASSERT_TRUE(f.Submit(MakeRequest("high0", 1)).ok());
  ASSERT_TRUE(f.Submit(MakeRequest("high1", 1)).ok());
  f.completions.Wait(4);
  f.batcher->Stop();
  EXPECT_EQ(f.executor.batches,
            (std::vector<std::vector<std::string>>{{"high0", "high1"}, {"low0", "low1"}}));
}

TEST(DynamicBatcherTest, DifferentShapesAreNotMerged) {
  BatcherFixture f;
  f.Start(BatchingConfig(8, {}, 0), 4);
  ASSERT_TRUE(f.Submit(MakeRequest("a", 0, 0, 4)).ok());
  ASSERT_TRUE(f.Submit(MakeRequest("b", 0, 0, 4)).ok());
  ASSERT_TRUE(f.Submit(MakeRequest("c", 0, 0, 8)).ok());
  ASSERT_TRUE(f.Submit(MakeRequest("d", 0, 0, 8)).ok());
  f.completions.Wait(4);
  f.batcher->Stop();
  EXPECT_EQ(f.executor.batches, (std::vector<std::vector<std::string>>{{"a", "b"}, {"c", "d"}}));
}

TEST(DynamicBatcherTest, RequestBatchSizesCount) {
  BatcherFixture f;
  f.Start(BatchingConfig(4, {}, 0), 3);
  ASSERT_TRUE(f.Submit(MakeRequest("two", 0, 0, 4, 2)).ok());
  ASSERT_TRUE(f.Submit(MakeRequest("one", 0, 0, 4, 1)).ok());
  ASSERT_TRUE(f.Submit(MakeRequest("three", 0, 0, 4, 3)).ok());
  f.completions.Wait(3);
  f.batcher->Stop();
  EXPECT_EQ(f.executor.batches, (std::vector<std::vector<std::string>>{{"two", "one"}, {"three"}}));
}

TEST(DynamicBatcherTest, FullQueueRejectsAndTimeoutsReject) {
  BatcherFixture f;
  inference::ModelConfig c = BatchingConfig(8, {}, 0);
  auto* policy = c.mutable_dynamic_batching()->mutable_default_queue_policy();
  policy->set_max_queue_size(2);
  policy->set_default_timeout_microseconds(500);
  f.Start(c, 100);  // hold: nothing executes
  ASSERT_TRUE(f.Submit(MakeRequest("a")).ok());
  ASSERT_TRUE(f.Submit(MakeRequest("b")).ok());
  Status full = f.Submit(MakeRequest("c"));
  EXPECT_EQ(full.code(), Status::Code::kUnavailable);
  f.clock.Advance(600 * kUs);
  f.batcher->Poke();
  f.completions.Wait(2);
  f.batcher->Stop();
  EXPECT_TRUE(f.executor.batches.empty());
  for (const auto& [id, status] : f.completions.done) {
    EXPECT_EQ(status.code(), Status::Code::kUnavailable) << id;
    EXPECT_EQ(status.message(), "Request timeout expired");
  }
}

TEST(DynamicBatcherTest, StopFinishesEverythingAccepted) {
  BatcherFixture f;
  f.Start(BatchingConfig(2, {}, 1'000'000), 100);  // held and with a long delay
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(f.Submit(MakeRequest("r" + std::to_string(i))).ok());
  f.batcher->Stop();
  EXPECT_EQ(f.completions.done.size(), 3u);
  EXPECT_EQ(f.executor.batches, (std::vector<std::vector<std::string>>{{"r0", "r1"}, {"r2"}}));
  EXPECT_FALSE(f.Submit(MakeRequest("late")).ok());
}

TEST(DynamicBatcherTest, PreserveOrderingReleasesResponsesInArrivalOrder) {
  BatcherFixture f;
  inference::ModelConfig c = BatchingConfig(1, {}, 0);
  c.mutable_dynamic_batching()->set_preserve_ordering(true);
  f.executor.slow_id = "r0";  // the first request finishes last
  f.Start(c, 4, /*instances=*/2);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(f.Submit(MakeRequest("r" + std::to_string(i))).ok());
  f.completions.Wait(4);
  f.batcher->Stop();
  std::vector<std::string> order;
  for (const auto& [id, s] : f.completions.done) order.push_back(id);
  EXPECT_EQ(order, (std::vector<std::string>{"r0", "r1", "r2", "r3"}));
}

// An instance under Triton's rate limiter: it takes its turn as ModelInstance does, and each
// execution lasts 200 ms.
class TurnTakingExecutor : public BatchExecutor {
 public:
  TurnTakingExecutor(std::shared_ptr<RateLimiter::Client> claim, RecordingExecutor* record,
                     std::atomic<int>* started)
      : claim_(std::move(claim)), record_(record), started_(started) {}
  bool RateLimited() const override { return true; }
  void AcquireTurn() override {
    claim_->Acquire();
    held_ = true;
  }
  void ReturnTurn() override {
    held_ = false;
    claim_->Return();
  }
  ExecutionSummary Execute(std::vector<std::unique_ptr<InferenceRequest>>& batch) override {
    if (!held_) claim_->Acquire();
    held_ = false;
    started_->fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ExecutionSummary summary = record_->Execute(batch);
    claim_->Release();
    return summary;
  }

 private:
  std::shared_ptr<RateLimiter::Client> claim_;
  RecordingExecutor* record_;
  std::atomic<int>* started_;
  bool held_ = false;
};

// Two instances that cannot run together (one resource of count 1): the idle one forms its batch
// only when it may run, so it takes the four requests that queued while the other executed, not
// the one there when it went idle (Triton's test_single_model_dynamic_batching).
TEST(DynamicBatcherTest, ARateLimitedInstanceFormsItsBatchOnceItMayRun) {
  RateLimiter limiter({{"r", 1, std::nullopt}});
  auto first = limiter.Register({{"r", false, 1}}, 0, 1);
  auto second = limiter.Register({{"r", false, 1}}, 0, 1);
  ASSERT_TRUE(first.ok() && second.ok());
  ManualClock clock;
  RecordingExecutor record;
  Completions completions;
  std::atomic<int> started{0};
  TurnTakingExecutor a(*first, &record, &started), b(*second, &record, &started);
  DynamicBatcher batcher(BatchingConfig(4, {1, 2, 3, 4}, 0), {&a, &b}, nullptr, &clock);
  batcher.HoldUntilQueued(4);
  auto submit = [&](int i) {
    auto r = MakeRequest("r" + std::to_string(i));
    r->on_complete = completions.Callback(r->id);
    ASSERT_TRUE(batcher.Enqueue(r).ok());
  };
  for (int i = 0; i < 4; ++i) submit(i);
  for (int spins = 0; started.load() == 0 && spins < 5000; ++spins)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(started.load(), 1);
  submit(4);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the idle instance sees r4 alone
  for (int i = 5; i < 8; ++i) submit(i);
  completions.Wait(8);
  batcher.Stop();
  EXPECT_EQ(record.batches, (std::vector<std::vector<std::string>>{{"r0", "r1", "r2", "r3"},
                                                                   {"r4", "r5", "r6", "r7"}}));
}

TEST(AdaptiveDelayTest, WaitsOnlyWhenArrivalsAreLikelyAndWithinBudget) {
  AdaptiveDelay a(/*goal_ns=*/5'000 * kUs, 0.99, /*max_batch=*/32);
  EXPECT_EQ(a.DelayNs(1, 0), 0u);  // nothing measured: no reason to wait
  for (int b = 1; b <= 32; b *= 2) a.OnExecution(b, 200 * kUs + b * 20 * kUs);
  uint64_t t = 0;
  for (int i = 0; i < 50; ++i) a.OnArrival(t += 100 * kUs);  // 10k requests/s, last arrival at t
  // The next request is due in 100 us, well within one execution (240 us for 2 rows): wait for it,
  // until it is overdue 150 us after the last arrival.
  EXPECT_EQ(a.DelayNs(1, t), 150 * kUs);
  // An older request may wait until then too (2 ms + 150 us after it arrived) ...
  EXPECT_EQ(a.DelayNs(1, t - 2'000 * kUs), 2'150 * kUs);
  // ... but never past the budget (0.5 * 5 ms) less the time to execute one more row (240 us).
  EXPECT_EQ(a.DelayNs(1, t - 3'000 * kUs), 2'500 * kUs - 240 * kUs);
  EXPECT_EQ(a.DelayNs(32, t), 0u);                             // full
  for (int i = 0; i < 50; ++i) a.OnArrival(t += 1'000 * kUs);  // 1000 requests/s
  // The next request is not expected within half an execution: send now.
  EXPECT_EQ(a.DelayNs(1, t), 0u);
}

TEST(AdaptiveDelayTest, WaitsOnlyWhereBiggerBatchesRaiseThroughput) {
  uint64_t t = 0;
  // Compute-bound: every row costs the same 100 us, so a wait only idles the instance.
  AdaptiveDelay linear(5'000 * kUs, 0.99, 32);
  for (int b = 1; b <= 32; ++b) linear.OnExecution(b, b * 100 * kUs);
  for (int i = 0; i < 50; ++i) linear.OnArrival(t += 50 * kUs);
  EXPECT_EQ(linear.DelayNs(8, t), 0u);
  // A fixed cost per execution (weights streamed once per batch): waiting for more rows pays.
  AdaptiveDelay fixed(5'000 * kUs, 0.99, 32);
  for (int b = 1; b <= 32; ++b) fixed.OnExecution(b, 2'000 * kUs + b * 10 * kUs);
  for (int i = 0; i < 50; ++i) fixed.OnArrival(t += 50 * kUs);
  EXPECT_EQ(fixed.DelayNs(4, t), 75 * kUs);  // 5 rows in 2.125 ms beat 4 in 2.04 ms by 20%
  EXPECT_EQ(fixed.DelayNs(8, t), 0u);        // 9 rows vs 8: +8%, within the estimates' noise
}

TEST(AdaptiveDelayTest, FruitlessWaitsBackOff) {
  AdaptiveDelay a(5'000 * kUs, 0.99, 32);
  a.OnExecution(2, 500 * kUs);
  uint64_t t = 0;
  for (int i = 0; i < 10; ++i) a.OnArrival(t += 50 * kUs);
  ASSERT_GT(a.DelayNs(1, t), 0u);
  a.OnWaitOutcome(false);  // nobody came: the next batch goes at once
  EXPECT_EQ(a.DelayNs(1, t), 0u);
  a.OnDispatch();
  EXPECT_GT(a.DelayNs(1, t), 0u);
  a.OnWaitOutcome(false);  // twice in a row: three batches without waiting
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a.DelayNs(1, t), 0u);
    a.OnDispatch();
  }
  EXPECT_GT(a.DelayNs(1, t), 0u);
  a.OnWaitOutcome(true);  // a wait that gathered requests resets the back-off
  EXPECT_GT(a.DelayNs(1, t), 0u);
}

TEST(AdaptiveDelayTest, FeedbackKeepsThePercentileUnderTheGoal) {
  AdaptiveDelay a(5'000 * kUs, 0.99, 32);
  const double start = a.budget_factor();
  for (int i = 0; i < 256; ++i) a.OnCompletion(8'000 * kUs);  // over the goal
  EXPECT_LT(a.budget_factor(), start);
  const double lowered = a.budget_factor();
  for (int i = 0; i < 256 * 4; ++i) a.OnCompletion(1'000 * kUs);  // well under
  EXPECT_GT(a.budget_factor(), lowered);
  EXPECT_LE(a.budget_factor(), 0.9);
}

TEST(AdaptiveDelayTest, EnergyObjectiveSteersToAShareOfTheGoal) {
  // A percentile at 90% of the goal: the throughput objective leaves its budget alone, the energy
  // objective (which steers to 85% of the goal) lowers it.
  AdaptiveDelay throughput(5'000 * kUs, 0.99, 32);
  AdaptiveDelay energy(5'000 * kUs, 0.99, 32, BatchingObjective::kEnergy);
  const double start = energy.budget_factor();
  for (int i = 0; i < 256; ++i) {
    throughput.OnCompletion(4'500 * kUs);
    energy.OnCompletion(4'500 * kUs);
  }
  EXPECT_DOUBLE_EQ(throughput.budget_factor(), start);
  EXPECT_LT(energy.budget_factor(), start);
}

// A batch's energy by its size, as the energy ledger would report it.
class FakeEnergyModel final : public BatchEnergyModel {
 public:
  double JoulesPerRow(int64_t rows) const override {
    return rows < static_cast<int64_t>(per_row.size()) ? per_row[rows] : -1;
  }
  std::vector<double> per_row;  // by rows; < 0: not measured
};

TEST(AdaptiveDelayTest, TheEnergyObjectiveWaitsWhereLargerBatchesCostLessARow) {
  FakeEnergyModel energy;
  // Each batch costs 1 J whatever its size (a memory-bound model): fewer joules per row the more
  // rows.
  for (int b = 0; b <= 32; ++b) energy.per_row.push_back(b == 0 ? -1 : 1.0 / b);
  AdaptiveDelay a(5'000 * kUs, 0.99, 32, BatchingObjective::kEnergy, &energy);
  for (int b = 1; b <= 32; ++b) a.OnExecution(b, 100 * kUs);
  uint64_t t = 0;
  for (int i = 0; i < 50; ++i) a.OnArrival(t += 500 * kUs);  // 2,000 requests/s
  // The throughput objective sends at once here (the next request is due after five executions);
  // the energy objective waits for more, until 4 gaps after the last arrival (5 rows by then).
  AdaptiveDelay throughput(5'000 * kUs, 0.99, 32);
  for (int b = 1; b <= 32; ++b) throughput.OnExecution(b, 100 * kUs);
  for (uint64_t i = 0, u = 0; i < 50; ++i) throughput.OnArrival(u += 500 * kUs);
  EXPECT_EQ(throughput.DelayNs(1, t), 0u);
  EXPECT_EQ(a.DelayNs(1, t), 2'000 * kUs);
  // An older request waits no longer than the budget (0.5 x 5 ms) less one more execution.
  EXPECT_EQ(a.DelayNs(1, t - 3'000 * kUs), 2'500 * kUs - 100 * kUs);
  // Where every row costs the same (compute-bound), waiting saves nothing: no wait.
  for (int b = 1; b <= 32; ++b) energy.per_row[b] = 0.5;
  EXPECT_EQ(a.DelayNs(1, t), 0u);
  // A size not measured yet is waited for: that is how it gets measured.
  energy.per_row[5] = -1;
  EXPECT_EQ(a.DelayNs(1, t), 2'000 * kUs);
}

TEST(AdaptiveDelayTest, AOneOffSlowBatchDoesNotPriceItsSizeOutForEver) {
  AdaptiveDelay a(5'000 * kUs, 0.99, 32);
  a.OnExecution(1, 200 * kUs);
  a.OnExecution(2, 30'000 * kUs);             // its first batch captured a CUDA graph
  EXPECT_EQ(a.ExecEstimateNs(2), 400 * kUs);  // capped by batch 1's, scaled to two rows
  a.OnExecution(4, 300 * kUs);
  EXPECT_EQ(a.ExecEstimateNs(4), 300 * kUs);  // measured, below the cap
  EXPECT_EQ(a.ExecEstimateNs(8), 600 * kUs);  // not measured: batch 4's, scaled
}

TEST(LatencyGoalConfigTest, ReadsAndValidatesParameters) {
  inference::ModelConfig c;
  c.set_name("m");
  EXPECT_EQ(ReadLatencyGoal(c)->goal_us, 0u);
  (*c.mutable_parameters())["nereid.latency_goal_us"].set_string_value("5000");
  (*c.mutable_parameters())["nereid.latency_goal_percentile"].set_string_value("95");
  auto goal = ReadLatencyGoal(c);
  ASSERT_TRUE(goal.ok());
  EXPECT_EQ(goal->goal_us, 5000u);
  EXPECT_DOUBLE_EQ(goal->percentile, 0.95);
  EXPECT_EQ(goal->objective, BatchingObjective::kThroughput);
  (*c.mutable_parameters())["nereid.batching_objective"].set_string_value("energy");
  EXPECT_EQ(ReadLatencyGoal(c)->objective, BatchingObjective::kEnergy);
  (*c.mutable_parameters())["nereid.batching_objective"].set_string_value("joules");
  EXPECT_EQ(ReadLatencyGoal(c).status().message(),
            "model 'm': parameter 'nereid.batching_objective' must be 'throughput' or 'energy', "
            "got 'joules'");
  (*c.mutable_parameters())["nereid.batching_objective"].set_string_value("energy");
  // Not a number, not finite, or out of range: refused, never cast (a goal that became 0).
  for (const char* bad : {"fast", "inf", "-inf", "nan", "1e400", "1e30", "0", "-5", "5000x", ""}) {
    (*c.mutable_parameters())["nereid.latency_goal_us"].set_string_value(bad);
    EXPECT_EQ(ReadLatencyGoal(c).status().message(),
              std::string("model 'm': parameter 'nereid.latency_goal_us' must be a finite number "
                          "from 1 to 3.6e+09, got '") +
                  bad + "'")
        << bad;
  }
  (*c.mutable_parameters())["nereid.latency_goal_us"].set_string_value("5000");
  for (const char* bad : {"100", "inf", "nan", "0"}) {
    (*c.mutable_parameters())["nereid.latency_goal_percentile"].set_string_value(bad);
    EXPECT_FALSE(ReadLatencyGoal(c).ok()) << bad;
  }
  (*c.mutable_parameters())["nereid.latency_goal_percentile"].set_string_value("95");
  c.mutable_parameters()->erase("nereid.latency_goal_us");
  EXPECT_EQ(ReadLatencyGoal(c).status().message(),
            "model 'm': parameter 'nereid.batching_objective' needs a latency goal "
            "('nereid.latency_goal_us')");
}

}  // namespace
}  // namespace nereid
