#include "graph.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <chrono>
#include <cmath>
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
GraphBody::GraphBody() = default;
GraphBody::~GraphBody() = default;

int GraphBody::ValueId(const std::string& name) {
  auto [it, inserted] = value_ids.emplace(name, static_cast<int>(value_ids.size()));
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
  g->body_.model = std::move(model);
  const onnx::GraphProto& graph = g->body_.model->graph();
  for (const auto& op : g->body_.model->opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx") g->body_.opset = op.version();

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
    const int id = g->body_.ValueId(init.name());
    if (g->body_.constants.size() <= static_cast<size_t>(id)) g->body_.constants.resize(id + 1);
    g->body_.constants[id] = std::move(t);
    g->body_.initializer_names.insert(init.name());
  }
  const auto& declared = options.declared_inputs;
  for (const auto& input : graph.input()) {
    const int id = g->body_.ValueId(input.name());
    if (!declared.empty() && g->body_.initializer_names.count(input.name()) &&
        std::find(declared.begin(), declared.end(), input.name()) == declared.end())
      continue;  // a weight no request can replace
    g->body_.inputs.push_back(ToValueInfo(input));
    if (g->body_.initializer_names.count(input.name())) {
      g->body_.inputs.back().has_default = true;
      g->body_.overridable.insert(id);
    }
  }
  for (const auto& output : graph.output()) g->body_.outputs.push_back(ToValueInfo(output));

  for (const auto& node : graph.node()) {
    Node n{OpNode(&node, g->body_.opset), FindOp(node.op_type()), {}, {}};
    for (const auto& name : node.input())
      n.inputs.push_back(name.empty() ? -1 : g->body_.ValueId(name));
    for (const auto& name : node.output())
      n.outputs.push_back(name.empty() ? -1 : g->body_.ValueId(name));
    g->body_.nodes.push_back(std::move(n));
  }
  g->body_.constants.resize(g->body_.value_ids.size());
  // Attributes (and constant inputs) an op cannot run exactly: refused here, naming the node.
  for (const Node& node : g->body_.nodes) {
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
      constants.push_back(g->body_.IsConstant(id) ? &g->body_.constants[id] : nullptr);
    RETURN_IF_ERROR(def->check(node.op, constants));
  }
  RETURN_IF_ERROR(RunPasses(g->body_, options));
  return g;
}

int GraphBody::AddValue(const std::string& hint, Tensor t) {
  std::string name = "nereid::" + hint;
  while (value_ids.count(name)) name += "'";
  const int id = ValueId(name);
  constants.resize(value_ids.size());
  constants[id] = std::move(t);
  return id;
}

GraphNode GraphBody::MakeNode(const std::string& op_type, const std::string& name, OpFn fn,
                              std::vector<int> inputs, std::vector<int> outputs) {
  auto proto = std::make_unique<onnx::NodeProto>();
  proto->set_op_type(op_type);
  proto->set_name(name);
  GraphNode n{OpNode(proto.get(), opset), fn, std::move(inputs), std::move(outputs)};
  made_nodes.push_back(std::move(proto));
  return n;
}

std::vector<int> GraphBody::Readers() {
  std::vector<int> readers(value_ids.size(), 0);
  for (const GraphNode& node : nodes)
    for (int id : node.inputs)
      if (id >= 0) ++readers[id];
  for (const auto& out : outputs) {
    const int id = ValueId(out.name);
    if (static_cast<size_t>(id) >= readers.size()) readers.resize(id + 1, 0);
    ++readers[id];
  }
  constants.resize(value_ids.size());
  return readers;
}

Status Graph::Run(const std::vector<std::pair<std::string, Tensor>>& feeds,
                  const std::vector<std::string>& fetch, std::vector<Tensor>* results,
                  std::vector<double>* node_ns, const Observer* observe) const {
  RecycleScope recycle;  // (intermediate values freed here are reused by the next run)
  std::vector<Tensor> values(body_.constants.size());
  for (size_t i = 0; i < body_.constants.size(); ++i)
    if (body_.constants[i].valid()) values[i] = body_.constants[i];
  for (const auto& [name, tensor] : feeds) {
    auto it = body_.value_ids.find(name);
    if (it == body_.value_ids.end())
      return InvalidArgument("the ONNX graph has no input '" + name + "'");
    // A feed of another rank than the graph declares would fail inside some op, naming that op.
    for (const backend::ValueInfo& declared : body_.inputs)
      if (declared.name == name && declared.has_shape &&
          declared.dims.size() != tensor.shape().size())
        return InvalidArgument("input '" + name + "' has " + std::to_string(tensor.shape().size()) +
                               " dimensions; the ONNX graph declares " +
                               std::to_string(declared.dims.size()));
    values[it->second] = tensor;
  }
  std::vector<const Tensor*> in;
  std::vector<Tensor> out;
  for (size_t i = 0; i < body_.nodes.size(); ++i) {
    const Node& node = body_.nodes[i];
    in.clear();
    for (int id : node.inputs) {
      if (id >= 0 && !values[id].valid())
        return Internal("node '" + node.op.name() + "' (" + node.op.op_type() +
                        ") reads a value that was never produced");
      in.push_back(id >= 0 ? &values[id] : nullptr);
    }
    out.assign(node.outputs.size(), Tensor());
    // A fused residual read for the last time here, by this node alone, lends its storage to the
    // output: a convolution reads each residual value just before it writes that same place, so
    // it writes in place (its lines already in cache and owned, not read again for the store;
    // ResNet-50's 64 -> 256 expansions at batch 8 move 25 MB less each). Ops that cannot use it
    // replace out[0].
    if (node.op.residual && node.inputs.size() == 4 && !node.outputs.empty()) {
      const int rid = node.inputs[3];
      if (rid >= 0 && body_.last_use[rid] == static_cast<int>(i) && !body_.keep[rid] &&
          std::count(node.inputs.begin(), node.inputs.end(), rid) == 1 && values[rid].sole_owner())
        out[0] = values[rid];
    }
    if (observe != nullptr) (*observe)(node, in);
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
      if (id >= 0 && body_.last_use[id] == static_cast<int>(i) && !body_.keep[id])
        values[id] = Tensor();
  }
  results->clear();
  for (const auto& name : fetch) {
    auto it = body_.value_ids.find(name);
    if (it == body_.value_ids.end() || !values[it->second].valid())
      return InvalidArgument("the ONNX graph produced no output '" + name + "'");
    results->push_back(values[it->second]);
  }
  return Status::Ok();
}

