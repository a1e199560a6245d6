#include "config/config_validator.h"

#include <set>

namespace nereid {
namespace {

class Checker {
 public:
  Checker(const std::string& model, const ConfigLocator& locator)
      : model_(model), locator_(locator) {}

  Status Fail(const std::vector<ConfigLocator::Step>& path, const std::string& field,
              const std::string& message) const {
    return InvalidArgument("model '" + model_ + "': " + locator_.Where(path) + ": field '" + field +
                           "': " + message);
  }

  template <typename Tensor>
  Status CheckTensor(const char* kind, int index, const Tensor& t) const {
    const std::string where = std::string(kind) + "[" + std::to_string(index) + "]";
    const std::vector<ConfigLocator::Step> at = {{kind, index}};
    if (t.name().empty())
      return Fail(at, where + ".name", "every " + std::string(kind) + " needs a name");
    if (t.data_type() == inference::TYPE_INVALID)
      return Fail(
          at, where + ".data_type",
          std::string(kind) + " '" + t.name() + "' needs a data_type (for example TYPE_FP32)");
    if (t.dims_size() == 0 && !t.has_reshape())
      return Fail(at, where + ".dims",
                  std::string(kind) + " '" + t.name() + "' must specify 'dims'");
    for (int d = 0; d < t.dims_size(); ++d) {
      if (t.dims(d) == -1 || t.dims(d) >= 1) continue;
      return Fail({{kind, index}, {"dims", d}}, where + ".dims",
                  std::string(kind) + " '" + t.name() + "' has dims " +
                      ShapeString(t.dims().data(), t.dims().size()) +
                      ": each dimension must be >= 1, or -1 for a variable size");
    }
    if (t.has_reshape()) RETURN_IF_ERROR(CheckReshape(kind, index, t));
    return Status::Ok();
  }

 private:
  // A reshape only re-labels the same elements: the variable dimensions (-1) must match in number,
  // and the fixed dimensions between them must hold the same number of elements (Triton's rule).
  template <typename Tensor>
  Status CheckReshape(const char* kind, int index, const Tensor& t) const {
    const std::vector<ConfigLocator::Step> at = {{kind, index}, {"reshape"}};
    const std::string field = std::string(kind) + "[" + std::to_string(index) + "].reshape";
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
    const auto& shape = t.reshape().shape();
    const std::vector<int64_t> from = segments(t.dims(), &bad);
    const std::vector<int64_t> to = segments(shape, &bad);
    const std::string both = std::string(kind) + " '" + t.name() + "' has dims " +
                             ShapeString(t.dims().data(), t.dims().size()) + " and reshape " +
                             ShapeString(shape.data(), shape.size());
    if (bad)
      return Fail(at, field, both + ": each dimension must be >= 1, or -1 for a variable size");
    if (from != to)
      return Fail(at, field,
                  both +
                      ", which hold different numbers of elements: a reshape must keep every "
                      "element (and the same variable dimensions)");
    return Status::Ok();
  }

