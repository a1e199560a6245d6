// The HTTP server's timeout rule, on its own so it can be tested.
#pragma once

#include <chrono>
#include <cstdint>

namespace nereid::http {

// Whether an operation that started at 'since' (steady-clock ns, 0: none running) is past 'limit'
// at 'now'. A start later than 'now' is not overdue: the timeout sweep takes the time once and then
// reads each connection's start, so a connection that begins its next keep-alive read in between
// has a start after the sweep's 'now' (and an unsigned 'now - since' would wrap to years: such
// connections were closed between two requests, which clients saw as "connection reset").
inline bool PastTimeout(uint64_t now, uint64_t since, std::chrono::nanoseconds limit) {
  return since != 0 && now > since && now - since > static_cast<uint64_t>(limit.count());
}

}  // namespace nereid::http
