// Closed-loop HTTP latency benchmark for one model: C connections (one thread each) send binary
// KServe v2 infer requests back to back, the way tritonclient.http does by default (binary inputs and
// outputs, keep-alive). Prints p50/p90/p99/mean latency and throughput.
//   build/bench_http_latency --url localhost:8000 --model simple [--concurrency 1] [--requests 20000]
// Input tensors are built from the model's metadata (variable dims become 1), filled with zeros.
#include <rapidjson/document.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

size_t TypeSize(const std::string& t) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"INT8", 1}, {"UINT8", 1}, {"INT16", 2}, {"UINT16", 2}, {"FP16", 2}, {"BF16", 2},
      {"INT32", 4}, {"UINT32", 4}, {"FP32", 4}, {"INT64", 8}, {"UINT64", 8}, {"FP64", 8}};
  auto it = sizes.find(t);
  return it == sizes.end() ? 0 : it->second;
}

struct Connection {
  net::io_context ioc;
  beast::tcp_stream stream{ioc};
  beast::flat_buffer buffer;
  Connection(const std::string& host, const std::string& port) {
    tcp::resolver resolver(ioc);
    stream.connect(resolver.resolve(host, port));
    stream.socket().set_option(tcp::no_delay(true));
  }
  bhttp::response<bhttp::string_body> Send(bhttp::request<bhttp::string_body>& req) {
    bhttp::write(stream, req);
    bhttp::response<bhttp::string_body> res;
    bhttp::read(stream, buffer, res);
    return res;
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string url = "localhost:8000", model = "simple";
  int concurrency = 1, requests = 20000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--url") url = value;
    else if (flag == "--model") model = value;
    else if (flag == "--concurrency") concurrency = std::stoi(value);
    else if (flag == "--requests") requests = std::stoi(value);
  }
  const std::string host = url.substr(0, url.find(':')), port = url.substr(url.find(':') + 1);

  Connection meta(host, port);
  bhttp::request<bhttp::string_body> get{bhttp::verb::get, "/v2/models/" + model, 11};
  get.set(bhttp::field::host, host);
  auto md_res = meta.Send(get);
  rapidjson::Document md;
  md.Parse(md_res.body().c_str());
  if (md_res.result_int() != 200 || !md.IsObject() || !md.HasMember("inputs")) {
    std::fprintf(stderr, "cannot read metadata of '%s': %s\n", model.c_str(), md_res.body().c_str());
    return 1;
  }
  std::string header = "{\"inputs\":[", blobs;
  bool first = true;
  for (const auto& in : md["inputs"].GetArray()) {
    const std::string dtype = in["datatype"].GetString();
    size_t elements = 1;
    std::string shape;
    for (const auto& d : in["shape"].GetArray()) {
      const int64_t dim = d.GetInt64() < 0 ? 1 : d.GetInt64();
      elements *= static_cast<size_t>(dim);
      shape += (shape.empty() ? "" : ",") + std::to_string(dim);
    }
    const size_t bytes = elements * TypeSize(dtype);
    header += std::string(first ? "" : ",") + "{\"name\":\"" + in["name"].GetString() + "\",\"shape\":[" + shape +
              "],\"datatype\":\"" + dtype + "\",\"parameters\":{\"binary_data_size\":" + std::to_string(bytes) + "}}";
    blobs.append(bytes, '\0');
    first = false;
  }
  header += "],\"parameters\":{\"binary_data_output\":true}}";
  const std::string body = header + blobs;

  std::vector<std::vector<double>> latencies(concurrency);
  std::vector<std::thread> threads;
  const int per_thread = requests / concurrency;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&, t] {
      Connection c(host, port);
      bhttp::request<bhttp::string_body> req{bhttp::verb::post, "/v2/models/" + model + "/infer", 11};
      req.set(bhttp::field::host, host);
      req.set("Inference-Header-Content-Length", std::to_string(header.size()));
      req.body() = body;
      req.prepare_payload();
      for (int i = 0; i < per_thread / 10; ++i) c.Send(req);  // warm-up
      latencies[t].reserve(per_thread);
      for (int i = 0; i < per_thread; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        auto res = c.Send(req);
        const auto t1 = std::chrono::steady_clock::now();
        if (res.result_int() != 200) {
          std::fprintf(stderr, "request failed: %s\n", res.body().c_str());
          std::exit(1);
        }
        latencies[t].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
    });
  }
  for (auto& th : threads) th.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) { return all[std::min(all.size() - 1, static_cast<size_t>(p * all.size()))]; };
  double mean = 0;
  for (double v : all) mean += v;
  mean /= static_cast<double>(all.size());
  std::printf("model=%s concurrency=%d requests=%zu p50=%.1fus p90=%.1fus p99=%.1fus mean=%.1fus throughput=%.0f/s\n",
              model.c_str(), concurrency, all.size(), pct(0.50), pct(0.90), pct(0.99), mean,
              static_cast<double>(all.size()) / seconds);
  return 0;
}
