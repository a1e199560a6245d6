#include "frontend/http/http_server.h"

#include <sys/mman.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <charconv>
#include <chrono>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "common/cpus.h"
#include "common/logging.h"
#include "frontend/http/compression.h"
#include "frontend/http/gather_body.h"
#include "frontend/http/http_api.h"
#include "frontend/http/http_routes.h"
#include "frontend/http/infer_codec.h"
#include "frontend/http/receive_body.h"
#include "frontend/http/timeouts.h"
#include "memory/memory_pool.h"

namespace nereid::http {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Request = bhttp::request<ReceiveBody>;
using Response = bhttp::response<bhttp::string_body>;

// A request's start line and headers together, and so any single field, stay under 60 KiB. Beast
// stores a field's length in 16 bits and throws for 64 KiB and more; nothing may reach that throw.
constexpr uint32_t kHeaderLimit = 60 << 10;
// The read buffer holds headers, chunk framing and trailers (bodies go straight to ReceiveBody),
// so its bound also bounds chunked trailers, which Beast's header limit does not cover.
constexpr size_t kReadBufferLimit = 64 << 10;

std::string_view SV(boost::beast::string_view s) { return {s.data(), s.size()}; }

}  // namespace

namespace {

// What the timeout sweep sees of a connection, plain or TLS.
// A request body of 'n' bytes whose binary section (after 'json_size' bytes of JSON, when known)
// starts 64-byte aligned, so binary inputs need no realignment. Large bodies are mapped lazily
// (MAP_NORESERVE): memory is committed as bytes arrive, never on the declared length alone.
Buffer BodyBuffer(size_t n, int64_t json_size) {
  const size_t pad =
      json_size > 0 && static_cast<size_t>(json_size) <= n ? (64 - json_size % 64) % 64 : 0;
  const size_t total = pad + n;
  // With GPUs, bodies carrying binary tensors of 64 KiB or more come from the pinned pool, so the
  // GPU engine copies them to the device straight from here (no staging copy).
  if (json_size > 0 && n - static_cast<size_t>(json_size) >= (size_t{64} << 10) &&
      PinnedPoolAvailable()) {
    auto pinned = AllocatePinned(total);
    if (pinned.ok() && pinned->location().type == MemoryType::kCpuPinned)
      return Buffer(pinned->data() + pad, n, pinned->location(), pinned->owner());
  }
  if (total >= (size_t{1} << 20)) {
    void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      std::shared_ptr<const void> owner(
          p, [total](const void* q) { munmap(const_cast<void*>(q), total); });
      return Buffer(static_cast<uint8_t*>(p) + pad, n, MemoryLocation{}, std::move(owner));
    }
  }
  std::shared_ptr<uint8_t[]> storage = AllocateAligned(total);
  uint8_t* data = storage.get() + pad;
  return Buffer(data, n, MemoryLocation{}, std::move(storage));
}

class SessionBase {
 public:
  virtual ~SessionBase() = default;
  virtual void CheckTimeouts(uint64_t now) = 0;
};

}  // namespace

class HttpServer::Impl {
 public:
  Impl(HttpOptions options, ServerApi* api)
      : options_(std::move(options)), api_(api), acceptor_(ioc_) {}

  Status Start();
  void StopAccepting();
  bool Drain(std::chrono::steady_clock::time_point deadline);
  void Stop();
  uint16_t port() const { return bound_port_; }
  uint16_t metrics_port() const { return bound_metrics_port_; }

