#include "config/ensemble_config.h"

#include <algorithm>
#include <map>
#include <set>

#include "common/data_type.h"

namespace nereid {
namespace {

using Path = std::vector<ConfigLocator::Step>;

// The tensors of an ensemble's graph: who writes each, who reads it.
struct Graph {
  std::vector<std::string> tensors;     // in order of first appearance in the steps
  std::map<std::string, int> producer;  // tensor -> step writing it
  std::map<std::string, std::set<int>> readers;
  bool Has(const std::string& t) const { return producer.count(t) > 0 || readers.count(t) > 0; }
};

Graph BuildGraph(const inference::ModelEnsembling& ensembling) {
  Graph g;
  auto seen = [&](const std::string& t) {
    if (!g.Has(t)) g.tensors.push_back(t);
  };
  for (int i = 0; i < ensembling.step_size(); ++i) {
    const auto& step = ensembling.step(i);
    for (const auto& [input, tensor] : step.input_map()) {
      seen(tensor);
      g.readers[tensor].insert(i);
    }
    for (const auto& [output, tensor] : step.output_map()) {
      seen(tensor);
      g.producer.emplace(tensor, i);
    }
  }
  return g;
}

// Tensors that become available from the ensemble's inputs: a step runs once all it reads exists.
std::set<std::string> Reachable(const inference::ModelConfig& config, const Graph& g) {
  std::set<std::string> ready;
  for (const auto& in : config.input()) ready.insert(in.name());
  const auto& steps = config.ensemble_scheduling().step();
  std::vector<bool> ran(steps.size(), false);
  for (bool progress = true; progress;) {
    progress = false;
    for (int i = 0; i < steps.size(); ++i) {
      if (ran[i]) continue;
      bool all = true;
      for (const auto& [input, tensor] : steps[i].input_map()) all = all && ready.count(tensor);
      if (!all) continue;
      ran[i] = progress = true;
      for (const auto& [output, tensor] : steps[i].output_map()) ready.insert(tensor);
    }
  }
  return ready;
}

// A tensor upstream of 'tensor' that nothing writes and that is no ensemble input ("" if none).
std::string Unconnected(const std::string& tensor, const inference::ModelConfig& config,
                        const Graph& g, std::set<std::string>& visited) {
  if (!visited.insert(tensor).second) return "";
  for (const auto& in : config.input())
    if (in.name() == tensor) return "";
  auto p = g.producer.find(tensor);
  if (p == g.producer.end()) return tensor;
  for (const auto& [input, t] : config.ensemble_scheduling().step(p->second).input_map())
    if (std::string found = Unconnected(t, config, g, visited); !found.empty()) return found;
  return "";
}

}  // namespace

void EnsembleStructureErrors(const inference::ModelConfig& config, const ConfigFail& fail) {
  if (config.platform() != "ensemble") return;
  const std::string& e = config.name();
  const std::string quoted = "'" + e + "'";
  if (!config.backend().empty())
    return fail({{"backend"}}, "backend",
                "Ensemble model " + quoted +
                    " must have platform type 'ensemble' and empty "
                    "backend type");
  if (config.instance_group_size() > 0)
    return fail({{"instance_group", 0}}, "instance_group",
                "instance group should not be specified for ensemble " + quoted);
  if (config.has_optimization())
    return fail({{"optimization"}}, "optimization",
                "optimization should not be specified for ensemble " + quoted);
  if (config.model_warmup_size() > 0)
    return fail({{"model_warmup", 0}}, "model_warmup",
                "model_warmup can not be specified for ensemble " + quoted);
  if (!config.has_ensemble_scheduling())
    return fail(
        {}, "ensemble_scheduling",
        "ensemble scheduling must be set for ensemble " + e + " whose platform is ensemble");
  const auto& ensembling = config.ensemble_scheduling();
  if (ensembling.step_size() == 0)
    return fail({{"ensemble_scheduling"}}, "ensemble_scheduling.step",
                "must specify 'step' for ensemble " + quoted);
  std::set<std::string> written;
  for (int i = 0; i < ensembling.step_size(); ++i) {
    const auto& step = ensembling.step(i);
    const Path at = {{"ensemble_scheduling"}, {"step", i}};
    const std::string field = "ensemble_scheduling.step[" + std::to_string(i) + "]";
    // Triton numbers steps from 0 in these messages.
    const std::string in_step = " in step " + std::to_string(i) + " of ensemble " + quoted;
    if (step.model_name().empty())
      return fail(at, field + ".model_name", "must specify 'model_name'" + in_step);
    if (step.input_map().empty())
      return fail(at, field + ".input_map", "must specify 'input_map'" + in_step);
    if (step.output_map().empty())
      return fail(at, field + ".output_map", "must specify 'output_map'" + in_step);
    for (const auto& [output, tensor] : step.output_map())
      if (!written.insert(tensor).second)
        return fail(at, field + ".output_map",
                    "ensemble tensor '" + tensor +
                        "' can appear in an output map only once for ensemble " + quoted +
                        " step " + std::to_string(i));
  }
  const Graph g = BuildGraph(ensembling);
  for (int i = 0; i < config.input_size(); ++i)
    if (!g.readers.count(config.input(i).name()))
      return fail(
          {{"input", i}}, "input[" + std::to_string(i) + "]",
          "ensemble input '" + config.input(i).name() + "' for ensemble " + e + "' is not used");
  for (int i = 0; i < config.output_size(); ++i)
    if (!g.Has(config.output(i).name()))
      return fail(
          {{"output", i}}, "output[" + std::to_string(i) + "]",
          "ensemble output '" + config.output(i).name() + "' for ensemble " + e + "' is not used");
  const std::set<std::string> ready = Reachable(config, g);
  std::set<std::string> outputs;
  for (int i = 0; i < config.output_size(); ++i) {
    const std::string& name = config.output(i).name();
    outputs.insert(name);
    if (ready.count(name)) continue;
    std::set<std::string> visited;
    const std::string root = Unconnected(name, config, g, visited);
    return fail({{"output", i}}, "output[" + std::to_string(i) + "]",
                "output '" + name + "' for ensemble " + quoted + " is not written" +
                    (root.empty() ? std::string()
                                  : ": at least one of its depending tensors, '" + root +
                                        "', is not connected"));
  }
  for (const std::string& t : g.tensors) {
    if (outputs.count(t)) continue;
    if (ready.count(t) && g.readers.count(t)) continue;
    return fail({{"ensemble_scheduling"}}, "ensemble_scheduling.step",
                "ensemble tensor '" + t + "' is unused in ensemble " + quoted);
  }
}

std::vector<std::string> EnsembleDependencies(const inference::ModelConfig& config) {
  std::vector<std::string> out;
  for (const auto& step : config.ensemble_scheduling().step())
    if (std::find(out.begin(), out.end(), step.model_name()) == out.end())
      out.push_back(step.model_name());
  return out;
}

namespace {

// What one model says an ensemble tensor is: its type and its shape with the batch dimension (-1)
// in front when the model batches.
struct TensorSpec {
  inference::DataType type = inference::TYPE_INVALID;
  std::vector<int64_t> dims, full;
  std::string model;
};

template <typename Tensor>
TensorSpec SpecOf(const Tensor& t, const inference::ModelConfig& model) {
  TensorSpec s;
  s.type = t.data_type();
  s.dims.assign(t.dims().begin(), t.dims().end());
  if (model.max_batch_size() > 0) s.full.push_back(-1);
  s.full.insert(s.full.end(), s.dims.begin(), s.dims.end());
  s.model = model.name();
  return s;
}

}  // namespace

bool DimsMatch(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != -1 && b[i] != -1 && a[i] != b[i]) return false;
  return true;
}

