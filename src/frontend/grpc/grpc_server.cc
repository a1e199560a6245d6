#include "frontend/grpc/grpc_server.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_set>

#include "common/logging.h"
#include "frontend/grpc/grpc_service.grpc.pb.h"
#include "frontend/grpc/infer_wire.h"
#include "nereid/backend.h"
#include "nereid/backend_util.h"
#include "server/request_builder.h"

namespace nereid::grpc_frontend {
namespace {

namespace pb = inference;

// A traced response's send: GRPC_SEND_START now, GRPC_SEND_END when it leaves scope (after the
// response is handed to gRPC, on every return path). Nothing without a trace.
class TracedSend {
 public:
  explicit TracedSend(trace::Trace* t) : t_(t) {
    if (t_) t_->Record("GRPC_SEND_START", SteadyNowNs());
  }
  ~TracedSend() {
    if (t_) t_->Record("GRPC_SEND_END", SteadyNowNs());
  }
  TracedSend(const TracedSend&) = delete;
  TracedSend& operator=(const TracedSend&) = delete;

 private:
  trace::Trace* t_;
};

// Triton's gRPC code for each Status code: the one table of this protocol.
grpc::StatusCode GrpcCodeFor(Status::Code code) {
  switch (code) {
    case Status::Code::kOk:
      return grpc::StatusCode::OK;
    case Status::Code::kInvalidArgument:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case Status::Code::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case Status::Code::kAlreadyExists:
      return grpc::StatusCode::ALREADY_EXISTS;
    case Status::Code::kUnsupported:
      return grpc::StatusCode::UNIMPLEMENTED;
    case Status::Code::kInternal:
      return grpc::StatusCode::INTERNAL;
    case Status::Code::kUnavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case Status::Code::kCancelled:
      return grpc::StatusCode::CANCELLED;
    case Status::Code::kResourceExhausted:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
  }
  return grpc::StatusCode::INVALID_ARGUMENT;
}

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(GrpcCodeFor(s.code()), s.message());
}

StatusOr<uint64_t> UintParameter(const pb::InferParameter& p, const std::string& name) {
  switch (p.parameter_choice_case()) {
    case pb::InferParameter::kUint64Param:
      return p.uint64_param();
    case pb::InferParameter::kInt64Param:
      if (p.int64_param() >= 0) return static_cast<uint64_t>(p.int64_param());
      break;
    default:
      break;
  }
  return InvalidArgument("parameter '" + name + "' must be a non-negative integer");
}

template <typename T, typename Repeated>
void AppendAs(const Repeated& values, std::vector<uint8_t>& out) {
  out.resize(values.size() * sizeof(T));
  for (int i = 0; i < values.size(); ++i) {
    const T v = static_cast<T>(values[i]);
    std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
  }
}

// Typed contents -> raw little-endian bytes. INT8/INT16 and UINT8/UINT16 travel widened, as in
// Triton.
// 'count' is how many elements were sent.
Status ContentsToBytes(const pb::InferTensorContents& c, DataType type, const std::string& name,
                       std::vector<uint8_t>& out, int64_t& count) {
  switch (type) {
    case DataType::kBool:
      AppendAs<uint8_t>(c.bool_contents(), out);
      break;
    case DataType::kInt8:
      AppendAs<int8_t>(c.int_contents(), out);
      break;
    case DataType::kInt16:
      AppendAs<int16_t>(c.int_contents(), out);
      break;
    case DataType::kInt32:
      AppendAs<int32_t>(c.int_contents(), out);
      break;
    case DataType::kInt64:
      AppendAs<int64_t>(c.int64_contents(), out);
      break;
    case DataType::kUint8:
      AppendAs<uint8_t>(c.uint_contents(), out);
      break;
    case DataType::kUint16:
      AppendAs<uint16_t>(c.uint_contents(), out);
      break;
    case DataType::kUint32:
      AppendAs<uint32_t>(c.uint_contents(), out);
      break;
    case DataType::kUint64:
      AppendAs<uint64_t>(c.uint64_contents(), out);
      break;
    case DataType::kFp32:
      AppendAs<float>(c.fp32_contents(), out);
      break;
    case DataType::kFp64:
      AppendAs<double>(c.fp64_contents(), out);
      break;
    case DataType::kBytes:
      for (const std::string& s : c.bytes_contents()) backend::AppendBytesElement(out, s);
      count = c.bytes_contents_size();
      return Status::Ok();
    default:
      return InvalidArgument("input '" + name + "': " + std::string(DataTypeName(type)) +
                             " data must be sent in raw_input_contents");
  }
  count = static_cast<int64_t>(out.size() / DataTypeSize(type));
  return Status::Ok();
}

// The shared-memory parameters of an input or output, or nothing when the tensor does not use
// shared memory.
using ParameterMap = google::protobuf::Map<std::string, pb::InferParameter>;
StatusOr<std::optional<SharedMemoryReference>> SharedMemoryParams(const ParameterMap& params,
                                                                  const std::string& what) {
  auto region = params.find("shared_memory_region");
  if (region == params.end()) return std::optional<SharedMemoryReference>();
  if (region->second.parameter_choice_case() != pb::InferParameter::kStringParam)
    return InvalidArgument(what + ": 'shared_memory_region' must be a string");
  SharedMemoryReference ref;
  ref.region = region->second.string_param();
  auto size = params.find("shared_memory_byte_size");
  if (size == params.end())
    return InvalidArgument(what + " uses shared memory region '" + ref.region +
                           "' but gives no 'shared_memory_byte_size'");
  ASSIGN_OR_RETURN(ref.byte_size, UintParameter(size->second, "shared_memory_byte_size"));
  if (auto o = params.find("shared_memory_offset"); o != params.end()) {
    ASSIGN_OR_RETURN(ref.offset, UintParameter(o->second, "shared_memory_offset"));
  }
  return std::optional<SharedMemoryReference>(std::move(ref));
}

// Request parameter keys starting with "triton_" that a client may send (Triton's list); they
// configure the frontend and are not passed to backends.
constexpr const char* kReservedTritonParameters[] = {"triton_enable_empty_final_response"};

// One entry of the request's parameters: those the server acts on (Triton's rules and messages
// for this protocol), or a parameter for the backend.
Status RequestParameterEntry(const std::string& key, const pb::InferParameter& value,
                             RequestDescription* d) {
  using P = pb::InferParameter;
  const auto type = value.parameter_choice_case();
  auto wrong_type = [&](const char* expected) {
    return InvalidArgument("invalid value type for '" + key + "' parameter, expected " + expected +
                           ".");
  };
  if (key == "sequence_id") {
    CorrelationId& id = d->correlation_id;
    id.present = true;
    if (type == P::kInt64Param) {
      id.number = static_cast<uint64_t>(value.int64_param());
    } else if (type == P::kStringParam) {
      id.is_text = true;
      id.text = value.string_param();
    } else {
      return wrong_type("int64_param or string_param");
    }
  } else if (key == "sequence_start" || key == "sequence_end") {
    if (type != P::kBoolParam) return wrong_type("bool_param");
    if (value.bool_param())
      d->flags |= key == "sequence_start" ? NEREID_REQUEST_FLAG_SEQUENCE_START
                                          : NEREID_REQUEST_FLAG_SEQUENCE_END;
  } else if (key == "priority") {
    if (type == P::kInt64Param && value.int64_param() < 0)
      return InvalidArgument("invalid value for 'priority', expected value >= 0.");
    if (type == P::kInt64Param)
      d->priority = static_cast<uint64_t>(value.int64_param());
    else if (type == P::kUint64Param)
      d->priority = value.uint64_param();
    else
      return wrong_type("int64_param or uint64_param");
  } else if (key == "timeout") {
    if (type != P::kInt64Param) return wrong_type("int64_param");
    if (value.int64_param() < 0)
      return InvalidArgument("invalid value for 'timeout', expected value >= 0.");
    d->timeout_us = static_cast<uint64_t>(value.int64_param());
  } else if (key.rfind("triton_", 0) == 0) {
    for (const char* reserved : kReservedTritonParameters)
      if (key == reserved) return Status::Ok();
    std::string allowed;
    for (const char* reserved : kReservedTritonParameters) allowed += std::string(" ") + reserved;
    return InvalidArgument(
        "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
        "following keys starting with 'triton_' are allowed:" +
        allowed);
  } else {
    RequestParameter p;
    p.name = key;
    switch (type) {
      case P::kBoolParam:
        p.type = RequestParameter::Type::kBool;
        p.bool_value = value.bool_param();
        break;
      case P::kInt64Param:
        p.type = RequestParameter::Type::kInt64;
        p.int_value = value.int64_param();
        break;
      case P::kDoubleParam:
        p.type = RequestParameter::Type::kDouble;
        p.double_value = value.double_param();
        break;
      case P::kStringParam:
        p.type = RequestParameter::Type::kString;
        p.string_value = value.string_param();
        break;
      default:
        return wrong_type("int64_param, bool_param, or string_param");
    }
    d->parameters.push_back(std::move(p));
  }
  return Status::Ok();
}

// A count parameter as a number: a value of another type reads as 0 (refused as not positive).
int64_t CountParameter(const pb::InferParameter& p) {
  if (p.parameter_choice_case() == pb::InferParameter::kInt64Param) return p.int64_param();
  if (p.parameter_choice_case() == pb::InferParameter::kUint64Param)
    return static_cast<int64_t>(
        std::min<uint64_t>(p.uint64_param(), std::numeric_limits<int64_t>::max()));
  return 0;
}

// ModelInferRequest -> the request description (the wire only; the server's request builder
// does the rest). Raw input data is not copied: it points into 'parsed', which the description
// keeps alive.
// (The model and its version are the caller's: looked up before the tensors are read.)
StatusOr<RequestDescription> Describe(std::shared_ptr<ParsedInferRequest> parsed) {
  const pb::ModelInferRequest& message = parsed->message;
  RequestDescription d;
  d.model_name = message.model_name();
  d.id = message.id();
  d.binary_outputs_by_default = true;
  for (const auto& [key, value] : message.parameters())
    RETURN_IF_ERROR(RequestParameterEntry(key, value, &d));
  // raw_input_contents go, in order, to the inputs that are neither in shared memory nor given
  // as contents (Triton's rule; tritonclient sends none for a shared-memory input).
  const auto& raw = parsed->raw;
  size_t next_raw = 0;
  bool mixed = false;
  for (int i = 0; i < message.inputs_size(); ++i) {
    const auto& t = message.inputs(i);
    InputDescription in;
    in.name = t.name();
    in.datatype = t.datatype();
    in.shape.assign(t.shape().begin(), t.shape().end());
    ASSIGN_OR_RETURN(in.shared_memory,
                     SharedMemoryParams(t.parameters(), "input '" + in.name + "'"));
    if (t.has_contents()) {
      const DataType type = DataTypeFromName(t.datatype());
      std::vector<uint8_t> bytes;
      if (type != DataType::kInvalid)  // an unknown datatype is the builder's to refuse
        RETURN_IF_ERROR(ContentsToBytes(t.contents(), type, in.name, bytes, in.typed_count));
      in.typed = std::move(bytes);
      // Contents beside raw_input_contents: the builder refuses the mix with Triton's message.
      if (!raw.empty()) {
        in.raw = std::string_view();  // marks the mix
        mixed = true;
      }
    } else if (!in.shared_memory) {
      if (next_raw == raw.size())
        return InvalidArgument("unable to find data for input tensor '" + in.name +
                               "' for model '" + message.model_name() + "' in request.");
      in.raw = raw[next_raw];
      in.raw_location = parsed->raw_location[next_raw];
      ++next_raw;
    }
    d.inputs.push_back(std::move(in));
  }
  if (!mixed && next_raw != raw.size())
    return InvalidArgument("the request has " + std::to_string(raw.size()) +
                           " raw_input_contents but only " + std::to_string(next_raw) +
                           " of its inputs take raw data");
  for (const auto& o : message.outputs()) {
    OutputDescription out;
    out.name = o.name();
    if (auto it = o.parameters().find("classification"); it != o.parameters().end())
      out.classification = CountParameter(it->second);
    ASSIGN_OR_RETURN(out.shared_memory,
                     SharedMemoryParams(o.parameters(), "output '" + out.name + "'"));
    d.outputs.push_back(std::move(out));
  }
  d.payload = std::move(parsed);
  return d;
}

// InferenceResponse -> the ModelInferResponse header (names, types, shapes). The bytes travel as
// raw_output_contents, one per output as Triton sends them, appended by SerializeInferResponse
// without a copy (empty for outputs written to shared memory).
void FillResponseHeader(const InferenceResponse& r, pb::ModelInferResponse* out) {
  out->set_model_name(r.model_name);
  out->set_model_version(std::to_string(r.model_version));
  out->set_id(r.id);
  for (const auto& p : r.parameters) {
    pb::InferParameter& v = (*out->mutable_parameters())[p.name];
    switch (p.type) {
      case RequestParameter::Type::kBool:
        v.set_bool_param(p.bool_value);
        break;
      case RequestParameter::Type::kInt64:
        v.set_int64_param(p.int_value);
        break;
      case RequestParameter::Type::kDouble:
        v.set_double_param(p.double_value);
        break;
      case RequestParameter::Type::kString:
        v.set_string_param(p.string_value);
        break;
    }
  }
  for (const auto& o : r.outputs) {
    auto* t = out->add_outputs();
    t->set_name(o.name);
    t->set_datatype(std::string(DataTypeName(o.datatype)));
    for (int64_t d : o.shape) t->add_shape(d);
  }
}

void FillDuration(const DurationSnapshot& d, pb::StatisticDuration* out) {
  out->set_count(d.count);
  out->set_ns(d.ns);
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

// One thread that finishes unary infer RPCs for the instance threads of busy models. Serializing a
// response and gRPC's Finish (which writes to the socket on the calling thread) cost tens of
// microseconds that the next batch of a busy model would wait for on its instance thread; an idle
// model's response is finished on its completing thread (a hand-off would only add a wake-up).
class Handoff {
 public:
  Handoff() : thread_([this] { Loop(); }) {}
  ~Handoff() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();  // after what was posted has run
  }
  void Post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      std::deque<std::function<void()>> batch;
      batch.swap(tasks_);
      lock.unlock();
      for (auto& task : batch) task();  // each task catches its own exceptions
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

// A message into gRPC's buffer (the server's own replies; the inference messages go through
// infer_wire).
void Serialize(const google::protobuf::Message& message, grpc::ByteBuffer* out) {
  bool own = false;
  grpc::SerializationTraits<google::protobuf::Message>::Serialize(message, out, &own);
}

namespace {

// Where a unary ModelInfer's response goes: the RPC's own buffer, then Finish. A busy model's
// instance thread hands the work to the Handoff thread.
class UnarySink final : public ResponseSink {
 public:
  UnarySink(Handoff* handoff, grpc::ServerUnaryReactor* reactor, grpc::ByteBuffer* out)
      : handoff_(handoff), reactor_(reactor), out_(out) {}

  void OnStarted(const Started& started) override { trace_ = started.trace; }
  void OnResponse(std::unique_ptr<InferenceResponse> response, bool others_pending) override {
    if (!others_pending) return Finish(reactor_, out_, *response, trace_.get());
    // (The sink goes with its request, perhaps before the task runs: the task holds its own.)
    std::shared_ptr<InferenceResponse> shared(std::move(response));
    handoff_->Post([reactor = reactor_, out = out_, shared, trace = trace_] {
      Finish(reactor, out, *shared, trace.get());
    });
  }

 private:
  static void Finish(grpc::ServerUnaryReactor* reactor, grpc::ByteBuffer* out,
                     const InferenceResponse& result, trace::Trace* trace) {
    TracedSend send(trace);
    if (!result.status.ok()) return reactor->Finish(ToGrpc(result.status));
    try {
      pb::ModelInferResponse header;
      FillResponseHeader(result, &header);
      SerializeInferResponse(header, result, /*as_stream=*/false, out);
    } catch (const std::exception& e) {  // out of memory serializing: the call still finishes
      return reactor->Finish(
          ToGrpc(Internal(std::string("serializing the response: ") + e.what())));
    }
    reactor->Finish(grpc::Status::OK);
  }

  Handoff* handoff_;
  grpc::ServerUnaryReactor* reactor_;
  grpc::ByteBuffer* out_;
  std::shared_ptr<trace::Trace> trace_;
};

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

// The statistics extension's answer, in Triton's message.
void FillStatistics(const std::vector<nereid::ModelStatistics>& models,
                    pb::ModelStatisticsResponse* response) {
  for (const nereid::ModelStatistics& st : models) {
    auto* out = response->add_model_stats();
    out->set_name(st.name);
    out->set_version(std::to_string(st.version));
    out->set_last_inference(st.last_inference_ms);
    out->set_inference_count(st.inference_count);
    out->set_execution_count(st.execution_count);
    auto* is = out->mutable_inference_stats();
    FillDuration(st.success, is->mutable_success());
    FillDuration(st.fail, is->mutable_fail());
    FillDuration(st.queue, is->mutable_queue());
    FillDuration(st.compute_input, is->mutable_compute_input());
    FillDuration(st.compute_infer, is->mutable_compute_infer());
    FillDuration(st.compute_output, is->mutable_compute_output());
    FillDuration(st.cache_hit, is->mutable_cache_hit());
    FillDuration(st.cache_miss, is->mutable_cache_miss());
    for (const auto& stat : st.batches) {
      auto* bs = out->add_batch_stats();
      bs->set_batch_size(static_cast<uint64_t>(stat.batch_size));
      FillDuration(stat.compute_input, bs->mutable_compute_input());
      FillDuration(stat.compute_infer, bs->mutable_compute_infer());
      FillDuration(stat.compute_output, bs->mutable_compute_output());
    }
    for (const auto& e : st.energy) {
      auto* o = out->add_energy();
      o->set_scope(e.scope);
      o->set_source(e.source);
      o->set_active_joules(e.active_joules);
      o->set_idle_joules(e.idle_joules);
      o->set_inferences(e.inferences);
      o->set_joules_per_inference(e.joules_per_inference);
      o->set_idle_share(e.idle_share);
      if (e.carbon_grams >= 0) o->set_carbon_grams(e.carbon_grams);
      o->set_active_watts(e.active_watts);
    }
  }
}

// The logging extension: applies the request's settings, answers with those in force.
Status ApplyLogSettings(ServerApi& api, const pb::LogSettingsRequest& request,
                        pb::LogSettingsResponse* response) {
  using Value = pb::LogSettingsRequest::SettingValue;
  for (const auto& [key, v] : request.settings()) {
    LogSettingValue value;
    switch (v.parameter_choice_case()) {
      case Value::kBoolParam:
        value = v.bool_param();
        break;
      case Value::kUint32Param:
        value = static_cast<uint64_t>(v.uint32_param());
        break;
      case Value::kStringParam:
        value = v.string_param();
        break;
      default:
        return InvalidArgument("logging setting '" + key + "' has no value");
    }
    RETURN_IF_ERROR(api.UpdateLogSetting(key, value));
  }
  auto& out = *response->mutable_settings();
  for (const auto& [key, value] : api.LogSettings()) {
    if (const bool* b = std::get_if<bool>(&value))
      out[key].set_bool_param(*b);
    else if (const uint64_t* n = std::get_if<uint64_t>(&value))
      out[key].set_uint32_param(static_cast<uint32_t>(*n));
    else
      out[key].set_string_param(std::get<std::string>(value));
  }
  return Status::Ok();
}

// An open ModelStreamInfer stream, as the server sees it at shutdown.
class OpenStream {
 public:
  // No new requests; once those in flight are answered and written, the stream is closed (at once
  // when it is idle), so that an idle client's stream does not hold the shutdown to its deadline.
  virtual void Drain() = 0;

 protected:
  ~OpenStream() = default;
};

}  // namespace

class GrpcServer::Impl final : public ServiceBase {
 public:
  Impl(GrpcOptions options, ServerApi* api) : options_(std::move(options)), api_(api) {}

  // Streams register while open (from their start to OnDone).
  void AddStream(OpenStream* stream) {
    bool drain = false;
    {
      std::lock_guard<std::mutex> lock(streams_mu_);
      streams_.insert(stream);
      drain = draining_;
    }
    if (drain) stream->Drain();
  }
  void RemoveStream(OpenStream* stream) {
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

  // ---- unary RPCs ----

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
    const nereid::ServerMetadata md = api_->GetServerMetadata();
    response->set_name(md.name);
    response->set_version(md.version);
    for (const std::string& e : md.extensions) response->add_extensions(e);
    return Done(ctx, Status::Ok());
  }

  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* ctx,
                                          const pb::ModelMetadataRequest* request,
                                          pb::ModelMetadataResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kMetadata); !a.ok()) return Done(ctx, a);
    auto version = ParseModelVersion(request->version());
    if (!version.ok()) return Done(ctx, version.status());
    auto metadata = api_->GetModelMetadata(request->name(), *version);
    if (!metadata.ok()) return Done(ctx, metadata.status());
    response->set_name(metadata->name);
    for (int64_t v : metadata->versions) response->add_versions(std::to_string(v));
    response->set_platform(metadata->platform);
    for (const bool inputs : {true, false})
      for (const TensorMetadata& t : inputs ? metadata->inputs : metadata->outputs) {
        auto* out = inputs ? response->add_inputs() : response->add_outputs();
        out->set_name(t.name);
        out->set_datatype(std::string(DataTypeName(t.datatype)));
        for (int64_t d : t.shape) out->add_shape(d);
      }
    return Done(ctx, Status::Ok());
  }

  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* ctx,
                                        const pb::ModelConfigRequest* request,
                                        pb::ModelConfigResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kModelConfig); !a.ok()) return Done(ctx, a);
    auto version = ParseModelVersion(request->version());
    if (!version.ok()) return Done(ctx, version.status());
    auto config = api_->ModelConfig(request->name(), *version);
    if (!config.ok()) return Done(ctx, config.status());
    *response->mutable_config() = std::move(config).value();
    return Done(ctx, Status::Ok());
  }

  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* ctx,
                                            const pb::ModelStatisticsRequest* request,
                                            pb::ModelStatisticsResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kStatistics); !a.ok()) return Done(ctx, a);
    auto version = ParseModelVersion(request->version());
    if (!version.ok()) return Done(ctx, version.status());
    auto models = api_->Statistics(request->name(), *version);
    if (!models.ok()) return Done(ctx, models.status());
    FillStatistics(*models, response);
    return Done(ctx, Status::Ok());
  }

  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* ctx,
                                            const pb::RepositoryIndexRequest* request,
                                            pb::RepositoryIndexResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kModelRepository); !a.ok()) return Done(ctx, a);
    for (const IndexEntry& e : api_->RepositoryIndex(request->ready())) {
      auto* m = response->add_models();
      m->set_name(e.name);
      if (e.version >= 0) m->set_version(std::to_string(e.version));
      m->set_state(e.state);
      m->set_reason(e.reason);
    }
    return Done(ctx, Status::Ok());
  }

  grpc::ServerUnaryReactor* RepositoryModelLoad(grpc::CallbackServerContext* ctx,
                                                const pb::RepositoryModelLoadRequest* request,
                                                pb::RepositoryModelLoadResponse*) override {
    if (Status a = Allowed(ctx, ApiGroup::kModelRepository); !a.ok()) return Done(ctx, a);
    std::string config;
    ModelFiles files;
    size_t bytes = 0;
    for (const auto& [key, value] : request->parameters()) {
      if (key == "config") {
        if (value.parameter_choice_case() != pb::ModelRepositoryParameter::kStringParam)
          return Done(ctx, InvalidArgument("parameter 'config' must be a JSON string"));
        config = value.string_param();
      } else if (key.rfind("file:", 0) == 0) {
        if (value.parameter_choice_case() != pb::ModelRepositoryParameter::kBytesParam)
          return Done(ctx, InvalidArgument("parameter '" + key.substr(0, 300) +
                                           "' must be the file's bytes (bytes_param)"));
        bytes += value.bytes_param().size();
        files.emplace_back(key.substr(5), value.bytes_param());
      }
    }
    return Control(ctx, request->model_name(), config.size() + bytes,
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
    auto regions = api_->shared_memory().GetStatus(request->name());
    if (!regions.ok()) return Done(ctx, regions.status());
    for (const auto& r : *regions) {
      auto& out = (*response->mutable_regions())[r.name];
      out.set_name(r.name);
      out.set_key(r.key);
      out.set_offset(r.offset);
      out.set_byte_size(r.byte_size);
    }
    return Done(ctx, Status::Ok());
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
    auto regions = api_->shared_memory().GetCudaStatus(request->name());
    if (!regions.ok()) return Done(ctx, regions.status());
    for (const auto& r : *regions) {
      auto& out = (*response->mutable_regions())[r.name];
      out.set_name(r.name);
      out.set_device_id(static_cast<uint64_t>(r.device_id));
      out.set_byte_size(r.byte_size);
    }
    return Done(ctx, Status::Ok());
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
  // A setting with no values is cleared (back to the global, or start-up, value).
  grpc::ServerUnaryReactor* TraceSetting(grpc::CallbackServerContext* ctx,
                                         const pb::TraceSettingRequest* request,
                                         pb::TraceSettingResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kTrace); !a.ok()) return Done(ctx, a);
    trace::SettingUpdate changes;
    for (const auto& [key, value] : request->settings()) {
      if (value.value().empty())
        changes.emplace_back(key, std::nullopt);
      else
        changes.emplace_back(key,
                             std::vector<std::string>(value.value().begin(), value.value().end()));
    }
    auto settings =
        api_->TraceSettings(request->model_name(), changes.empty() ? nullptr : &changes);
    if (!settings.ok()) return Done(ctx, settings.status());
    for (const auto& [key, values] : *settings) {
      auto& out = (*response->mutable_settings())[key];
      for (const auto& v : values) out.add_value(v);
    }
    return Done(ctx, Status::Ok());
  }

  grpc::ServerUnaryReactor* LogSettings(grpc::CallbackServerContext* ctx,
                                        const pb::LogSettingsRequest* request,
                                        pb::LogSettingsResponse* response) override {
    if (Status a = Allowed(ctx, ApiGroup::kLogging); !a.ok()) return Done(ctx, a);
    return Done(ctx, ApplyLogSettings(*api_, *request, response));
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
    RequestContext context = Context(ctx, InferEndpoint::kGrpcUnary, read_start);
    context.cancel = std::make_shared<CancelFlag>();
    context.cancel->probe = [ctx] { return ctx->IsCancelled(); };
    Status queued = Infer(std::move(message).value(), context,
                          std::make_shared<UnarySink>(&handoff_, reactor, raw_response));
    if (!queued.ok()) reactor->Finish(ToGrpc(queued));
    return reactor;
  }

  // The request context of a call read from 'ctx' (its "traceparent" metadata, if any); gRPC
  // hands over whole messages, so the read began when the handler did.
  static RequestContext Context(grpc::CallbackServerContext* ctx, InferEndpoint endpoint,
                                uint64_t read_start) {
    RequestContext context;
    context.endpoint = endpoint;
    const auto& metadata = ctx->client_metadata();
    if (auto it = metadata.find("traceparent"); it != metadata.end())
      context.traceparent = std::string_view(it->second.data(), it->second.size());
    context.read_start_ns = read_start;
    context.read_end_ns = SteadyNowNs();
    return context;
  }

  // The request a received message asks for (the message keeps its raw bytes alive), to 'sink'.
  Status Infer(std::shared_ptr<ParsedInferRequest> parsed, const RequestContext& context,
               std::shared_ptr<ResponseSink> sink) {
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

namespace {

// One ModelStreamInfer stream: reads requests as they come, enqueues each, and writes each response
// (or its error, in error_message) as it completes, one write at a time. Lives until the stream is
// done and every request it enqueued has completed.
// What a stream may hold for a client that does not read: past kPauseBytes of responses waiting
// (or kPauseRequests requests unanswered) the stream stops reading requests until half of it is
// gone, so a client that only sends is slowed by gRPC's flow control; past kCancelBytes (one
// decoupled request answering without end) the stream is cancelled and what waits dropped.
class StreamReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                            public OpenStream {
 public:
  static constexpr size_t kPauseBytes = size_t{1} << 20;
  static constexpr int kPauseRequests = 256;
  static constexpr size_t kCancelBytes = size_t{256} << 20;

  StreamReactor(GrpcServer::Impl* server, grpc::CallbackServerContext* ctx)
      : server_(server), ctx_(ctx) {
    server_->AddStream(this);
    StartRead(&next_);
  }

  void Drain() override {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
    MaybeFinishLocked();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      std::lock_guard<std::mutex> lock(mu_);
      reads_done_ = true;
      MaybeFinishLocked();
      return;
    }
    const uint64_t read_start = SteadyNowNs();
    auto parsed = ParseInferRequest(next_);
    next_.Clear();
    bool read_next = false, draining = false;
    {
      // Counted before the next read starts: if that read ends the stream at once, the reactor
      // must not finish (and be deleted) while this request is still being handled.
      std::lock_guard<std::mutex> lock(mu_);
      ++in_flight_;
      read_next = !OverLimitLocked();
      paused_ = !read_next;
      draining = draining_;
    }
    if (draining) {  // the server is shutting down: answered, not run
      const std::string model = parsed.ok() ? (*parsed)->message.model_name() : "";
      const std::string id = parsed.ok() ? (*parsed)->message.id() : "";
      Send(Error(model, id, Unavailable("Server is shutting down: no new requests")), true);
      // Reading goes on: the read pending when the stream is cancelled is what finishes it.
      if (read_next) StartRead(&next_);
      return;
    }
    Handle(std::move(parsed), read_start);
    // The next message is read only once this one is queued: a stream's requests reach their
    // models in the order sent (a sequence's requests must).
    if (read_next) StartRead(&next_);
  }

  void Handle(StatusOr<std::shared_ptr<ParsedInferRequest>> parsed, uint64_t read_start) {
    if (!parsed.ok()) return Send(Error("", "", parsed.status()), true);
    std::shared_ptr<ParsedInferRequest> parsed_request = std::move(parsed).value();
    const pb::ModelInferRequest* message = &parsed_request->message;  // kept by parsed_request
    bool empty_final = false;
    if (auto it = message->parameters().find("triton_enable_empty_final_response");
        it != message->parameters().end())
      empty_final = it->second.bool_param();  // false unless a bool_param says true
    RequestContext context =
        GrpcServer::Impl::Context(ctx_, InferEndpoint::kGrpcStream, read_start);
    context.cancel = cancel_;
    Status queued =
        server_->Infer(parsed_request, context, std::make_shared<Sink>(this, empty_final));
    if (!queued.ok()) Send(Error(message->model_name(), message->id(), queued), true);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    pending_bytes_ -= pending_.front().Length();
    pending_.pop_front();
    if (!ok) broken_ = true;
    WriteNextLocked();
    ResumeLocked();
    MaybeFinishLocked();
  }

  // The client cancelled the stream (stop_stream(cancel_requests=True), a deadline, a broken
  // connection): its requests read as cancelled at once, so a model streaming responses can stop;
  // OnDone comes only after those requests have completed.
  void OnCancel() override {
    cancel_->cancelled.store(true, std::memory_order_relaxed);
    // A paused stream reads again: that read fails at once, which ends the stream (Finish).
    std::lock_guard<std::mutex> lock(mu_);
    if (paused_ && !reads_done_) {
      paused_ = false;
      StartRead(&next_);
    }
  }

  void OnDone() override {
    server_->RemoveStream(this);  // the server is still there: OnDone comes before its Wait ends
    bool destroy = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Ended before we finished it: the client cancelled or went away; its requests stop.
      if (!finished_) cancel_->cancelled.store(true, std::memory_order_relaxed);
      done_ = true;
      destroy = in_flight_ == 0 && !deleted_;
      if (destroy) deleted_ = true;
    }
    if (destroy) delete this;  // otherwise the last completing request deletes it (Send)
  }

 private:
  // Where one request's responses go: serialized on the completing thread, queued on the stream.
  // Decoupled models answer with any number of responses; each carries Triton's
  // "triton_final_response" flag, and an empty final one is sent only when the client asked.
  class Sink final : public ResponseSink {
   public:
    Sink(StreamReactor* stream, bool empty_final) : stream_(stream), empty_final_(empty_final) {}
    void OnStarted(const Started& started) override {
      decoupled_ = started.decoupled;
      trace_ = started.trace;
    }
    void OnResponse(std::unique_ptr<InferenceResponse> result, bool /*others_pending*/) override {
      TracedSend send(result->final ? trace_.get() : nullptr);  // the final response's
      if (!result->status.ok())
        return stream_->Send(Error(result->model_name, result->id, result->status), true);
      if (result->empty_final && !empty_final_) return stream_->Send(std::nullopt, true);
      pb::ModelInferResponse header;
      FillResponseHeader(*result, &header);
      if (decoupled_)
        (*header.mutable_parameters())["triton_final_response"].set_bool_param(result->final);
      grpc::ByteBuffer buffer;
      SerializeInferResponse(header, *result, /*as_stream=*/true, &buffer);
      stream_->Send(std::move(buffer), result->final);
    }

   private:
    StreamReactor* stream_;  // lives until this request's last response is sent
    bool empty_final_;
    bool decoupled_ = false;
    std::shared_ptr<trace::Trace> trace_;
  };

  // A request's error on the stream: the message, with the model name and id it was sent with.
  static grpc::ByteBuffer Error(const std::string& model_name, const std::string& id,
                                const Status& s) {
    pb::ModelStreamInferResponse out;
    out.set_error_message(s.message());
    out.mutable_infer_response()->set_model_name(model_name);
    out.mutable_infer_response()->set_id(id);
    grpc::ByteBuffer buffer;
    Serialize(out, &buffer);
    return buffer;
  }

  // Queues a response of one request (serialized now, on the completing thread) and writes it
  // when the stream is free; 'last' when the request has no more responses to come (the response
  // itself may be absent: an empty final response the client did not ask for).
  void Send(std::optional<grpc::ByteBuffer> response, bool last) {
    bool destroy = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (last) --in_flight_;
      if (response && !done_ && !broken_) {
        pending_bytes_ += response->Length();
        pending_.push_back(std::move(*response));
        WriteNextLocked();
        if (pending_bytes_ > kCancelBytes) {
          // Only the write in progress stays (gRPC owns its buffer until it completes).
          while (pending_.size() > 1) {
            pending_bytes_ -= pending_.back().Length();
            pending_.pop_back();
          }
          broken_ = true;
          cancel_->cancelled.store(true, std::memory_order_relaxed);
          LOG_WARNING << "a gRPC stream's client left more than " << (kCancelBytes >> 20)
                      << " MiB of responses unread: the stream is cancelled";
          ctx_->TryCancel();
        }
      }
      ResumeLocked();
      MaybeFinishLocked();
      destroy = done_ && in_flight_ == 0 && !deleted_;
      if (destroy) deleted_ = true;
    }
    if (destroy) delete this;
  }

  bool OverLimitLocked() const {
    return pending_bytes_ >= kPauseBytes || in_flight_ >= kPauseRequests;
  }

  // Reads again once what waits has fallen to half the limits.
  void ResumeLocked() {
    if (!paused_ || done_ || reads_done_ || pending_bytes_ > kPauseBytes / 2 ||
        in_flight_ > kPauseRequests / 2)
      return;
    paused_ = false;
    StartRead(&next_);
  }

  void WriteNextLocked() {
    if (writing_ || pending_.empty() || done_) return;
    writing_ = true;
    StartWrite(&pending_.front());
  }

  void MaybeFinishLocked() {
    if (finished_ || in_flight_ > 0 || writing_ || !pending_.empty()) return;
    if (reads_done_) {
      finished_ = true;
      Finish(grpc::Status::OK);
    } else if (draining_ && !closing_) {
      // Shutting down with nothing left to answer: a read is still pending, which only
      // cancelling ends (Finish must wait for it); the failed read then finishes the stream.
      closing_ = true;
      ctx_->TryCancel();
    }
  }

  GrpcServer::Impl* server_;
  grpc::CallbackServerContext* ctx_;
  std::shared_ptr<CancelFlag> cancel_ = std::make_shared<CancelFlag>();
  grpc::ByteBuffer next_;
  std::mutex mu_;
  std::deque<grpc::ByteBuffer> pending_;
  size_t pending_bytes_ = 0;
  bool paused_ = false;  // reading stopped until what waits drains (OverLimitLocked)
  int in_flight_ = 0;
  bool reads_done_ = false, writing_ = false, finished_ = false, broken_ = false, done_ = false;
  bool deleted_ = false;
  bool draining_ = false, closing_ = false;  // the server is shutting down; cancel requested
};

// A stream refused before its first read: finishes at once with 'status'.
class RefusedStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit RefusedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* GrpcServer::Impl::ModelStreamInfer(
    grpc::CallbackServerContext* ctx) {
  if (Status a = Allowed(ctx, ApiGroup::kInference); !a.ok()) return new RefusedStream(ToGrpc(a));
  return new StreamReactor(this, ctx);
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
