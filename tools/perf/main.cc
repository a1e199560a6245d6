// nereid-perf: the load generator (closed and open loop, HTTP and gRPC, sweeps, CSV/JSON). A
// client of the server, built as its own executable under tools/.
#include <string>
#include <vector>

#include "perf/load_generator.h"

int main(int argc, char** argv) {
  return nereid::perf::PerfMain(std::vector<std::string>(argv + 1, argv + argc));
}