  HttpOptions options_;
  ServerApi* api_;
  // Declared before the io_context: sessions it destroys still count themselves out.
  std::atomic<int64_t> busy_{0};       // requests read and not yet answered
  std::atomic<bool> draining_{false};  // shutting down: no new work, close after each response
  std::mutex sessions_mu_;             // every open connection, for the timeout sweep
  std::unordered_map<SessionBase*, std::weak_ptr<SessionBase>> sessions_;
  // TLS for the inference port (--http-ssl-cert/--http-ssl-key); null: plain HTTP.
  std::unique_ptr<net::ssl::context> tls_;
  net::io_context ioc_;
  // Keeps the I/O threads running while no socket operation is pending: once the listeners close
  // for shutdown, requests still in a model have nothing pending on the loop until they complete.
  net::executor_work_guard<net::io_context::executor_type> work_{ioc_.get_executor()};
  tcp::acceptor acceptor_;
  tcp::acceptor metrics_acceptor_{ioc_};
  std::vector<std::thread> threads_;
  net::steady_timer accept_backoff_{ioc_};
  net::steady_timer metrics_accept_backoff_{ioc_};
  // Timeouts: one timer for all connections (sessions_) instead of one per read and write (arming
  // a timer per operation cost 10 us at concurrency 1); a sweep once a second closes connections
  // past their deadline.
  net::steady_timer sweep_timer_{ioc_};
  uint16_t bound_port_ = 0;
  uint16_t bound_metrics_port_ = 0;

 private:
  void Accept(tcp::acceptor& acceptor, bool metrics);
  void RunIoThread();
  void Sweep();
  Status Listen(tcp::acceptor& acceptor, uint16_t port, const char* what);
};

