#include "frontend/grpc/grpc_server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <unordered_set>

#include "common/logging.h"
#include "frontend/grpc/grpc_api.h"
#include "frontend/grpc/grpc_service.grpc.pb.h"
#include "frontend/grpc/infer_message.h"
#include "frontend/grpc/infer_wire.h"
#include "frontend/grpc/response_sinks.h"
#include "frontend/grpc/stream_reactor.h"
#include "server/request_builder.h"

namespace nereid::grpc_frontend {
namespace {

namespace pb = inference;

// The inference RPCs take raw messages: gRPC's own parsing ends a stream with status OK on a
// message it cannot parse (and answers a unary call UNIMPLEMENTED with no text); parsed here, a bad
// message gets INVALID_ARGUMENT, or an error response on a stream that then goes on.
using G = pb::GRPCInferenceService;
// Every RPC on the callback API, the two inference RPCs raw.
using ServiceBase = G::WithCallbackMethod_ServerLive<
    G::WithCallbackMethod_ServerReady<G::WithCallbackMethod_ModelReady<
        G::WithCallbackMethod_ServerMetadata<G::WithCallbackMethod_ModelMetadata<
            G::WithRawCallbackMethod_ModelInfer<G::WithRawCallbackMethod_ModelStreamInfer<
                G::WithCallbackMethod_ModelConfig<G::WithCallbackMethod_ModelStatistics<
                    G::WithCallbackMethod_RepositoryIndex<G::WithCallbackMethod_RepositoryModelLoad<
                        G::WithCallbackMethod_RepositoryModelUnload<
                            G::WithCallbackMethod_SystemSharedMemoryStatus<
                                G::WithCallbackMethod_SystemSharedMemoryRegister<
                                    G::WithCallbackMethod_SystemSharedMemoryUnregister<
                                        G::WithCallbackMethod_CudaSharedMemoryStatus<
                                            G::WithCallbackMethod_CudaSharedMemoryRegister<
                                                G::WithCallbackMethod_CudaSharedMemoryUnregister<
                                                    G::WithCallbackMethod_TraceSetting<
                                                        G::WithCallbackMethod_LogSettings<
                                                            G::Service>>>>>>>>>>>>>>>>>>>>;

StatusOr<std::string> ReadPem(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument(flag + ": cannot read '" + path + "'");
  std::string pem((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (pem.find("-----BEGIN ") == std::string::npos)
    return InvalidArgument(flag + ": '" + path + "' is not a PEM file");
  return pem;
}

// Insecure, or TLS from the PEM files the --grpc-*-cert/key flags name (mutual: the client's
// certificate is required and verified against the root certificate).
StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const GrpcOptions::Ssl& ssl) {
  if (!ssl.use_ssl && !ssl.mutual) return grpc::InsecureServerCredentials();
  if (ssl.server_cert.empty() || ssl.server_key.empty())
    return InvalidArgument("--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key");
  if (ssl.mutual && ssl.root_cert.empty())
    return InvalidArgument("--grpc-use-ssl-mutual needs --grpc-root-cert");
  grpc::SslServerCredentialsOptions tls(
      ssl.mutual ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                 : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.private_key, ReadPem(ssl.server_key, "--grpc-server-key"));
  ASSIGN_OR_RETURN(pair.cert_chain, ReadPem(ssl.server_cert, "--grpc-server-cert"));
  tls.pem_key_cert_pairs.push_back(std::move(pair));
  if (!ssl.root_cert.empty()) {
    ASSIGN_OR_RETURN(tls.pem_root_certs, ReadPem(ssl.root_cert, "--grpc-root-cert"));
  }
  return grpc::SslServerCredentials(tls);
}

}  // namespace

void ApplyChannelArguments(grpc::ServerBuilder& builder, const GrpcOptions& options) {
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      std::clamp<int64_t>(options.max_input_size, 1, std::numeric_limits<int32_t>::max())));
  builder.SetMaxSendMessageSize(std::numeric_limits<int32_t>::max());
  // Not gRPC's minimal filter stack (GRPC_ARG_MINIMAL_STACK), although it took about 10% off a
  // small model's p50: it drops the message-size filter, and with it the receive limit above, so
  // any client could make the server buffer a 2 GiB message.
  builder.AddChannelArgument("grpc.optimization_target", "latency");
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, options.reuse_port ? 1 : 0);
}

class GrpcServer::Impl final : public ServiceBase, public StreamHost {
 public:
  Impl(GrpcOptions options, ServerApi* api) : options_(std::move(options)), api_(api) {}

