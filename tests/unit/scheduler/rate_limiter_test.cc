// The rate limiter: Triton's flag format and load errors, resources held while executing, and
// the priority rule under contention.
#include "scheduler/rate_limiter.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <thread>
#include <vector>

namespace nereid {
namespace {

TEST(RateLimiterTest, ParsesTritonsFlagAndRefusesOtherForms) {
  auto a = RateLimiter::ParseResourceFlag("Resource1:4");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->name, "resource1");
  EXPECT_EQ(a->count, 4u);
  EXPECT_FALSE(a->device.has_value());
  auto b = RateLimiter::ParseResourceFlag("r:10:3");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b->device, 3);
  for (const char* bad : {"r", "r:", ":3", "r:x", "r:1:2:3", "r:-1", "r:1:-2"}) {
    auto s = RateLimiter::ParseResourceFlag(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(
        s.status().message(),
        std::string("--rate-limit-resource option format is '<resource_name>:<count>:<device>' "
                    "or '<resource_name>:<count>'. Got ") +
            bad);
  }
}

TEST(RateLimiterTest, LoadErrorsCarryTritonsMessages) {
  RateLimiter limiter({{"resource1", 3, std::nullopt}, {"resource2", 2, std::nullopt}});
  auto claim = limiter.Register({{"resource1", false, 4}}, 0, 1);
  ASSERT_FALSE(claim.ok());
  EXPECT_EQ(claim.status().message(),
            "Resource count for \"resource1\" is limited to 3 which will prevent scheduling of one "
            "or more model instances, the minimum required count is 4");
  RateLimiter on_device_10({{"resource1", 10, 10}});
  auto elsewhere = on_device_10.Register({{"resource1", false, 4}}, 0, 1);
  ASSERT_FALSE(elsewhere.ok());
  EXPECT_NE(elsewhere.status().message().find("limited to 0"), std::string::npos);
  RateLimiter defaults({});
  auto global = defaults.Register({{"resource2", true, 2}}, 0, 2);
  ASSERT_TRUE(global.ok());
  auto device = defaults.Register({{"resource2", false, 2}}, 0, 1);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().message(),
            "Resource \"resource2\" is present as both global and device-specific resource in the "
            "model configuration.");
}

// Two instances that cannot run together (4 + 2 of a resource with 4): under contention the one
// of priority 2 gets half the executions of the one of priority 1.
TEST(RateLimiterTest, PriorityTwoGetsHalfTheExecutionsUnderContention) {
  RateLimiter limiter({});
  auto first = limiter.Register({{"r", false, 4}}, 0, 1);
  auto second = limiter.Register({{"r", false, 2}, {"g", true, 2}}, 0, 2);
  ASSERT_TRUE(first.ok() && second.ok());
  std::atomic<bool> stop{false};
  std::atomic<int> running{0}, overlap{0};
  std::array<std::atomic<int>, 2> runs{};
  auto loop = [&](RateLimiter::Client* c, int who) {
    while (!stop.load()) {
      c->Acquire();
      if (running.fetch_add(1) > 0) overlap.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      running.fetch_sub(1);
      runs[who].fetch_add(1);
      c->Release();
    }
  };
  std::thread a(loop, first->get(), 0), b(loop, second->get(), 1);
  while (runs[0].load() + runs[1].load() < 600)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop = true;
  a.join();
  b.join();
  EXPECT_EQ(overlap.load(), 0);  // never both at once: 4 + 2 > 4
  const double ratio = static_cast<double>(runs[0].load()) / runs[1].load();
  EXPECT_NEAR(ratio, 2.0, 0.1) << runs[0].load() << " vs " << runs[1].load();
}

}  // namespace
}  // namespace nereid
