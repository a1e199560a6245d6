// The GPU's normalization family: BatchNormalization standing alone (after no Conv: a per-channel
// multiply and add), LayerNormalization (also the graph passes' fusion of its written-out form),
// LRN across channels (channels-last) and Softmax.
#include <algorithm>
#include <cmath>

#include "gpu_model.h"

namespace nereid::native {
namespace {

// BatchNormalization left standing (not after a Conv): y = x * scale' + shift' per channel.
Status CompileBatchNorm(const Graph& graph, const Graph::Node& node, GpuModel& m,
                        const std::string& who) {
  const OpNode& op = node.op;
  const ValueSpec x = m.values[node.inputs[0]];
  if (node.inputs.size() != 5 || op.AttrInt("training_mode", 0) != 0 || x.dims.empty())
    return Unsupported(who + ": inference BatchNormalization of 5 inputs only on the GPU");
  const int64_t c = x.dims[0];
  std::vector<float> p[4];
  for (int k = 0; k < 4; ++k) {
    const int id = node.inputs[k + 1];
    const Tensor& t = id >= 0 ? graph.constant(id) : Tensor();
    if (!t.valid() || t.type() != DataType::kFp32 || t.elements() != c)
      return Unsupported(who + ": scale, B, mean and var must be " + std::to_string(c) +
                         " constant FP32 values on the GPU");
    p[k] = FloatsOf(t);
  }
  const double eps = op.AttrFloat("epsilon", 1e-5f);
  std::vector<int64_t> per_channel(x.dims.size(), 1);
  per_channel[0] = c;
  Tensor scale = Tensor::Allocate(DataType::kFp32, per_channel);
  Tensor shift = Tensor::Allocate(DataType::kFp32, per_channel);
  for (int64_t i = 0; i < c; ++i) {
    const double k = p[0][i] / std::sqrt(static_cast<double>(p[3][i]) + eps);
    scale.mutable_data<float>()[i] = static_cast<float>(k);
    shift.mutable_data<float>()[i] = static_cast<float>(p[1][i] - p[2][i] * k);
  }
  const int scaled = m.AddValue(ValueSpec{});
  RETURN_IF_ERROR(
      CompileBinary(m, kc::BinaryOp::kMul, {node.inputs[0]}, {-1, &scale}, scaled, who));
  return CompileBinary(m, kc::BinaryOp::kAdd, {scaled}, {-1, &shift}, node.outputs[0], who);
}

// Softmax over the last axis (opset 13 on) or over the axes from 'axis' on (before 13).
Status CompileSoftmax(const Graph::Node& node, GpuModel& m, const std::string& who) {
  const OpNode& op = node.op;
  ValueSpec x = m.values[node.inputs[0]];
  if (x.logical != DataType::kFp32) return Unsupported(who + ": FP32 only on the GPU");
  const int64_t rank = static_cast<int64_t>(x.dims.size()) + 1;
  int64_t axis = op.AttrInt("axis", op.opset() < 13 ? 1 : -1);
  if (axis < 0) axis += rank;
  if (axis < 1 || axis >= rank) return Unsupported(who + ": a softmax over the batch axis");
  int64_t n = 1;
  for (int64_t d = axis - 1; d < rank - 1; ++d) n *= x.dims[d];
  if (op.opset() >= 13 && n != x.dims[axis - 1])
    return Unsupported(who + ": the GPU engine runs Softmax over the last axis");
  Step s;
  s.kind = Step::kSoftmax;
  s.in = InLayout(m, node.inputs[0], false);
  s.k = n, s.outer = x.row_elems / n;
  x.nhwc = false;
  return AddElementwise(m, s, x, node.outputs[0]);
}

// LayerNormalization over the axes from 'axis' on (not the batch), Scale and B constant (one value
// per normalised element, or one in all); Mean and InvStdDev too where the node names them.
Status LayerNorm(const GpuNode& n) {
  ASSIGN_OR_RETURN(ValueSpec x, n.Input(0));
  const OpNode& op = n.node.op;
  if (x.logical != DataType::kFp32) return Unsupported(n.who + ": FP32 only on the GPU");
  if (op.AttrInt("stash_type", 1) != 1)
    return Unsupported(n.who + ": stash_type other than 1 (FP32 statistics)");
  const int64_t rank = static_cast<int64_t>(x.dims.size()) + 1;
  int64_t axis = op.AttrInt("axis", -1);
  if (axis < 0) axis += rank;
  if (axis < 1 || axis >= rank) return Unsupported(n.who + ": a layer norm over the batch axis");
  const int64_t inner = ElementCount(x.dims.data() + axis - 1, rank - axis);
  const float eps = op.AttrFloat("epsilon", 1e-5f);
  if (!(eps >= 0.f) || std::isinf(eps)) return op.Error("epsilon must be finite and >= 0");
  Step s;
  s.kind = Step::kLayerNorm;
  const void* params[2] = {nullptr, nullptr};
  for (size_t k = 1; k < 3; ++k) {
    if (n.in(k) < 0) continue;
    const Tensor& t = n.Constant(k);
    if (!t.valid() || t.type() != DataType::kFp32 || (t.elements() != inner && t.elements() != 1))
      return Unsupported(n.who + ": Scale and B must be constant FP32 of " + std::to_string(inner) +
                         " values (or one) on the GPU");
    std::vector<float> v = FloatsOf(t);
    v.resize(static_cast<size_t>(inner), v[0]);  // one value: every element's
    ASSIGN_OR_RETURN(params[k - 1], n.m.UploadFloats(v, kc::ElemType::kF32));
  }
  s.w = params[0];
  s.bias = static_cast<const float*>(params[1]);
  s.epsilon = eps;
  s.in = n.m.Resolve(InLayout(n.m, n.in(0), false));
  s.k = inner, s.outer = x.row_elems / inner;
  x.nhwc = false;
  // The statistics: the input's dims with the normalised ones 1.
  ValueSpec stat = x;
  std::fill(stat.dims.begin() + axis - 1, stat.dims.end(), 1);
  stat.row_elems = s.outer;
  const auto& outs = n.node.outputs;
  if (outs.size() > 1 && outs[1] >= 0) n.m.values[s.mean_out = outs[1]] = stat;
  if (outs.size() > 2 && outs[2] >= 0) n.m.values[s.inv_std_out = outs[2]] = stat;
  return AddElementwise(n.m, s, x, n.out());
}

// LRN across the channels of an image, channels-last.
Status CompileLrn(const Graph::Node& node, GpuModel& m, const std::string& who) {
  const OpNode& op = node.op;
  ValueSpec x = m.values[node.inputs[0]];
  if (x.logical != DataType::kFp32 || !IsImage(x))
    return Unsupported(who + ": the GPU engine runs LRN on FP32 images [rows, c, h, w]");
  const int64_t size = op.AttrInt("size", 0);
  if (size < 1) return op.Error("size must be positive");
  Step s;
  s.kind = Step::kLrn;
  s.in = InLayout(m, node.inputs[0], true);
  s.n = size;
  s.lrn_alpha = op.AttrFloat("alpha", 1e-4f), s.lrn_beta = op.AttrFloat("beta", 0.75f);
  s.lrn_bias = op.AttrFloat("bias", 1.f);
  x = m.values[s.in];
  return AddElementwise(m, s, x, node.outputs[0]);
}

Status BatchNorm(const GpuNode& n) {
  RETURN_IF_ERROR(n.Input(0).status());
  return CompileBatchNorm(n.graph, n.node, n.m, n.who);
}

Status Softmax(const GpuNode& n) {
  RETURN_IF_ERROR(n.Input(0).status());
  return CompileSoftmax(n.node, n.m, n.who);
}

Status Lrn(const GpuNode& n) {
  RETURN_IF_ERROR(n.Input(0).status());
  return CompileLrn(n.node, n.m, n.who);
}

}  // namespace

std::vector<GpuOpDef> GpuNormOps() {
  return {{"BatchNormalization", BatchNorm},
          {"LayerNormalization", LayerNorm, 3},
          {"LRN", Lrn},
          {"Softmax", Softmax}};
}

}  // namespace nereid::native
