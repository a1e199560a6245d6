// How many CPUs this process may run on.
#pragma once

namespace nereid {

// The CPUs in the process's affinity mask (taskset, cgroup cpusets), not every CPU of the machine
// as std::thread::hardware_concurrency() counts: thread pools sized from it do not oversubscribe a
// pinned server. At least 1.
int AvailableCpus();

}  // namespace nereid
