#include "scheduler/sequence_inputs.h"

#include <algorithm>
#include <cstring>

#include "config/model_files.h"
#include "memory/memory_pool.h"
#include "nereid/backend_util.h"

namespace nereid {
namespace {

using Control = inference::ModelSequenceBatching::Control;

// A sequence's initial state may not exceed this (a config, which a client may send, chooses it).
constexpr int64_t kMaxStateBytes = int64_t{256} << 20;

template <typename T>
std::vector<uint8_t> ElementBytes(T value) {
  std::vector<uint8_t> bytes(sizeof(T));
  std::memcpy(bytes.data(), &value, sizeof(T));
  return bytes;
}

// The CORRID tensor's one element: the id in the control's type (32-bit types keep the low 32
// bits), or for TYPE_STRING a BYTES element.
std::vector<uint8_t> CorrelationBytes(DataType type, const CorrelationId* id) {
  const uint64_t n = id != nullptr && !id->is_text ? id->number : 0;
  switch (type) {
    case DataType::kUint64:
      return ElementBytes<uint64_t>(n);
    case DataType::kInt64:
      return ElementBytes<int64_t>(static_cast<int64_t>(n));
    case DataType::kUint32:
      return ElementBytes<uint32_t>(static_cast<uint32_t>(n));
    case DataType::kInt32:
      return ElementBytes<int32_t>(static_cast<int32_t>(n));
    default: {  // BYTES
      std::vector<uint8_t> bytes;
      backend::AppendBytesElement(bytes, id != nullptr && id->is_text ? id->text : "");
      return bytes;
    }
  }
}

// Zeros for a state of 'type' and 'shape' (a BYTES element of zero length each).
StatusOr<std::vector<uint8_t>> Zeros(const std::string& state, DataType type,
                                     const std::vector<int64_t>& shape) {
  const int64_t bytes = ZeroFilledByteSize(type, shape);
  if (bytes < 0 || bytes > kMaxStateBytes)
    return InvalidArgument("state '" + state + "' of shape " + ShapeString(shape) +
                           " exceeds the " + std::to_string(kMaxStateBytes >> 20) +
                           " MiB a sequence's state may hold");
  return std::vector<uint8_t>(static_cast<size_t>(bytes), 0);
}

StatusOr<SequenceStateSpec> ReadState(const inference::ModelSequenceBatching::State& s,
                                      const std::filesystem::path& model_dir) {
  SequenceStateSpec spec;
  spec.input_name = s.input_name();
  spec.output_name = s.output_name();
  spec.type = FromConfigType(s.data_type());
  for (int64_t d : s.dims()) spec.initial_shape.push_back(d < 0 ? 1 : d);
  if (s.initial_state_size() == 0) {
    ASSIGN_OR_RETURN(spec.initial, Zeros(spec.input_name, spec.type, spec.initial_shape));
    return spec;
  }
  const auto& init = s.initial_state(0);
  spec.initial_shape.assign(init.dims().begin(), init.dims().end());
  ASSIGN_OR_RETURN(std::vector<uint8_t> zeros,
                   Zeros(spec.input_name, spec.type, spec.initial_shape));
  if (init.has_zero_data()) {
    spec.initial = std::move(zeros);
    return spec;
  }
  ASSIGN_OR_RETURN(spec.initial,
                   ReadModelFileBytes(model_dir, model_dir / "initial_state", init.data_file(),
                                      "sequence_batching.state.initial_state.data_file",
                                      kMaxStateBytes, "initial state files"));
  // Triton's rules: a fixed-size state takes the file's first bytes (a shorter file is an error,
  // in Triton's words). A STRING state's buffer is zeroed after the file is read, so whatever the
  // file holds the state starts as empty strings; only a size that is no whole number of length
  // prefixes is refused.
  if (spec.type == DataType::kBytes) {
    if (spec.initial.size() % sizeof(uint32_t) != 0)
      return InvalidArgument(
          "The total byte size must be a multiple of 4 when setting the sequence state to zero.");
    spec.initial = std::move(zeros);
    return spec;
  }
  if (spec.initial.size() < zeros.size())
    return InvalidArgument("initial_state setting expects " + std::to_string(zeros.size()) +
                           " bytes, but the data provided from " + init.data_file() + "only has " +
                           std::to_string(spec.initial.size()) + " bytes.");
  spec.initial.resize(zeros.size());
  return spec;
}

}  // namespace

StatusOr<SequenceBatcherConfig> ReadSequenceBatcherConfig(const inference::ModelConfig& config,
                                                          const std::filesystem::path& model_dir) {
  const auto& sb = config.sequence_batching();
  SequenceBatcherConfig c;
  c.model = config.name();
  c.max_batch_size = config.max_batch_size();
  c.oldest = sb.has_oldest();
  c.device_state = ReadsDeviceInputs(config);
  const size_t rows = static_cast<size_t>(std::max<int64_t>(1, c.max_batch_size));
  if (c.oldest) {
    const auto& o = sb.oldest();
    c.slots_per_instance =
        o.max_candidate_sequences() > 0 ? static_cast<size_t>(o.max_candidate_sequences()) : rows;
    c.max_queue_delay_ns = o.max_queue_delay_microseconds() * 1000;
    c.preferred_batch_sizes.assign(o.preferred_batch_size().begin(),
                                   o.preferred_batch_size().end());
    if (c.preferred_batch_sizes.empty()) c.preferred_batch_sizes.push_back(int64_t(rows));
    std::sort(c.preferred_batch_sizes.begin(), c.preferred_batch_sizes.end());
  } else {
    c.slots_per_instance = rows;
    c.max_queue_delay_ns = sb.direct().max_queue_delay_microseconds() * 1000;
    c.minimum_slot_utilization = sb.direct().minimum_slot_utilization();
  }
  if (sb.max_sequence_idle_microseconds() > 0)
    c.idle_ns = sb.max_sequence_idle_microseconds() * 1000;
  for (const auto& input : sb.control_input()) {
    for (const auto& ctl : input.control()) {
      SequenceControl s;
      s.name = input.name();
      switch (ctl.kind()) {
        case Control::CONTROL_SEQUENCE_START:
          s.kind = SequenceControl::Kind::kStart;
          break;
        case Control::CONTROL_SEQUENCE_END:
          s.kind = SequenceControl::Kind::kEnd;
          break;
        case Control::CONTROL_SEQUENCE_READY:
          s.kind = SequenceControl::Kind::kReady;
          break;
        default:
          s.kind = SequenceControl::Kind::kCorrelationId;
          break;
      }
      if (s.kind == SequenceControl::Kind::kCorrelationId) {
        s.type = FromConfigType(ctl.data_type());
      } else if (ctl.int32_false_true_size() == 2) {
        s.type = DataType::kInt32;
        for (int i = 0; i < 2; ++i)
          s.false_true[i] = ElementBytes<int32_t>(ctl.int32_false_true(i));
      } else if (ctl.fp32_false_true_size() == 2) {
        s.type = DataType::kFp32;
        for (int i = 0; i < 2; ++i) s.false_true[i] = ElementBytes<float>(ctl.fp32_false_true(i));
      } else {
        s.type = DataType::kBool;
        for (int i = 0; i < 2; ++i)
          s.false_true[i] =
              ElementBytes<uint8_t>(ctl.bool_false_true_size() == 2 && ctl.bool_false_true(i));
      }
      c.controls.push_back(std::move(s));
    }
  }
  for (const auto& state : sb.state()) {
    auto spec = ReadState(state, model_dir);
    if (!spec.ok())
      return Status(spec.status().code(),
                    "model '" + config.name() + "': " + spec.status().message());
    c.states.push_back(std::move(spec).value());
  }
  return c;
}

void AddControls(const SequenceBatcherConfig& config, InferenceRequest& request, bool start,
                 bool end, bool ready, const CorrelationId* id) {
  const std::vector<int64_t> shape =
      config.max_batch_size > 0 ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{1};
  for (const auto& c : config.controls) {
    InferInput& in = request.inputs.emplace_back();
    in.name = c.name;
    in.datatype = c.type;
    in.shape = shape;
    switch (c.kind) {
      case SequenceControl::Kind::kStart:
        in.Own(c.false_true[start ? 1 : 0]);
        break;
      case SequenceControl::Kind::kEnd:
        in.Own(c.false_true[end ? 1 : 0]);
        break;
      case SequenceControl::Kind::kReady:
        in.Own(c.false_true[ready ? 1 : 0]);
        break;
      case SequenceControl::Kind::kCorrelationId:
        in.Own(CorrelationBytes(c.type, id));
        break;
    }
  }
}

std::vector<std::string> AddState(const SequenceBatcherConfig& config, InferenceRequest& request,
                                  const SequenceState& state, bool initial) {
  std::vector<std::string> added;
  for (size_t i = 0; i < config.states.size(); ++i) {
    const SequenceStateSpec& spec = config.states[i];
    InferInput& in = request.inputs.emplace_back();
    in.name = spec.input_name;
    in.datatype = spec.type;
    if (initial || i >= state.values.size()) {
      in.shape = spec.initial_shape;
      if (config.max_batch_size > 0) in.shape.insert(in.shape.begin(), 1);
      in.Own(spec.initial);
    } else {
      const Buffer& value = state.values[i];
      in.shape = state.shapes[i];
      in.Borrow(value.data(), value.size(), value.location(), value.owner());
      CountHandoff(HandoffKind::kSequenceState, value.location().type == MemoryType::kGpu,
                   value.size());
    }
    auto asked = std::find_if(request.outputs.begin(), request.outputs.end(),
                              [&](const RequestedOutput& o) { return o.name == spec.output_name; });
    if (asked == request.outputs.end()) {
      // Not the client's: the engine may leave it on its GPU for the next request.
      request.outputs.emplace_back().name = spec.output_name;
      request.outputs.back().device_ok = config.device_state;
      added.push_back(spec.output_name);
    }
  }
  return added;
}

void KeepState(const SequenceBatcherConfig& config, const InferenceResponse& response,
               SequenceState* state) {
  if (config.states.empty()) return;
  state->values.resize(config.states.size());
  state->shapes.resize(config.states.size());
  for (size_t i = 0; i < config.states.size(); ++i)
    for (const auto& out : response.outputs)
      if (out.name == config.states[i].output_name) {
        if (out.buffer.location().type == MemoryType::kGpu) {
          state->values[i] = out.buffer;  // the server's allocation: kept, not copied
        } else {
          // A backend may reuse a host buffer once the response is out: copied.
          auto owned =
              std::make_shared<std::vector<uint8_t>>(out.bytes(), out.bytes() + out.byte_size());
          state->values[i] = Buffer(owned->data(), owned->size(), MemoryLocation{}, owned);
        }
        state->shapes[i] = out.shape;
      }
}

std::unique_ptr<InferenceRequest> PaddingRow(const SequenceBatcherConfig& config,
                                             const InferenceRequest& like) {
  auto pad = std::make_unique<InferenceRequest>();
  pad->model_name = like.model_name;
  pad->model_version = like.model_version;
  pad->padding = true;
  pad->batch_size = 1;
  pad->payload = like.payload;
  // Its inputs, the state included, are the representative's (so the batch's shapes agree); its
  // controls say READY false.
  for (const auto& in : like.inputs)
    if (std::none_of(config.controls.begin(), config.controls.end(),
                     [&](const SequenceControl& c) { return c.name == in.name; }))
      pad->inputs.push_back(in);
  for (const auto& out : like.outputs) pad->outputs.emplace_back().name = out.name;
  AddControls(config, *pad, false, false, /*ready=*/false, nullptr);
  pad->times.received_ns = pad->times.queued_ns = SteadyNowNs();
  return pad;
}

}  // namespace nereid
