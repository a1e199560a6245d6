// gRPC's own cost per unary call, by server API: the callback (reactor) API that Nereid's frontend
// uses against the completion-queue (async) API with the server's own polling threads, as Triton
// uses. Both servers answer inference.GRPCInferenceService/ModelInfer with an empty response at
// once (no model), on the channel arguments Nereid uses (ApplyChannelArguments); one synchronous
// client measures the round trip at concurrency 1, alternating between the servers in rounds so
// machine noise hits both alike. With --url, a running server's ModelInfer on `simple` (two INT32
// [1,16] inputs, as the example model takes them) is measured by the same client in the same
// rounds, e.g. Nereid's.
//   build/bench_grpc_api [--rounds N] [--ms M] [--cq-threads T] [--url host:port]
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "frontend/grpc/grpc_server.h"
#include "frontend/grpc/grpc_service.grpc.pb.h"

namespace {

using inference::GRPCInferenceService;
using inference::ModelInferRequest;
using inference::ModelInferResponse;

class CallbackInfer final : public GRPCInferenceService::CallbackService {
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx,
                                       const ModelInferRequest* request,
                                       ModelInferResponse* response) override {
    response->set_model_name(request->model_name());
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

// The classic async server: one object per call moving through request -> finish -> done.
class CqServer {
 public:
  CqServer(const std::string& address, int threads) {
    grpc::ServerBuilder b;
    b.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(&service_);
    nereid::grpc_frontend::ApplyChannelArguments(b);
    cq_ = b.AddCompletionQueue();
    server_ = b.BuildAndStart();
    for (int i = 0; i < threads; ++i) new Call(&service_, cq_.get());
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Poll(); });
  }
  ~CqServer() {
    server_->Shutdown(std::chrono::system_clock::now());
    cq_->Shutdown();
    for (auto& t : threads_) t.join();
    void* tag;
    bool ok;
    while (cq_->Next(&tag, &ok)) static_cast<Call*>(tag)->Proceed(false);
  }
  int port() const { return port_; }

 private:
  struct Call {
    Call(GRPCInferenceService::AsyncService* s, grpc::ServerCompletionQueue* cq)
        : service(s), cq(cq), writer(&ctx) {
      service->RequestModelInfer(&ctx, &request, &writer, cq, cq, this);
    }
    void Proceed(bool ok) {
      if (!ok || finished) {
        delete this;
        return;
      }
      new Call(service, cq);  // keep one call waiting for the next request
      response.set_model_name(request.model_name());
      finished = true;
      writer.Finish(response, grpc::Status::OK, this);
    }
    GRPCInferenceService::AsyncService* service;
    grpc::ServerCompletionQueue* cq;
    grpc::ServerContext ctx;
    ModelInferRequest request;
    ModelInferResponse response;
    grpc::ServerAsyncResponseWriter<ModelInferResponse> writer;
    bool finished = false;
  };
  void Poll() {
    void* tag;
    bool ok;
    while (cq_->Next(&tag, &ok)) static_cast<Call*>(tag)->Proceed(ok);
  }
  GRPCInferenceService::AsyncService service_;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::thread> threads_;
  int port_ = 0;
};

struct Sample {
  double p50_us, mean_us;
};

ModelInferRequest SimpleRequest() {
  ModelInferRequest request;
  request.set_model_name("simple");
  for (const char* name : {"INPUT0", "INPUT1"}) {
    auto* input = request.add_inputs();
    input->set_name(name);
    input->set_datatype("INT32");
    input->add_shape(1);
    input->add_shape(16);
    request.add_raw_input_contents(std::string(64, '\1'));
  }
  return request;
}

Sample Measure(const std::string& url, int ms) {
  grpc::ChannelArguments args;
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  auto stub = GRPCInferenceService::NewStub(
      grpc::CreateCustomChannel(url, grpc::InsecureChannelCredentials(), args));
  const ModelInferRequest request = SimpleRequest();
  std::vector<double> lat;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (int warm = 0; warm < 200; ++warm) {
    grpc::ClientContext ctx;
    ModelInferResponse response;
    stub->ModelInfer(&ctx, request, &response);
  }
  while (std::chrono::steady_clock::now() < end) {
    grpc::ClientContext ctx;
    ModelInferResponse response;
    const auto t0 = std::chrono::steady_clock::now();
    if (!stub->ModelInfer(&ctx, request, &response).ok()) {
      std::fprintf(stderr, "call failed\n");
      std::exit(1);
    }
    lat.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(lat.begin(), lat.end());
  double sum = 0;
  for (double v : lat) sum += v;
  return {lat[lat.size() / 2], sum / static_cast<double>(lat.size())};
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3, ms = 2000, cq_threads = 2;
  std::string url;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--rounds") rounds = std::stoi(argv[i + 1]);
    if (flag == "--ms") ms = std::stoi(argv[i + 1]);
    if (flag == "--cq-threads") cq_threads = std::stoi(argv[i + 1]);
    if (flag == "--url") url = argv[i + 1];
  }
  CallbackInfer callback_service;
  grpc::ServerBuilder b;
  int callback_port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &callback_port);
  b.RegisterService(&callback_service);
  nereid::grpc_frontend::ApplyChannelArguments(b);
  auto callback_server = b.BuildAndStart();
  CqServer cq_server("127.0.0.1:0", cq_threads);
  std::printf(
      "empty ModelInfer, concurrency 1, %d ms per round; completion-queue server: %d threads\n", ms,
      cq_threads);
  std::printf(
      "| round | callback p50 us | callback mean us | cq p50 us | cq mean us | p50 cq/callback "
      "|%s\n",
      url.empty() ? "" : " server p50 us | server mean us |");
  std::printf("|---|---|---|---|---|---|%s\n", url.empty() ? "" : "---|---|");
  const std::string local = "127.0.0.1:";
  for (int r = 1; r <= rounds; ++r) {
    const Sample c = Measure(local + std::to_string(callback_port), ms);
    const Sample q = Measure(local + std::to_string(cq_server.port()), ms);
    std::printf("| %d | %.1f | %.1f | %.1f | %.1f | %.2f |", r, c.p50_us, c.mean_us, q.p50_us,
                q.mean_us, q.p50_us / c.p50_us);
    if (!url.empty()) {
      const Sample n = Measure(url, ms);
      std::printf(" %.1f | %.1f |", n.p50_us, n.mean_us);
    }
    std::printf("\n");
  }
  callback_server->Shutdown(std::chrono::system_clock::now());
  return 0;
}
