#include "config/config_validator.h"

#include <map>
#include <set>

#include "config/ensemble_config.h"

namespace nereid {
namespace {

using Path = std::vector<ConfigLocator::Step>;
using Control = inference::ModelSequenceBatching::Control;

// Collects every problem of one config, each with the file and line of the field it names.
class Checker {
 public:
  Checker(const std::string& model, const ConfigLocator& locator)
      : model_(model), locator_(locator) {}

  void Fail(const Path& path, const std::string& field, const std::string& message) {
    errors_.push_back("model '" + model_ + "': " + locator_.Where(path) + ": field '" + field +
                      "': " + message);
  }
  std::vector<std::string> TakeErrors() { return std::move(errors_); }

  // Triton's rules for one input or output: name, data_type, dims (each >= 1 or -1), reshape.
  template <typename Tensor>
  // 'complete': data_type and dims must be there (a backend's auto-complete may still fill them in
  // a config as written).
  void CheckTensor(const char* kind, int index, const Tensor& t, int32_t max_batch_size,
                   bool complete) {
    const std::string where = std::string(kind) + "[" + std::to_string(index) + "]";
    const std::string what = std::string(kind) + " '" + t.name() + "'";
    const Path at = {{kind, index}};
    if (t.name().empty()) Fail(at, where + ".name", "every " + std::string(kind) + " needs a name");
    if (complete && t.data_type() == inference::TYPE_INVALID)
      Fail(at, where + ".data_type", what + " needs a data_type (for example TYPE_FP32)");
    if (complete && t.dims_size() == 0 && !t.has_reshape())
      Fail(at, where + ".dims", what + " must specify 'dims'");
    for (int d = 0; d < t.dims_size(); ++d) {
      if (t.dims(d) == -1 || t.dims(d) >= 1) continue;
      Fail({{kind, index}, {"dims", d}}, where + ".dims",
           what + " has dims " + ShapeString(t.dims().data(), t.dims().size()) +
               ": each dimension must be >= 1, or -1 for a variable size");
      break;
    }
    if (t.has_reshape()) CheckReshape(kind, index, t, max_batch_size);
  }

  // A reshape only re-labels the same elements: the variable dimensions (-1) must match in number,
  // and the fixed dimensions between them must hold the same number of elements (Triton's rule).
  // An empty reshape (a scalar per batch item) needs dims of one element and a batching model.
  template <typename Tensor>
  void CheckReshape(const char* kind, int index, const Tensor& t, int32_t max_batch_size) {
    const Path at = {{kind, index}, {"reshape"}};
    const std::string field = std::string(kind) + "[" + std::to_string(index) + "].reshape";
    const auto& shape = t.reshape().shape();
    const std::string both = std::string(kind) + " '" + t.name() + "' has dims " +
                             ShapeString(t.dims().data(), t.dims().size()) + " and reshape " +
                             ShapeString(shape.data(), shape.size());
    if (shape.empty() && max_batch_size == 0) {
      Fail(at, field,
           both + ": an empty reshape (a scalar) needs a batching model (max_batch_size > 0)");
      return;
    }
    auto segments = [](const auto& dims, bool* bad) {
      std::vector<int64_t> out(1, 1);
      for (int64_t d : dims) {
        if (d == -1) {
          out.push_back(1);
        } else if (d < 1 || __builtin_mul_overflow(out.back(), d, &out.back())) {
          *bad = true;
        }
      }
      return out;
    };
    bool bad = false;
    const std::vector<int64_t> from = segments(t.dims(), &bad);
    const std::vector<int64_t> to = segments(shape, &bad);
    if (bad) {
      Fail(at, field, both + ": each dimension must be >= 1, or -1 for a variable size");
    } else if (from.size() != to.size()) {
      Fail(at, field, both + ": they have different numbers of variable-size (-1) dimensions");
    } else if (from != to) {
      Fail(at, field,
           both + ", which hold different numbers of elements: a reshape must keep every element");
    }
  }

  // Every batch input and output names exactly one source, an input of the model.
  template <typename Batch>
  void CheckSources(const char* what, int index, const std::string& kind, const Batch& b,
                    const std::set<std::string>& inputs) {
    const std::string field = std::string(what) + "[" + std::to_string(index) + "].source_input";
    const Path at = {{what, index}};
    if (b.source_input_size() != 1)
      Fail(at, field,
           std::string(what == std::string("batch_input") ? "batch input" : "batch output") +
               " kind '" + kind + "' expects 1 source input, got " +
               std::to_string(b.source_input_size()));
    for (const auto& source : b.source_input())
      if (!inputs.count(source)) Fail(at, field, "unknown source input name '" + source + "'");
  }

