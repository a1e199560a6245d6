// The native engine called directly in one process, for its speed against ONNX Runtime's
// (bench/native_vs_ort.py runs both on the same inputs) and its outputs against ORT's.
//
//   bench_native --model=PATH [--batch=N] [--shape=D,D,...] [--iterations=N] [--input=RAW]
//                [--feeds=FILE] [--output=RAW] [--int8] [--no-channels-last] [--threads=N]
//                [--profile=N] [--split-rows] [--gpu=PRECISION [--ragged=N]]
//                [--calibration=FILE [--smoothing=ALPHA]] [--fetch=OUTPUT]
// --feeds gives every input instead (models with several): records of u32 name length, name,
// u32 ONNX element type, u32 rank, i64 dims, then the bytes (bench/native_vs_ort.py writes it).
// The model's first input gets [batch, dims from the file...] (other variable dims 1), or
// --shape (its first dim replaced by --batch). --input
// reads its FP32 bytes from a file (otherwise deterministic values); --output writes the first
// output's FP32 bytes (--fetch: that output's instead). Prints the load log, then one line: "run_us
// <mean> p50_us <median> best_us <min> iterations <n>"; --profile=N then lists the N nodes that
// took longest (share of the run, us per run, op and node name). --split-rows runs the batch as the
// backend does where nereid.split_batches chose it: Graph::RunRows, the rows side by side over the
// threads. Inputs not fed by --feeds: every input of the graph, --shape (or its dims, open ones 1)
// with the batch first, floats of a fixed pattern, integers 1 (a valid index); inputs with a
// default (weights an older file lists as inputs) keep it.
// --calibration (with --int8): feeds (--feeds' format) the int8 layers' input ranges are measured
// on, fp32, before the int8 graph loads with its activations smoothed per channel where that
// pays (--smoothing=ALPHA: SmoothQuant's alpha for every layer instead).
// --gpu=fp32|tf32|bf16|fp16|int8 (builds with CUDA): the graph compiled for GPU 0 in that
// precision and run host to host (RunOnGpu, as the server's KIND_GPU instances run it); times as
// above, and --profile=N lists the N steps of the plan that take longest (each timed alone,
// ProfileGpuSteps) and the time per kind of step. --ragged=N (an encoder's [batch, tokens] inputs):
// the ragged plan (allow_ragged_batch) running N sequences packed end to end, their lengths drawn
// uniformly from 16 to --shape's tokens (the longest the plan takes), the same draw every run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/parallel.h"
#include "graph.h"
#if defined(NEREID_NATIVE_GPU)
#include "gpu_engine.h"
#endif

namespace {

// "run_us <mean> p50_us <median> best_us <min> iterations <n>" (sorts 'times').
void PrintTimes(std::vector<double>& times) {
  double sum = 0;
  for (double t : times) sum += t;
  std::sort(times.begin(), times.end());
  std::printf("run_us %.1f p50_us %.1f best_us %.1f iterations %zu\n", sum / times.size(),
              times[times.size() / 2], times[0], times.size());
}

// The indices of 'times', longest first (the profiles' order).
std::vector<size_t> LongestFirst(const std::vector<double>& times) {
  std::vector<size_t> order(times.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return times[a] > times[b]; });
  return order;
}

#if defined(NEREID_NATIVE_GPU)