namespace {

// One connection. Stream is beast::tcp_stream, or beast::ssl_stream over one for TLS.
template <typename Stream>
class Session final : public SessionBase,
                      public ResponseSink,
                      public std::enable_shared_from_this<Session<Stream>> {
  using std::enable_shared_from_this<Session<Stream>>::shared_from_this;
  using std::enable_shared_from_this<Session<Stream>>::weak_from_this;
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

 public:
  Session(tcp::socket socket, HttpServer::Impl* server, bool metrics) requires(!kTls)
      : stream_(std::move(socket)), server_(server), metrics_(metrics) {}
  Session(tcp::socket socket, net::ssl::context& tls, HttpServer::Impl* server) requires(kTls)
      : stream_(std::move(socket), tls), server_(server), metrics_(false) {}
  ~Session() override {
    Done();
    std::lock_guard<std::mutex> lock(server_->sessions_mu_);
    server_->sessions_.erase(this);
  }

  void Start() {
    {
      std::lock_guard<std::mutex> lock(server_->sessions_mu_);
      server_->sessions_.emplace(this, weak_from_this());
    }
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if constexpr (kTls) {
        // The handshake is timed like a read: a client that never finishes it is closed.
        self->read_since_ns_.store(SteadyNowNs(), std::memory_order_relaxed);
        self->stream_.async_handshake(net::ssl::stream_base::server, [self](beast::error_code ec) {
          self->read_since_ns_.store(0, std::memory_order_relaxed);
          if (ec) {
            LOG_VERBOSE(1) << "TLS handshake failed: " << ec.message();
            self->Abort();
            return;
          }
          self->Read();
        });
      } else {
        self->Read();
      }
    });
  }

  // Called by the sweep (any thread) with the time now: a connection reading for longer than the
  // read timeout, or writing for longer than the write timeout, is checked on its own strand and
  // closed there if it is idle past the timeout or its request has been arriving for too long.
  void CheckTimeouts(uint64_t now) override {
    const auto& options = server_->options_;
    const bool reading =
        PastTimeout(now, read_since_ns_.load(std::memory_order_relaxed), options.read_timeout);
    const bool writing =
        PastTimeout(now, write_since_ns_.load(std::memory_order_relaxed), options.write_timeout);
    if (!reading && !writing) return;
    // Decided again on the connection's strand with the time then: the read or write the sweep saw
    // may have ended, and the next one begun, in between.
    net::post(stream_.get_executor(), [self = shared_from_this(), reading] {
      const auto& o = self->server_->options_;
      const uint64_t at = SteadyNowNs();
      if (reading) {
        if (!PastTimeout(at, self->read_since_ns_.load(std::memory_order_relaxed), o.read_timeout))
          return;  // the read finished, or a new one started
        if (self->parser_ && self->parser_->got_some()) {
          // A request is arriving: its own clock starts at the first sweep that sees it.
          if (self->request_started_ns_ == 0) {
            self->request_started_ns_ = at;
            return;
          }
          if (!PastTimeout(at, self->request_started_ns_, o.read_timeout)) return;
        }
      } else if (!PastTimeout(at, self->write_since_ns_.load(std::memory_order_relaxed),
                              o.write_timeout)) {
        return;  // the write finished, or a new one started
      }
      self->Abort();
    });
  }

 private:
  // One request, read whole. Timeouts are the sweep's (CheckTimeouts): reading starts the clock.
  void Read() {
    parser_.emplace();
    parser_->body_limit(server_->options_.max_input_size);
    parser_->header_limit(kHeaderLimit);
    request_started_ns_ = 0;
    read_since_ns_.store(SteadyNowNs(), std::memory_order_relaxed);
    bhttp::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  // The header is in. An inference body with a known length is read straight into its own
  // aligned buffer (BodyBuffer); everything else lets Beast read the body as usual.
  void OnHeader(beast::error_code ec) {
    if (ec) return OnRead(ec);
    const auto& header = parser_->get();
    recv_start_ns_ = SteadyNowNs();
    // Routed once, here; Handle answers by this route once the body is in.
    route_ = metrics_ ? Route() : Match(SV(header.target()));
    const auto length = parser_->content_length();
    const bool direct = route_.kind == Route::kModelInfer && header.method() == bhttp::verb::post &&
                        length && !parser_->chunked() &&
                        *length <= server_->options_.max_input_size &&
                        header.find(bhttp::field::content_encoding) == header.end();
    if (!direct) {
      bhttp::async_read(
          stream_, buffer_, *parser_,
          [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
      return;
    }
    int64_t json_size = -1;
    if (auto it = header.find("Inference-Header-Content-Length"); it != header.end()) {
      const auto v = it->value();
      std::from_chars(v.data(), v.data() + v.size(), json_size);
    }
    const size_t n = static_cast<size_t>(*length);
    direct_body_ = BodyBuffer(n, json_size);
    // What Beast read past the header already is copied (counted); the rest arrives in place.
    const size_t have = std::min(buffer_.size(), n);
    if (have > 0) {
      std::memcpy(direct_body_.data(), buffer_.data().data(), have);
      buffer_.consume(have);
      CountCopy(CopyKind::kInput, have);
    }
    if (have == n) return OnRead({});
    net::async_read(stream_, net::buffer(direct_body_.data() + have, n - have),
                    [self = shared_from_this()](beast::error_code ec, size_t) {
                      if (ec) {
                        self->direct_body_ = Buffer();
                        return self->Close();
                      }
                      self->OnRead({});
                    });
  }

  void OnRead(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted ||
        ec == net::error::bad_descriptor) {
      return Close();
    }
    read_since_ns_.store(0, std::memory_order_relaxed);
    busy_ = true;
    server_->busy_.fetch_add(1, std::memory_order_relaxed);
    if (ec == bhttp::error::body_limit) {
      keep_alive_ = false;
      drain_after_send_ = true;
      // Triton's words (whatever the body holds), with the size when the client declared it.
      std::string declared;
      if (parser_ && parser_->content_length())
        declared = " of " + std::to_string(*parser_->content_length()) + " bytes";
      return SendError(bhttp::status::bad_request,
                       "request JSON size" + declared +
                           " exceeds the maximum allowed input size of " +
                           std::to_string(server_->options_.max_input_size) +
                           " bytes; raise it with --http-max-input-size");
    }
    if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
      keep_alive_ = false;
      drain_after_send_ = true;
      return SendError(bhttp::status::request_header_fields_too_large,
                       "request header (or chunked trailer) exceeds the limit of " +
                           std::to_string(kHeaderLimit) + " bytes");
    }
    if (ec) {
      keep_alive_ = false;
      return SendError(bhttp::status::bad_request, "malformed HTTP request: " + ec.message());
    }
    Request req = parser_->release();
    keep_alive_ = req.keep_alive();
    version_ = req.version();
    if (server_->draining_.load(std::memory_order_relaxed)) {
      keep_alive_ = false;
      return SendError(bhttp::status::service_unavailable, "the server is shutting down");
    }
    Handle(std::move(req));
  }

  template <typename Body>
  void Send(bhttp::response<Body> res) {
    // A response sent while the server drains for shutdown closes its connection.
    if (server_->draining_.load(std::memory_order_relaxed)) keep_alive_ = false;
    res.version(version_);
    res.keep_alive(keep_alive_);
    res.set(bhttp::field::server, "nereid");
    res.prepare_payload();
    auto sp = std::make_shared<bhttp::response<Body>>(std::move(res));
    write_since_ns_.store(SteadyNowNs(), std::memory_order_relaxed);
    bhttp::async_write(stream_, *sp, [self = shared_from_this(), sp](beast::error_code ec, size_t) {
      self->write_since_ns_.store(0, std::memory_order_relaxed);
      if (self->trace_)
        std::exchange(self->trace_, nullptr)->Record("HTTP_SEND_END", SteadyNowNs());
      self->Done();
      if (!ec && self->drain_after_send_) return self->Drain();
      if (ec || !self->keep_alive_) return self->Close();
      self->Read();
    });
  }

  // The request read by OnRead has been answered (or its connection failed).
  void Done() {
    if (!busy_) return;
    busy_ = false;
    server_->busy_.fetch_sub(1, std::memory_order_relaxed);
  }

  // After rejecting an oversized body: stop sending, then read and discard what the client still
  // sends, so it gets to read our error instead of a connection reset. Bounded in bytes and time.
  void Drain() {
    Close();
    beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(10));
    auto scratch = std::make_shared<std::array<char, 65536>>();
    stream_.async_read_some(net::buffer(*scratch), [self = shared_from_this(), scratch](
                                                       beast::error_code ec, size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ > 4 * self->server_->options_.max_input_size + (64u << 20)) {
        self->Abort();
        return;
      }
      self->Drain();
    });
  }

  void SendBody(bhttp::status status, std::string body, const char* content_type = kJson) {
    Response res{status, version_};
    if (!body.empty() && content_type) res.set(bhttp::field::content_type, content_type);
    // A model at its admission limit (429): the client may retry after a second, here or elsewhere.
    if (status == bhttp::status::too_many_requests) res.set(bhttp::field::retry_after, "1");
    res.body() = std::move(body);
    Send(std::move(res));
  }

  void SendError(bhttp::status status, const std::string& message) {
    SendBody(status, ErrorJson(message));
  }

  void SendStatus(const Status& s) { SendReply(StatusReply(s)); }

  void SendReply(Reply r) {
    SendBody(static_cast<bhttp::status>(r.status), std::move(r.body), r.content_type);
  }

  // Ends the sending side: the client reads what was sent, then sees the end of the stream.
  void Close() {
    beast::error_code ec;
    beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  // Closes the connection at once (a failed handshake, a timeout, a drain that went on too long);
  // pending operations end with an error and the session is released.
  void Abort() {
    beast::error_code ignored;
    beast::get_lowest_layer(stream_).socket().close(ignored);
  }

  void Handle(Request req) {
    if (metrics_) {
      const std::string_view target = SV(req.target());
      if (target.substr(0, target.find('?')) != "/metrics")
        return SendError(bhttp::status::not_found, "Not Found (the metrics port serves /metrics)");
      if (req.method() != bhttp::verb::get)
        return SendError(bhttp::status::method_not_allowed, "method not allowed for this endpoint");
      return SendBody(bhttp::status::ok, server_->api_->MetricsText(server_->options_.gpu_metrics),
                      "text/plain; version=0.0.4; charset=utf-8");
    }
    const Route route = std::move(route_);  // matched by OnHeader
    const RoutedRequest routed{route, SV(req.method_string()),
                               [&req](std::string_view name) -> std::optional<std::string_view> {
                                 const auto it =
                                     req.find(beast::string_view(name.data(), name.size()));
                                 if (it == req.end()) return std::nullopt;
                                 return SV(it->value());
                               },
                               req.body()};
    Handling handling = HandleRoute(*server_->api_, server_->options_.restricted, routed);
    switch (handling.kind) {
      case Handling::kReply:
        return SendReply(std::move(handling.reply));
      case Handling::kInfer:
        return Infer(route, std::move(req));
      case Handling::kRepositoryControl:
        return RepositoryControl(
            *server_->api_, route, req.body(), [self = shared_from_this()](Reply reply) {
              net::post(self->stream_.get_executor(), [self, reply = std::move(reply)]() mutable {
                self->SendReply(std::move(reply));
              });
            });
    }
  }

  void Infer(const Route& route, Request req) {
    RequestContext context;
    context.endpoint = InferEndpoint::kHttp;
    context.read_start_ns = recv_start_ns_;
    context.read_end_ns = SteadyNowNs();
    if (auto it = req.find("traceparent"); it != req.end()) context.traceparent = SV(it->value());
    // Cancellation: the connection is idle while its request is in flight (the next read starts
    // after the response), so a peek at the socket tells whether the client has gone: end of stream
    // or an error. Asked when the request is about to execute, and by backends that poll.
    context.cancel = std::make_shared<CancelFlag>();
    context.cancel->probe = [fd = beast::get_lowest_layer(stream_).socket().native_handle()] {
      char c;
      const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    };
    response_encoding_ = Encoding::kIdentity;
    if (auto it = req.find(bhttp::field::accept_encoding); it != req.end())
      response_encoding_ = PickAcceptEncoding(SV(it->value()));
    // The body, decoded once the model is found: read in place (OnHeader), or as Beast read it
    // (inflated when compressed).
    auto decode = [&]() -> StatusOr<RequestDescription> {
      Buffer body = std::exchange(direct_body_, Buffer());
      std::optional<std::string_view> encoding, header_length;
      if (auto it = req.find(bhttp::field::content_encoding); it != req.end())
        encoding = SV(it->value());
      if (auto it = req.find("Inference-Header-Content-Length"); it != req.end())
        header_length = SV(it->value());
      if (body.data() == nullptr) {  // (only an uncompressed body is read in place)
        auto text = std::make_shared<std::string>(std::move(req.body()));
        body =
            Buffer(reinterpret_cast<uint8_t*>(text->data()), text->size(), MemoryLocation{}, text);
      }
      return DecodeInferBody(std::move(body), encoding, header_length,
                             server_->options_.max_input_size);
    };
    Status queued =
        server_->api_->Infer(route.model, route.version, context, decode, shared_from_this());
    if (!queued.ok()) {
      direct_body_ = Buffer();  // a model refused before its body was decoded
      return SendStatus(queued);
    }
  }

  // ResponseSink: the request in flight on this connection (one at a time).
  void OnStarted(const Started& started) override { trace_ = started.trace; }
  void OnResponse(std::unique_ptr<InferenceResponse> r, bool others_pending) override {
    // An idle model writes the response from the completing thread: while a request is in flight
    // its connection has no other operation pending (the next read starts after this write), so
    // this is safe and saves waking an I/O thread (a quarter of the latency of small models). With
    // more requests waiting, the instance thread is worth more: hand the write to the
    // connection's strand. Either way the write's completion and the next read run there.
    if (!others_pending) return SendInferResponse(*r, response_encoding_);
    net::post(stream_.get_executor(), [self = shared_from_this(), r = std::move(r)]() mutable {
      self->SendInferResponse(*r, self->response_encoding_);
    });
  }

  void SendInferResponse(const InferenceResponse& r, Encoding encoding) {
    if (trace_) trace_->Record("HTTP_SEND_START", SteadyNowNs());
    if (!r.status.ok()) return SendStatus(r.status);
    if (Status json = CheckJsonOutputs(r); !json.ok()) return SendStatus(json);
    EncodedResponse encoded = EncodeInferResponse(r);
    bhttp::response<GatherBody> res{bhttp::status::ok, version_};
    if (encoded.has_binary) {
      res.set(bhttp::field::content_type, "application/octet-stream");
      res.set("Inference-Header-Content-Length", std::to_string(encoded.json.size()));
    } else {
      res.set(bhttp::field::content_type, kJson);
    }
    if (encoding != Encoding::kIdentity) {
      auto compressed = Deflate(encoding, encoded.Flatten());
      if (compressed.ok()) {
        res.set(bhttp::field::content_encoding, std::string(EncodingName(encoding)));
        res.body().head = std::move(compressed).value();
        return Send(std::move(res));
      }
    }
    // Uncompressed: the JSON header and the outputs' own buffers, written together.
    res.body().head = std::move(encoded.json);
    res.body().tail = std::move(encoded.binary);
    Send(std::move(res));
  }

  Stream stream_;
  beast::flat_buffer buffer_{kReadBufferLimit};
  Route route_;         // the request being read, matched by OnHeader for Handle
  Buffer direct_body_;  // an inference body read in place by OnHeader, for Infer
  std::optional<bhttp::request_parser<ReceiveBody>> parser_;
  HttpServer::Impl* server_;
  bool metrics_;  // the Prometheus listener: only GET /metrics
  bool keep_alive_ = true;
  bool drain_after_send_ = false;
  bool busy_ = false;  // a request was read and its response is not written yet
  std::atomic<uint64_t> read_since_ns_{0};   // a read is pending since (0: none)
  std::atomic<uint64_t> write_since_ns_{0};  // a write is pending since (0: none)
  uint64_t request_started_ns_ = 0;          // first sweep that saw this request's bytes
  uint64_t recv_start_ns_ = 0;               // this request's header was read (tracing)
  std::shared_ptr<trace::Trace> trace_;      // the traced request in flight, until it is sent
  Encoding response_encoding_ = Encoding::kIdentity;  // the request in flight's Accept-Encoding
  uint64_t drained_ = 0;
  unsigned version_ = 11;
};

}  // namespace

