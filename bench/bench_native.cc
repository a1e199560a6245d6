// The native engine called directly in one process, for its speed against ONNX Runtime's
// (bench/native_vs_ort.py runs both on the same inputs) and its outputs against ORT's.
//
//   bench_native --model=PATH [--batch=N] [--shape=D,D,...] [--iterations=N] [--input=RAW]
//                [--feeds=FILE] [--output=RAW] [--int8] [--no-channels-last] [--threads=N]
//                [--profile=N] [--split-rows]
// --feeds gives every input instead (models with several): records of u32 name length, name,
// u32 ONNX element type, u32 rank, i64 dims, then the bytes (bench/native_vs_ort.py writes it).
// The model's first input gets [batch, dims from the file...] (other variable dims 1), or
// --shape (its first dim replaced by --batch). --input
// reads its FP32 bytes from a file (otherwise deterministic values); --output writes the first
// output's FP32 bytes. Prints the load log, then one line: "run_us <mean> p50_us <median>
// best_us <min> iterations <n>"; --profile=N then lists the N nodes that took longest (share of
// the run, us per run, op and node name). --split-rows runs the batch as the backend does where
// nereid.split_batches chose it: Graph::RunRows, the rows side by side over the threads.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "cpu/parallel.h"
#include "graph.h"

int main(int argc, char** argv) {
  using nereid::native::Graph;
  using nereid::native::Tensor;
  std::string model, input_file, output_file, feeds_file;
  std::vector<int64_t> shape_flag;
  int64_t batch = 1;
  int iterations = 20, threads = 1;
  size_t profile = 0;
  bool split_rows = false;
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
    } else if (a == "--split-rows") {
      split_rows = true;
    } else if (a == "--no-channels-last") {
      options.channels_last = false;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  auto graph = Graph::Load(model, options);
  if (!graph.ok()) {
    std::fprintf(stderr, "%s\n", graph.status().message().c_str());
    return 1;
  }
  for (const auto& line : (*graph)->pass_log()) std::printf("pass: %s\n", line.c_str());
  const auto& info = (*graph)->inputs()[0];
  std::vector<int64_t> shape = shape_flag.empty() ? info.dims : shape_flag;
  if (shape.empty()) shape = {batch};
  shape[0] = batch;
  for (int64_t& d : shape)
    if (d < 0) d = 1;
  Tensor x = Tensor::Allocate(nereid::backend::DataType::kFp32, shape);
  float* px = x.mutable_data<float>();
  if (!input_file.empty()) {
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
  std::vector<std::pair<std::string, Tensor>> feeds{{info.name, x}};
  if (!feeds_file.empty()) {
    feeds.clear();
    std::ifstream in(feeds_file, std::ios::binary);
    uint32_t length = 0;
    while (in.read(reinterpret_cast<char*>(&length), 4)) {
      std::string name(length, '\0');
      uint32_t type = 0, rank = 0;
      in.read(name.data(), length);
      in.read(reinterpret_cast<char*>(&type), 4);
      in.read(reinterpret_cast<char*>(&rank), 4);
      std::vector<int64_t> dims(rank);
      in.read(reinterpret_cast<char*>(dims.data()), 8 * rank);
      Tensor t = Tensor::Allocate(nereid::native::FromOnnxType(static_cast<int32_t>(type)), dims);
      in.read(reinterpret_cast<char*>(t.mutable_raw()), static_cast<std::streamsize>(t.bytes()));
      if (!in) {
        std::fprintf(stderr, "%s is truncated\n", feeds_file.c_str());
        return 1;
      }
      feeds.emplace_back(name, t);
    }
  }
  const std::string out_name = (*graph)->outputs()[0].name;
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
  double sum = 0;
  for (double t : times) sum += t;
  std::sort(times.begin(), times.end());
  std::printf("run_us %.1f p50_us %.1f best_us %.1f iterations %zu\n", sum / times.size(),
              times[times.size() / 2], times[0], times.size());
  if (profile) {  // the nodes by time, with their output shapes
    std::vector<size_t> order((*graph)->node_count());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return node_ns[a] > node_ns[b]; });
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