// --gpu: the graph on GPU 0, host to host, as a KIND_GPU instance runs it.
int RunGpu(const nereid::native::Graph& graph, const std::string& precision_name,
           const std::vector<std::pair<std::string, nereid::native::Tensor>>& feeds, int64_t batch,
           int ragged, int iterations, size_t profile, const std::string& output_file) {
  namespace nn = nereid::native;
  auto precision = nn::ParsePrecision(precision_name);
  if (!precision.ok()) {
    std::fprintf(stderr, "%s\n", precision.status().message().c_str());
    return 2;
  }
  nn::GpuShapes shapes;
  for (const auto& [name, t] : feeds)
    shapes.input_dims[name] = std::vector<int64_t>(t.shape().begin() + 1, t.shape().end());
  // Each input whole, or with --ragged sequences of 16 to 'longest' tokens, each its own part
  // (every token the value of the input's first).
  std::vector<int64_t> lengths;
  std::vector<std::vector<uint8_t>> packed(feeds.size());
  std::vector<nn::GpuFeed> gpu_feeds;
  if (ragged > 0) {
    const int64_t longest = feeds[0].second.shape().size() == 2 ? feeds[0].second.shape()[1] : 0;
    if (longest < 16) {
      std::fprintf(stderr, "--ragged: inputs of [batch, tokens] with --shape's tokens >= 16\n");
      return 2;
    }
    shapes.ragged_max_length = longest;
    shapes.ragged_max_sequences = ragged;
    uint64_t state = 12345;
    for (int i = 0; i < ragged; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      lengths.push_back(16 + static_cast<int64_t>((state >> 33) % (longest - 15)));
    }
    batch = 0;
    for (int64_t n : lengths) batch += n;
    std::printf("ragged: %d sequences, %lld tokens\n", ragged, static_cast<long long>(batch));
  }
  for (size_t f = 0; f < feeds.size(); ++f) {
    const nereid::native::Tensor& t = feeds[f].second;
    gpu_feeds.push_back({feeds[f].first, {}});
    if (ragged == 0) {
      gpu_feeds.back().parts.push_back({t.raw(), t.bytes()});
      continue;
    }
    shapes.input_dims[feeds[f].first] = {-1};
    const size_t element = t.bytes() / static_cast<size_t>(t.elements());
    packed[f].resize(static_cast<size_t>(batch) * element);
    for (size_t at = 0; at < packed[f].size(); at += element)
      std::memcpy(packed[f].data() + at, t.raw(), element);
    size_t at = 0;
    for (int64_t n : lengths) {
      gpu_feeds.back().parts.push_back({packed[f].data() + at, static_cast<size_t>(n) * element});
      at += static_cast<size_t>(n) * element;
    }
  }
  auto compiled = nn::CompileForGpu(graph, 0, *precision, shapes);
  if (!compiled.ok()) {
    std::fprintf(stderr, "%s\n", compiled.status().message().c_str());
    return 1;
  }
  std::printf("gpu: %s\n", nn::Describe(**compiled).c_str());
  auto instance = nn::CreateGpuInstance(*compiled);
  if (!instance.ok()) {
    std::fprintf(stderr, "%s\n", instance.status().message().c_str());
    return 1;
  }
  std::vector<nn::GpuResult> results;
  std::vector<double> times;
  double device_us = 0;  // the device's part: copies in, graph, copies out (CUDA events)
  for (int it = 0; it < std::max(iterations, 1) + 3; ++it) {  // (3 first: the graph's capture)
    uint64_t start = 0, end = 0;
    const auto t0 = std::chrono::steady_clock::now();
    auto s = nn::RunOnGpu(**instance, batch, gpu_feeds, {}, &results, &start, &end,
                          ragged > 0 ? &lengths : nullptr);
    const auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
    if (it < 3) continue;
    times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    device_us += static_cast<double>(nn::LastDeviceNs(**instance)) / 1e3;
  }
  if (!output_file.empty() && !results.empty()) {
    std::ofstream out(output_file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(results[0].data),
              static_cast<std::streamsize>(results[0].bytes));
  }
  PrintTimes(times);
  std::printf("device_us %.1f (copies and graph, mean)\n",
              device_us / static_cast<double>(times.size()));
  if (profile) {
    auto steps = nn::ProfileGpuSteps(**instance, batch, std::max(iterations, 1));
    if (!steps.ok()) {
      std::fprintf(stderr, "%s\n", steps.status().message().c_str());
      return 1;
    }
    double total = 0;
    std::map<std::string, std::pair<double, int>> kinds;
    for (const auto& s : *steps) {
      total += s.us;
      kinds[s.kind].first += s.us;
      ++kinds[s.kind].second;
    }
    std::printf("steps %zu, %.1f us each timed alone, summed\n", steps->size(), total);
    std::printf("%6s %9s %6s  %s\n", "share", "us", "steps", "kind");
    for (const auto& [kind, v] : kinds)
      std::printf("%5.1f%% %9.1f %6d  %s\n", 100 * v.first / total, v.first, v.second,
                  kind.c_str());
    std::vector<double> us;
    for (const auto& s : *steps) us.push_back(s.us);
    const std::vector<size_t> order = LongestFirst(us);
    std::printf("%6s %9s  %s\n", "step", "us", "kind");
    for (size_t i = 0; i < std::min(order.size(), profile); ++i) {
      const auto& s = (*steps)[order[i]];
      std::printf("%6zu %9.1f  %s %s\n", order[i], s.us, s.kind.c_str(), s.detail.c_str());
    }
  }
  return 0;
}
#endif