Status HttpServer::Impl::Listen(tcp::acceptor& acceptor, uint16_t port, const char* what) {
  beast::error_code ec;
  const auto address = net::ip::make_address(options_.address, ec);
  if (ec) return InvalidArgument("invalid HTTP address '" + options_.address + "'");
  tcp::endpoint endpoint(address, port);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return Unavailable(std::string("cannot listen for ") + what + " on " + options_.address + ":" +
                       std::to_string(port) + ": " + ec.message());
  return Status::Ok();
}

Status HttpServer::Impl::Start() {
  if (!options_.tls.cert.empty() || !options_.tls.key.empty() || !options_.tls.root_cert.empty()) {
    if (options_.tls.cert.empty() || options_.tls.key.empty())
      return InvalidArgument("HTTPS needs both --http-ssl-cert and --http-ssl-key");
    tls_ = std::make_unique<net::ssl::context>(net::ssl::context::tls_server);
    tls_->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                      net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                      net::ssl::context::no_tlsv1_1);
    beast::error_code ec;
    tls_->use_certificate_chain_file(options_.tls.cert, ec);
    if (ec) return InvalidArgument("--http-ssl-cert '" + options_.tls.cert + "': " + ec.message());
    tls_->use_private_key_file(options_.tls.key, net::ssl::context::pem, ec);
    if (ec) return InvalidArgument("--http-ssl-key '" + options_.tls.key + "': " + ec.message());
    if (!options_.tls.root_cert.empty()) {
      tls_->load_verify_file(options_.tls.root_cert, ec);
      if (ec)
        return InvalidArgument("--http-ssl-root-cert '" + options_.tls.root_cert +
                               "': " + ec.message());
      tls_->set_verify_mode(net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert);
    }
  }
  RETURN_IF_ERROR(Listen(acceptor_, options_.port, "HTTP"));
  bound_port_ = acceptor_.local_endpoint().port();
  Accept(acceptor_, false);
  if (options_.metrics_port >= 0) {
    RETURN_IF_ERROR(
        Listen(metrics_acceptor_, static_cast<uint16_t>(options_.metrics_port), "metrics"));
    bound_metrics_port_ = metrics_acceptor_.local_endpoint().port();
    Accept(metrics_acceptor_, true);
  }
  int threads = options_.threads > 0 ? options_.threads : std::max(2, AvailableCpus());
  Sweep();
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { RunIoThread(); });
  LOG_INFO << "Started HTTPService at " << options_.address << ":" << bound_port_ << " (" << threads
           << " I/O threads" << (tls_ ? ", HTTPS" : "") << ")";
  if (bound_metrics_port_)
    LOG_INFO << "Started Metrics Service at " << options_.address << ":" << bound_metrics_port_;
  return Status::Ok();
}