  // Streams register while open (from their start to OnDone).
  void AddStream(OpenStream* stream) override {
    bool drain = false;
    {
      std::lock_guard<std::mutex> lock(streams_mu_);
      streams_.insert(stream);
      drain = draining_;
    }
    if (drain) stream->Drain();
  }
  void RemoveStream(OpenStream* stream) override {
    std::lock_guard<std::mutex> lock(streams_mu_);
    streams_.erase(stream);
  }

  // Readiness for grpc.health.v1 (the default health service): NOT_SERVING while draining.
  void SetServing(bool serving) {
    if (server_)
      if (auto* health = server_->GetHealthCheckService()) health->SetServingStatus(serving);
  }

  Status Start() {
    grpc::EnableDefaultHealthCheckService(true);
    ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                     Credentials(options_.ssl));
    grpc::ServerBuilder builder;
    builder.AddListeningPort(options_.address + ":" + std::to_string(options_.port), credentials,
                             &bound_port_);
    builder.RegisterService(this);
    ApplyChannelArguments(builder, options_);
    grpc::ResourceQuota quota("nereid");
    quota.Resize(static_cast<size_t>(options_.memory_quota));
    if (options_.threads > 0) quota.SetMaxThreads(options_.threads);
    builder.SetResourceQuota(quota);
    server_ = builder.BuildAndStart();
    if (!server_ || bound_port_ == 0)
      return Unavailable("cannot listen for gRPC on " + options_.address + ":" +
                         std::to_string(options_.port));
    if (auto* health = server_->GetHealthCheckService()) health->SetServingStatus(true);
    LOG_INFO << "Started GRPCInferenceService at " << options_.address << ":" << bound_port_;
    return Status::Ok();
  }

  void Stop(std::chrono::system_clock::time_point deadline) {
    if (server_) {
      {
        std::lock_guard<std::mutex> lock(streams_mu_);
        draining_ = true;
        for (OpenStream* stream : streams_) stream->Drain();
      }
      server_->Shutdown(deadline);
      server_->Wait();
      server_.reset();
    }
  }

  int port() const { return bound_port_; }

  // ---- unary RPCs (the answers: grpc_api.h) ----

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* ctx,
                                       const pb::ServerLiveRequest*,
                                       pb::ServerLiveResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kHealth); !a.ok()) return Done(ctx, a);
    response->set_live(true);
    return Done(ctx, Status::Ok());
  }

  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* ctx,
                                        const pb::ServerReadyRequest*,
                                        pb::ServerReadyResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kHealth); !a.ok()) return Done(ctx, a);
    response->set_ready(api_->Ready());
    return Done(ctx, Status::Ok());
  }

  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* ctx,
                                       const pb::ModelReadyRequest* request,
                                       pb::ModelReadyResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kHealth); !a.ok()) return Done(ctx, a);
    auto version = ParseModelVersion(request->version());
    response->set_ready(version.ok() && api_->ModelReady(request->name(), *version).ok());
    return Done(ctx, Status::Ok());
  }

  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* ctx,
                                           const pb::ServerMetadataRequest*,
                                           pb::ServerMetadataResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kMetadata); !a.ok()) return Done(ctx, a);
    AnswerServerMetadata(*api_, response);
    return Done(ctx, Status::Ok());
  }

  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* ctx,
                                          const pb::ModelMetadataRequest* request,
                                          pb::ModelMetadataResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kMetadata); !a.ok()) return Done(ctx, a);
    return Done(ctx, AnswerModelMetadata(*api_, *request, response));
  }

  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* ctx,
                                        const pb::ModelConfigRequest* request,
                                        pb::ModelConfigResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kModelConfig); !a.ok()) return Done(ctx, a);
    return Done(ctx, AnswerModelConfig(*api_, *request, response));
  }

  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* ctx,
                                            const pb::ModelStatisticsRequest* request,
                                            pb::ModelStatisticsResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kStatistics); !a.ok()) return Done(ctx, a);
    return Done(ctx, AnswerModelStatistics(*api_, *request, response));
  }

  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* ctx,
                                            const pb::RepositoryIndexRequest* request,
                                            pb::RepositoryIndexResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kModelRepository); !a.ok()) return Done(ctx, a);
    AnswerRepositoryIndex(*api_, *request, response);
    return Done(ctx, Status::Ok());
  }

  grpc::ServerUnaryReactor* RepositoryModelLoad(grpc::CallbackServerContext* ctx,
                                                const pb::RepositoryModelLoadRequest* request,
                                                pb::RepositoryModelLoadResponse*) override {
    if (Status a = Allowed(ctx, ApiGroup::kModelRepository); !a.ok()) return Done(ctx, a);
    std::string config;
    ModelFiles files;
    size_t bytes = 0;
    if (Status s = ReadLoadRequest(*request, &config, &files, &bytes); !s.ok()) return Done(ctx, s);
    return Control(ctx, request->model_name(), bytes,
                   [this, name = request->model_name(), config, files = std::move(files)] {
                     return api_->LoadModel(name, config, files);
                   });
  }

  grpc::ServerUnaryReactor* RepositoryModelUnload(grpc::CallbackServerContext* ctx,
                                                  const pb::RepositoryModelUnloadRequest* request,
                                                  pb::RepositoryModelUnloadResponse*) override {
    if (Status a = Allowed(ctx, ApiGroup::kModelRepository); !a.ok()) return Done(ctx, a);
    bool dependents = false;
    if (auto it = request->parameters().find("unload_dependents");
        it != request->parameters().end())
      dependents = it->second.bool_param();
    return Control(ctx, request->model_name(), 0, [this, name = request->model_name(), dependents] {
      return api_->UnloadModel(name, dependents);
    });
  }

  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* ctx, const pb::SystemSharedMemoryStatusRequest* request,
      pb::SystemSharedMemoryStatusResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kSharedMemory); !a.ok()) return Done(ctx, a);
    return Done(ctx, AnswerSystemSharedMemoryStatus(*api_, *request, response));
  }
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* ctx, const pb::SystemSharedMemoryRegisterRequest* request,
      pb::SystemSharedMemoryRegisterResponse*) override {
    if (Status a = Allowed(ctx, ApiGroup::kSharedMemory); !a.ok()) return Done(ctx, a);
    return Done(ctx, api_->shared_memory().Register(request->name(), request->key(),
                                                    request->offset(), request->byte_size()));
  }
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* ctx, const pb::SystemSharedMemoryUnregisterRequest* request,
      pb::SystemSharedMemoryUnregisterResponse*) override {
    if (Status a = Allowed(ctx, ApiGroup::kSharedMemory); !a.ok()) return Done(ctx, a);
    return Done(ctx, api_->shared_memory().Unregister(request->name()));
  }
  grpc::ServerUnaryReactor* CudaSharedMemoryStatus(
      grpc::CallbackServerContext* ctx, const pb::CudaSharedMemoryStatusRequest* request,
      pb::CudaSharedMemoryStatusResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kSharedMemory); !a.ok()) return Done(ctx, a);
    return Done(ctx, AnswerCudaSharedMemoryStatus(*api_, *request, response));
  }
  grpc::ServerUnaryReactor* CudaSharedMemoryRegister(
      grpc::CallbackServerContext* ctx, const pb::CudaSharedMemoryRegisterRequest* request,
      pb::CudaSharedMemoryRegisterResponse*) override {
    if (Status a = Allowed(ctx, ApiGroup::kSharedMemory); !a.ok()) return Done(ctx, a);
    if (request->device_id() > 1024) return Done(ctx, InvalidArgument("invalid 'device_id'"));
    return Done(ctx,
                api_->shared_memory().RegisterCuda(request->name(), request->raw_handle(),
                                                   request->device_id(), request->byte_size()));
  }
  grpc::ServerUnaryReactor* CudaSharedMemoryUnregister(
      grpc::CallbackServerContext* ctx, const pb::CudaSharedMemoryUnregisterRequest* request,
      pb::CudaSharedMemoryUnregisterResponse*) override {
    if (Status a = Allowed(ctx, ApiGroup::kSharedMemory); !a.ok()) return Done(ctx, a);
    return Done(ctx, api_->shared_memory().UnregisterCuda(request->name()));
  }
  grpc::ServerUnaryReactor* TraceSetting(grpc::CallbackServerContext* ctx,
                                         const pb::TraceSettingRequest* request,
                                         pb::TraceSettingResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kTrace); !a.ok()) return Done(ctx, a);
    return Done(ctx, AnswerTraceSetting(*api_, *request, response));
  }

  grpc::ServerUnaryReactor* LogSettings(grpc::CallbackServerContext* ctx,
                                        const pb::LogSettingsRequest* request,
                                        pb::LogSettingsResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kLogging); !a.ok()) return Done(ctx, a);
    return Done(ctx, AnswerLogSettings(*api_, *request, response));
  }

  // ---- inference ----

  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* raw_request,
                                       grpc::ByteBuffer* raw_response) override {
    if (Status a = Allowed(ctx, ApiGroup::kInference); !a.ok()) return Done(ctx, a);
    auto* reactor = ctx->DefaultReactor();
    const uint64_t read_start = SteadyNowNs();
    auto message = ParseInferRequest(*raw_request);
    if (!message.ok()) {
      reactor->Finish(ToGrpc(message.status()));
      return reactor;
    }
    // The context and the response buffer live until Finish, which runs after completion.
    RequestContext context = CallContext(ctx, InferEndpoint::kGrpcUnary, read_start);
    context.cancel = std::make_shared<CancelFlag>();
    context.cancel->probe = [ctx] { return ctx->IsCancelled(); };
    Status queued = Infer(std::move(message).value(), context,
                          std::make_shared<UnarySink>(&handoff_, reactor, raw_response));
    if (!queued.ok()) reactor->Finish(ToGrpc(queued));
    return reactor;
  }

  // The request a received message asks for (the message keeps its raw bytes alive), to 'sink'.
  Status Infer(std::shared_ptr<ParsedInferRequest> parsed, const RequestContext& context,
               std::shared_ptr<ResponseSink> sink) override {
    const pb::ModelInferRequest& message = parsed->message;
    ASSIGN_OR_RETURN(int64_t version, ParseModelVersion(message.model_version()));
    return api_->Infer(
        message.model_name(), version, context, [&] { return Describe(std::move(parsed)); },
        std::move(sink));
  }

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ModelStreamInfer(
      grpc::CallbackServerContext* ctx) override;

 private:
  // Triton's restricted protocols: a call to a restricted group needs the metadata
  // "triton-grpc-protocol-<key>" with the configured value.
  Status Allowed(grpc::CallbackServerContext* ctx, ApiGroup group) const {
    const auto* r = options_.restricted.For(group);
    if (r == nullptr) return Status::Ok();
    const std::string header = "triton-grpc-protocol-" + r->key;
    const auto& metadata = ctx->client_metadata();
    const auto it = metadata.find(header);
    if (it != metadata.end() && std::string_view(it->second.data(), it->second.size()) == r->value)
      return Status::Ok();
    return Unavailable("This protocol is restricted, expecting header '" + header + "'");
  }

  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const Status& s) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpc(s));
    return reactor;
  }

  // Load/unload are slow: run them off gRPC's threads and finish the RPC when done.
  template <typename Fn>
  grpc::ServerUnaryReactor* Control(grpc::CallbackServerContext* ctx, const std::string& model,
                                    size_t bytes, Fn fn) {
    if (Status allowed = api_->CheckRepositoryControl(); !allowed.ok()) return Done(ctx, allowed);
    auto* reactor = ctx->DefaultReactor();
    api_->RunControl(model, bytes, fn, [reactor](Status s) { reactor->Finish(ToGrpc(s)); });
    return reactor;
  }

  GrpcOptions options_;
  ServerApi* api_;
  Handoff handoff_;  // before server_: destroyed after it, once every call has finished
  std::unique_ptr<grpc::Server> server_;
  int bound_port_ = 0;
  std::mutex streams_mu_;  // guards streams_ and draining_; taken before a stream's own lock
  std::unordered_set<OpenStream*> streams_;
  bool draining_ = false;
};

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* GrpcServer::Impl::ModelStreamInfer(
    grpc::CallbackServerContext* ctx) {
  if (Status a = Allowed(ctx, ApiGroup::kInference); !a.ok()) return RefuseStream(ToGrpc(a));
  return StartStream(this, ctx);
}