  const std::string& model_;
  const ConfigLocator& locator_;
};

}  // namespace

void FillConfigDefaults(const std::string& model_name, inference::ModelConfig* config) {
  if (config->name().empty()) config->set_name(model_name);
  if (!config->has_version_policy())
    config->mutable_version_policy()->mutable_latest()->set_num_versions(1);
  if (config->version_policy().has_latest() &&
      config->version_policy().latest().num_versions() == 0)
    config->mutable_version_policy()->mutable_latest()->set_num_versions(1);
  if (config->instance_group_size() == 0) {
    auto* group = config->add_instance_group();
    group->set_kind(inference::ModelInstanceGroup::KIND_CPU);
    group->set_count(1);
  }
  for (int i = 0; i < config->instance_group_size(); ++i) {
    auto* group = config->mutable_instance_group(i);
    if (group->count() == 0) group->set_count(1);
    if (group->name().empty()) group->set_name(model_name + "_" + std::to_string(i));
  }
}

Status ValidateModelConfig(const inference::ModelConfig& config, const std::string& model_name,
                           const ConfigLocator& locator, ConfigStage stage) {
  Checker check(model_name, locator);
  if (config.name() != model_name)
    return check.Fail({{"name"}}, "name",
                      "config names the model '" + config.name() + "' but it lives in directory '" +
                          model_name + "'; they must match");
  if (config.max_batch_size() < 0)
    return check.Fail({{"max_batch_size"}}, "max_batch_size",
                      "must be >= 0, got " + std::to_string(config.max_batch_size()));
  if (stage == ConfigStage::kFinal && config.input_size() == 0)
    return check.Fail({}, "input", "the model has no inputs (and none could be auto-completed)");
  if (stage == ConfigStage::kFinal && config.output_size() == 0)
    return check.Fail({}, "output", "the model has no outputs (and none could be auto-completed)");

  std::set<std::string> names;
  for (int i = 0; i < config.input_size(); ++i) {
    RETURN_IF_ERROR(check.CheckTensor("input", i, config.input(i)));
    if (!names.insert(config.input(i).name()).second)
      return check.Fail({{"input", i}}, "input[" + std::to_string(i) + "].name",
                        "input '" + config.input(i).name() + "' is declared twice");
  }
  names.clear();
  for (int i = 0; i < config.output_size(); ++i) {
    RETURN_IF_ERROR(check.CheckTensor("output", i, config.output(i)));
    if (!names.insert(config.output(i).name()).second)
      return check.Fail({{"output", i}}, "output[" + std::to_string(i) + "].name",
                        "output '" + config.output(i).name() + "' is declared twice");
  }

  if (config.has_dynamic_batching()) {
    const auto& db = config.dynamic_batching();
    for (int i = 0; i < db.preferred_batch_size_size(); ++i) {
      const int32_t p = db.preferred_batch_size(i);
      if (p < 1 || p > config.max_batch_size())
        return check.Fail({{"dynamic_batching"}, {"preferred_batch_size", i}},
                          "dynamic_batching.preferred_batch_size",
                          "preferred batch size " + std::to_string(p) +
                              " must be between 1 and max_batch_size (" +
                              std::to_string(config.max_batch_size()) + ")");
    }
    if (db.priority_levels() > 0 &&
        (db.default_priority_level() < 1 || db.default_priority_level() > db.priority_levels()))
      return check.Fail(
          {{"dynamic_batching"}, {"default_priority_level"}},
          "dynamic_batching.default_priority_level",
          "must be between 1 and priority_levels (" + std::to_string(db.priority_levels()) + ")");
  }

  for (int i = 0; i < config.instance_group_size(); ++i) {
    const auto& group = config.instance_group(i);
    const std::string field = "instance_group[" + std::to_string(i) + "]";
    if (group.count() < 1)
      return check.Fail({{"instance_group", i}, {"count"}}, field + ".count", "must be >= 1");
    if (group.count() > kMaxInstancesPerGroup)
      return check.Fail({{"instance_group", i}, {"count"}}, field + ".count",
                        std::to_string(group.count()) +
                            " instances (one thread each) is over the "
                            "limit of " +
                            std::to_string(kMaxInstancesPerGroup) + " per group");
    if (group.kind() == inference::ModelInstanceGroup::KIND_GPU)
      return check.Fail({{"instance_group", i}, {"kind"}}, field + ".kind",
                        "KIND_GPU instances are not available in this build (no GPU support yet); "
                        "use KIND_CPU or KIND_AUTO");
    if ((group.kind() == inference::ModelInstanceGroup::KIND_CPU ||
         group.kind() == inference::ModelInstanceGroup::KIND_MODEL) &&
        group.gpus_size() > 0)
      return check.Fail({{"instance_group", i}, {"gpus"}}, field + ".gpus",
                        "'gpus' may only be given for KIND_GPU or KIND_AUTO groups");
  }

  if (config.model_transaction_policy().decoupled())
    return check.Fail({{"model_transaction_policy"}, {"decoupled"}},
                      "model_transaction_policy.decoupled",
                      "decoupled models (several responses per request) are not supported yet; "
                      "a model that needs it cannot be served");

  if (config.version_policy().has_specific() &&
      config.version_policy().specific().versions_size() == 0)
    return check.Fail({{"version_policy"}}, "version_policy.specific.versions",
                      "a specific version policy must list at least one version");
  return Status::Ok();
}

}  // namespace nereid