Status CheckEnsembleSteps(const inference::ModelConfig& ensemble,
                          const std::vector<const inference::ModelConfig*>& steps) {
  const std::string in_e = "in ensemble " + ensemble.name() + ", ";
  std::map<std::string, TensorSpec> specs;
  auto infer = [&](const std::string& tensor, const TensorSpec& s) -> Status {
    auto [it, fresh] = specs.emplace(tensor, s);
    if (fresh) return Status::Ok();
    const TensorSpec& first = it->second;
    if (first.type != s.type)
      return InvalidArgument(in_e + "ensemble tensor " + tensor + ": inconsistent data type: " +
                             std::string(ConfigTypeName(first.type)) + " is inferred from model " +
                             first.model + " while " + std::string(ConfigTypeName(s.type)) +
                             " is inferred from model " + s.model);
    // Batching and non-batching models may share a tensor: the dims alone, or the whole shape
    // with the batch dimension, must agree.
    if (!DimsMatch(first.dims, s.dims) && !DimsMatch(first.full, s.full))
      return InvalidArgument(in_e + "ensemble tensor " + tensor +
                             ": inconsistent shape: " + ShapeString(first.full) +
                             " is inferred from model " + first.model + " while " +
                             ShapeString(s.full) + " is inferred from model " + s.model);
    return Status::Ok();
  };
  for (const auto& in : ensemble.input()) RETURN_IF_ERROR(infer(in.name(), SpecOf(in, ensemble)));
  for (const auto& out : ensemble.output())
    RETURN_IF_ERROR(infer(out.name(), SpecOf(out, ensemble)));
  const auto& step_configs = ensemble.ensemble_scheduling().step();
  for (int i = 0; i < step_configs.size() && i < static_cast<int>(steps.size()); ++i) {
    const auto& step = step_configs[i];
    const inference::ModelConfig& m = *steps[i];
    const std::string& name = step.model_name();
    // A model that does not batch takes the ensemble's batch as part of its own shape.
    if (m.max_batch_size() > 0 && ensemble.max_batch_size() > m.max_batch_size())
      return InvalidArgument(
          "ensemble " + ensemble.name() + " allows maximum batch size " +
          std::to_string(ensemble.max_batch_size()) + ", but it contains model " + name +
          " which only allows maximum batch size to be " + std::to_string(m.max_batch_size()));
    for (const auto& kv : step.input_map()) {
      const std::string& input = kv.first;
      const std::string& tensor = kv.second;
      auto spec = std::find_if(m.input().begin(), m.input().end(),
                               [&](const auto& in) { return in.name() == input; });
      if (spec == m.input().end())
        return InvalidArgument(in_e + "ensemble tensor " + tensor +
                               " is mapping to non-existing input " + input + " in model " + name);
      RETURN_IF_ERROR(infer(tensor, SpecOf(*spec, m)));
    }
    for (const auto& in : m.input())
      if (!in.optional() && !step.input_map().contains(in.name()))
        return InvalidArgument(in_e + "input " + in.name() + " in model " + name +
                               " is not mapped to any ensemble tensors");
    for (const auto& kv : step.output_map()) {
      const std::string& output = kv.first;
      const std::string& tensor = kv.second;
      auto spec = std::find_if(m.output().begin(), m.output().end(),
                               [&](const auto& out) { return out.name() == output; });
      if (spec == m.output().end())
        return InvalidArgument(in_e + "ensemble tensor " + tensor +
                               " is mapped from non-existing output " + output + " in model " +
                               name);
      RETURN_IF_ERROR(infer(tensor, SpecOf(*spec, m)));
    }
  }
  // Each tensor's responses come from at most one decoupled step (-1: the request itself); a step,
  // or the ensemble's outputs, fed from two would pair responses that do not belong together.
  std::map<std::string, int> origin;
  for (const auto& in : ensemble.input()) origin[in.name()] = -1;
  auto single = [&](const auto& tensors, int* from) {
    std::set<int> origins;
    for (const auto& [key, tensor] : tensors)
      if (auto it = origin.find(tensor); it != origin.end() && it->second >= 0)
        origins.insert(it->second);
    *from = origins.empty() ? -1 : *origins.begin();
    return origins.size() <= 1;
  };
  std::vector<bool> done(step_configs.size(), false);
  for (bool progress = true; progress;) {
    progress = false;
    for (int i = 0; i < step_configs.size() && i < static_cast<int>(steps.size()); ++i) {
      const auto& step = step_configs[i];
      if (done[i] || !std::all_of(step.input_map().begin(), step.input_map().end(),
                                  [&](const auto& kv) { return origin.count(kv.second) > 0; }))
        continue;
      done[i] = progress = true;
      int from = -1;
      if (!single(step.input_map(), &from))
        return InvalidArgument(in_e + "step of model '" + step.model_name() +
                               "' receives inputs originated from different decoupled models");
      if (steps[i]->model_transaction_policy().decoupled()) from = i;
      for (const auto& [output, tensor] : step.output_map()) origin[tensor] = from;
    }
  }
  std::map<std::string, std::string> outputs;
  for (const auto& out : ensemble.output()) outputs[out.name()] = out.name();
  if (int from = -1; !single(outputs, &from))
    return InvalidArgument(in_e + "step of model '" + ensemble.name() +
                           "' receives inputs originated from different decoupled models");
  return Status::Ok();
}

}  // namespace nereid