void HttpServer::Impl::Sweep() {
  std::vector<std::shared_ptr<SessionBase>> live;
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    live.reserve(sessions_.size());
    for (auto& [raw, weak] : sessions_)
      if (auto s = weak.lock()) live.push_back(std::move(s));
  }
  const uint64_t now = SteadyNowNs();
  for (auto& s : live) s->CheckTimeouts(now);
  live.clear();  // drop the references outside the lock (a last one runs ~Session, which locks)
  sweep_timer_.expires_after(std::chrono::seconds(1));
  sweep_timer_.async_wait([this](beast::error_code ec) {
    if (!ec) Sweep();
  });
}

// No exception may end an I/O thread (std::terminate would take the server down): one that escapes
// a handler is logged and the loop goes on; the connection whose handler threw is dropped.
void HttpServer::Impl::RunIoThread() {
  for (;;) {
    try {
      ioc_.run();
      return;
    } catch (const std::exception& e) {
      LOG_ERROR << "HTTP I/O thread: a connection failed with an exception: " << e.what();
    } catch (...) {
      LOG_ERROR << "HTTP I/O thread: a connection failed with an unknown exception";
    }
  }
}

void HttpServer::Impl::Accept(tcp::acceptor& acceptor, bool metrics) {
  acceptor.async_accept(
      net::make_strand(ioc_), [this, &acceptor, metrics](beast::error_code ec, tcp::socket socket) {
        if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
        if (ec) {
          // Out of file descriptors (or another transient failure): retrying at once would spin a
          // core until a connection closes. Wait a little; the backlog holds new connections.
          net::steady_timer& backoff = metrics ? metrics_accept_backoff_ : accept_backoff_;
          LOG_WARNING << "HTTP accept failed (" << ec.message() << "); retrying in 100 ms";
          backoff.expires_after(std::chrono::milliseconds(100));
          backoff.async_wait([this, &acceptor, metrics](beast::error_code wait_ec) {
            if (!wait_ec) Accept(acceptor, metrics);
          });
          return;
        }
        // The next accept is armed first: nothing that goes wrong with this connection (an
        // exception setting up its session) may stop the listener.
        Accept(acceptor, metrics);
        socket.set_option(tcp::no_delay(true), ec);
        try {
          if (tls_ && !metrics)
            std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(std::move(socket),
                                                                            *tls_, this)
                ->Start();
          else
            std::make_shared<Session<beast::tcp_stream>>(std::move(socket), this, metrics)->Start();
        } catch (const std::exception& e) {
          LOG_ERROR << "HTTP: dropping a new connection: " << e.what();
        }
      });
}