GrpcServer::GrpcServer(GrpcOptions options, ServerApi* server)
    : options_(std::move(options)), api_(server), impl_(std::make_unique<Impl>(options_, server)) {}

GrpcServer::~GrpcServer() { Stop(); }

Status GrpcServer::Start() {
  RETURN_IF_ERROR(impl_->Start());
  port_ = impl_->port();
  watchdog_ = std::make_unique<ListenerWatchdog>(port_, [this] { return Restart(); });
  return Status::Ok();
}

bool GrpcServer::Restart() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return true;
  if (impl_) impl_->Stop(std::chrono::system_clock::now() + std::chrono::seconds(1));
  GrpcOptions options = options_;
  options.port = port_;
  impl_ = std::make_unique<Impl>(options, api_);
  if (Status s = impl_->Start(); !s.ok()) {
    LOG_ERROR << "gRPC restart failed (retrying every second): " << s.message();
    impl_.reset();
    return false;
  }
  LOG_INFO << "gRPC server listening again on port " << port_;
  return true;
}

void GrpcServer::SetServing(bool serving) {
  std::lock_guard<std::mutex> lock(mu_);
  if (impl_) impl_->SetServing(serving);
}

void GrpcServer::Stop(std::chrono::system_clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  watchdog_.reset();  // joins: no restart runs from here on
  if (impl_) impl_->Stop(deadline);
}

}  // namespace nereid::grpc_frontend
