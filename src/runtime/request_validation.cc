#include "runtime/request_validation.h"

#include <set>
#include <string>
#include <vector>

#include "nereid/backend_util.h"
#include "scheduler/ensemble_wiring.h"

namespace nereid {
namespace {

template <typename Dims>
std::string ExpectedShape(const Dims& dims, bool batching) {
  std::vector<int64_t> shape;
  if (batching) shape.push_back(-1);
  shape.insert(shape.end(), dims.begin(), dims.end());
  return ShapeString(shape);
}

}  // namespace

void FitEnsembleStep(const inference::ModelConfig& config, InferenceRequest& request) {
  const bool batches = config.max_batch_size() > 0;
  for (auto& input : request.inputs) {
    for (const auto& spec : config.input())
      if (spec.name() == input.name) {
        input.shape = EnsembleReshape(input.shape, input.from_batching, batches,
                                      {spec.dims().begin(), spec.dims().end()});
        break;
      }
  }
}

Status ValidateRequest(const inference::ModelConfig& config, const std::string& model_name,
                       InferenceRequest& request) {
  const bool batching = config.max_batch_size() > 0;
  const std::string for_model = " for model '" + model_name + "'";
  std::set<std::string> seen;
  int64_t batch_size = -1;
  for (auto& input : request.inputs) {
    if (!seen.insert(input.name).second)
      return InvalidArgument("input '" + input.name + "' appears more than once in the request");
    const inference::ModelInput* spec = nullptr;
    for (const auto& in : config.input())
      if (in.name() == input.name) spec = &in;
    if (spec == nullptr)
      return InvalidArgument("unexpected inference input '" + input.name + "'" + for_model);
    const DataType expected = FromConfigType(spec->data_type());
    if (input.datatype != expected)
      return InvalidArgument("inference input '" + input.name + "' data-type is '" +
                             std::string(DataTypeName(input.datatype)) + "', but model '" +
                             model_name + "' expects '" + std::string(DataTypeName(expected)) +
                             "'");
    // Shape: [batch] + dims when batching, dims otherwise; -1 in dims matches any size.
    const auto& dims =
        spec->has_reshape() && spec->dims_size() == 0 ? spec->reshape().shape() : spec->dims();
    const size_t offset = batching ? 1 : 0;
    bool shape_ok = input.shape.size() == static_cast<size_t>(dims.size()) + offset;
    for (size_t i = 0; shape_ok && i < input.shape.size(); ++i) {
      if (input.shape[i] < 0)
        shape_ok = false;
      else if (i >= offset && dims[i - offset] != -1 && dims[i - offset] != input.shape[i])
        shape_ok = false;
    }
    if (!shape_ok)
      return InvalidArgument("unexpected shape for input '" + input.name + "'" + for_model +
                             ". Expected " + ExpectedShape(dims, batching) + ", got " +
                             ShapeString(input.shape));
    if (batching) {
      if (input.shape[0] < 1 || input.shape[0] > config.max_batch_size())
        return InvalidArgument(
            "inference request batch-size must be <= " + std::to_string(config.max_batch_size()) +
            " for '" + model_name + "', got " + std::to_string(input.shape[0]) + " in input '" +
            input.name + "'");
      if (batch_size >= 0 && input.shape[0] != batch_size)
        return InvalidArgument("inputs of one request must share the batch size" + for_model +
                               ": input '" + input.name + "' has " +
                               std::to_string(input.shape[0]) + ", another input has " +
                               std::to_string(batch_size));
      batch_size = input.shape[0];
    }
    if (std::string overflow = SizeOverflow(input.name, input.datatype, input.shape);
        !overflow.empty())
      return InvalidArgument(overflow);
    const int64_t elements = ElementCount(input.shape);
    if (input.datatype == DataType::kBytes && !input.location.host_addressable())
      return InvalidArgument("input '" + input.name +
                             "': BYTES tensors in CUDA shared memory are not supported");
    if (input.datatype == DataType::kBytes) {
      const int64_t found = backend::CountBytesElements(input.data, input.byte_size);
      if (found != elements)
        return InvalidArgument(
            "input '" + input.name + "' holds " +
            (found < 0 ? std::string("malformed BYTES data (a length prefix runs past the end)")
                       : std::to_string(found) + " BYTES elements") +
            " but its shape " + ShapeString(input.shape) + " needs " + std::to_string(elements));
    } else {
      const int64_t expected_bytes = TensorByteSize(input.datatype, input.shape);
      if (input.byte_size != static_cast<uint64_t>(expected_bytes))
        return InvalidArgument("input '" + input.name + "' has " + std::to_string(input.byte_size) +
                               " bytes of data but shape " + ShapeString(input.shape) + " of " +
                               std::string(DataTypeName(input.datatype)) + " needs " +
                               std::to_string(expected_bytes));
      // Backends may read elements in place: data that the wire left misaligned is realigned here,
      // the one copy such an input gets.
      const size_t align = DataTypeSize(input.datatype);
      if (input.location.host_addressable() && align > 1 &&
          reinterpret_cast<uintptr_t>(input.data) % align != 0) {
        std::shared_ptr<uint8_t[]> aligned = AllocateAligned(input.byte_size);
        uint8_t* dst = aligned.get();
        std::memcpy(dst, input.data, input.byte_size);
        CountCopy(CopyKind::kInput, input.byte_size);
        input.Borrow(dst, input.byte_size, MemoryLocation{}, std::move(aligned));
      }
    }
  }
  std::vector<std::string> missing;
  for (const auto& in : config.input())
    if (!in.optional() && !seen.count(in.name())) missing.push_back("'" + in.name() + "'");
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    return InvalidArgument("expected " + std::to_string(config.input_size()) + " inputs but got " +
                           std::to_string(request.inputs.size()) + " inputs" + for_model +
                           "; missing required input(s) " + list);
  }
  request.batch_size = batching ? batch_size : 1;

  if (request.outputs.empty()) {
    for (const auto& out : config.output()) {
      RequestedOutput wanted;
      wanted.name = out.name();
      wanted.binary = request.binary_outputs_by_default;
      request.outputs.push_back(std::move(wanted));
    }
  }
  seen.clear();
  for (const auto& out : request.outputs) {
    const inference::ModelOutput* spec = nullptr;
    for (const auto& o : config.output())
      if (o.name() == out.name) spec = &o;
    if (spec == nullptr)
      return InvalidArgument("unexpected inference output '" + out.name + "'" + for_model);
    if (!seen.insert(out.name).second)
      return InvalidArgument("output '" + out.name + "' already exists in request");
    if (out.class_count > 0 && spec->data_type() == inference::TYPE_STRING)
      return InvalidArgument("classification (class_count) is not possible on BYTES output '" +
                             out.name + "'");
  }
  return Status::Ok();
}

}  // namespace nereid