StatusOr<Int8Calibration> Graph::MeasureInt8Inputs(
    const std::vector<std::pair<std::string, Tensor>>& feeds, std::vector<Tensor>* outputs) const {
  std::vector<std::string> names(body_.value_ids.size());
  for (const auto& [name, id] : body_.value_ids)
    if (id >= 0 && static_cast<size_t>(id) < names.size()) names[id] = name;
  Int8Calibration stats;
  const Observer observe = [&](const Node& node, const std::vector<const Tensor*>& in) {
    const std::string& op = node.op.op_type();
    const bool conv = op == "Conv" && node.op.conv != nullptr && node.op.nhwc &&
                      node.op.AttrInt("group", 1) == 1 && !node.op.conv->weights.depthwise() &&
                      in.size() > 1 && in[1] != nullptr;
    const bool gemm = (op == "MatMul" || (op == "Gemm" && node.op.AttrInt("transA", 0) == 0)) &&
                      node.op.packed_b != nullptr;
    if ((!conv && !gemm) || in.empty() || in[0] == nullptr || node.outputs.empty() ||
        node.outputs[0] < 0 || in[0]->type() != DataType::kFp32 || in[0]->shape().size() < 2)
      return;
    const Tensor& x = *in[0];
    const float* v = x.data<float>();
    const int64_t channels = x.shape().back(), pixels = channels > 0 ? x.elements() / channels : 0;
    if (channels <= 0 || pixels <= 0) return;
    Int8InputStats s;
    s.range.assign(channels, 0.f);
    for (int64_t p = 0; p < pixels; ++p)
      for (int64_t c = 0; c < channels; ++c)  // (NaN skipped)
        s.range[c] = std::max(s.range[c], std::fabs(v[p * channels + c]));
    int64_t rows = pixels;
    kernels::Conv2dGeometry g;
    if (conv) {  // the windows: the geometry as the Conv op finds it
      const std::vector<int64_t>& ws = in[1]->shape();
      auto spatial = SpatialOf(node.op, x);
      if (!spatial.ok() || (ws.size() != 3 && ws.size() != 4) || ws[1] != channels) return;
      const int64_t kh = ws.size() == 4 ? ws[2] : 1, kw = ws.back();
      int64_t pad_end[2];
      auto geometry = WindowGeometry(node.op, *spatial, kh, kw, false, pad_end);
      if (!geometry.ok()) return;
      g = *geometry;
      g.c_out = ws[0];
      rows = g.n * g.oh * g.ow;
      s.depth = kh * kw * channels;
    } else {
      s.depth = channels;
    }
    const int64_t samples = std::min(rows, Int8InputStats::kSampleRows);
    s.rows.resize(static_cast<size_t>(samples * s.depth));
    for (int64_t r = 0; r < samples; ++r) {
      const int64_t row = r * rows / samples;
      float* out = s.rows.data() + r * s.depth;
      if (conv)
        kernels::ConvWindow(g, v, 0, row, out);
      else
        std::copy_n(v + row * channels, channels, out);
    }
    stats[names[node.outputs[0]]] = std::move(s);
  };
  std::vector<std::string> fetch;
  for (const ValueInfo& out : body_.outputs) fetch.push_back(out.name);
  std::vector<Tensor> results;
  RETURN_IF_ERROR(Run(feeds, fetch, outputs != nullptr ? outputs : &results, nullptr, &observe));
  return stats;
}

StatusOr<std::shared_ptr<const Int8Calibration>> CalibrateInt8(
    const std::string& path, GraphOptions options,
    const std::vector<std::pair<std::string, Tensor>>& feeds, std::vector<Tensor>* outputs) {
  options.int8_weights = false;
  options.int8_calibration = nullptr;
  options.fuse_depthwise_blocks = false;
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, Graph::Load(path, options));
  ASSIGN_OR_RETURN(Int8Calibration stats, graph->MeasureInt8Inputs(feeds, outputs));
  return std::make_shared<const Int8Calibration>(std::move(stats));
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
