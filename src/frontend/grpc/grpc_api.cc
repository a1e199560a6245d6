#include "frontend/grpc/grpc_api.h"

#include <optional>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/logging.h"
#include "frontend/grpc/grpc_service.grpc.pb.h"

namespace nereid::grpc_frontend {
namespace {

namespace pb = inference;

void FillDuration(const DurationSnapshot& d, pb::StatisticDuration* out) {
  out->set_count(d.count);
  out->set_ns(d.ns);
}

// Nereid's extension to the metadata and the statistics (field 1001 of each).
void FillPlacement(const std::vector<InstancePlacement>& placement,
                   google::protobuf::RepeatedPtrField<pb::InstancePlacement>* out) {
  for (const InstancePlacement& p : placement) {
    auto* o = out->Add();
    o->set_model(p.model);
    o->set_instance(p.instance);
    o->set_kind(p.kind);
    o->set_device(p.device);
    o->set_requested(p.requested);
  }
}

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
    FillPlacement(st.placement, out->mutable_placement());
  }
}

}  // namespace

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

void Serialize(const google::protobuf::Message& message, grpc::ByteBuffer* out) {
  bool own = false;
  grpc::SerializationTraits<google::protobuf::Message>::Serialize(message, out, &own);
}

RequestContext CallContext(grpc::CallbackServerContext* ctx, InferEndpoint endpoint,
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

void AnswerServerMetadata(const ServerApi& api, pb::ServerMetadataResponse* response) {
  const nereid::ServerMetadata md = api.GetServerMetadata();
  response->set_name(md.name);
  response->set_version(md.version);
  for (const std::string& e : md.extensions) response->add_extensions(e);
}

Status AnswerModelMetadata(const ServerApi& api, const pb::ModelMetadataRequest& request,
                           pb::ModelMetadataResponse* response) {
  ASSIGN_OR_RETURN(int64_t version, ParseModelVersion(request.version()));
  ASSIGN_OR_RETURN(nereid::ModelMetadata metadata, api.GetModelMetadata(request.name(), version));
  response->set_name(metadata.name);
  for (int64_t v : metadata.versions) response->add_versions(std::to_string(v));
  response->set_platform(metadata.platform);
  for (const bool inputs : {true, false})
    for (const TensorMetadata& t : inputs ? metadata.inputs : metadata.outputs) {
      auto* out = inputs ? response->add_inputs() : response->add_outputs();
      out->set_name(t.name);
      out->set_datatype(std::string(DataTypeName(t.datatype)));
      for (int64_t d : t.shape) out->add_shape(d);
    }
  FillPlacement(metadata.placement, response->mutable_placement());
  return Status::Ok();
}

Status AnswerModelConfig(const ServerApi& api, const pb::ModelConfigRequest& request,
                         pb::ModelConfigResponse* response) {
  ASSIGN_OR_RETURN(int64_t version, ParseModelVersion(request.version()));
  ASSIGN_OR_RETURN(*response->mutable_config(), api.ModelConfig(request.name(), version));
  return Status::Ok();
}

Status AnswerModelStatistics(const ServerApi& api, const pb::ModelStatisticsRequest& request,
                             pb::ModelStatisticsResponse* response) {
  ASSIGN_OR_RETURN(int64_t version, ParseModelVersion(request.version()));
  ASSIGN_OR_RETURN(std::vector<nereid::ModelStatistics> models,
                   api.Statistics(request.name(), version));
  FillStatistics(models, response);
  return Status::Ok();
}

void AnswerRepositoryIndex(const ServerApi& api, const pb::RepositoryIndexRequest& request,
                           pb::RepositoryIndexResponse* response) {
  for (const IndexEntry& e : api.RepositoryIndex(request.ready())) {
    auto* m = response->add_models();
    m->set_name(e.name);
    if (e.version >= 0) m->set_version(std::to_string(e.version));
    m->set_state(e.state);
    m->set_reason(e.reason);
  }
}

Status ReadLoadRequest(const pb::RepositoryModelLoadRequest& request, std::string* config,
                       ModelFiles* files, size_t* bytes) {
  *bytes = 0;
  for (const auto& [key, value] : request.parameters()) {
    if (key == "config") {
      if (value.parameter_choice_case() != pb::ModelRepositoryParameter::kStringParam)
        return InvalidArgument("parameter 'config' must be a JSON string");
      *config = value.string_param();
      *bytes += config->size();
    } else if (key.rfind("file:", 0) == 0) {
      if (value.parameter_choice_case() != pb::ModelRepositoryParameter::kBytesParam)
        return InvalidArgument("parameter '" + key.substr(0, 300) +
                               "' must be the file's bytes (bytes_param)");
      *bytes += value.bytes_param().size();
      files->emplace_back(key.substr(5), value.bytes_param());
    }
  }
  return Status::Ok();
}

Status AnswerSystemSharedMemoryStatus(ServerApi& api,
                                      const pb::SystemSharedMemoryStatusRequest& request,
                                      pb::SystemSharedMemoryStatusResponse* response) {
  ASSIGN_OR_RETURN(auto regions, api.shared_memory().GetStatus(request.name()));
  for (const auto& r : regions) {
    auto& out = (*response->mutable_regions())[r.name];
    out.set_name(r.name);
    out.set_key(r.key);
    out.set_offset(r.offset);
    out.set_byte_size(r.byte_size);
  }
  return Status::Ok();
}

Status AnswerCudaSharedMemoryStatus(ServerApi& api,
                                    const pb::CudaSharedMemoryStatusRequest& request,
                                    pb::CudaSharedMemoryStatusResponse* response) {
  ASSIGN_OR_RETURN(auto regions, api.shared_memory().GetCudaStatus(request.name()));
  for (const auto& r : regions) {
    auto& out = (*response->mutable_regions())[r.name];
    out.set_name(r.name);
    out.set_device_id(static_cast<uint64_t>(r.device_id));
    out.set_byte_size(r.byte_size);
  }
  return Status::Ok();
}

Status AnswerTraceSetting(ServerApi& api, const pb::TraceSettingRequest& request,
                          pb::TraceSettingResponse* response) {
  trace::SettingUpdate changes;
  for (const auto& [key, value] : request.settings()) {
    if (value.value().empty())
      changes.emplace_back(key, std::nullopt);
    else
      changes.emplace_back(key,
                           std::vector<std::string>(value.value().begin(), value.value().end()));
  }
  ASSIGN_OR_RETURN(trace::SettingMap settings,
                   api.TraceSettings(request.model_name(), changes.empty() ? nullptr : &changes));
  for (const auto& [key, values] : settings) {
    auto& out = (*response->mutable_settings())[key];
    for (const auto& v : values) out.add_value(v);
  }
  return Status::Ok();
}

Status AnswerLogSettings(ServerApi& api, const pb::LogSettingsRequest& request,
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

}  // namespace nereid::grpc_frontend
