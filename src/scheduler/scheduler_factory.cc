#include "scheduler/scheduler_factory.h"

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "common/logging.h"
#include "metrics/model_stats.h"
#include "scheduler/default_scheduler.h"
#include "scheduler/dynamic_batcher.h"

namespace nereid {

std::string SchedulingChoice(const inference::ModelConfig& config) {
  if (config.platform() == "ensemble") return "ensemble";
  if (config.has_sequence_batching()) return "sequence";
  if (config.has_dynamic_batching()) return "dynamic";
  return "default";
}

namespace {

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
  auto batcher = std::make_unique<DynamicBatcher>(config, std::move(c.instances), c.stats, c.clock,
                                                  goal, c.energy);
  // Triton's test hook (its QA's batcher tests set it): no batch is formed until N requests are
  // queued, once; then batching goes on as configured.
  if (const char* delay = std::getenv("TRITONSERVER_DELAY_SCHEDULER"); delay != nullptr) {
    size_t n = 0;
    const char* end = delay + std::strlen(delay);
    const auto [ptr, error] = std::from_chars(delay, end, n);
    if (error != std::errc() || ptr != end || n > 1'000'000) {
      LOG_WARNING << "TRITONSERVER_DELAY_SCHEDULER='" << delay
                  << "' is not a request count (0 .. 1000000): ignored";
    } else if (n > 0) {
      LOG_WARNING << "model '" << config.name() << "': test hook TRITONSERVER_DELAY_SCHEDULER=" << n
                  << ": no batch until " << n << " requests are queued";
      batcher->HoldUntilQueued(n);
    }
  }
  return std::unique_ptr<Scheduler>(std::move(batcher));
}

}  // namespace

SchedulerFactory& SchedulerFactory::Get() {
  static SchedulerFactory* factory = [] {
    auto* f = new SchedulerFactory();
    f->Register("default", MakeDefault);
    f->Register("dynamic", MakeDynamic);
    // Until the sequence batcher registers itself: a config with sequence_batching (and no control
    // inputs, which validation refuses) is served one request at a time, and the load log lists
    // sequence_batching among the fields not acted on.
    f->Register("sequence", MakeDefault);
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