  void CheckBatchIo(const inference::ModelConfig& config) {
    std::set<std::string> inputs, outputs;
    for (const auto& t : config.input()) inputs.insert(t.name());
    for (const auto& t : config.output()) outputs.insert(t.name());
    for (int i = 0; i < config.batch_input_size(); ++i) {
      const auto& b = config.batch_input(i);
      const std::string field = "batch_input[" + std::to_string(i) + "]";
      const Path at = {{"batch_input", i}};
      CheckSources("batch_input", i, inference::BatchInput::Kind_Name(b.kind()), b, inputs);
      if (b.data_type() != inference::TYPE_INT32 && b.data_type() != inference::TYPE_FP32)
        Fail(at, field + ".data_type", "a batch input's data_type must be TYPE_INT32 or TYPE_FP32");
      if (b.target_name_size() == 0)
        Fail(at, field + ".target_name", "a batch input needs a target_name");
    }
    for (int i = 0; i < config.batch_output_size(); ++i) {
      const auto& b = config.batch_output(i);
      const std::string field = "batch_output[" + std::to_string(i) + "]";
      const Path at = {{"batch_output", i}};
      CheckSources("batch_output", i, inference::BatchOutput::Kind_Name(b.kind()), b, inputs);
      std::set<std::string> targets;
      for (const auto& target : b.target_name()) {
        if (!outputs.count(target))
          Fail(at, field + ".target_name", "unknown target output name '" + target + "'");
        if (!targets.insert(target).second)
          Fail(at, field + ".target_name",
               "target output name '" + target + "' can only be specified once");
      }
    }
  }

  void CheckDynamicBatching(const inference::ModelConfig& config) {
    const auto& db = config.dynamic_batching();
    for (int i = 0; i < db.preferred_batch_size_size(); ++i) {
      const int32_t p = db.preferred_batch_size(i);
      if (p < 1 || p > config.max_batch_size())
        Fail({{"dynamic_batching"}, {"preferred_batch_size", i}},
             "dynamic_batching.preferred_batch_size",
             "preferred batch size " + std::to_string(p) +
                 " must be between 1 and max_batch_size (" +
                 std::to_string(config.max_batch_size()) + ")");
    }
    const uint64_t levels = db.priority_levels();
    const std::string range = "[1, " + std::to_string(levels) + "]";
    if (levels > 0) {
      if (db.default_priority_level() < 1 || db.default_priority_level() > levels)
        Fail({{"dynamic_batching"}, {"default_priority_level"}},
             "dynamic_batching.default_priority_level",
             "the default priority level must be in " + range + " (priority_levels)");
      for (const auto& [level, policy] : db.priority_queue_policy())
        if (level < 1 || level > levels)
          Fail({{"dynamic_batching"}, {"priority_queue_policy"}},
               "dynamic_batching.priority_queue_policy",
               "a priority queue policy names level " + std::to_string(level) +
                   ", outside the priority levels " + range);
    }
    if (db.preserve_ordering()) {
      if (levels > 1)
        Fail({{"dynamic_batching"}, {"preserve_ordering"}}, "dynamic_batching.preserve_ordering",
             "only one priority level is allowed when 'preserve_ordering' is true");
      auto delays = [](const inference::ModelQueuePolicy& p) {
        return p.default_timeout_microseconds() != 0 &&
               p.timeout_action() == inference::ModelQueuePolicy::DELAY;
      };
      bool delay = delays(db.default_queue_policy());
      for (const auto& [level, policy] : db.priority_queue_policy())
        delay = delay || delays(policy);
      if (delay)
        Fail({{"dynamic_batching"}, {"preserve_ordering"}}, "dynamic_batching.preserve_ordering",
             "a queue policy cannot have DELAY as its timeout action when 'preserve_ordering' is "
             "true");
    }
  }