// Reads a --feeds file into 'feeds' (replacing what it held); false, with a message, where the
// file is truncated.
bool ReadFeeds(const std::string& path,
               std::vector<std::pair<std::string, nereid::native::Tensor>>* feeds) {
  feeds->clear();
  std::ifstream in(path, std::ios::binary);
  uint32_t length = 0;
  while (in.read(reinterpret_cast<char*>(&length), 4)) {
    std::string name(length, '\0');
    uint32_t type = 0, rank = 0;
    in.read(name.data(), length);
    in.read(reinterpret_cast<char*>(&type), 4);
    in.read(reinterpret_cast<char*>(&rank), 4);
    std::vector<int64_t> dims(rank);
    in.read(reinterpret_cast<char*>(dims.data()), 8 * rank);
    auto t = nereid::native::Tensor::Allocate(
        nereid::native::FromOnnxType(static_cast<int32_t>(type)), dims);
    in.read(reinterpret_cast<char*>(t.mutable_raw()), static_cast<std::streamsize>(t.bytes()));
    if (!in) {
      std::fprintf(stderr, "%s is truncated\n", path.c_str());
      return false;
    }
    feeds->emplace_back(name, t);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using nereid::native::Graph;
  using nereid::native::Tensor;
  std::string model, input_file, output_file, feeds_file, calibration_file, fetch_name;
  std::vector<int64_t> shape_flag;
  int64_t batch = 1;
  int iterations = 20, threads = 1;
  size_t profile = 0;
  bool split_rows = false;
  std::string gpu;
  int ragged = 0;
  nereid::native::GraphOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) { return a.substr(std::string(flag).size()); };
    if (a.rfind("--model=", 0) == 0) {
      model = value("--model=");
    } else if (a.rfind("--batch=", 0) == 0) {
      batch = std::atoll(value("--batch=").c_str());
    } else if (a.rfind("--iterations=", 0) == 0) {
      iterations = std::atoi(value("--iterations=").c_str());
    } else if (a.rfind("--input=", 0) == 0) {
      input_file = value("--input=");
    } else if (a.rfind("--feeds=", 0) == 0) {
      feeds_file = value("--feeds=");
    } else if (a.rfind("--output=", 0) == 0) {
      output_file = value("--output=");
    } else if (a.rfind("--shape=", 0) == 0) {
      const std::string list = value("--shape=");
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        shape_flag.push_back(std::atoll(list.substr(at, comma - at).c_str()));
        at = comma + 1;
      }
    } else if (a.rfind("--profile=", 0) == 0) {
      profile = static_cast<size_t>(std::atoi(value("--profile=").c_str()));
    } else if (a.rfind("--threads=", 0) == 0) {
      threads = std::atoi(value("--threads=").c_str());
    } else if (a == "--int8") {
      options.int8_weights = true;
    } else if (a.rfind("--fetch=", 0) == 0) {
      fetch_name = value("--fetch=");
    } else if (a.rfind("--calibration=", 0) == 0) {
      calibration_file = value("--calibration=");
    } else if (a.rfind("--smoothing=", 0) == 0) {
      options.int8_smoothing = std::strtof(value("--smoothing=").c_str(), nullptr);
    } else if (a.rfind("--ragged=", 0) == 0) {
      ragged = std::atoi(value("--ragged=").c_str());
    } else if (a.rfind("--gpu=", 0) == 0) {
      gpu = value("--gpu=");
    } else if (a == "--split-rows") {
      split_rows = true;
    } else if (a == "--no-channels-last") {
      options.channels_last = false;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (ragged > 0 && gpu.empty()) {
    std::fprintf(stderr, "--ragged runs the GPU engine's ragged plan: give --gpu too\n");
    return 2;
  }
#if !defined(NEREID_NATIVE_GPU)
  if (!gpu.empty()) {
    std::fprintf(stderr, "--gpu: this build has no CUDA\n");
    return 2;
  }
#endif
  // The GPU compiler reads the file's weights as they are (the backend loads it so).
  if (!gpu.empty()) options.pack_weights = false;
  if (!calibration_file.empty()) {
    std::vector<std::pair<std::string, Tensor>> calibration;
    if (!ReadFeeds(calibration_file, &calibration)) return 1;
    auto ranges = nereid::native::CalibrateInt8(model, options, calibration);
    if (!ranges.ok()) {
      std::fprintf(stderr, "calibration: %s\n", ranges.status().message().c_str());
      return 1;
    }
    options.int8_calibration = *ranges;
  }
  auto graph = Graph::Load(model, options);
  if (!graph.ok()) {
    std::fprintf(stderr, "%s\n", graph.status().message().c_str());
    return 1;
  }
  for (const auto& line : (*graph)->pass_log()) std::printf("pass: %s\n", line.c_str());
  if (gpu.empty()) std::printf("sgemm: %s\n", nereid::kernels::SgemmKernelName());
  std::vector<std::pair<std::string, Tensor>> feeds;
  for (const auto& info : (*graph)->inputs()) {
    if (info.has_default) continue;  // (an initializer listed as an input: its weights)
    std::vector<int64_t> shape = shape_flag.empty() ? info.dims : shape_flag;
    if (shape.empty()) shape = {batch};
    shape[0] = batch;
    for (int64_t& d : shape)
      if (d < 0) d = 1;
    Tensor x = Tensor::Allocate(info.type, shape);
    if (info.type == nereid::backend::DataType::kInt64) {
      std::fill_n(x.mutable_data<int64_t>(), x.elements(), int64_t{1});
    } else if (info.type == nereid::backend::DataType::kInt32) {
      std::fill_n(x.mutable_data<int32_t>(), x.elements(), 1);
    } else if (info.type == nereid::backend::DataType::kFp32) {
      float* px = x.mutable_data<float>();
      if (!input_file.empty() && feeds.empty()) {
        std::ifstream in(input_file, std::ios::binary);
        in.read(reinterpret_cast<char*>(px), static_cast<std::streamsize>(x.bytes()));
        if (in.gcount() != static_cast<std::streamsize>(x.bytes())) {
          std::fprintf(stderr, "%s holds fewer than %zu bytes\n", input_file.c_str(), x.bytes());
          return 1;
        }
      } else {
        for (int64_t i = 0; i < x.elements(); ++i)
          px[i] = static_cast<float>((i * 7919) % 1000) / 500.f - 1.f;
      }
    } else if (feeds_file.empty()) {
      std::fprintf(stderr, "input %s: give its values with --feeds\n", info.name.c_str());
      return 2;
    }
    feeds.emplace_back(info.name, x);
  }
  if (!feeds_file.empty() && !ReadFeeds(feeds_file, &feeds)) return 1;
#if defined(NEREID_NATIVE_GPU)
  if (!gpu.empty())
    return RunGpu(**graph, gpu, feeds, batch, ragged, iterations, profile, output_file);
#endif
  const std::string out_name = fetch_name.empty() ? (*graph)->outputs()[0].name : fetch_name;
  std::vector<Tensor> results;
  std::vector<double> times;
  std::vector<double> node_ns((*graph)->node_count(), 0.0);
  // Intra-op threads: a team made current for this thread, as the backend does per instance.
  std::unique_ptr<nereid::kernels::ThreadTeam> team;
  if (threads > 1) team = std::make_unique<nereid::kernels::ThreadTeam>(threads);
  nereid::kernels::ParallelScope scope(team.get());
  for (int it = 0; it < std::max(iterations, 1); ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    auto s = split_rows ? (*graph)->RunRows(feeds, {out_name}, &results)
                        : (*graph)->Run(feeds, {out_name}, &results, profile ? &node_ns : nullptr);
    const auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
    times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  if (!output_file.empty()) {
    std::ofstream out(output_file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(results[0].raw()),
              static_cast<std::streamsize>(results[0].bytes()));
  }
  PrintTimes(times);
  if (profile) {  // the nodes by time, with their output shapes
    const std::vector<size_t> order = LongestFirst(node_ns);
    double total = 0;
    for (double ns : node_ns) total += ns;
    std::printf("%6s %9s  %s\n", "share", "us/run", "node");
    for (size_t i = 0; i < std::min<size_t>(order.size(), profile); ++i) {
      const auto& node = (*graph)->nodes()[order[i]];
      std::printf("%5.1f%% %9.1f  %s %s\n", 100 * node_ns[order[i]] / total,
                  node_ns[order[i]] / 1e3 / times.size(), node.op.op_type().c_str(),
                  node.op.name().c_str());
    }
  }
  return 0;
}