void HttpServer::Impl::StopAccepting() {
  draining_ = true;
  std::promise<void> closed;
  net::post(ioc_, [this, &closed] {
    beast::error_code ec;
    acceptor_.close(ec);
    metrics_acceptor_.close(ec);
    accept_backoff_.cancel();
    metrics_accept_backoff_.cancel();
    closed.set_value();
  });
  if (!threads_.empty()) closed.get_future().wait();
}

bool HttpServer::Impl::Drain(std::chrono::steady_clock::time_point deadline) {
  while (busy_.load(std::memory_order_relaxed) > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

void HttpServer::Impl::Stop() {
  if (!draining_) StopAccepting();
  // A load/unload this frontend started answers through the I/O threads: let it finish first.
  api_->WaitForControlIdle();
  work_.reset();
  ioc_.stop();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

HttpServer::HttpServer(HttpOptions options, ServerApi* server)
    : impl_(std::make_unique<Impl>(std::move(options), server)) {}
HttpServer::~HttpServer() { Stop(); }
Status HttpServer::Start() { return impl_->Start(); }
void HttpServer::StopAccepting() { impl_->StopAccepting(); }
bool HttpServer::Drain(std::chrono::steady_clock::time_point deadline) {
  return impl_->Drain(deadline);
}
int64_t HttpServer::InFlight() const { return impl_->busy_.load(std::memory_order_relaxed); }
void HttpServer::Stop() {
  if (impl_) impl_->Stop();
}
uint16_t HttpServer::port() const { return impl_->port(); }
uint16_t HttpServer::metrics_port() const { return impl_->metrics_port(); }

}  // namespace nereid::http