  // Each control kind at most once, each tensor for one kind only; START, END and READY carry
  // exactly one pair of false/true values, CORRID a data type instead.
  // Implicit state (Triton's messages).
  void CheckSequenceStates(const inference::ModelConfig& config) {
    const auto& sb = config.sequence_batching();
    std::set<std::string> inputs;
    const bool all_gpu = [&] {
      for (const auto& g : config.instance_group())
        if (g.kind() != inference::ModelInstanceGroup::KIND_GPU) return false;
      return config.instance_group_size() > 0;
    }();
    for (int i = 0; i < sb.state_size(); ++i) {
      const auto& st = sb.state(i);
      const std::string field = "sequence_batching.state[" + std::to_string(i) + "]";
      const Path at = {{"sequence_batching"}, {"state", i}};
      const std::string name = st.input_name();
      if (name.empty() || st.output_name().empty())
        Fail(at, field, "a state needs an input_name and an output_name");
      if (!inputs.insert(name).second)
        Fail(at, field + ".input_name",
             "State input name '" + name + "' specified more than once.");
      if (st.data_type() == inference::TYPE_INVALID)
        Fail(at, field + ".data_type", "state '" + name + "' needs a data_type");
      for (int64_t d : st.dims())
        if (d < 1 && d != -1)
          Fail(at, field + ".dims", "state '" + name + "': dims must be positive or -1");
      if (st.use_growable_memory() && !st.use_same_buffer_for_input_output())
        Fail(at, field + ".use_growable_memory",
             "In order to 'use_growable_memory', you must also enable 'use_single_buffer' for "
             "state input name '" +
                 name + "'.");
      if (st.use_growable_memory() && !all_gpu)
        Fail(at, field + ".use_growable_memory",
             "'use_growable_memory' can only work with KIND_GPU model instances right now. Please "
             "either change the instance type to KIND_GPU or set 'use_growable_memory' to false "
             "for state input '" +
                 name + "'.");
      if (st.initial_state_size() > 1) {
        Fail(at, field + ".initial_state",
             "initial_state field for state input '" + name +
                 "' must contain exactly one or zero element. Found '" +
                 std::to_string(st.initial_state_size()) + "' elements.");
        continue;
      }
      if (st.initial_state_size() == 0) continue;
      const auto& init = st.initial_state(0);
      const std::string ifield = field + ".initial_state[0]";
      if (init.data_type() != st.data_type())
        Fail(at, ifield + ".data_type",
             "The data type used for 'initial_state' field of state '" + name +
                 "' does not match the state data type.");
      if (init.name().empty())
        Fail(at, ifield + ".name",
             "Field 'name' must be set when using initial_state for state input '" + name + "'.");
      if (init.dims_size() != st.dims_size()) {
        Fail(at, ifield + ".dims",
             "Number of dimensions in 'initial_state' doesn't match the size of 'state' "
             "dimensions for state input '" +
                 name + "'. " + std::to_string(init.dims_size()) +
                 " != " + std::to_string(st.dims_size()));
      } else {
        for (int d = 0; d < init.dims_size(); ++d) {
          if (init.dims(d) < 0) {
            Fail(at, ifield + ".dims",
                 "'initial_state' field for state input name '" + name +
                     "' contains variable dimensions.");
            break;
          }
          if (st.dims(d) != -1 && st.dims(d) != init.dims(d)) {
            Fail(at, ifield + ".dims",
                 "'initial_state' dim for input name '" + name +
                     "' doesn't match 'state' dim description.");
            break;
          }
        }
      }
      if (!init.has_zero_data() && init.data_file().empty())
        Fail(at, ifield,
             "initial_state setting expects state'" + name + "' to have state_data set");
    }
  }

