#include "graph.h"

#include <onnx/onnx_pb.h>

#include <fstream>
#include <set>
#include <sstream>

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
    if (!default_domain || FindOp(node.op_type()) == nullptr)
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

  std::set<std::string> initializer_names;
  for (const auto& init : graph.initializer()) {
    ASSIGN_OR_RETURN(Tensor t, TensorFromProto(init));
    const int id = g->ValueId(init.name());
    if (g->constants_.size() <= static_cast<size_t>(id)) g->constants_.resize(id + 1);
    g->constants_[id] = std::move(t);
    initializer_names.insert(init.name());
  }
  std::set<int> overridable;  // value ids of inputs with a default
  for (const auto& input : graph.input()) {
    const int id = g->ValueId(input.name());
    g->inputs_.push_back(ToValueInfo(input));
    if (initializer_names.count(input.name())) {
      g->inputs_.back().has_default = true;
      overridable.insert(id);
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
  // Constant weights of Gemm/MatMul are packed once, here, into the GEMM's panel layout.
  for (Node& node : g->nodes_) {
    if (!options.pack_weights) break;
    const std::string& op = node.op.op_type();
    if ((op != "Gemm" && op != "MatMul") || node.inputs.size() < 2 || node.inputs[1] < 0) continue;
    const int id = node.inputs[1];
    if (static_cast<size_t>(id) >= g->constants_.size() || !g->constants_[id].valid()) continue;
    if (overridable.count(id)) continue;  // a request may replace it
    const Tensor& w = g->constants_[id];
    if (w.type() != DataType::kFp32 || w.shape().size() != 2) continue;
    const bool trans = op == "Gemm" && node.op.AttrInt("transB", 0) != 0;
    const int64_t k = trans ? w.shape()[1] : w.shape()[0], n = trans ? w.shape()[0] : w.shape()[1];
    if (options.int8_weights && !(op == "Gemm" && node.op.AttrInt("transA", 0) != 0)) {
      // n x k (a Linear layer's layout), then one scale per output channel.
      std::vector<float> nk;
      const float* rows = w.data<float>();
      if (!trans) {
        nk.resize(static_cast<size_t>(n * k));
        for (int64_t l = 0; l < k; ++l)
          for (int64_t j = 0; j < n; ++j) nk[j * k + l] = rows[l * n + j];
        rows = nk.data();
      }
      g->packed_int8_.push_back(std::make_unique<kernels::PackedInt8W>(rows, n, k, k));
      node.op.packed_int8 = g->packed_int8_.back().get();
      continue;
    }
    g->packed_.push_back(
        std::make_unique<kernels::PackedMatrixB>(trans, k, n, w.data<float>(), w.shape()[1]));
    node.op.packed_b = g->packed_.back().get();
  }
  // Weights now packed and read by no other node keep only their shape: the packed copy serves
  // (SgemmPacked is at least as fast at every batch size). The initializers' bytes were copied
  // into constants_, so the protobuf's copy goes too: a model's weights are held once.
  const std::vector<int> readers = g->Readers();
  for (const Node& node : g->nodes_) {
    if (node.op.packed_b == nullptr && node.op.packed_int8 == nullptr) continue;
    const int id = node.inputs[1];
    if (readers[id] != 1) continue;
    const Tensor& w = g->constants_[id];
    g->constants_[id] = Tensor::Borrow(w.type(), w.shape(), nullptr);
  }
  // (DeleteSubrange frees them; clear() would keep the cleared messages and their buffers for
  // reuse.)
  auto* initializers = g->model_->mutable_graph()->mutable_initializer();
  initializers->DeleteSubrange(0, initializers->size());
  g->FuseActivations(readers);
  const size_t values = g->value_ids_.size();
  g->constants_.resize(values);
  g->last_use_.assign(values, -1);
  g->keep_.assign(values, false);
  for (size_t i = 0; i < g->nodes_.size(); ++i)
    for (int id : g->nodes_[i].inputs)
      if (id >= 0) g->last_use_[id] = static_cast<int>(i);
  for (const auto& out : g->outputs_) g->keep_[g->ValueId(out.name)] = true;
  for (const auto& name : initializer_names) g->keep_[g->value_ids_[name]] = true;
  return g;
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
  return readers;
}

void Graph::FuseActivations(const std::vector<int>& readers) {
  std::vector<bool> fused(nodes_.size(), false);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& gemm = nodes_[i];
    if (gemm.op.op_type() != "Gemm" || gemm.outputs.size() != 1 || gemm.outputs[0] < 0 ||
        readers[gemm.outputs[0]] != 1)
      continue;
    for (size_t j = i + 1; j < nodes_.size(); ++j) {
      Node& act = nodes_[j];
      if (act.inputs.size() != 1 || act.inputs[0] != gemm.outputs[0]) continue;
      const std::string& op = act.op.op_type();
      if (op != "Relu" && op != "Sigmoid") break;
      gemm.op.activation = op == "Relu" ? OpNode::Activation::kRelu : OpNode::Activation::kSigmoid;
      gemm.outputs[0] = act.outputs[0];  // the Gemm now produces the activation's value
      fused[j] = true;
      break;
    }
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (!fused[i]) kept.push_back(std::move(nodes_[i]));
  nodes_ = std::move(kept);
}

Status Graph::Run(const std::vector<std::pair<std::string, Tensor>>& feeds,
                  const std::vector<std::string>& fetch, std::vector<Tensor>* results) const {
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
    RETURN_IF_ERROR(node.fn(node.op, in, out));
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

}  // namespace nereid::native
