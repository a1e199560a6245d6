// nereid-perf: a load generator for KServe v2 servers (Nereid, Triton) in the spirit of
// perf_analyzer: fixed concurrency (closed loop) or fixed request rate (open loop, latency measured
// from the intended send time, so a slow server cannot hide its queueing), sweeps over either, live
// progress on stderr, and results as a table, CSV and JSON.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace nereid::perf {

struct PerfOptions {
  std::string model;
  std::string version;
  std::string url = "localhost:8000";
  std::string protocol = "http";
  int64_t batch_size = 1;
  std::vector<double> concurrency;        // closed-loop sweep
  std::vector<double> request_rate;       // open-loop sweep (requests per second)
  std::string distribution = "constant";  // or "poisson" (request-rate mode)
  int max_threads = 32;                   // connections in request-rate mode
  uint64_t measurement_ms = 5000;
  uint64_t warmup_ms = 1000;
  std::map<std::string, std::vector<int64_t>> shapes;  // --shape NAME:d1,d2 for variable dims
  bool json_data = false;                              // send JSON tensors instead of binary
  std::string csv_file;
  std::string json_file;
  bool quiet = false;
  // --metrics-url HOST:PORT: the server's metrics port, for the energy columns (Nereid's
  // nereid_energy_* and nereid_carbon_* families); empty: none.
  std::string metrics_url;
  // --sequence-length N (perf_analyzer's flag): every connection sends sequences of N requests
  // (sequence_id, sequence_start on the first, sequence_end on the last) for sequence-batching
  // models; 0: plain requests.
  int64_t sequence_length = 0;
  // --rate-schedule R:S,R:S,...: one open-loop run whose rate steps through the phases (requests
  // per second for S seconds each), no warm-up; measured over the whole run.
  std::vector<std::pair<double, double>> rate_schedule;
  // --windows-file FILE: CSV of every 1-second window of a request-rate run (by completion time):
  // second, intended rate, answered, errors, p50 and p99 latency.
  std::string windows_file;
};

struct PerfResult {
  std::string mode;  // "concurrency" or "request_rate"
  double load = 0;   // the concurrency or the request rate
  double throughput = 0;
  uint64_t count = 0;
  uint64_t errors = 0;
  double avg_us = 0;
  double p50_us = 0, p90_us = 0, p95_us = 0, p99_us = 0, max_us = 0;
  // From the server's statistics over the window (0 when it has none): mean requests per
  // execution, and the mean queue and compute time per request.
  double server_batch = 0, server_queue_us = 0, server_compute_us = 0;
  // From the metrics port over the window (--metrics-url): the server's average power (every
  // metered scope, idle included), the model's joules (active and idle share) per inference and
  // inferences per joule, and its grams CO2e per 1,000 inferences (0 without an intensity).
  bool energy = false;
  double watts = 0, mj_per_inference = 0, inferences_per_joule = 0, grams_per_1k = 0;
};

StatusOr<PerfOptions> ParsePerfOptions(const std::vector<std::string>& args);
std::string PerfUsage();
StatusOr<std::vector<PerfResult>> RunPerf(const PerfOptions& options);
std::string FormatTable(const std::vector<PerfResult>& results);
std::string FormatCsv(const std::vector<PerfResult>& results);
std::string FormatJson(const PerfOptions& options, const std::vector<PerfResult>& results);

// `nereid-perf ...`: parses, runs, prints; returns the process exit code.
int PerfMain(const std::vector<std::string>& args);

}  // namespace nereid::perf
