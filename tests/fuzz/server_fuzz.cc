// Fuzz target for the whole request path: an in-process Nereid (HTTP and gRPC frontends, a model
// repository served by the real native backend) fed over loopback, so an input reaches header
// parsing, routing, request validation, batching and a backend's Execute. The first byte picks
// where the rest goes:
//   0: raw bytes to the HTTP port (request line, headers, chunking, body: anything)
//   1: one gRPC ModelInfer message (raw bytes, not necessarily a valid protobuf)
//   2: a gRPC ModelStreamInfer stream: the bytes cut into messages at each 0xFF byte
// After each input the server must still answer /v2/health/live. SERVER_FUZZ_ECHO=1 prints what
// came back (the first line of each HTTP response, each gRPC status), to check a corpus.
//   libFuzzer: scripts/fuzz.sh [seconds]     replay (any compiler): build/server_fuzz FILE...
#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "../unit/test_repository.h"
#include "frontend/grpc/grpc_server.h"
#include "frontend/http/http_server.h"
#include "repository/model_repository.h"
#include "server/inference_server.h"

namespace {

bool Echo() {
  static const bool echo = std::getenv("SERVER_FUZZ_ECHO") != nullptr;
  return echo;
}

constexpr const char* kModels[][2] = {
    {"add",
     "name: \"add\"\nbackend: \"native\"\nmax_batch_size: 8\n"
     "input [ { name: \"A\" data_type: TYPE_INT32 dims: [ 4 ] }, { name: \"B\" data_type: "
     "TYPE_INT32 dims: [ 4 ] } ]\noutput [ { name: \"OUT\" data_type: TYPE_INT32 dims: [ 4 ] } ]\n"
     "dynamic_batching { max_queue_delay_microseconds: 100 }\n"},
    {"add_reshape",
     "name: \"add_reshape\"\nbackend: \"native\"\nmax_batch_size: 0\n"
     "input [ { name: \"A\" data_type: TYPE_INT32 dims: [ 2, 2 ] reshape { shape: [ 1, 4 ] } }, "
     "{ name: \"B\" data_type: TYPE_INT32 dims: [ -1, 4 ] } ]\n"
     "output [ { name: \"OUT\" data_type: TYPE_INT32 dims: [ -1, 4 ] } ]\n"},
    {"add_default",
     "name: \"add_default\"\nbackend: \"native\"\n"
     "input [ { name: \"A\" data_type: TYPE_INT32 dims: [ -1, 4 ] }, { name: \"B\" data_type: "
     "TYPE_INT32 dims: [ 4 ] optional: true } ]\n"
     "output [ { name: \"OUT\" data_type: TYPE_INT32 dims: [ -1, 4 ] label_filename: "
     "\"labels.txt\" } ]\n"},
};

// The server under test, started on the first input and kept for the whole run.
struct Harness {
  nereid::testing::TempRepository repo;
  nereid::BackendManager backends{NEREID_BACKEND_DIR};
  std::unique_ptr<nereid::ModelRepository> repository;
  std::unique_ptr<nereid::InferenceServer> api;  // outlives the frontends
  std::unique_ptr<nereid::http::HttpServer> http;
  std::unique_ptr<nereid::grpc_frontend::GrpcServer> grpc;
  std::unique_ptr<grpc::GenericStub> stub;
  grpc::CompletionQueue cq;

