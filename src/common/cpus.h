// How many CPUs this process may run on, and how precisely its threads' timed waits wake.
#pragma once

namespace nereid {

// The CPUs in the process's affinity mask (taskset, cgroup cpusets), not every CPU of the machine
// as std::thread::hardware_concurrency() counts: thread pools sized from it do not oversubscribe a
// pinned server. At least 1.
int AvailableCpus();

// The calling thread's timed waits wake within about a microsecond of their deadline instead of
// Linux's default 50 us timer slack (which the kernel may add to every timed sleep to coalesce
// wake-ups). Every scheduler instance thread calls it: a max_queue_delay_microseconds of 100
// otherwise waits 140-190 us. No-op where the system has no per-thread timer slack.
void UseFineTimerSlack();

}  // namespace nereid
