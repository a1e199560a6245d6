#include "common/cpus.h"

#include <sched.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <thread>

namespace nereid {

int AvailableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

void UseFineTimerSlack() {
#if defined(__linux__)
  // 1 ns: the smallest slack the kernel accepts (0 would restore the default).
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
}

}  // namespace nereid
