#include "scheduler/ensemble_wiring.h"

#include <algorithm>

#include "common/logging.h"
#include "config/ensemble_config.h"
#include "nereid/backend.h"
#include "trace/trace.h"

namespace nereid {

EnsembleWiring EnsembleWiring::Of(const inference::ModelConfig& config) {
  EnsembleWiring w;
  std::map<std::string, int> index;  // tensor name -> its index in tensors
  auto tensor_index = [&](const std::string& name) {
    auto [it, fresh] = index.emplace(name, static_cast<int>(w.tensors.size()));
    if (fresh) w.tensors.push_back(name);
    return it->second;
  };
  for (const auto& in : config.input()) w.inputs.emplace_back(in.name(), tensor_index(in.name()));
  for (const auto& out : config.output()) {
    w.outputs[out.name()] = tensor_index(out.name());
    w.output_dims[out.name()].assign(out.dims().begin(), out.dims().end());
  }
  for (const auto& s : config.ensemble_scheduling().step()) {
    Step step;
    step.model = s.model_name();
    step.version = s.model_version();
    // Sorted by the model's tensor names: a step's request lists them in a fixed order.
    std::map<std::string, std::string> in(s.input_map().begin(), s.input_map().end());
    std::map<std::string, std::string> out(s.output_map().begin(), s.output_map().end());
    for (const auto& [model_input, tensor] : in)
      step.inputs.emplace_back(model_input, tensor_index(tensor));
    for (const auto& [model_output, tensor] : out)
      step.outputs.emplace_back(model_output, tensor_index(tensor));
    w.steps.push_back(std::move(step));
  }
  w.producer.assign(w.tensors.size(), -1);
  w.readers.assign(w.tensors.size(), {});
  for (int i = 0; i < static_cast<int>(w.steps.size()); ++i) {
    for (const auto& [name, t] : w.steps[i].outputs) w.producer[t] = i;
    for (const auto& [name, t] : w.steps[i].inputs)
      if (std::find(w.readers[t].begin(), w.readers[t].end(), i) == w.readers[t].end()) {
        w.readers[t].push_back(i);
        w.steps[i].reads.push_back(t);
      }
  }
  w.is_output.assign(w.tensors.size(), 0);
  for (const auto& [name, t] : w.outputs) w.is_output[t] = 1;
  return w;
}

std::unique_ptr<InferenceRequest> MakeStepRequest(const EnsembleWiring& wiring, int index,
                                                  const InferenceRequest& top,
                                                  const EnsembleValues& values,
                                                  const std::vector<char>& needed) {
  const EnsembleWiring::Step& step = wiring.steps[index];
  auto r = std::make_unique<InferenceRequest>();
  r->model_name = step.model;
  r->model_version = step.version;
  // Each step carries the client's id, sequence, priority, timeout and parameters (Triton's).
  r->id = top.id;
  r->priority = top.priority;
  r->timeout_us = top.timeout_us;
  r->deadline_ns = top.deadline_ns;
  r->parameters = top.parameters;
  r->flags = top.flags;
  r->correlation_id = top.correlation_id;
  r->cancel = top.cancel;
  r->ensemble_step = true;
  // A traced ensemble's steps are traced as its children (their parent_id, their model spans
  // under its own).
  if (top.trace) r->trace = top.trace->Child(step.model, step.version);
  for (const auto& [name, t] : step.inputs) {
    const EnsembleTensor& tensor = *values(t);
    if (!tensor.present) continue;  // left out upstream: the model may take it as optional
    if (wiring.producer[t] >= 0)
      CountHandoff(HandoffKind::kEnsemble, tensor.location.type == MemoryType::kGpu,
                   tensor.byte_size);
    InferInput in;
    in.name = name;
    in.datatype = tensor.datatype;
    in.shape = tensor.shape;
    in.from_batching = tensor.from_batching;
    in.Borrow(tensor.data, tensor.byte_size, tensor.location, tensor.keep);
    r->inputs.push_back(std::move(in));
  }
  for (const auto& [name, t] : step.outputs)
    if (needed[t]) {
      RequestedOutput& out = r->outputs.emplace_back();
      out.name = name;
      out.device_ok = !wiring.is_output[t];  // read by steps only: it may stay on a GPU
    }
  return r;
}

Status FillEnsembleResponse(const EnsembleWiring& wiring, bool batching,
                            const InferenceRequest& request, const EnsembleValues& values,
                            InferenceResponse& response) {
  for (const RequestedOutput& wanted : request.outputs) {
    const int t = wiring.outputs.at(wanted.name);
    const EnsembleTensor& tensor = *values(t);
    if (!tensor.present) {  // a step left it out: the response lacks it (Triton's)
      LOG_VERBOSE(1) << "in ensemble '" << request.model_name
                     << "': Composing models did not output tensor " << wiring.tensors[t];
      continue;
    }
    InferOutput out;
    out.name = wanted.name;
    out.datatype = tensor.datatype;
    out.shape = EnsembleReshape(tensor.shape, tensor.from_batching, batching,
                                wiring.output_dims.at(wanted.name));
    out.binary = wanted.binary;
    out.buffer =
        Buffer(const_cast<uint8_t*>(tensor.data), tensor.byte_size, tensor.location, tensor.keep);
    if (wanted.has_destination) {
      RETURN_IF_ERROR(CheckOutputRegion(wanted, wanted.name, tensor.byte_size));
      Buffer region(wanted.destination.data(), tensor.byte_size, wanted.destination.location(),
                    wanted.destination.owner());
      RETURN_IF_ERROR(CopyIntoRegion(region, tensor.data, tensor.byte_size));
      out.buffer = region;
      out.in_shared_memory = true;
    }
    response.outputs.push_back(std::move(out));
  }
  // Every ensemble response carries the request's sequence id and flags (Triton's).
  auto parameter = [&](const char* name, RequestParameter::Type type) -> RequestParameter& {
    RequestParameter& p = response.parameters.emplace_back();
    p.name = name;
    p.type = type;
    return p;
  };
  if (request.correlation_id.is_text)
    parameter("sequence_id", RequestParameter::Type::kString).string_value =
        request.correlation_id.text;
  else
    parameter("sequence_id", RequestParameter::Type::kInt64).int_value =
        static_cast<int64_t>(request.correlation_id.number);
  parameter("sequence_start", RequestParameter::Type::kBool).bool_value =
      (request.flags & NEREID_REQUEST_FLAG_SEQUENCE_START) != 0;
  parameter("sequence_end", RequestParameter::Type::kBool).bool_value =
      (request.flags & NEREID_REQUEST_FLAG_SEQUENCE_END) != 0;
  response.model_name = request.model_name;
  response.model_version = request.model_version;
  response.id = request.id;
  return Status::Ok();
}

std::vector<int64_t> EnsembleReshape(const std::vector<int64_t>& shape, bool from_batching,
                                     bool reader_batches, const std::vector<int64_t>& dims) {
  if (from_batching == reader_batches) return shape;
  if (reader_batches) {
    if (!DimsMatch(shape, dims)) return shape;  // taken as already batched
    std::vector<int64_t> batched{1};
    batched.insert(batched.end(), shape.begin(), shape.end());
    return batched;
  }
  if (DimsMatch(shape, dims) || shape.empty() || shape[0] != 1) return shape;
  return {shape.begin() + 1, shape.end()};
}

}  // namespace nereid
