#include "graph.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "cpu/parallel.h"
#include "ops/conv.h"

namespace nereid::native {
namespace {

ValueInfo ToValueInfo(const onnx::ValueInfoProto& v) {
  ValueInfo info;
  info.name = v.name();
  if (v.type().has_tensor_type()) {
    info.type = FromOnnxType(v.type().tensor_type().elem_type());
    info.has_shape = v.type().tensor_type().has_shape();
    for (const auto& d : v.type().tensor_type().shape().dim())
      info.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
  }
  return info;
}

}  // namespace

Graph::~Graph() = default;

int Graph::ValueId(const std::string& name) {
  auto [it, inserted] = value_ids_.emplace(name, static_cast<int>(value_ids_.size()));
  return it->second;
}

StatusOr<std::unique_ptr<Graph>> Graph::Load(const std::string& path, GraphOptions options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open ONNX model file " + path);
  auto model = std::make_unique<onnx::ModelProto>();
  if (!model->ParseFromIstream(&in)) return InvalidArgument("cannot parse ONNX model file " + path);
  return FromProto(std::move(model), options);
}

StatusOr<std::unique_ptr<Graph>> Graph::FromProto(std::unique_ptr<onnx::ModelProto> model,
                                                  GraphOptions options) {
  std::unique_ptr<Graph> g(new Graph());
  g->model_ = std::move(model);
  const onnx::GraphProto& graph = g->model_->graph();
  for (const auto& op : g->model_->opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx") g->opset_ = op.version();

  // Refused at load, not at the first request: a model is ready only if what it accepts can run.
  std::set<std::string> string_inputs;
  for (const auto& input : graph.input())
    if (input.type().tensor_type().elem_type() == onnx::TensorProto::STRING)
      string_inputs.insert(input.name());
  std::set<std::string> unsupported;
  for (const auto& node : graph.node()) {
    const bool default_domain = node.domain().empty() || node.domain() == "ai.onnx";
    if (!default_domain || FindOpDef(node.op_type()) == nullptr)
      unsupported.insert(default_domain ? node.op_type() : node.domain() + "." + node.op_type());
    if (default_domain && node.op_type() == "Cast") {
      for (const auto& attr : node.attribute())
        if (attr.name() == "to" && attr.i() == onnx::TensorProto::STRING)
          unsupported.insert("Cast to STRING");
      if (node.input_size() > 0 && string_inputs.count(node.input(0)))
        unsupported.insert("Cast from STRING");
    }
  }
  if (!unsupported.empty()) {
    std::string list;
    for (const auto& op : unsupported) list += (list.empty() ? "" : ", ") + op;
    return Unsupported("the native engine does not support these ops: " + list);
  }

  for (const auto& init : graph.initializer()) {
    ASSIGN_OR_RETURN(Tensor t, TensorFromProto(init));
    const int id = g->ValueId(init.name());
    if (g->constants_.size() <= static_cast<size_t>(id)) g->constants_.resize(id + 1);
    g->constants_[id] = std::move(t);
    g->initializer_names_.insert(init.name());
  }
  const auto& declared = options.declared_inputs;
  for (const auto& input : graph.input()) {
    const int id = g->ValueId(input.name());
    if (!declared.empty() && g->initializer_names_.count(input.name()) &&
        std::find(declared.begin(), declared.end(), input.name()) == declared.end())
      continue;  // a weight no request can replace
    g->inputs_.push_back(ToValueInfo(input));
    if (g->initializer_names_.count(input.name())) {
      g->inputs_.back().has_default = true;
      g->overridable_.insert(id);
    }
  }
  for (const auto& output : graph.output()) g->outputs_.push_back(ToValueInfo(output));

  for (const auto& node : graph.node()) {
    Node n{OpNode(&node, g->opset_), FindOp(node.op_type()), {}, {}};
    for (const auto& name : node.input()) n.inputs.push_back(name.empty() ? -1 : g->ValueId(name));
    for (const auto& name : node.output())
      n.outputs.push_back(name.empty() ? -1 : g->ValueId(name));
    g->nodes_.push_back(std::move(n));
  }
  g->constants_.resize(g->value_ids_.size());
  // Attributes (and constant inputs) an op cannot run exactly: refused here, naming the node.
  for (const Node& node : g->nodes_) {
    const OpDef* def = FindOpDef(node.op.op_type());
    if (def == nullptr) continue;
    int outputs = 0;
    for (int id : node.outputs) outputs += id >= 0;
    if (outputs > def->max_outputs)
      return node.op.Refuse("computes " + std::to_string(def->max_outputs) +
                            " output(s); the node asks for " + std::to_string(outputs));
    if (def->check == nullptr) continue;
    std::vector<const Tensor*> constants;
    for (int id : node.inputs)
      constants.push_back(g->IsConstant(id) ? &g->constants_[id] : nullptr);
    RETURN_IF_ERROR(def->check(node.op, constants));
  }
  RETURN_IF_ERROR(g->RunPasses(options));
  return g;
}

int Graph::AddValue(const std::string& hint, Tensor t) {
  std::string name = "nereid::" + hint;
  while (value_ids_.count(name)) name += "'";
  const int id = ValueId(name);
  constants_.resize(value_ids_.size());
  constants_[id] = std::move(t);
  return id;
}

Graph::Node Graph::MakeNode(const std::string& op_type, const std::string& name, OpFn fn,
                            std::vector<int> inputs, std::vector<int> outputs) {
  auto proto = std::make_unique<onnx::NodeProto>();
  proto->set_op_type(op_type);
  proto->set_name(name);
  Node n{OpNode(proto.get(), opset_), fn, std::move(inputs), std::move(outputs)};
  made_nodes_.push_back(std::move(proto));
  return n;
}

std::vector<int> Graph::Readers() {
  std::vector<int> readers(value_ids_.size(), 0);
  for (const Node& node : nodes_)
    for (int id : node.inputs)
      if (id >= 0) ++readers[id];
  for (const auto& out : outputs_) {
    const int id = ValueId(out.name);
    if (static_cast<size_t>(id) >= readers.size()) readers.resize(id + 1, 0);
    ++readers[id];
  }
  constants_.resize(value_ids_.size());
  return readers;
}

Status Graph::Run(const std::vector<std::pair<std::string, Tensor>>& feeds,
                  const std::vector<std::string>& fetch, std::vector<Tensor>* results,
                  std::vector<double>* node_ns) const {
  RecycleScope recycle;  // (intermediate values freed here are reused by the next run)
  std::vector<Tensor> values(constants_.size());
  for (size_t i = 0; i < constants_.size(); ++i)
    if (constants_[i].valid()) values[i] = constants_[i];
  for (const auto& [name, tensor] : feeds) {
    auto it = value_ids_.find(name);
    if (it == value_ids_.end())
      return InvalidArgument("the ONNX graph has no input '" + name + "'");
    values[it->second] = tensor;
  }
  std::vector<const Tensor*> in;
  std::vector<Tensor> out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& node = nodes_[i];
    in.clear();
    for (int id : node.inputs) {
      if (id >= 0 && !values[id].valid())
        return Internal("node '" + node.op.name() + "' (" + node.op.op_type() +
                        ") reads a value that was never produced");
      in.push_back(id >= 0 ? &values[id] : nullptr);
    }
    out.assign(node.outputs.size(), Tensor());
    const auto start = node_ns != nullptr ? std::chrono::steady_clock::now()
                                          : std::chrono::steady_clock::time_point();
    RETURN_IF_ERROR(node.fn(node.op, in, out));
    if (node_ns != nullptr && i < node_ns->size())
      (*node_ns)[i] +=
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
              .count();
    for (size_t o = 0; o < node.outputs.size(); ++o)
      if (node.outputs[o] >= 0) values[node.outputs[o]] = std::move(out[o]);
    for (int id : node.inputs)
      if (id >= 0 && last_use_[id] == static_cast<int>(i) && !keep_[id]) values[id] = Tensor();
  }
  results->clear();
  for (const auto& name : fetch) {
    auto it = value_ids_.find(name);
    if (it == value_ids_.end() || !values[it->second].valid())
      return InvalidArgument("the ONNX graph produced no output '" + name + "'");
    results->push_back(values[it->second]);
  }
  return Status::Ok();
}

Status Graph::RunRows(const std::vector<std::pair<std::string, Tensor>>& feeds,
                      const std::vector<std::string>& fetch, std::vector<Tensor>* results) const {
  const int64_t rows =
      feeds.empty() || feeds[0].second.shape().empty() ? 1 : feeds[0].second.shape()[0];
  for (const auto& [name, t] : feeds)
    if (t.type() == DataType::kBytes || t.shape().empty() || t.shape()[0] != rows)
      return Run(feeds, fetch, results);
  const int threads = kernels::ParallelThreads();
  if (rows <= 1 || (threads > 1 && rows < threads)) return Run(feeds, fetch, results);
  std::vector<std::vector<Tensor>> outs(static_cast<size_t>(rows));
  std::vector<Status> failed(static_cast<size_t>(rows), Status::Ok());
  // One row per index: across the team (each row's kernels then run inline on its thread), or
  // in turn without one.
  kernels::ParallelFor(rows, [&](int64_t r) {
    std::vector<std::pair<std::string, Tensor>> row(feeds.size());
    for (size_t i = 0; i < feeds.size(); ++i) {
      const Tensor& t = feeds[i].second;
      std::vector<int64_t> shape = t.shape();
      shape[0] = 1;
      const size_t bytes = t.bytes() / static_cast<size_t>(rows);
      row[i] = {feeds[i].first, Tensor::Borrow(t.type(), shape, t.raw() + r * bytes, bytes)};
    }
    failed[r] = Run(row, fetch, &outs[r]);
  });
  for (const Status& s : failed) RETURN_IF_ERROR(s);
  results->clear();
  for (size_t o = 0; o < fetch.size(); ++o) {
    const Tensor& first = outs[0][o];
    if (first.shape().empty() || first.shape()[0] != 1 || first.type() == DataType::kBytes)
      return Internal("output '" + fetch[o] + "' has no row per input row");
    std::vector<int64_t> shape = first.shape();
    shape[0] = rows;
    Tensor joined = Tensor::Uninitialized(first.type(), shape);
    for (int64_t r = 0; r < rows; ++r) {
      const Tensor& part = outs[r][o];
      if (part.shape() != first.shape() || part.type() != first.type())
        return Internal("output '" + fetch[o] + "' changed its shape between rows");
      std::memcpy(joined.mutable_raw() + r * part.bytes(), part.raw(), part.bytes());
    }
    results->push_back(std::move(joined));
  }
  return Status::Ok();
}

}  // namespace nereid::native
