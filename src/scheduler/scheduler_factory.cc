#include "scheduler/scheduler_factory.h"

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "common/logging.h"
#include "metrics/model_stats.h"
#include "scheduler/default_scheduler.h"
#include "scheduler/dynamic_batcher.h"
#include "scheduler/ensemble_scheduler.h"
#include "scheduler/sequence_batcher.h"

namespace nereid {

std::string SchedulingChoice(const inference::ModelConfig& config) {
  if (config.platform() == "ensemble") return "ensemble";
  if (config.has_sequence_batching()) return "sequence";
  if (config.has_dynamic_batching()) return "dynamic";
  return "default";
}

namespace {

// Triton's test hooks (its QA's batcher tests set them): no batch is formed until N requests are
// queued (or wait in a sequence batcher's backlog), once; then batching goes on as configured.
size_t TestHoldCount(const char* variable, const std::string& model, const char* where) {
  const char* value = std::getenv(variable);
  if (value == nullptr) return 0;
  size_t n = 0;
  const char* end = value + std::strlen(value);
  const auto [ptr, error] = std::from_chars(value, end, n);
  if (error != std::errc() || ptr != end || n > 1'000'000) {
    LOG_WARNING << variable << "='" << value << "' is not a request count (0 .. 1000000): ignored";
    return 0;
  }
  if (n > 0)
    LOG_WARNING << "model '" << model << "': test hook " << variable << "=" << n
                << ": no batch until " << n << " requests are " << where;
  return n;
}

StatusOr<std::unique_ptr<Scheduler>> MakeDefault(SchedulerContext& c) {
  return std::unique_ptr<Scheduler>(std::make_unique<DefaultScheduler>(std::move(c.instances)));
}

StatusOr<std::unique_ptr<Scheduler>> MakeDynamic(SchedulerContext& c) {
  const inference::ModelConfig& config = c.config;
  ASSIGN_OR_RETURN(LatencyGoalConfig goal, ReadLatencyGoal(config));
  if (config.max_batch_size() == 0)
    LOG_WARNING << "model '" << config.name()
                << "': dynamic_batching with max_batch_size 0 only queues; requests are never "
                   "merged";
  if (goal.goal_us > 0)
    LOG_INFO << "model '" << config.name() << "': latency-goal batching, p" << goal.percentile * 100
             << " <= " << goal.goal_us << " us"
             << (goal.objective == BatchingObjective::kEnergy
                     ? c.energy != nullptr
                           ? ", fewest joules per inference (measured)"
                           : ", fewest joules per inference (execution time standing in: no "
                             "energy accounting)"
                     : "");
  auto batcher = std::make_unique<DynamicBatcher>(config, std::move(c.instances), c.requests,
                                                  c.clock, goal, c.energy);
  if (const size_t n = TestHoldCount("TRITONSERVER_DELAY_SCHEDULER", config.name(), "queued");
      n > 0)
    batcher->HoldUntilQueued(n);
  return std::unique_ptr<Scheduler>(std::move(batcher));
}

StatusOr<std::unique_ptr<Scheduler>> MakeSequence(SchedulerContext& c) {
  ASSIGN_OR_RETURN(SequenceBatcherConfig sequence,
                   ReadSequenceBatcherConfig(c.config, c.model_dir));
  sequence.hold_until_queued =
      TestHoldCount("TRITONSERVER_DELAY_SCHEDULER", c.config.name(), "queued");
  sequence.hold_until_backlogged =
      TestHoldCount("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", c.config.name(), "in the backlog");
  LOG_INFO << "model '" << c.config.name() << "': sequence batcher ("
           << (sequence.oldest ? "oldest" : "direct") << "), " << sequence.slots_per_instance
           << " slot(s) per instance, idle timeout " << sequence.idle_ns / 1000 << " us";
  return std::unique_ptr<Scheduler>(
      std::make_unique<SequenceBatcher>(std::move(sequence), std::move(c.instances), c.requests));
}

}  // namespace

SchedulerFactory& SchedulerFactory::Get() {
  static SchedulerFactory* factory = [] {
    auto* f = new SchedulerFactory();
    f->Register("default", MakeDefault);
    f->Register("dynamic", MakeDynamic);
    f->Register("sequence", MakeSequence);
    f->Register("ensemble", MakeEnsembleScheduler);
    return f;
  }();
  return *factory;
}

void SchedulerFactory::Register(const std::string& choice, Maker maker) {
  std::lock_guard<std::mutex> lock(mu_);
  makers_[choice] = std::move(maker);
}

StatusOr<std::unique_ptr<Scheduler>> SchedulerFactory::Create(SchedulerContext& context) const {
  const std::string choice = SchedulingChoice(context.config);
  Maker maker;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = makers_.find(choice);
    if (it == makers_.end())
      return Unsupported("model '" + context.config.name() + "': no scheduler for '" + choice +
                         "' scheduling yet");
    maker = it->second;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler, maker(context));
  RETURN_IF_ERROR(scheduler->start_status());
  return scheduler;
}

}  // namespace nereid