  Harness() {
    // The harness is never destroyed, so its repository would outlive the run in /tmp.
    static const std::filesystem::path root = repo.root();
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(root, ignored);
    });
    for (const auto& [name, config] : kModels) repo.AddModel(name, config, {});
    nereid::testing::WriteAddModel(repo.root() / "add" / "1" / "model.onnx");
    nereid::testing::WriteAddModel(repo.root() / "add_reshape" / "1" / "model.onnx");
    nereid::testing::WriteAddModel(repo.root() / "add_default" / "1" / "model.onnx",
                                   /*b_default=*/true);
    std::ofstream(repo.root() / "add_default" / "labels.txt") << "a\nb\nc\nd\n";
    nereid::RepositoryOptions options;
    options.paths = {repo.root().string()};
    options.control_mode = nereid::ModelControlMode::kExplicit;
    options.startup_models = {"*"};
    repository = std::make_unique<nereid::ModelRepository>(options, &backends);
    Check(repository->LoadStartupModels(), "load");
    if (!repository->FailedModels().empty()) Die("a fuzz model failed to load");
    nereid::http::HttpOptions http_options;
    http_options.address = "127.0.0.1";
    http_options.port = 0;
    http_options.threads = 2;
    http_options.max_input_size = 1 << 20;
    api = std::make_unique<nereid::InferenceServer>(repository.get());
    http = std::make_unique<nereid::http::HttpServer>(http_options, api.get());
    Check(http->Start(), "HTTP");
    nereid::grpc_frontend::GrpcOptions grpc_options;
    grpc_options.address = "127.0.0.1";
    grpc_options.port = 0;
    grpc_options.max_input_size = 1 << 20;
    grpc = std::make_unique<nereid::grpc_frontend::GrpcServer>(grpc_options, api.get());
    Check(grpc->Start(), "gRPC");
    stub = std::make_unique<grpc::GenericStub>(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(grpc->port()), grpc::InsecureChannelCredentials()));
  }

  static void Die(const std::string& what) {
    std::fprintf(stderr, "server_fuzz: %s\n", what.c_str());
    std::abort();
  }
  static void Check(const nereid::Status& s, const char* what) {
    if (!s.ok()) Die(std::string(what) + ": " + s.message());
  }

  // Sends 'bytes' to the HTTP port, half-closes, and reads whatever comes back until the server
  // closes (or 5 s pass). Returns the bytes read.
  std::string Http(const std::string& bytes) const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(http->port());
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval timeout{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    std::string reply;
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      size_t sent = 0;
      while (sent < bytes.size()) {
        const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
      shutdown(fd, SHUT_WR);
      char buf[4096];
      for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) reply.append(buf, n);
    }
    close(fd);
    return reply;
  }

  // Waits for one completion-queue event (each call below has a 5 s deadline).
  bool Next() {
    void* tag = nullptr;
    bool ok = false;
    if (!cq.Next(&tag, &ok)) Die("completion queue shut down");
    return ok;
  }

  void Unary(const std::string& bytes) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::Status status;
    auto call =
        stub->PrepareUnaryCall(&ctx, "/inference.GRPCInferenceService/ModelInfer", request, &cq);
    call->StartCall();
    call->Finish(&response, &status, this);
    Next();
    if (Echo())
      std::fprintf(stderr, "  grpc unary: %d %s (%zu bytes)\n", status.error_code(),
                   status.error_message().c_str(), response.Length());
  }

  void Stream(const std::string& bytes) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    auto call = stub->PrepareCall(&ctx, "/inference.GRPCInferenceService/ModelStreamInfer", &cq);
    call->StartCall(this);
    if (!Next()) return;
    size_t start = 0;
    while (start <= bytes.size()) {
      size_t end = bytes.find('\xff', start);
      if (end == std::string::npos) end = bytes.size();
      grpc::Slice slice(bytes.substr(start, end - start));
      grpc::ByteBuffer message(&slice, 1);
      call->Write(message, this);
      if (!Next()) break;
      start = end + 1;
    }
    call->WritesDone(this);
    Next();
    grpc::ByteBuffer reply;
    int replies = 0;
    for (;; ++replies) {
      call->Read(&reply, this);
      if (!Next()) break;
    }
    grpc::Status status;
    call->Finish(&status, this);
    Next();
    if (Echo())
      std::fprintf(stderr, "  grpc stream: %d responses, status %d %s\n", replies,
                   status.error_code(), status.error_message().c_str());
  }

  void CheckAlive() const {
    const auto start = std::chrono::steady_clock::now();
    const std::string reply = Http("GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n");
    if (reply.rfind("HTTP/1.1 200", 0) == 0) return;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    Die("the server stopped answering /v2/health/live (after " + std::to_string(ms) +
        " ms, errno " + std::to_string(errno) + "): '" + reply + "'");
  }
};

Harness& Get() {
  static Harness* harness = new Harness();  // never destroyed: the process ends with the run
  return *harness;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Harness& h = Get();
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0: {
      const std::string reply = h.Http(body);
      if (Echo()) {
        size_t at = 0;
        for (size_t pos; (pos = reply.find("HTTP/1.1 ", at)) != std::string::npos; at = pos + 1)
          std::fprintf(stderr, "  http: %s\n",
                       reply.substr(pos, reply.find('\r', pos) - pos).c_str());
      }
      break;
    }
    case 1:
      h.Unary(body);
      break;
    case 2:
      h.Stream(body);
      break;
  }
  h.CheckAlive();
  return 0;
}