  void CheckSequenceBatching(const inference::ModelConfig& config) {
    const auto& sb = config.sequence_batching();
    std::map<int, int> kinds;  // control kind -> times seen
    std::set<std::string> tensors;
    for (int i = 0; i < sb.control_input_size(); ++i) {
      const auto& input = sb.control_input(i);
      const std::string field = "sequence_batching.control_input[" + std::to_string(i) + "]";
      const Path at = {{"sequence_batching"}, {"control_input", i}};
      if (input.name().empty()) Fail(at, field + ".name", "a control tensor needs a name");
      if (!input.name().empty() && !tensors.insert(input.name()).second)
        Fail(at, field + ".name",
             "control tensor '" + input.name() + "' is specified for multiple control kinds");
      for (const auto& c : input.control()) {
        const std::string kind = Control::Kind_Name(c.kind());
        if (++kinds[c.kind()] == 2)
          Fail(at, field + ".control", "sequence batching specifies multiple " + kind + " tensors");
        const int given = (c.int32_false_true_size() > 0) + (c.fp32_false_true_size() > 0) +
                          (c.bool_false_true_size() > 0);
        if (c.kind() == Control::CONTROL_SEQUENCE_CORRID) {
          if (given > 0)
            Fail(at, field + ".control",
                 kind +
                     " takes a data_type, not 'int32_false_true', 'fp32_false_true' or "
                     "'bool_false_true'");
          const auto t = c.data_type();
          if (t != inference::TYPE_UINT64 && t != inference::TYPE_INT64 &&
              t != inference::TYPE_UINT32 && t != inference::TYPE_INT32 &&
              t != inference::TYPE_STRING)
            Fail(at, field + ".control.data_type",
                 kind + " must be TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING");
          continue;
        }
        if (given != 1) {
          Fail(at, field + ".control",
               kind +
                   " must specify exactly one of 'int32_false_true', 'fp32_false_true' or "
                   "'bool_false_true'");
          continue;
        }
        const int n =
            c.int32_false_true_size() + c.fp32_false_true_size() + c.bool_false_true_size();
        if (n != 2)
          Fail(
              at, field + ".control",
              kind + ": the false/true list must have exactly 2 entries, got " + std::to_string(n));
      }
    }
    CheckSequenceStates(config);
    if (sb.has_oldest())
      for (int32_t p : sb.oldest().preferred_batch_size())
        if (p < 1 || p > config.max_batch_size())
          Fail({{"sequence_batching"}, {"oldest"}}, "sequence_batching.oldest.preferred_batch_size",
               "preferred batch size " + std::to_string(p) + " must be between 1 and " +
                   "max_batch_size (" + std::to_string(config.max_batch_size()) + ")");
    if (sb.has_direct()) {
      const float u = sb.direct().minimum_slot_utilization();
      if (u < 0.0f || u > 1.0f)
        Fail({{"sequence_batching"}, {"direct"}},
             "sequence_batching.direct.minimum_slot_utilization", "must be in [0.0, 1.0]");
    }
  }

  void CheckModelMetrics(const inference::ModelConfig& config) {
    for (int i = 0; i < config.model_metrics().metric_control_size(); ++i) {
      const auto& mc = config.model_metrics().metric_control(i);
      const std::string field = "model_metrics.metric_control[" + std::to_string(i) + "]";
      const Path at = {{"model_metrics"}, {"metric_control", i}};
      if (!mc.has_metric_identifier())
        Fail(at, field + ".metric_identifier", "a metric control must specify 'metric_identifier'");
      else if (mc.metric_identifier().family().empty())
        Fail(at, field + ".metric_identifier.family",
             "a metric identifier must specify a non-empty 'family'");
      if (!mc.has_histogram_options())
        Fail(at, field + ".histogram_options", "a metric control must specify 'histogram_options'");
      else if (mc.histogram_options().buckets_size() == 0)
        Fail(at, field + ".histogram_options.buckets",
             "histogram options must specify non-empty 'buckets'");
    }
  }

  // Triton's refusals of a response cache where a response depends on more than the inputs.
  void CheckResponseCache(const inference::ModelConfig& config) {
    if (!config.response_cache().enable()) return;
    const Path at = {{"response_cache"}, {"enable"}};
    if (config.has_sequence_batching())
      Fail(at, "response_cache.enable",
           "Response Cache does not currently support model " + config.name() +
               " with sequence batching scheduler. Please disable the response cache.");
    if (config.model_transaction_policy().decoupled())
      Fail(at, "response_cache.enable", DecoupledCacheError(config.name()));
  }

  void CheckInstanceGroups(const inference::ModelConfig& config) {
    for (int i = 0; i < config.instance_group_size(); ++i) {
      const auto& group = config.instance_group(i);
      const std::string field = "instance_group[" + std::to_string(i) + "]";
      if (group.count() < 1)
        Fail({{"instance_group", i}, {"count"}}, field + ".count", "must be >= 1");
      if (group.count() > kMaxInstancesPerGroup)
        Fail({{"instance_group", i}, {"count"}}, field + ".count",
             std::to_string(group.count()) + " instances (one thread each) is over the limit of " +
                 std::to_string(kMaxInstancesPerGroup) + " per group");
      for (int32_t gpu : group.gpus())
        if (gpu < 0)
          Fail({{"instance_group", i}, {"gpus"}}, field + ".gpus",
               "invalid GPU id " + std::to_string(gpu));
      if ((group.kind() == inference::ModelInstanceGroup::KIND_CPU ||
           group.kind() == inference::ModelInstanceGroup::KIND_MODEL) &&
          group.gpus_size() > 0)
        Fail({{"instance_group", i}, {"gpus"}}, field + ".gpus",
             "'gpus' may only be given for KIND_GPU or KIND_AUTO groups");
    }
  }

