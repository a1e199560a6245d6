// The HTTP server's timeout rule (frontend/http/timeouts.h).
#include <gtest/gtest.h>

#include "frontend/http/timeouts.h"

namespace nereid::http {
namespace {

using std::chrono::nanoseconds;
using std::chrono::seconds;

TEST(HttpTimeouts, OverdueOnlyPastTheLimit) {
  const uint64_t start = 1'000'000'000;
  EXPECT_FALSE(PastTimeout(start + 59'000'000'000, start, seconds(60)));
  EXPECT_FALSE(PastTimeout(start + 60'000'000'000, start, seconds(60)));  // exactly at the limit
  EXPECT_TRUE(PastTimeout(start + 60'000'000'001, start, seconds(60)));
}

TEST(HttpTimeouts, NothingRunningIsNeverOverdue) {
  EXPECT_FALSE(PastTimeout(500'000'000'000, 0, seconds(1)));
}

// The sweep reads the clock, then each connection's start: a read that began in between starts
// after the sweep's "now". It used to wrap around to an enormous age and close a healthy keep-alive
// connection between two requests (perf_analyzer at concurrency 64: "Failure when receiving data
// from the peer").
TEST(HttpTimeouts, AStartAfterTheSweepsClockIsNotOverdue) {
  const uint64_t now = 7'000'000'000;
  EXPECT_FALSE(PastTimeout(now, now + 1, seconds(60)));
  EXPECT_FALSE(PastTimeout(now, now + 5'000, nanoseconds(0)));
  EXPECT_FALSE(PastTimeout(now, now, nanoseconds(0)));
}

}  // namespace
}  // namespace nereid::http
