// "identity": the test backend of Triton's QA suites (`backend: "identity"`), on Nereid's ABI.
// Each input INPUT<i> is copied to output OUTPUT<i> (any datatype, BYTES included; the config must
// pair them with equal datatypes and dims, checked at load). Parameters, as Triton's:
//   execute_delay_ms                each execution sleeps this long first;
//   instance_wise_delay_multiplier  ... times this x the instance's creation index (at least 1x);
//   creation_delay_sec              the model's load sleeps this long.
// For tests only: it computes nothing.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "common/config_json.h"
#include "nereid/backend_util.h"

namespace {

namespace nb = nereid::backend;

struct IdentityModel {
  std::string name;
  int64_t max_batch_size = 0;
  std::vector<std::pair<std::string, std::string>> pairs;  // (INPUT<i>, OUTPUT<i>)
  int execute_delay_ms = 0;
  int delay_multiplier = 0;
  std::atomic<int> instances{0};
};

struct IdentityInstance {
  int index = 0;  // creation order within the model
};

nb::StatusOr<std::unique_ptr<IdentityModel>> Load(NereidModel* handle) {
  auto m = std::make_unique<IdentityModel>();
  m->name = NereidModelName(handle);
  rapidjson::Document config;
  config.Parse(NereidModelConfigJson(handle));
  if (config.HasParseError() || !config.IsObject())
    return nb::Internal("model config JSON is malformed");
  // Only config.pbtxt's own inputs and outputs pair up (as in Triton's identity backend): the
  // sequence batcher's control tensors are inputs it is handed and ignores.
  nb::ModelIo io = nb::ReadModelIo(m->name, config);
  io.inputs = nb::ReadIo(config, "input");
  io.outputs = nb::ReadIo(config, "output");
  m->max_batch_size = io.max_batch_size;
  const std::string where = "model '" + m->name + "': ";
  if (io.inputs.size() != io.outputs.size())
    return nb::InvalidArgument(where + "model configuration must have equal input/output pairs");
  for (const auto& [name, in] : io.inputs) {
    if (name.rfind("INPUT", 0) != 0)
      return nb::InvalidArgument(
          where + "expected input name to follow INPUT<index> pattern, got '" + name + "'");
    const std::string out_name = "OUTPUT" + name.substr(5);
    auto out = io.outputs.find(out_name);
    if (out == io.outputs.end()) {
      for (const auto& [o, spec] : io.outputs)
        if (o.rfind("OUTPUT", 0) != 0)
          return nb::InvalidArgument(
              where + "expected output name to follow OUTPUT<index> pattern, got '" + o + "'");
      return nb::InvalidArgument(where + "expected input and output indices to match");
    }
    if (in.type != out->second.type)
      return nb::InvalidArgument(where + "expected input and output datatype to match, got " +
                                 std::string(nb::DataTypeName(in.type)) + " and " +
                                 std::string(nb::DataTypeName(out->second.type)));
    if (in.dims != out->second.dims)
      return nb::InvalidArgument(where + "expected input and output shape to match, got " +
                                 nb::ShapeString(in.dims) + " and " +
                                 nb::ShapeString(out->second.dims));
    m->pairs.emplace_back(name, out_name);
  }
  ASSIGN_OR_RETURN(m->execute_delay_ms,
                   nb::IntParameter(m->name, config, "execute_delay_ms", 0, 3'600'000, 0));
  ASSIGN_OR_RETURN(
      m->delay_multiplier,
      nb::IntParameter(m->name, config, "instance_wise_delay_multiplier", 0, 1'000'000, 0));
  ASSIGN_OR_RETURN(const int creation_delay_sec,
                   nb::IntParameter(m->name, config, "creation_delay_sec", 0, 3600, 0));
  if (creation_delay_sec > 0) {
    nb::Log(NEREID_LOG_INFO,
            where + "creation delay is set to " + std::to_string(creation_delay_sec) + " s");
    std::this_thread::sleep_for(std::chrono::seconds(creation_delay_sec));
  }
  return m;
}

// One request: every requested output is its input's bytes, shape and datatype.
nb::Status Copy(const IdentityModel& m, NereidRequest* request) {
  const std::vector<std::string> wanted = nb::RequestedOutputs(request);
  for (const auto& [in_name, out_name] : m.pairs) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), out_name) == wanted.end())
      continue;
    ASSIGN_OR_RETURN(NereidTensor in, nb::Input(request, in_name.c_str()));
    if (in.memory_type == NEREID_MEMORY_GPU)
      return nb::Unsupported("model '" + m.name + "': input '" + in_name +
                             "' is in GPU memory; the identity backend copies host memory only");
    ASSIGN_OR_RETURN(NereidBuffer out,
                     nb::AllocateOutput(request, out_name, static_cast<nb::DataType>(in.datatype),
                                        nb::Shape(in), in.byte_size, NEREID_MEMORY_CPU));
    if (in.byte_size > 0) std::memcpy(out.data, in.data, in.byte_size);
  }
  return nb::Status::Ok();
}

}  // namespace

struct IdentityBackend {
  using Model = IdentityModel;
  using Instance = IdentityInstance;
  static constexpr const char* kPlatforms = "";
  static constexpr const char* kModelFile = "";  // it has none
  static nb::Status Initialize() { return nb::Status::Ok(); }
  static nb::StatusOr<std::unique_ptr<Model>> LoadModel(NereidModel* model) { return Load(model); }
  static nb::StatusOr<std::unique_ptr<Instance>> CreateInstance(NereidInstance*, Model& model) {
    auto instance = std::make_unique<Instance>();
    instance->index = model.instances.fetch_add(1);
    return instance;
  }
  static nb::Status Execute(const Model& model, Instance& instance, NereidInstance*,
                            NereidRequest** requests, uint32_t count,
                            std::vector<nb::Status>& failed) {
    if (model.execute_delay_ms > 0) {
      const int64_t multiplier =
          model.delay_multiplier > 0 ? int64_t{model.delay_multiplier} * instance.index : 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(int64_t{model.execute_delay_ms} *
                                                            std::max<int64_t>(multiplier, 1)));
    }
    for (uint32_t r = 0; r < count; ++r) failed[r] = Copy(model, requests[r]);
    return nb::Status::Ok();
  }
};

NEREID_BATCH_BACKEND(IdentityBackend)
