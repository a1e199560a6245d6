#include "trace/otlp_exporter.h"

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>

#include "common/logging.h"
#include "trace/protobuf_writer.h"
#include "trace/trace.h"

namespace nereid::trace {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;

StatusOr<std::shared_ptr<OtlpExporter>> OtlpExporter::Create(const TraceConfig& config) {
  std::shared_ptr<OtlpExporter> e(new OtlpExporter());
  std::string_view url = config.url;
  if (url.rfind("http://", 0) != 0)
    return InvalidArgument(
        "--trace-config opentelemetry,url must be http://host[:port][/path], got '" + config.url +
        "'");
  url.remove_prefix(7);
  const size_t slash = url.find('/');
  std::string_view authority = url.substr(0, slash);
  e->target_ = slash == std::string_view::npos ? "/v1/traces" : std::string(url.substr(slash));
  e->port_ = "80";
  if (!authority.empty() && authority.front() == '[') {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close != std::string_view::npos) {
      e->host_ = std::string(authority.substr(1, close - 1));
      if (authority.size() > close + 2 && authority[close + 1] == ':')
        e->port_ = std::string(authority.substr(close + 2));
    }
  } else if (const size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    e->host_ = std::string(authority.substr(0, colon));
    e->port_ = std::string(authority.substr(colon + 1));
  } else {
    e->host_ = std::string(authority);
  }
  if (e->host_.empty() || e->port_.empty() ||
      e->port_.find_first_not_of("0123456789") != std::string::npos)
    return InvalidArgument("--trace-config opentelemetry,url: cannot read host and port in '" +
                           config.url + "'");
  ProtobufWriter resource;
  bool named = false;
  for (const auto& [k, v] : config.resource) {
    resource.StringAttribute(1, k, v);
    named = named || k == "service.name";
  }
  if (!named) resource.StringAttribute(1, "service.name", "nereid");
  e->resource_ = std::move(resource.s);
  e->max_queue_ = config.bsp_max_queue_size;
  e->max_batch_ = config.bsp_max_export_batch_size;
  e->delay_ms_ = config.bsp_schedule_delay_ms;
  e->thread_ = std::thread([raw = e.get()] { raw->Run(); });
  return e;
}

// At shutdown what is queued gets at most this long in all, within the exit deadline.
constexpr std::chrono::milliseconds kStopBudget{2000};

OtlpExporter::~OtlpExporter() { Stop(std::chrono::steady_clock::now() + kStopBudget); }

void OtlpExporter::Stop(std::chrono::steady_clock::time_point deadline) {
  deadline = std::min(deadline, std::chrono::steady_clock::now() + kStopBudget);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
    stop_deadline_ns_.store(std::max<int64_t>(
        1,
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count()));
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool OtlpExporter::PastStopDeadline() const {
  const int64_t deadline = stop_deadline_ns_.load();
  return deadline != 0 && std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::steady_clock::now().time_since_epoch())
                                  .count() >= deadline;
}

void OtlpExporter::Enqueue(std::vector<std::string> spans) {
  bool full_batch = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : spans) {
      if (queue_.size() >= max_queue_) {
        if (dropped_++ % 1000 == 0)
          LOG_WARNING << "tracing: the span queue is full (bsp_max_queue_size " << max_queue_
                      << "); spans dropped so far: " << dropped_;
        continue;
      }
      queue_.push_back(std::move(s));
    }
    full_batch = queue_.size() >= max_batch_;
  }
  if (full_batch) wake_.notify_one();
}

uint64_t OtlpExporter::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

uint64_t OtlpExporter::exported() const {
  std::lock_guard<std::mutex> lock(mu_);
  return exported_;
}

std::string OtlpExporter::Request(const std::vector<std::string>& spans) const {
  ProtobufWriter scope, scope_spans, resource_spans, request;
  scope.Bytes(1, "nereid");
  scope_spans.Bytes(1, scope.s);
  for (const auto& s : spans) scope_spans.Bytes(2, s);
  resource_spans.Bytes(1, resource_);
  resource_spans.Bytes(2, scope_spans.s);
  request.Bytes(1, resource_spans.s);
  return std::move(request.s);
}

void OtlpExporter::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait_for(lock, std::chrono::milliseconds(delay_ms_),
                   [&] { return stop_ || queue_.size() >= max_batch_; });
    while (!queue_.empty()) {
      // Read per batch: a stop that comes while batches are going out ends them at its deadline.
      if (stop_ && PastStopDeadline()) {
        dropped_ += queue_.size();
        LOG_WARNING << "tracing: " << queue_.size()
                    << " span(s) not exported by the exit deadline; dropped";
        queue_.clear();
        break;
      }
      std::vector<std::string> batch;
      while (!queue_.empty() && batch.size() < max_batch_) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      lock.unlock();
      Status sent = Internal("not sent");
      try {
        sent = Post(Request(batch), std::chrono::milliseconds(5000));
      } catch (const std::exception& e) {
        sent = Internal(e.what());
      }
      lock.lock();
      if (sent.ok()) {
        exported_ += batch.size();
      } else {
        if (stop_) dropped_ += batch.size();
        if (failures_++ % 100 == 0)
          LOG_WARNING << "tracing: exporting " << batch.size() << " span(s) to http://" << host_
                      << ":" << port_ << target_ << " failed: " << sent.message();
      }
      if (!stop_ && queue_.size() < max_batch_) break;
    }
    if (stop_) return;
  }
}

Status OtlpExporter::Post(const std::string& body, std::chrono::milliseconds budget) {
  // Asynchronous operations on one io_context run for at most 'budget': Beast's timeouts apply to
  // asynchronous operations only, and a receiver that accepts but never answers must not hold
  // this thread (or the server's shutdown) for longer.
  net::io_context io;
  beast::tcp_stream stream(io);
  net::ip::tcp::resolver resolver(io);
  bhttp::request<bhttp::string_body> req{bhttp::verb::post, target_, 11};
  req.set(bhttp::field::host, host_ + ":" + port_);
  req.set(bhttp::field::content_type, "application/x-protobuf");
  req.set(bhttp::field::user_agent, "nereid");
  req.body() = body;
  req.prepare_payload();
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(1 << 20);
  Status result = Unavailable("no answer within " + std::to_string(budget.count()) + " ms");
  auto fail = [&](const char* step, const beast::error_code& ec) {
    result = Unavailable(std::string(step) + ": " + ec.message());
  };
  resolver.async_resolve(host_, port_, [&](beast::error_code ec, auto endpoints) {
    if (ec) return fail("resolving", ec);
    stream.expires_after(budget);
    stream.async_connect(endpoints, [&](beast::error_code ec, auto) {
      if (ec) return fail("connecting", ec);
      bhttp::async_write(stream, req, [&](beast::error_code ec, size_t) {
        if (ec) return fail("sending", ec);
        bhttp::async_read(stream, buffer, parser, [&](beast::error_code ec, size_t) {
          if (ec) return fail("reading the reply", ec);
          const unsigned status = parser.get().result_int();
          result = status >= 200 && status < 300
                       ? Status::Ok()
                       : Unavailable("the receiver answered HTTP " + std::to_string(status));
        });
      });
    });
  });
  // In slices, so that a stop's deadline ends a wait that started before it.
  const auto end = std::chrono::steady_clock::now() + budget;
  while (!io.stopped() && std::chrono::steady_clock::now() < end && !PastStopDeadline())
    io.run_for(std::min<std::chrono::steady_clock::duration>(
        std::chrono::milliseconds(50), end - std::chrono::steady_clock::now()));
  return result;
}

}  // namespace nereid::trace
