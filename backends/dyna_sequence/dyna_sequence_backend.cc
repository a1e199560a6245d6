// "dyna_sequence": the test backend Triton's QA builds `simple_string_dyna_sequence` (the `-d`
// sequence client examples) and `custom_dyna_sequence_int32` from, on Nereid's ABI. A sequence
// model (control inputs START, END, READY and CORRID; CORRID TYPE_UINT64 or TYPE_STRING holding an
// integer) with one INT32 vector input INPUT and output OUTPUT of the same shape. Per sequence it
// keeps an accumulator, as Triton's backend does: START sets it to the sum of INPUT's elements,
// a later request adds them; END adds the correlation id (its low 32 bits) and forgets the
// sequence afterwards. Every element of OUTPUT is the accumulator; a request that is not READY
// gets no output.
// Parameter execute_delay_ms: each execution sleeps this long first. For tests only.
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>

#include "common/config_json.h"
#include "nereid/backend_util.h"

namespace {

namespace nb = nereid::backend;

struct DynaModel {
  std::string name;
  int execute_delay_ms = 0;
};

struct DynaInstance {
  std::mutex mu;
  std::unordered_map<uint64_t, int32_t> accumulator;  // by correlation id
};

nb::StatusOr<std::unique_ptr<DynaModel>> Load(NereidModel* handle) {
  auto m = std::make_unique<DynaModel>();
  m->name = NereidModelName(handle);
  rapidjson::Document config;
  config.Parse(NereidModelConfigJson(handle));
  if (config.HasParseError() || !config.IsObject())
    return nb::Internal("model config JSON is malformed");
  const std::string where = "model '" + m->name + "': ";
  // The four control inputs, named as Triton's backend requires, with CORRID's type.
  std::map<std::string, std::string> controls;  // name -> data type
  if (config.HasMember("sequence_batching") && config["sequence_batching"].IsObject() &&
      config["sequence_batching"].HasMember("control_input") &&
      config["sequence_batching"]["control_input"].IsArray())
    for (const auto& c : config["sequence_batching"]["control_input"].GetArray()) {
      std::string type;
      if (c.HasMember("control") && c["control"].IsArray())
        for (const auto& k : c["control"].GetArray()) type = nb::StringField(k, "data_type");
      controls[nb::StringField(c, "name")] = type;
    }
  for (const char* name : {"START", "END", "READY", "CORRID"})
    if (!controls.contains(name))
      return nb::InvalidArgument(where +
                                 "'START', 'END, 'READY' and 'CORRID' must be configured as "
                                 "the control inputs");
  if (controls["CORRID"] != "TYPE_UINT64" && controls["CORRID"] != "TYPE_STRING")
    return nb::InvalidArgument(where +
                               "model CORRID control input must have TYPE_UINT64 or TYPE_STRING "
                               "data-type");
  const auto inputs = nb::ReadIo(config, "input");
  const auto outputs = nb::ReadIo(config, "output");
  auto in = inputs.find("INPUT");
  auto out = outputs.find("OUTPUT");
  if (inputs.size() != 1 || in == inputs.end() || in->second.type != nb::DataType::kInt32 ||
      in->second.dims.size() != 1)
    return nb::InvalidArgument(where + "model must have one INT32 input 'INPUT' with vector shape");
  if (outputs.size() != 1 || out == outputs.end() || out->second.type != nb::DataType::kInt32 ||
      out->second.dims != in->second.dims)
    return nb::InvalidArgument(where +
                               "model must have one INT32 output 'OUTPUT' with INPUT's shape");
  ASSIGN_OR_RETURN(m->execute_delay_ms,
                   nb::IntParameter(m->name, config, "execute_delay_ms", 0, 3'600'000, 0));
  return m;
}

nb::StatusOr<int32_t> Scalar(NereidRequest* request, const char* name) {
  ASSIGN_OR_RETURN(NereidTensor t, nb::Input(request, name));
  if (t.datatype != NEREID_TYPE_INT32 || t.byte_size < sizeof(int32_t) ||
      t.memory_type == NEREID_MEMORY_GPU)
    return nb::InvalidArgument(std::string("control input '") + name +
                               "' must be INT32 in host memory");
  int32_t v = 0;
  std::memcpy(&v, t.data, sizeof(v));
  return v;
}

// One request of a sequence: its step of the accumulator, and OUTPUT when READY.
nb::Status Step(DynaInstance& inst, NereidRequest* request, std::set<uint64_t>& seen) {
  uint64_t number = 0;
  const char* text = nullptr;
  NereidRequestCorrelationId(request, &number, &text);
  uint64_t id = number;
  if (text != nullptr) {
    char* end = nullptr;
    errno = 0;
    const long long parsed = std::strtoll(text, &end, 10);
    if (*text == '\0' || end == text || errno != 0)
      return nb::InvalidArgument(
          "dyna sequence backend expects correlation ID to be decodable into an integer");
    id = static_cast<uint64_t>(parsed);
  }
  if (!seen.insert(id).second)
    return nb::Unsupported(
        "Execute() called with batch containing multiple inferences requests for the same "
        "Correlation ID");
  ASSIGN_OR_RETURN(const int32_t start, Scalar(request, "START"));
  ASSIGN_OR_RETURN(const int32_t end, Scalar(request, "END"));
  ASSIGN_OR_RETURN(const int32_t ready, Scalar(request, "READY"));
  ASSIGN_OR_RETURN(NereidTensor in, nb::Input(request, "INPUT"));
  if (in.datatype != NEREID_TYPE_INT32 || in.memory_type == NEREID_MEMORY_GPU)
    return nb::Unsupported("failed to get input buffer in CPU memory");
  if (ready == 0) return nb::Status::Ok();
  const size_t n = in.byte_size / sizeof(int32_t);
  const auto* x = static_cast<const int32_t*>(in.data);
  int32_t value = 0;
  {
    std::lock_guard<std::mutex> lock(inst.mu);
    // Unsigned arithmetic: the sums wrap as the original's int32 additions do on every machine.
    const auto it = inst.accumulator.find(id);
    uint32_t acc =
        start != 0 || it == inst.accumulator.end() ? 0u : static_cast<uint32_t>(it->second);
    for (size_t e = 0; e < n; ++e) acc += static_cast<uint32_t>(x[e]);
    if (end != 0) acc += static_cast<uint32_t>(id);
    value = static_cast<int32_t>(acc);
    if (end != 0)
      inst.accumulator.erase(id);
    else
      inst.accumulator[id] = value;
  }
  ASSIGN_OR_RETURN(NereidBuffer out,
                   nb::AllocateOutput(request, "OUTPUT", nb::DataType::kInt32, nb::Shape(in),
                                      in.byte_size, NEREID_MEMORY_CPU));
  auto* y = static_cast<int32_t*>(out.data);
  for (size_t e = 0; e < n; ++e) y[e] = value;
  return nb::Status::Ok();
}

}  // namespace

struct DynaSequenceBackend {
  using Model = DynaModel;
  using Instance = DynaInstance;
  static constexpr const char* kPlatforms = "";
  static constexpr const char* kModelFile = "";  // it has none
  static nb::Status Initialize() { return nb::Status::Ok(); }
  static nb::StatusOr<std::unique_ptr<Model>> LoadModel(NereidModel* model) { return Load(model); }
  static nb::StatusOr<std::unique_ptr<Instance>> CreateInstance(NereidInstance*, Model&) {
    return std::make_unique<Instance>();
  }
  static nb::Status Execute(const Model& model, Instance& instance, NereidInstance*,
                            NereidRequest** requests, uint32_t count,
                            std::vector<nb::Status>& failed) {
    if (model.execute_delay_ms > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(model.execute_delay_ms));
    std::set<uint64_t> seen;  // the sequence batcher never puts one sequence twice in a batch
    for (uint32_t r = 0; r < count; ++r) failed[r] = Step(instance, requests[r], seen);
    return nb::Status::Ok();
  }
};

NEREID_BATCH_BACKEND(DynaSequenceBackend)