 private:
  const std::string& model_;
  const ConfigLocator& locator_;
  std::vector<std::string> errors_;
};

}  // namespace

void FillConfigDefaults(const std::string& model_name, inference::ModelConfig* config) {
  if (config->name().empty()) config->set_name(model_name);
  if (!config->has_version_policy())
    config->mutable_version_policy()->mutable_latest()->set_num_versions(1);
  if (config->version_policy().has_latest() &&
      config->version_policy().latest().num_versions() == 0)
    config->mutable_version_policy()->mutable_latest()->set_num_versions(1);
  // An ensemble has no instances (its steps' models have theirs); its transaction policy is
  // shown set, as Triton shows it.
  if (config->platform() == "ensemble") config->mutable_model_transaction_policy();
  if (config->instance_group_size() == 0 && config->platform() != "ensemble") {
    auto* group = config->add_instance_group();
    group->set_kind(inference::ModelInstanceGroup::KIND_AUTO);
    group->set_count(1);
  }
  for (int i = 0; i < config->instance_group_size(); ++i) {
    auto* group = config->mutable_instance_group(i);
    if (group->count() == 0) group->set_count(1);
    if (group->name().empty()) group->set_name(model_name + "_" + std::to_string(i));
  }
}

Status ResolveInstanceGroups(const std::string& model_name, const GpuAvailability& gpus,
                             const ConfigLocator& locator, inference::ModelConfig* config) {
  Checker check(model_name, locator);
  using Group = inference::ModelInstanceGroup;
  auto all_gpus = [&](Group* group) {
    for (int d = 0; d < gpus.count; ++d) group->add_gpus(d);
  };
  const std::string none =
      gpus.count == 0 ? "no GPU is available (" + gpus.unavailable_reason + ")" : "";
  for (int i = 0; i < config->instance_group_size(); ++i) {
    Group* group = config->mutable_instance_group(i);
    const std::string field = "instance_group[" + std::to_string(i) + "]";
    if (group->kind() == Group::KIND_AUTO) {
      // Triton's rule: the GPUs when there are any (and the backend can use them), else the CPU.
      if (gpus.backend_supports_gpu && gpus.count > 0) {
        group->set_kind(Group::KIND_GPU);
      } else if (group->gpus_size() > 0) {
        check.Fail({{"instance_group", i}, {"gpus"}}, field + ".gpus",
                   "lists GPUs, but " +
                       (gpus.backend_supports_gpu
                            ? none
                            : "backend '" + gpus.backend + "' runs no KIND_GPU instances"));
        continue;
      } else {
        group->set_kind(Group::KIND_CPU);
      }
    }
    if (group->kind() != Group::KIND_GPU) continue;
    if (gpus.count == 0) {  // said first: true whatever the backend
      check.Fail({{"instance_group", i}, {"kind"}}, field + ".kind", "KIND_GPU, but " + none);
      continue;
    }
    if (!gpus.backend_supports_gpu && !gpus.backend_gpu_fallback) {
      check.Fail(
          {{"instance_group", i}, {"kind"}}, field + ".kind",
          "KIND_GPU, but backend '" + gpus.backend + "' runs no KIND_GPU instances; use KIND_CPU");
      continue;
    }
    if (group->gpus_size() == 0) all_gpus(group);
    for (int32_t gpu : group->gpus())
      if (gpu >= gpus.count)
        check.Fail({{"instance_group", i}, {"gpus"}}, field + ".gpus",
                   "GPU " + std::to_string(gpu) + " does not exist: this machine has " +
                       std::to_string(gpus.count) + " GPU" + (gpus.count == 1 ? "" : "s") +
                       " (0.." + std::to_string(gpus.count - 1) + ")");
  }
  return ConfigErrorsStatus(check.TakeErrors());
}

std::vector<std::string> ModelConfigErrors(const inference::ModelConfig& config,
                                           const std::string& model_name,
                                           const ConfigLocator& locator, ConfigStage stage) {
  Checker check(model_name, locator);
  const bool final = stage == ConfigStage::kFinal;
  if (config.name() != model_name)
    check.Fail({{"name"}}, "name",
               "config names the model '" + config.name() + "' but it lives in directory '" +
                   model_name + "'; they must match");
  if (!config.runtime().empty()) {
    const std::string& r = config.runtime();
    if (r.find('/') != std::string::npos || r.find('\\') != std::string::npos ||
        r.find("..") != std::string::npos)
      check.Fail({{"runtime"}}, "runtime",
                 "backend library name '" + r + "' escapes the backend directory");
    else
      check.Fail({{"runtime"}}, "runtime",
                 "unable to find backend library '" + r +
                     "': Nereid's backends are chosen by 'backend' or 'platform' alone; leave "
                     "'runtime' out");
  }
  if (config.max_batch_size() < 0)
    check.Fail({{"max_batch_size"}}, "max_batch_size",
               "must be >= 0, got " + std::to_string(config.max_batch_size()));
  if (final && config.input_size() == 0)
    check.Fail({}, "input", "the model has no inputs (and none could be auto-completed)");
  if (final && config.output_size() == 0)
    check.Fail({}, "output", "the model has no outputs (and none could be auto-completed)");

  std::set<std::string> names;
  for (int i = 0; i < config.input_size(); ++i) {
    check.CheckTensor("input", i, config.input(i), config.max_batch_size(), final);
    if (!config.input(i).name().empty() && !names.insert(config.input(i).name()).second)
      check.Fail({{"input", i}}, "input[" + std::to_string(i) + "].name",
                 "input '" + config.input(i).name() + "' is declared twice");
  }
  names.clear();
  for (int i = 0; i < config.output_size(); ++i) {
    check.CheckTensor("output", i, config.output(i), config.max_batch_size(), final);
    if (!config.output(i).name().empty() && !names.insert(config.output(i).name()).second)
      check.Fail({{"output", i}}, "output[" + std::to_string(i) + "].name",
                 "output '" + config.output(i).name() + "' is declared twice");
  }
  check.CheckBatchIo(config);
  if (config.has_dynamic_batching()) check.CheckDynamicBatching(config);
  if (config.has_sequence_batching()) check.CheckSequenceBatching(config);
  if (config.has_ensemble_scheduling() && config.platform() != "ensemble")
    check.Fail({{"ensemble_scheduling"}}, "ensemble_scheduling",
               "ensemble scheduling cannot be set for a model whose platform is not 'ensemble'");
  EnsembleStructureErrors(
      config, [&](const Path& path, const std::string& field, const std::string& message) {
        check.Fail(path, field, message);
      });
  if (config.has_model_metrics()) check.CheckModelMetrics(config);
  if (config.has_response_cache()) check.CheckResponseCache(config);
  check.CheckInstanceGroups(config);
  if (config.version_policy().has_specific() &&
      config.version_policy().specific().versions_size() == 0)
    check.Fail({{"version_policy"}}, "version_policy.specific.versions",
               "a specific version policy must list at least one version");

  // Batch inputs and outputs are made and scattered by the backends that join a batch's tensors
  // themselves (ONNX Runtime's, the native engine's on the CPU, PyTorch's): valid for Triton with
  // the others too, but a model Nereid would serve wrongly there, so refused.
  const std::string& backend = config.backend();
  const std::string& platform = config.platform();
  const bool batches_itself = backend == "onnxruntime" || backend == "pytorch" ||
                              platform == "onnxruntime_onnx" || platform == "pytorch_libtorch";
  const std::string elsewhere =
      " are served by the onnxruntime and pytorch backends only (this model's backend: '" +
      (backend.empty() ? platform : backend) + "')";
  if (config.batch_input_size() > 0 && !batches_itself)
    check.Fail({{"batch_input"}}, "batch_input",
               "batch inputs (tensors the server adds to each batch)" + elsewhere);
  if (config.batch_output_size() > 0 && !batches_itself)
    check.Fail({{"batch_output"}}, "batch_output",
               "batch outputs (scattered by input shape)" + elsewhere);
  return check.TakeErrors();
}

std::string DecoupledCacheError(const std::string& model_name) {
  return "Response Cache does not currently support model " + model_name +
         " with 'decoupled' transaction policy. Please disable the response cache.";
}

Status ConfigErrorsStatus(const std::vector<std::string>& errors) {
  if (errors.empty()) return Status::Ok();
  std::string message = errors[0];
  for (size_t i = 1; i < errors.size(); ++i) message += "; " + errors[i];
  return InvalidArgument(message);
}

Status ValidateModelConfig(const inference::ModelConfig& config, const std::string& model_name,
                           const ConfigLocator& locator, ConfigStage stage) {
  return ConfigErrorsStatus(ModelConfigErrors(config, model_name, locator, stage));
}

}  // namespace nereid
