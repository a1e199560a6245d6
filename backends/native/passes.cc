// The graph passes of the native engine, in the one order RunPasses lists. Each rewrites g.nodes
// (and adds constants) without changing what the graph computes; what each did goes to
// g.pass_log, which the backend logs at load.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>

#include "cpu/winograd.h"
#include "graph.h"
#include "ops/conv.h"

namespace nereid::native {

namespace {

using Node = GraphNode;

// Per output channel: y' = (y + pre) * scale + post.
struct ChannelAffine {
  std::vector<double> pre, scale, post;
};
using AffineOf = std::function<bool(const Node& node, size_t slot, int64_t c_out, size_t rank,
                                    ChannelAffine* f)>;

Status FoldConstants(GraphBody& g);
void FoldAffinesIntoConvs(GraphBody& g);
void FoldInputAffinesIntoConvs(GraphBody& g);
void FuseHardSwishes(GraphBody& g);
void FuseSelfGatedResiduals(GraphBody& g);
void FuseLayerNorms(GraphBody& g);
void FuseConvEpilogues(GraphBody& g, bool transposed);
void FuseGemmActivations(GraphBody& g);
void FuseMatMulEpilogues(GraphBody& g);
void FuseGelus(GraphBody& g);
void FuseAttention(GraphBody& g);
void MergeSiblingMatMuls(GraphBody& g);
void RemoveDeadNodes(GraphBody& g);
void ChooseChannelsLast(GraphBody& g);
void PackWeights(GraphBody& g, const GraphOptions& options);
void FuseDepthwiseBlocks(GraphBody& g);
void ReleasePackedOriginals(GraphBody& g);
void PlanLifetimes(GraphBody& g);

// Drops the nodes marked in 'marked' (by index), keeping the others in order, with the nodes of
// 'placed[i]' put at node i's place (before it, where it stays): how a pass that fused, folded or
// rewrote nodes ends.
void EraseMarked(GraphBody& g, const std::vector<bool>& marked,
                 std::map<size_t, std::vector<Node>> placed = {}) {
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (auto it = placed.find(i); it != placed.end())
      for (Node& n : it->second) kept.push_back(std::move(n));
    if (!marked[i]) kept.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(kept);
}

}  // namespace

Status RunPasses(GraphBody& g, const GraphOptions& options) {
  RETURN_IF_ERROR(FoldConstants(g));  // constant subgraphs (shape arithmetic) computed once
  FoldAffinesIntoConvs(g);  // Conv -> BatchNormalization, Mul/Add by constants: weights and bias
  FuseHardSwishes(g);       // x * Clip(x + 3, 0, 6) / 6 as written out: HardSwish
  FoldInputAffinesIntoConvs(g);  // Mul/Add by constants -> unpadded Conv: its weights and bias
  FuseSelfGatedResiduals(g);     // x + x * s (a Conv's x): x * (s + 1), one pass over x
  FuseLayerNorms(g);             // ReduceMean, Sub, Pow, ..., Div as written out: one node
  // Conv -> Add(residual) -> Relu/Clip: one node (ConvTranspose -> Relu too on the CPU)
  FuseConvEpilogues(g, options.pack_weights);
  FuseGemmActivations(g);  // Gemm -> Relu/Sigmoid: one node
  RemoveDeadNodes(g);      // nothing reads them
  FuseMatMulEpilogues(g);  // MatMul by a weight -> Add(bias) -> Add(residual)
  FuseGelus(g);      // x * (Erf(x / d) + 1) * 0.5 as written out: one Gelu (a MatMul's epilogue)
  FuseAttention(g);  // MatMul(Q, Kt) / c + mask -> Softmax -> MatMul(., V): one node
  if (!options.pack_weights) MergeSiblingMatMuls(g);  // GPU: Q, K and V as one GEMM
  if (options.pack_weights) {
    if (options.channels_last) ChooseChannelsLast(g);  // NHWC between convolutions
    PackWeights(g, options);                           // GEMM panels, int8 rows, convolution plans
    if (options.fuse_depthwise_blocks) FuseDepthwiseBlocks(g);  // 1x1 -> depthwise -> 1x1
    ReleasePackedOriginals(g);
  }
  PlanLifetimes(g);  // when each value is freed; unread constants dropped
  // The initializers' bytes were copied into g.constants, so the protobuf's copy goes: a model's
  // weights are held once. (DeleteSubrange frees them; clear() would keep the cleared messages
  // and their buffers for reuse.)
  auto* initializers = g.model->mutable_graph()->mutable_initializer();
  initializers->DeleteSubrange(0, initializers->size());
  return Status::Ok();
}

namespace {

// ---- constant folding ---------------------------------------------------------------------------

Status FoldConstants(GraphBody& g) {
  int folded = 0;
  std::vector<Node> kept;
  for (Node& node : g.nodes) {
    bool constant = true;
    for (int id : node.inputs)
      if (id >= 0 && !g.IsConstant(id)) constant = false;
    for (int id : node.outputs)
      if (id < 0) constant = false;
    if (!constant) {
      kept.push_back(std::move(node));
      continue;
    }
    std::vector<const Tensor*> in;
    for (int id : node.inputs) in.push_back(id >= 0 ? &g.constants[id] : nullptr);
    std::vector<Tensor> out(node.outputs.size());
    // A constant subgraph that fails would fail every request: the model is refused.
    RETURN_IF_ERROR(node.fn(node.op, in, out));
    for (size_t o = 0; o < out.size(); ++o) g.constants[node.outputs[o]] = std::move(out[o]);
    ++folded;
  }
  g.nodes = std::move(kept);
  if (folded) g.pass_log.push_back("constant folding: " + std::to_string(folded) + " nodes");
  return Status::Ok();
}

// ---- per-channel affine maps into Conv ---------------------------------------------------------

// Folds each node that 'affine_of' reads as a per-output-channel affine map of its input 'slot'
// (the output of a Conv or ConvTranspose with constant FP32 weights of rank 'rank', which only
// that node reads; c_out channels) into it:
// w' = w * scale, b' = (b + pre) * scale + post, in double as the reference computes the unfused
// pair; the node's output becomes the Conv's. One pass in node order, so a chain of such nodes
// after one Conv folds whole. Returns how many folded.
int FoldIntoConvs(GraphBody& g, const AffineOf& affine_of) {
  std::vector<int> readers = g.Readers();
  std::map<int, size_t> producer;  // value id -> node index
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int id : g.nodes[i].outputs)
      if (id >= 0) producer[id] = i;
  std::vector<bool> dead(g.nodes.size(), false);
  int folded = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& node = g.nodes[i];
    if (node.outputs.size() != 1) continue;
    for (size_t slot = 0; slot < node.inputs.size(); ++slot) {
      const int x = node.inputs[slot];
      if (x < 0 || g.IsConstant(x) || readers[x] != 1) continue;
      auto it = producer.find(x);
      if (it == producer.end() || dead[it->second]) continue;
      Node& conv = g.nodes[it->second];
      const bool transposed = conv.op.op_type() == "ConvTranspose";
      if ((!transposed && conv.op.op_type() != "Conv") || conv.outputs.size() != 1 ||
          conv.inputs.size() < 2 || !g.IsConstant(conv.inputs[1]))
        continue;
      const Tensor& w = g.constants[conv.inputs[1]];
      if (w.type() != DataType::kFp32 || w.shape().size() < 3) continue;
      // Weights [c_out, c_in / group, k...], or transposed [c_in, c_out / group, k...].
      const int64_t groups = conv.op.AttrInt("group", 1);
      if (transposed && (groups < 1 || w.shape()[0] % groups != 0)) continue;
      const int64_t c_out = transposed ? w.shape()[1] * groups : w.shape()[0];
      const bool has_bias = conv.inputs.size() > 2 && conv.inputs[2] >= 0;
      if (has_bias &&
          (!g.IsConstant(conv.inputs[2]) || g.constants[conv.inputs[2]].type() != DataType::kFp32 ||
           g.constants[conv.inputs[2]].elements() != c_out))
        continue;
      ChannelAffine f;
      if (!affine_of(node, slot, c_out, w.shape().size(), &f)) continue;
      bool scaled = false;
      for (double v : f.scale) scaled = scaled || v != 1.0;
      if (scaled) {
        Tensor w2 = Tensor::Allocate(DataType::kFp32, w.shape());
        // Runs of 'taps' weights of one output channel: Conv's whole row of an output channel,
        // ConvTranspose's kernel of one (input, output) pair, output channel (ci / cig) * cog + co.
        const int64_t taps =
            transposed ? w.elements() / (w.shape()[0] * w.shape()[1]) : w.elements() / c_out;
        const int64_t cog = w.shape()[1], cig = w.shape()[0] / groups;
        for (int64_t r = 0; r < w.elements() / taps; ++r) {
          const int64_t co = transposed ? r / cog / cig * cog + r % cog : r;
          const float* src = w.data<float>() + r * taps;
          float* dst = w2.mutable_data<float>() + r * taps;
          for (int64_t e = 0; e < taps; ++e) dst[e] = static_cast<float>(src[e] * f.scale[co]);
        }
        conv.inputs[1] = g.AddValue(node.op.name() + ".folded_weight", std::move(w2));
      }
      Tensor b2 = Tensor::Allocate(DataType::kFp32, {c_out});
      for (int64_t co = 0; co < c_out; ++co) {
        const double b = has_bias ? g.constants[conv.inputs[2]].data<float>()[co] : 0.0;
        b2.mutable_data<float>()[co] =
            static_cast<float>((b + f.pre[co]) * f.scale[co] + f.post[co]);
      }
      conv.inputs.resize(3);
      conv.inputs[2] = g.AddValue(node.op.name() + ".folded_bias", std::move(b2));
      conv.outputs[0] = node.outputs[0];
      producer[node.outputs[0]] = it->second;
      dead[i] = true;
      ++folded;
      break;
    }
  }
  EraseMarked(g, dead);
  return folded;
}

// Constant 'k' as one value per channel of a value of rank 'rank' with 'channels' channels
// (NCHW: one value, or dims aligned right, each 1 but the channel's: [C, 1, 1], [1, C, 1, 1]; not
// [C], which would broadcast along the width) into 'values' (channels of them).
bool PerChannelConstant(const GraphBody& g, int k, int64_t channels, size_t rank,
                        std::vector<double>* values) {
  if (k < 0 || !g.IsConstant(k) || g.constants[k].type() != DataType::kFp32) return false;
  const Tensor& c = g.constants[k];
  const std::vector<int64_t>& cs = c.shape();
  if (cs.size() > rank) return false;
  for (size_t d = 0; d < cs.size(); ++d)
    if (cs[d] != 1 && !(rank - cs.size() + d == 1 && cs[d] == channels)) return false;
  const bool one = c.elements() == 1;
  values->resize(static_cast<size_t>(channels));
  for (int64_t ch = 0; ch < channels; ++ch) (*values)[ch] = c.data<float>()[one ? 0 : ch];
  return true;
}

// Conv (or ConvTranspose) -> BatchNormalization (inference): scale / sqrt(var + eps) per
// channel, mean and beta the shifts. Conv -> Mul (or Add) by a constant that is one value, or one
// per output channel ([C, 1, 1], [1, C, 1, 1]; not [C], which would broadcast along the width):
// the weights (and bias) scaled, or the bias shifted. Reparameterized blocks (RapidOCR's
// detector: MobileOne's learned scale and shift after each convolution) then leave the Conv
// followed directly by its activation, which fuses. Both kinds in one sweep, so that a chain of
// them folds whole (the detector's head: ConvTranspose -> Add -> BatchNormalization -> Relu).
void FoldAffinesIntoConvs(GraphBody& g) {
  int norms = 0, scales = 0;
  auto batch_norm = [&](const Node& bn, size_t slot, int64_t c_out, ChannelAffine* f) {
    if (bn.op.op_type() != "BatchNormalization" || slot != 0 || bn.inputs.size() != 5 ||
        bn.op.AttrInt("training_mode", 0) != 0)
      return false;
    for (int k = 1; k < 5; ++k)
      if (!g.IsConstant(bn.inputs[k]) || g.constants[bn.inputs[k]].type() != DataType::kFp32 ||
          g.constants[bn.inputs[k]].elements() != c_out)
        return false;
    const float* scale = g.constants[bn.inputs[1]].data<float>();
    const float* beta = g.constants[bn.inputs[2]].data<float>();
    const float* mean = g.constants[bn.inputs[3]].data<float>();
    const float* var = g.constants[bn.inputs[4]].data<float>();
    const float eps = bn.op.AttrFloat("epsilon", 1e-5f);
    for (int64_t co = 0; co < c_out; ++co) {
      f->pre.push_back(-static_cast<double>(mean[co]));
      f->scale.push_back(static_cast<double>(scale[co]) /
                         std::sqrt(static_cast<double>(var[co]) + eps));
      f->post.push_back(beta[co]);
    }
    return true;
  };
  auto scale_or_shift = [&](const Node& op, size_t slot, int64_t c_out, size_t rank,
                            ChannelAffine* f) {
    const bool mul = op.op.op_type() == "Mul";
    if ((!mul && op.op.op_type() != "Add") || op.inputs.size() != 2) return false;
    std::vector<double> k;
    if (!PerChannelConstant(g, op.inputs[1 - slot], c_out, rank, &k)) return false;
    for (int64_t co = 0; co < c_out; ++co) {
      const double v = k[co];
      f->pre.push_back(0.0);
      f->scale.push_back(mul ? v : 1.0);
      f->post.push_back(mul ? 0.0 : v);
    }
    return true;
  };
  FoldIntoConvs(g,
                [&](const Node& node, size_t slot, int64_t c_out, size_t rank, ChannelAffine* f) {
                  if (batch_norm(node, slot, c_out, f)) return ++norms, true;
                  return scale_or_shift(node, slot, c_out, rank, f) && (++scales, true);
                });
  if (norms) g.pass_log.push_back("BatchNormalization folded into Conv: " + std::to_string(norms));
  if (scales) g.pass_log.push_back("constant Mul/Add folded into Conv: " + std::to_string(scales));
}

// Mul and Add by constant single values whose result only a Conv without padding reads (constant
// FP32 weights; pads 0, so every tap of every window reads the affine map's output, never a zero of
// the padding): the map x' = s * x + t goes into the Conv's weights (w * s per input channel) and
// bias (b + the sum of w * t over each output's window), in double. RapidOCR's detector scales and
// shifts each HardSwish's output by learned constants before its 1x1 convolutions: two passes over
// the image each. A padded Conv keeps them (the window's taps in the padding read zeros, not t).
void FoldInputAffinesIntoConvs(GraphBody& g) {
  std::vector<int> readers = g.Readers();
  std::map<int, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int id : g.nodes[i].outputs)
      if (id >= 0) producer[id] = i;
  std::vector<bool> dead(g.nodes.size(), false);
  int folded = 0;
  auto zeros = [](const std::vector<int64_t>& v) {
    return std::all_of(v.begin(), v.end(), [](int64_t e) { return e == 0; });
  };
  for (Node& conv : g.nodes) {
    if (conv.op.op_type() != "Conv" || conv.outputs.size() != 1 || conv.inputs.size() < 2 ||
        conv.inputs[0] < 0 || !g.IsConstant(conv.inputs[1]) || !zeros(conv.op.AttrInts("pads")) ||
        conv.op.AttrString("auto_pad", "NOTSET") != "NOTSET")
      continue;
    const Tensor& w = g.constants[conv.inputs[1]];
    const int64_t groups = conv.op.AttrInt("group", 1);
    if (w.type() != DataType::kFp32 || w.shape().size() < 3 || groups < 1) continue;
    const int64_t c_out = w.shape()[0], cig = w.shape()[1], c_in = cig * groups;
    const bool has_bias = conv.inputs.size() > 2 && conv.inputs[2] >= 0;
    if (has_bias &&
        (!g.IsConstant(conv.inputs[2]) || g.constants[conv.inputs[2]].type() != DataType::kFp32 ||
         g.constants[conv.inputs[2]].elements() != c_out))
      continue;
    // Back from the Conv's input: x' = s * u + t, one node at a time.
    std::vector<double> s(static_cast<size_t>(c_in), 1.0), t(static_cast<size_t>(c_in), 0.0);
    int u = conv.inputs[0], steps = 0;
    for (;;) {
      auto it = producer.find(u);
      if (it == producer.end() || dead[it->second] || readers[u] != 1) break;
      const Node& op = g.nodes[it->second];
      const bool mul = op.op.op_type() == "Mul";
      if ((!mul && op.op.op_type() != "Add") || op.inputs.size() != 2 || op.outputs.size() != 1)
        break;
      const size_t slot = g.IsConstant(op.inputs[1]) ? 0 : 1;  // the data operand
      std::vector<double> k;
      // (One value only: a constant of one per channel could widen an operand of one channel.)
      const int k_id = op.inputs[1 - slot];
      if (op.inputs[slot] < 0 || g.IsConstant(op.inputs[slot]) || k_id < 0 || !g.IsConstant(k_id) ||
          g.constants[k_id].elements() != 1 ||
          !PerChannelConstant(g, k_id, c_in, w.shape().size(), &k))
        break;
      // x' = s * (m * u' + a) + t: s * m, s * a + t.
      for (int64_t c = 0; c < c_in; ++c) {
        if (mul)
          s[c] *= k[c];
        else
          t[c] += s[c] * k[c];
      }
      dead[it->second] = true;
      u = op.inputs[slot];
      ++steps;
    }
    if (steps == 0) continue;
    const int64_t taps = w.elements() / (c_out * cig);
    Tensor w2 = Tensor::Allocate(DataType::kFp32, w.shape());
    Tensor b2 = Tensor::Allocate(DataType::kFp32, {c_out});
    for (int64_t co = 0; co < c_out; ++co) {
      double bias = has_bias ? g.constants[conv.inputs[2]].data<float>()[co] : 0.0;
      for (int64_t ci = 0; ci < cig; ++ci) {
        const int64_t channel = co / (c_out / groups) * cig + ci;  // the input channel
        for (int64_t e = 0; e < taps; ++e) {
          const int64_t at = (co * cig + ci) * taps + e;
          const double v = w.data<float>()[at];
          w2.mutable_data<float>()[at] = static_cast<float>(v * s[channel]);
          bias += v * t[channel];
        }
      }
      b2.mutable_data<float>()[co] = static_cast<float>(bias);
    }
    conv.inputs[0] = u;
    conv.inputs[1] = g.AddValue(conv.op.name() + ".input_scaled_weight", std::move(w2));
    conv.inputs.resize(std::max<size_t>(conv.inputs.size(), 3));
    conv.inputs[2] = g.AddValue(conv.op.name() + ".input_shifted_bias", std::move(b2));
    folded += steps;
  }
  EraseMarked(g, dead);
  if (folded)
    g.pass_log.push_back("constant Mul/Add folded into the Conv reading them: " +
                         std::to_string(folded));
}

// ---- ops written out as several --------------------------------------------------------------

// What the pattern fusions ask of the graph as it stands: who computes a value, who reads it, and
// which constants are FP32 scalars.
class Patterns {
 public:
  explicit Patterns(GraphBody& g) : g_(g), readers_(g.Readers()) {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      for (int id : g.nodes[i].outputs)
        if (id >= 0) producer_[id] = i;
      for (int id : g.nodes[i].inputs)
        if (id >= 0) reader_[id] = i;
    }
  }
  int readers(int id) const { return readers_[id]; }
  // The one-output node of type 'op' computing 'id', when 'uses' node inputs (and no graph output)
  // read 'id'; nullptr otherwise.
  Node* MadeBy(int id, const char* op, int uses = 1) const {
    auto it = producer_.find(id);
    if (it == producer_.end() || readers_[id] != uses) return nullptr;
    Node& n = g_.nodes[it->second];
    return n.op.op_type() == op && n.outputs.size() == 1 ? &n : nullptr;
  }
  // The one-output node of type 'op' that is the only reader of 'id'; nullptr otherwise.
  Node* ReadBy(int id, const char* op) const {
    auto it = reader_.find(id);
    if (it == reader_.end() || readers_[id] != 1) return nullptr;
    Node& n = g_.nodes[it->second];
    return n.op.op_type() == op && n.outputs.size() == 1 ? &n : nullptr;
  }
  // A constant FP32 scalar, its value in *v.
  bool Scalar(int id, float* v) const {
    if (!g_.IsConstant(id) || g_.constants[id].type() != DataType::kFp32 ||
        g_.constants[id].elements() != 1)
      return false;
    *v = g_.constants[id].data<float>()[0];
    return true;
  }
  // A constant FP32 scalar equal to 'want' (to float rounding).
  bool ScalarIs(int id, float want) const {
    float v = 0.f;
    return Scalar(id, &v) && std::abs(v - want) <= 1e-6f * std::abs(want);
  }
  size_t Index(const Node* n) const { return static_cast<size_t>(n - g_.nodes.data()); }

 private:
  GraphBody& g_;
  std::vector<int> readers_;
  std::map<int, size_t> producer_, reader_;  // value id -> node index (reader_: the last one)
};

void FuseHardSwishes(GraphBody& g) {
  // Exporters (Paddle, older PyTorch) write HardSwish as Add(x, 3) -> Clip(0, 6) -> Mul(x, .) ->
  // Div(., 6) (or Mul(., 1/6)). The four become one HardSwish node, which a Conv's epilogue can
  // then take.
  const Patterns p(g);
  const OpDef* hard_swish = FindOpDef("HardSwish");
  std::vector<bool> dead(g.nodes.size(), false);
  int fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& last = g.nodes[i];
    const std::string& op = last.op.op_type();
    if (last.inputs.size() != 2 || last.outputs.size() != 1) continue;
    if (!((op == "Div" && p.ScalarIs(last.inputs[1], 6.f)) ||
          (op == "Mul" && p.ScalarIs(last.inputs[1], 1.f / 6.f))))
      continue;
    Node* mul = p.MadeBy(last.inputs[0], "Mul");
    if (mul == nullptr || mul->inputs.size() != 2) continue;
    for (int side = 0; side < 2; ++side) {
      const int x = mul->inputs[side];
      Node* clip = p.MadeBy(mul->inputs[1 - side], "Clip");
      if (clip == nullptr || clip->inputs.size() != 3 || clip->op.opset() < 11 ||
          !p.ScalarIs(clip->inputs[1], 0.f) || !p.ScalarIs(clip->inputs[2], 6.f))
        continue;
      Node* add = p.MadeBy(clip->inputs[0], "Add");
      if (add == nullptr || add->inputs.size() != 2) continue;
      const bool x_first = add->inputs[0] == x && p.ScalarIs(add->inputs[1], 3.f);
      const bool x_second = add->inputs[1] == x && p.ScalarIs(add->inputs[0], 3.f);
      if (!x_first && !x_second) continue;
      for (Node* n : {mul, clip, add}) dead[n - g.nodes.data()] = true;
      last = g.MakeNode("HardSwish", last.op.name() + ".hard_swish", hard_swish->fn, {x},
                        {last.outputs[0]});
      ++fused;
      break;
    }
  }
  EraseMarked(g, dead);
  if (fused) g.pass_log.push_back("HardSwish patterns fused: " + std::to_string(fused));
}

namespace {

// A ReduceMean over the last axis only, keeping it (the attribute before opset 18, a constant
// input from it).
bool MeanOfLastAxis(const Graph::Node& n, const std::function<const Tensor*(int)>& constant) {
  if (n.inputs.empty() || n.op.AttrInt("keepdims", 1) != 1) return false;
  std::vector<int64_t> axes = n.op.AttrInts("axes");
  if (n.op.opset() >= 18) {
    const Tensor* t = n.inputs.size() > 1 ? constant(n.inputs[1]) : nullptr;
    if (t == nullptr || t->type() != DataType::kInt64) return false;
    axes.assign(t->data<int64_t>(), t->data<int64_t>() + t->elements());
  } else if (n.inputs.size() > 1) {
    return false;
  }
  return axes == std::vector<int64_t>{-1};
}

}  // namespace

void FuseLayerNorms(GraphBody& g) {
  // Exporters without LayerNormalization (opset < 17; Paddle, HuggingFace's older exports) write
  // it out: m = ReduceMean(x), d = Sub(x, m), v = ReduceMean(Pow(d, 2) or Mul(d, d)),
  // y = Div(d, Sqrt(Add(v, eps))), then Mul by a scale and Add of a bias, each 1-D and constant.
  // The chain becomes one LayerNormalization over the last axis.
  const Patterns p(g);
  auto constant = [&g](int id) { return g.IsConstant(id) ? &g.constants[id] : nullptr; };
  auto vector = [&](int id) {
    const Tensor* t = constant(id);
    return t != nullptr && t->type() == DataType::kFp32 && t->shape().size() == 1;
  };
  const OpDef* layer_norm = FindOpDef("LayerNormalization");
  std::vector<bool> dead(g.nodes.size(), false);
  int fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& div = g.nodes[i];
    if (dead[i] || div.op.op_type() != "Div" || div.inputs.size() != 2 || div.outputs.size() != 1)
      continue;
    const int d = div.inputs[0];
    Node* sqrt = p.MadeBy(div.inputs[1], "Sqrt");
    Node* add = sqrt == nullptr ? nullptr : p.MadeBy(sqrt->inputs[0], "Add");
    if (add == nullptr || add->inputs.size() != 2) continue;
    float eps = 0.f;
    const int side = p.Scalar(add->inputs[1], &eps) ? 0 : 1;
    if (!p.Scalar(add->inputs[1 - side], &eps) || !(eps >= 0.f) || std::isinf(eps)) continue;
    Node* var = p.MadeBy(add->inputs[side], "ReduceMean");
    if (var == nullptr || !MeanOfLastAxis(*var, constant)) continue;
    // The square: Pow(d, 2) (d read twice in all) or Mul(d, d) (three times).
    Node* square = p.MadeBy(var->inputs[0], "Pow");
    Node* sub = nullptr;
    if (square != nullptr && square->inputs.size() == 2 && square->inputs[0] == d &&
        p.ScalarIs(square->inputs[1], 2.f)) {
      sub = p.MadeBy(d, "Sub", 2);
    } else if ((square = p.MadeBy(var->inputs[0], "Mul")) != nullptr &&
               square->inputs.size() == 2 && square->inputs[0] == d && square->inputs[1] == d) {
      sub = p.MadeBy(d, "Sub", 3);
    }
    if (sub == nullptr || sub->inputs.size() != 2) continue;
    const int x = sub->inputs[0];
    Node* mean = p.MadeBy(sub->inputs[1], "ReduceMean");
    if (x < 0 || mean == nullptr || mean->inputs[0] != x || !MeanOfLastAxis(*mean, constant))
      continue;
    // The affine tail, each step optional.
    Node* last = &div;
    int scale = -1, bias = -1;
    if (Node* mul = p.ReadBy(last->outputs[0], "Mul"); mul != nullptr && mul->inputs.size() == 2) {
      const int other = mul->inputs[0] == last->outputs[0] ? mul->inputs[1] : mul->inputs[0];
      if (vector(other)) scale = other, last = mul;
    }
    if (Node* shift = p.ReadBy(last->outputs[0], "Add");
        shift != nullptr && shift->inputs.size() == 2) {
      const int other = shift->inputs[0] == last->outputs[0] ? shift->inputs[1] : shift->inputs[0];
      if (vector(other)) bias = other, last = shift;
    }
    const int out = last->outputs[0];
    for (Node* n : {mean, sub, square, var, add, sqrt, &div, last}) dead[p.Index(n)] = true;
    // The fused node takes the last node's place: every input is computed by then.
    Node ln = g.MakeNode("LayerNormalization", div.op.name() + ".layer_norm", layer_norm->fn,
                         {x, scale, bias}, {out});
    onnx::AttributeProto* a = g.made_nodes.back()->add_attribute();
    a->set_name("epsilon");
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(eps);
    const size_t at = p.Index(last);
    g.nodes[at] = std::move(ln);
    dead[at] = false;
    ++fused;
  }
  EraseMarked(g, dead);
  if (fused) g.pass_log.push_back("LayerNormalization patterns fused: " + std::to_string(fused));
}

// ---- fused epilogues ----------------------------------------------------------------------------

}  // namespace

bool FusableActivation(const Graph::Node& node, const std::function<bool(int)>& is_constant,
                       const std::function<const Tensor&(int)>& constant, OpNode::Activation* act,
                       float* a, float* b) {
  const std::string& op = node.op.op_type();
  using A = OpNode::Activation;
  if (op == "Relu" || op == "HardSwish") {
    *act = op == "Relu" ? A::kRelu : A::kHardSwish;
    return true;
  }
  if (op == "LeakyRelu") {
    *act = A::kLeakyRelu;
    *a = node.op.AttrFloat("alpha", 0.01f);
    return true;
  }
  if (op == "HardSigmoid") {
    *act = A::kHardSigmoid;
    *a = node.op.AttrFloat("alpha", 0.2f), *b = node.op.AttrFloat("beta", 0.5f);
    return true;
  }
  if (op != "Clip") return false;
  *a = -INFINITY, *b = INFINITY;
  if (node.op.opset() < 11) {
    *a = node.op.AttrFloat("min", -INFINITY);
    *b = node.op.AttrFloat("max", INFINITY);
  } else {
    for (size_t k = 1; k < node.inputs.size() && k < 3; ++k) {
      const int id = node.inputs[k];
      if (id < 0) continue;
      if (!is_constant(id) || constant(id).type() != DataType::kFp32 ||
          constant(id).elements() != 1)
        return false;
      (k == 1 ? *a : *b) = constant(id).data<float>()[0];
    }
  }
  if (std::isnan(*a) || std::isnan(*b)) return false;
  *act = A::kClip;
  return true;
}

namespace {

// Add(x, Mul(x, s)) with x a Conv's output and the Mul read only by the Add (RapidOCR's
// detector's residual squeeze-excite: x + x * HardSigmoid(...), s one value per image and
// channel): Mul(x, Add(s, 1)), the 1 added on s's few values, one pass over the image instead of
// two. The same broadcast; the product rounds once where the sum of two rounded twice.
void FuseSelfGatedResiduals(GraphBody& g) {
  const Patterns p(g);
  const OpDef* add_op = FindOpDef("Add");
  const OpDef* mul_op = FindOpDef("Mul");
  std::vector<bool> dead(g.nodes.size(), false);
  std::map<size_t, std::vector<Node>> replaced;  // node index -> the nodes taking its place
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& add = g.nodes[i];
    if (add.op.op_type() != "Add" || add.inputs.size() != 2 || add.outputs.size() != 1) continue;
    for (int side = 0; side < 2; ++side) {
      const int x = add.inputs[side];
      Node* mul = p.MadeBy(add.inputs[1 - side], "Mul");
      if (x < 0 || g.IsConstant(x) || mul == nullptr || mul->inputs.size() != 2 ||
          p.MadeBy(x, "Conv", p.readers(x)) == nullptr)
        continue;
      const int gate = mul->inputs[0] == x   ? mul->inputs[1]
                       : mul->inputs[1] == x ? mul->inputs[0]
                                             : -1;
      if (gate < 0 || gate == x) continue;
      Tensor one_value = Tensor::Allocate(DataType::kFp32, {});
      one_value.mutable_data<float>()[0] = 1.f;
      const int one = g.AddValue(add.op.name() + ".one", std::move(one_value));
      const int plus_one = g.AddValue(add.op.name() + ".gate_plus_one");
      replaced[i] = {
          g.MakeNode("Add", add.op.name() + ".gate_plus_one", add_op->fn, {gate, one}, {plus_one}),
          g.MakeNode("Mul", add.op.name() + ".gated", mul_op->fn, {x, plus_one}, {add.outputs[0]})};
      dead[p.Index(mul)] = dead[i] = true;
      break;
    }
  }
  if (replaced.empty()) return;
  const size_t count = replaced.size();
  EraseMarked(g, dead, std::move(replaced));
  g.pass_log.push_back("x + x * s as x * (s + 1): " + std::to_string(count));
}

void FuseConvEpilogues(GraphBody& g, bool transposed) {
  // A fused node takes the place of the last node of its group: every input of the group is
  // computed by then (a residual branch may come after the Conv). 'transposed': ConvTranspose
  // takes its activation too (the CPU's op applies it; the GPU's has no epilogue).
  std::vector<int> readers = g.Readers();
  std::map<int, size_t> reader_of;  // value id -> the index of its one reader
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int id : g.nodes[i].inputs)
      if (id >= 0) reader_of[id] = i;
  std::vector<bool> dead(g.nodes.size(), false);
  int residuals = 0, activations = 0;
  auto is_constant = [&g](int id) { return g.IsConstant(id); };
  auto constant = [&g](int id) -> const Tensor& { return g.constants[id]; };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const bool is_transposed = g.nodes[i].op.op_type() == "ConvTranspose";
    if (dead[i] || g.nodes[i].outputs.size() != 1 ||
        (g.nodes[i].op.op_type() != "Conv" && !(transposed && is_transposed)))
      continue;
    const int out = g.nodes[i].outputs[0];
    if (out < 0 || readers[out] != 1 || !reader_of.count(out)) continue;
    const size_t r = reader_of[out];
    Node& next = g.nodes[r];
    Node& conv = g.nodes[i];
    if (conv.op.activation != OpNode::Activation::kNone) continue;
    const bool add = next.op.op_type() == "Add" || next.op.op_type() == "Sum";  // Sum of two
    if (add && is_transposed) continue;
    if (add && next.inputs.size() == 2 && !conv.op.residual && next.outputs.size() == 1) {
      const int other = next.inputs[0] == out ? next.inputs[1] : next.inputs[0];
      if (other < 0 || other == out || g.IsConstant(other)) continue;
      conv.inputs.resize(4, -1);
      conv.inputs[3] = other;
      conv.op.residual = true;
      conv.outputs[0] = next.outputs[0];
      ++residuals;
    } else {
      OpNode::Activation act;
      float lo = 0, hi = 0;
      if (next.outputs.size() != 1 ||
          !FusableActivation(next, is_constant, constant, &act, &lo, &hi))
        continue;
      conv.op.activation = act;
      conv.op.activation_a = lo, conv.op.activation_b = hi;
      conv.outputs[0] = next.outputs[0];
      ++activations;
    }
    // The Conv moves to the reader's place; its new output's reader is looked at when the loop
    // gets there.
    g.nodes[r] = std::move(conv);
    dead[i] = true;
    dead[r] = false;
  }
  EraseMarked(g, dead);
  if (residuals || activations)
    g.pass_log.push_back("Conv epilogues fused: " + std::to_string(residuals) + " residual Add, " +
                         std::to_string(activations) + " activation");
}

// MatMul(x, W) by a constant 2-D FP32 weight, then Add of a constant bias of W's columns ([n]
// or [1, ..., 1, n]), then Add of another value (a residual branch: a transformer layer's
// x + f(x)): the MatMul takes them as inputs 2 and 3 (-1: absent) and adds them while its output
// tiles are in cache (the CPU's and the GPU's GEMM epilogues), where three passes over the
// activations were.
void FuseMatMulEpilogues(GraphBody& g) {
  const Patterns p(g);
  // The node reading 'value' when it is the value's only reader and a two-input Add.
  auto only_add = [&p](int value) -> Node* {
    Node* next = value < 0 ? nullptr : p.ReadBy(value, "Add");
    return next != nullptr && next->inputs.size() == 2 && next->inputs[0] != next->inputs[1]
               ? next
               : nullptr;
  };
  std::vector<bool> dead(g.nodes.size(), false);
  int biases = 0, residuals = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& mm = g.nodes[i];
    if (dead[i] || mm.op.op_type() != "MatMul" || mm.inputs.size() != 2 || mm.outputs.size() != 1 ||
        !g.IsConstant(mm.inputs[1]))
      continue;
    const Tensor& w = g.constants[mm.inputs[1]];
    if (w.type() != DataType::kFp32 || w.shape().size() != 2) continue;
    const int64_t n = w.shape()[1];
    Node* add = only_add(mm.outputs[0]);
    if (add == nullptr) continue;
    const int b = add->inputs[0] == mm.outputs[0] ? add->inputs[1] : add->inputs[0];
    if (!g.IsConstant(b)) continue;
    const Tensor& bias = g.constants[b];
    const auto& bs = bias.shape();
    if (bias.type() != DataType::kFp32 || bs.empty() || bs.back() != n ||
        Product(bs, 0, bs.size() - 1) != 1)
      continue;
    // The MatMul moves to the last fused node's place: the residual is computed by then.
    size_t last = p.Index(add);
    mm.inputs = {mm.inputs[0], mm.inputs[1], b, -1};
    mm.outputs[0] = add->outputs[0];
    ++biases;
    if (Node* second = only_add(mm.outputs[0])) {
      const int r = second->inputs[0] == mm.outputs[0] ? second->inputs[1] : second->inputs[0];
      if (r >= 0 && !g.IsConstant(r)) {
        mm.inputs[3] = r;
        mm.outputs[0] = second->outputs[0];
        dead[last] = true;
        last = p.Index(second);
        ++residuals;
      }
    }
    g.nodes[last] = std::move(mm);
    dead[i] = true;
    dead[last] = false;
  }
  EraseMarked(g, dead);
  if (biases)
    g.pass_log.push_back("MatMul epilogues fused: " + std::to_string(biases) + " bias, " +
                         std::to_string(residuals) + " residual Add");
}

// GELU as PyTorch exports it (HF's BERT: x * 0.5 * (1 + erf(x / sqrt(2)))): Div(x, d) -> Erf ->
// Add(., 1) -> Mul(x, .) -> Mul(., 0.5), or with the 0.5 taken first (Mul(x, 0.5) ->
// Mul(., Add(...))). One Gelu node with the file's divisor as its second input computes the same
// steps in one pass (x 0.5 is exact either way round).
void FuseGelus(GraphBody& g) {
  const Patterns p(g);
  const OpDef* gelu = FindOpDef("Gelu");
  std::vector<bool> dead(g.nodes.size(), false);
  int fused = 0;
  auto is = [&p](int id, float want) {
    float v = 0.f;
    return p.Scalar(id, &v) && v == want;
  };
  // The input of 'mul' other than 'id' (-1 when neither is 'id').
  auto other = [](const Node& mul, int id) {
    return mul.inputs[0] == id ? mul.inputs[1] : mul.inputs[1] == id ? mul.inputs[0] : -1;
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& last = g.nodes[i];
    if (dead[i] || last.op.op_type() != "Mul" || last.inputs.size() != 2 ||
        last.outputs.size() != 1)
      continue;
    for (int side = 0; side < 2; ++side) {
      // last = Mul(a, b): either (Mul(x, t), 0.5) or (Mul(x, 0.5), t), t = Add(Erf(Div(x, d)), 1).
      Node* inner = p.MadeBy(last.inputs[side], "Mul");
      if (inner == nullptr || inner->inputs.size() != 2) continue;
      const int b = last.inputs[1 - side];
      std::vector<std::pair<int, int>> tries;  // (x, t) candidates
      if (is(b, 0.5f))
        tries = {{inner->inputs[0], inner->inputs[1]}, {inner->inputs[1], inner->inputs[0]}};
      for (int k = 0; k < 2; ++k)
        if (is(inner->inputs[k], 0.5f)) tries.push_back({inner->inputs[1 - k], b});
      for (const auto& [x, t] : tries) {
        Node* add = p.MadeBy(t, "Add");
        if (add == nullptr || add->inputs.size() != 2) continue;
        const int e = is(add->inputs[1], 1.f)   ? add->inputs[0]
                      : is(add->inputs[0], 1.f) ? add->inputs[1]
                                                : -1;
        Node* erf = e < 0 ? nullptr : p.MadeBy(e, "Erf");
        Node* div =
            erf == nullptr || erf->inputs.size() != 1 ? nullptr : p.MadeBy(erf->inputs[0], "Div");
        float d = 0.f;
        if (div == nullptr || div->inputs.size() != 2 || div->inputs[0] != x ||
            !p.Scalar(div->inputs[1], &d) || other(*inner, x) < 0)
          continue;
        for (Node* n : {inner, add, erf, div}) dead[p.Index(n)] = true;
        last = g.MakeNode("Gelu", last.op.name() + ".gelu", gelu->fn, {x, div->inputs[1]},
                          {last.outputs[0]});
        ++fused;
        break;
      }
      if (last.op.op_type() == "Gelu") break;
    }
  }
  // A Gelu whose input is a MatMul's output read by nothing else (a feed-forward block's first
  // product) becomes that MatMul's epilogue: applied while its tiles are in cache, not in a pass
  // over the activations from memory.
  int into_matmul = 0;
  {
    std::vector<int> readers = g.Readers();  // of the nodes that stay
    std::map<int, size_t> producer;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      for (int id : g.nodes[i].inputs)
        if (id >= 0 && dead[i]) --readers[id];
      if (!dead[i])
        for (int id : g.nodes[i].outputs)
          if (id >= 0) producer[id] = i;
    }
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      Node& gel = g.nodes[i];
      if (dead[i] || gel.op.op_type() != "Gelu" || gel.inputs.size() != 2) continue;
      const int x = gel.inputs[0];
      auto it = producer.find(x);
      float d = 0.f;
      if (it == producer.end() || !p.Scalar(gel.inputs[1], &d) || readers[x] != 1) continue;
      Node& mm = g.nodes[it->second];
      if (mm.op.op_type() != "MatMul" || mm.op.activation != OpNode::Activation::kNone ||
          mm.outputs.size() != 1 || (mm.inputs.size() > 3 && mm.inputs[3] >= 0))
        continue;
      mm.op.activation = OpNode::Activation::kGelu;
      mm.op.activation_a = d;
      mm.outputs[0] = gel.outputs[0];
      dead[i] = true;
      ++into_matmul;
    }
  }
  EraseMarked(g, dead);
  if (fused)
    g.pass_log.push_back("GELU patterns fused: " + std::to_string(fused) + ", " +
                         std::to_string(into_matmul) + " of them into their MatMul's epilogue");
}

// MatMuls of one input by constant 2-D FP32 weights of the same depth, each with a bias of its
// columns or none alike and no residual or activation (an attention's Q, K and V projections),
// become one MatMul by the weights side by side, each output a Slice of its columns: one GEMM
// where there were several (on the GPU, whose Slices are views the fused attention reads through).
// The GPU graph only: the CPU's attention kernel takes Q, K and V as tensors of their own.
void MergeSiblingMatMuls(GraphBody& g) {
  const OpDef* slice = FindOpDef("Slice");
  std::map<int, std::vector<size_t>> by_input;  // x -> the MatMuls reading it
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op.op_type() != "MatMul" || n.outputs.size() != 1 || n.inputs.size() < 2 ||
        n.op.activation != OpNode::Activation::kNone || !g.IsConstant(n.inputs[1]) ||
        (n.inputs.size() > 3 && n.inputs[3] >= 0))
      continue;
    const Tensor& w = g.constants[n.inputs[1]];
    if (w.type() == DataType::kFp32 && w.shape().size() == 2) by_input[n.inputs[0]].push_back(i);
  }
  std::vector<bool> dead(g.nodes.size(), false);
  std::map<size_t, std::vector<Node>> placed;  // at node index: the merged MatMul and its Slices
  int merged = 0;
  for (const auto& [x, members] : by_input) {
    if (members.size() < 2) continue;
    const int64_t k = g.constants[g.nodes[members[0]].inputs[1]].shape()[0];
    bool fits = true,
         biased = g.nodes[members[0]].inputs.size() > 2 && g.nodes[members[0]].inputs[2] >= 0;
    int64_t total = 0;
    for (size_t i : members) {
      const Node& n = g.nodes[i];
      const Tensor& w = g.constants[n.inputs[1]];
      const bool has_bias = n.inputs.size() > 2 && n.inputs[2] >= 0;
      fits = fits && w.shape()[0] == k && has_bias == biased &&
             (!has_bias ||
              (g.IsConstant(n.inputs[2]) && g.constants[n.inputs[2]].type() == DataType::kFp32 &&
               g.constants[n.inputs[2]].elements() == w.shape()[1]));
      total += w.shape()[1];
    }
    if (!fits) continue;
    Tensor w_all = Tensor::Allocate(DataType::kFp32, {k, total});
    Tensor b_all = Tensor::Allocate(DataType::kFp32, {total});
    int64_t at = 0;
    std::vector<Node> nodes;
    const int merged_out = g.AddValue("merged_matmul");
    for (size_t i : members) {
      const Node& n = g.nodes[i];
      const Tensor& w = g.constants[n.inputs[1]];
      const int64_t cols = w.shape()[1];
      for (int64_t r = 0; r < k; ++r)
        std::copy_n(w.data<float>() + r * cols, cols, w_all.mutable_data<float>() + r * total + at);
      if (biased)
        std::copy_n(g.constants[n.inputs[2]].data<float>(), cols, b_all.mutable_data<float>() + at);
      auto ints = [](int64_t v) {
        Tensor t = Tensor::Allocate(DataType::kInt64, {1});
        t.mutable_data<int64_t>()[0] = v;
        return t;
      };
      const int starts = g.AddValue("merged_start", ints(at)),
                ends = g.AddValue("merged_end", ints(at + cols)),
                axes = g.AddValue("merged_axis", ints(-1));
      nodes.push_back(g.MakeNode("Slice", n.op.name() + ".columns", slice->fn,
                                 {merged_out, starts, ends, axes}, {n.outputs[0]}));
      at += cols;
      dead[i] = true;
    }
    const Node& first = g.nodes[members[0]];
    Node mm = g.MakeNode("MatMul", first.op.name() + ".merged", first.fn,
                         {x, g.AddValue("merged_weights", std::move(w_all)),
                          biased ? g.AddValue("merged_bias", std::move(b_all)) : -1},
                         {merged_out});
    nodes.insert(nodes.begin(), std::move(mm));
    placed[members[0]] = std::move(nodes);
    ++merged;
  }
  if (!merged) return;
  EraseMarked(g, dead, std::move(placed));
  g.pass_log.push_back("sibling MatMuls merged: " + std::to_string(merged) + " groups");
}

// Attention as PyTorch exports it (HF's BERT): MatMul(Q, Kt) -> Div (or Mul) by a constant
// scalar -> Add(mask) (optional) -> Softmax over the last axis (opset 13 on) -> MatMul(., V), each
// value read by the next alone, becomes one Attention node (ops/attention.cc) in the last
// MatMul's place (the CPU's kernel, the GPU's fused one, or the ops it replaced where their shapes
// do not fit either).
void FuseAttention(GraphBody& g) {
  if (g.opset < 13) return;  // (Softmax's axis then coerces to 2-D)
  const Patterns p(g);
  std::vector<bool> dead(g.nodes.size(), false);
  int fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& second = g.nodes[i];
    if (dead[i] || second.op.op_type() != "MatMul" || second.inputs.size() != 2 ||
        second.outputs.size() != 1 || g.IsConstant(second.inputs[1]))
      continue;
    Node* softmax = p.MadeBy(second.inputs[0], "Softmax");
    if (softmax == nullptr || softmax->inputs.size() != 1 || softmax->op.AttrInt("axis", -1) != -1)
      continue;
    // The scaled scores: Div/Mul(MatMul(Q, Kt), constant scalar), read by the Softmax or by the
    // Add of the mask (either of its sides).
    Node *scale = nullptr, *first = nullptr;
    bool divide = false;
    auto scaled = [&](int value) {
      scale = p.MadeBy(value, "Div");
      divide = scale != nullptr;
      if (scale == nullptr) scale = p.MadeBy(value, "Mul");
      float c = 0.f;
      if (scale == nullptr || scale->inputs.size() != 2 || !p.Scalar(scale->inputs[1], &c))
        return false;
      first = p.MadeBy(scale->inputs[0], "MatMul");
      return first != nullptr && first->inputs.size() == 2 && !g.IsConstant(first->inputs[1]) &&
             first->op.activation == OpNode::Activation::kNone;
    };
    int mask = -1;
    Node* add = p.MadeBy(softmax->inputs[0], "Add");
    if (add != nullptr && add->inputs.size() == 2) {
      if (scaled(add->inputs[0]))
        mask = add->inputs[1];
      else if (scaled(add->inputs[1]))
        mask = add->inputs[0];
      else
        continue;
    } else if (add != nullptr || !scaled(softmax->inputs[0])) {
      continue;
    }
    for (Node* n : {first, scale, softmax}) dead[p.Index(n)] = true;
    if (add != nullptr) dead[p.Index(add)] = true;
    Node made =
        g.MakeNode("Attention", second.op.name() + ".attention", Attention,
                   {first->inputs[0], first->inputs[1], scale->inputs[1], mask, second.inputs[1]},
                   {second.outputs[0]});
    auto* divide_attr = g.made_nodes.back()->add_attribute();
    divide_attr->set_name("divide");
    divide_attr->set_type(onnx::AttributeProto::INT);
    divide_attr->set_i(divide ? 1 : 0);
    second = std::move(made);
    ++fused;
  }
  EraseMarked(g, dead);
  if (fused) g.pass_log.push_back("attention fused: " + std::to_string(fused));
}

void FuseGemmActivations(GraphBody& g) {
  const std::vector<int> readers = g.Readers();
  std::vector<bool> fused(g.nodes.size(), false);
  int count = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& gemm = g.nodes[i];
    if (gemm.op.op_type() != "Gemm" || gemm.outputs.size() != 1 || gemm.outputs[0] < 0 ||
        readers[gemm.outputs[0]] != 1)
      continue;
    for (size_t j = i + 1; j < g.nodes.size(); ++j) {
      Node& act = g.nodes[j];
      if (act.inputs.size() != 1 || act.inputs[0] != gemm.outputs[0]) continue;
      const std::string& op = act.op.op_type();
      if (op != "Relu" && op != "Sigmoid") break;
      gemm.op.activation = op == "Relu" ? OpNode::Activation::kRelu : OpNode::Activation::kSigmoid;
      gemm.outputs[0] = act.outputs[0];  // the Gemm now produces the activation's value
      fused[j] = true;
      ++count;
      break;
    }
  }
  EraseMarked(g, fused);
  if (count) g.pass_log.push_back("Gemm activations fused: " + std::to_string(count));
}

void RemoveDeadNodes(GraphBody& g) {
  int removed = 0;
  for (bool changed = true; changed;) {
    changed = false;
    const std::vector<int> readers = g.Readers();
    std::vector<Node> kept;
    for (Node& node : g.nodes) {
      bool read = false;
      for (int id : node.outputs) read = read || (id >= 0 && readers[id] > 0);
      if (read) {
        kept.push_back(std::move(node));
      } else {
        ++removed;
        changed = true;
      }
    }
    g.nodes = std::move(kept);
  }
  if (removed) g.pass_log.push_back("dead nodes removed: " + std::to_string(removed));
}

// ---- channels-last layout -----------------------------------------------------------------------

void ChooseChannelsLast(GraphBody& g) {
  // Values keep their ids in NCHW; a value computed channels-last gets a second id (nhwc_of).
  // Convolutions always run channels-last (converting an NCHW input once; ConvTranspose where its
  // taps tile the output, TapsTileTheOutput); pools, normalisation,
  // elementwise ops and Concat on channels do when their inputs already are; any other reader
  // gets the NCHW value back through a conversion inserted before it.
  std::map<int, int> nhwc_of;
  std::set<int> nchw_ready;     // of those produced channels-last, the ones converted back
  std::set<int> produced_nhwc;  // original ids whose producer now writes the NHWC id only
  std::vector<Node> out;
  int convs = 0, conversions = 0, permuted = 0;
  auto to_nhwc = [&](int id) {
    auto it = nhwc_of.find(id);
    if (it != nhwc_of.end()) return it->second;
    const int t = g.AddValue("nhwc");
    out.push_back(g.MakeNode("NereidToChannelsLast", "to_nhwc", ToChannelsLastOp, {id}, {t}));
    ++conversions;
    return nhwc_of[id] = t;
  };
  auto to_nchw = [&](int id) {
    if (!produced_nhwc.count(id) || nchw_ready.count(id)) return;
    out.push_back(
        g.MakeNode("NereidToChannelsFirst", "to_nchw", ToChannelsFirstOp, {nhwc_of[id]}, {id}));
    nchw_ready.insert(id);
    ++conversions;
  };
  static const std::set<std::string> kUnary = {
      "Relu",     "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Sigmoid", "Tanh",
      "Identity", "Exp",       "Sqrt", "Abs",         "Neg",       "Erf"};
  static const std::set<std::string> kBinary = {"Add", "Sub", "Mul", "Div",
                                                "Max", "Min", "Sum", "PRelu"};
  for (Node& node : g.nodes) {
    const std::string& op = node.op.op_type();
    const auto in_nhwc = [&](int id) { return id >= 0 && nhwc_of.count(id) > 0; };
    const bool one_out = node.outputs.size() == 1 && node.outputs[0] >= 0;
    bool capable = false;
    std::vector<size_t> data_inputs;  // inputs read channels-last
    if (op == "Conv" && one_out && node.inputs.size() >= 2 && g.IsConstant(node.inputs[1]) &&
        g.constants[node.inputs[1]].shape().size() == 4) {
      capable = true;
      data_inputs.push_back(0);
      if (node.op.residual) data_inputs.push_back(3);
    } else if (op == "ConvTranspose" && one_out && node.inputs.size() >= 2 &&
               g.IsConstant(node.inputs[1]) && g.constants[node.inputs[1]].shape().size() == 4 &&
               TapsTileTheOutput(node.op, g.constants[node.inputs[1]].shape())) {
      capable = true;
      data_inputs.push_back(0);
    } else if ((op == "MaxPool" || op == "AveragePool") && one_out && in_nhwc(node.inputs[0]) &&
               node.op.AttrInts("kernel_shape").size() == 2) {
      capable = true;
      data_inputs.push_back(0);
    } else if ((op == "GlobalAveragePool" || op == "GlobalMaxPool" || op == "BatchNormalization") &&
               one_out && in_nhwc(node.inputs[0])) {
      capable = true;
      data_inputs.push_back(0);
      for (size_t k = 1; k < node.inputs.size(); ++k)
        capable = capable && (node.inputs[k] < 0 || g.IsConstant(node.inputs[k]));
    } else if (kUnary.count(op) && one_out && in_nhwc(node.inputs[0])) {
      capable = true;
      data_inputs.push_back(0);
      for (size_t k = 1; k < node.inputs.size(); ++k)
        capable = capable && (node.inputs[k] < 0 || (g.IsConstant(node.inputs[k]) &&
                                                     g.constants[node.inputs[k]].elements() == 1));
    } else if (kBinary.count(op) && one_out && !node.inputs.empty()) {
      bool any = false;
      capable = true;
      for (size_t k = 0; k < node.inputs.size(); ++k) {
        const int id = node.inputs[k];
        if (in_nhwc(id)) {
          any = true;
          data_inputs.push_back(k);
        } else if (!(g.IsConstant(id) && g.constants[id].shape().size() <= 4)) {
          capable = false;
        }
      }
      capable = capable && any;
    } else if (op == "Resize" && one_out && in_nhwc(node.inputs[0])) {
      // (Scales and sizes stay in NCHW order: the op plans on the NCHW shape.)
      capable = true;
      data_inputs.push_back(0);
      for (size_t k = 1; k < node.inputs.size(); ++k)
        capable = capable && (node.inputs[k] < 0 || g.IsConstant(node.inputs[k]));
    } else if (op == "Concat" && one_out && node.op.opset() >= 4 && !node.inputs.empty() &&
               (node.op.AttrInt("axis", 0) == 1 || node.op.AttrInt("axis", 0) == -3)) {
      capable = true;
      for (size_t k = 0; k < node.inputs.size(); ++k) {
        capable = capable && in_nhwc(node.inputs[k]);
        data_inputs.push_back(k);
      }
    }
    if (!capable) {
      for (int id : node.inputs)
        if (id >= 0) to_nchw(id);
      for (int id : node.outputs)
        if (id >= 0) nchw_ready.insert(id);
      out.push_back(std::move(node));
      continue;
    }
    for (size_t k : data_inputs) node.inputs[k] = to_nhwc(node.inputs[k]);
    // Constant operands of elementwise ops: permuted to channels-last ([C,1,1] -> [1,1,1,C]).
    if (kBinary.count(op))
      for (size_t k = 0; k < node.inputs.size(); ++k) {
        const int id = node.inputs[k];
        if (!g.IsConstant(id) || g.constants[id].elements() == 1 ||
            std::find(data_inputs.begin(), data_inputs.end(), k) != data_inputs.end())
          continue;
        const Tensor& c = g.constants[id];
        std::vector<int64_t> shape = c.shape();
        while (shape.size() < 4) shape.insert(shape.begin(), 1);
        Tensor p = Tensor::Allocate(c.type(), {shape[0], shape[2], shape[3], shape[1]});
        TransposeBytes(c.raw(), shape, {0, 2, 3, 1}, DataTypeSize(c.type()), p.mutable_raw());
        node.inputs[k] = g.AddValue("nhwc_constant", std::move(p));
        ++permuted;
      }
    const int original = node.outputs[0];
    const int t = g.AddValue("nhwc");
    nhwc_of[original] = t;
    produced_nhwc.insert(original);
    node.outputs[0] = t;
    node.op.nhwc = true;
    if (op == "Conv") ++convs;
    out.push_back(std::move(node));
  }
  for (const auto& o : g.outputs) to_nchw(g.ValueId(o.name));
  g.nodes = std::move(out);
  if (convs)
    g.pass_log.push_back("channels-last: " + std::to_string(convs) + " Conv, " +
                         std::to_string(conversions) + " layout conversions, " +
                         std::to_string(permuted) + " constants permuted");
}

// ---- weights ------------------------------------------------------------------------------------

// The smoothing of an int8 layer's input channels (kernels::PackedInt8W's 'smooth' per channel;
// empty for none) from its calibrated input statistics and its weights 'nk' (n rows of x.depth:
// (tap, channel) order): SmoothQuant's factors s_j = range_j^alpha / w_max_j^(1 - alpha) (w_max_j:
// channel j's largest weight). 'alpha' from 0 to 1: those, unmeasured; below 0: alpha 0.5 where
// it gives the sampled rows' int8 products (GemmInt8, as the layer runs them) less squared error
// against fp32's than none. (Choosing among 0.25, 0.5 and 0.75 by the same measure picked 0.75
// often, whose errors sit in the weights, the same for every row: MiniLM-L3's embeddings then came
// out further from fp32, 0.0353 against 0.0285 unsmoothed and 0.0223 with 0.5 alone.)
// RapidOCR's recogniser: a 480-channel 1x1 whose input has one channel near 2.5 on every pixel
// (the median channel's range is 0.23) had 7.6% rms error in int8, 2.2% smoothed at alpha 0.7.
std::vector<float> SmoothingFor(const Int8InputStats& x, const float* nk, int64_t n, float alpha) {
  const auto channels = static_cast<int64_t>(x.range.size());
  const int64_t depth = x.depth;
  const int64_t samples = depth > 0 ? static_cast<int64_t>(x.rows.size()) / depth : 0;
  if (channels == 0 || depth % channels != 0 || samples == 0 || n <= 0) return {};
  std::vector<float> w_max(static_cast<size_t>(channels), 0.f);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t l = 0; l < depth; ++l)
      w_max[l % channels] = std::max(w_max[l % channels], std::fabs(nk[j * depth + l]));
  auto factors = [&](double a) {
    std::vector<float> f(static_cast<size_t>(channels), 1.f);
    for (int64_t l = 0; l < channels; ++l)
      if (x.range[l] > 0.f && w_max[l] > 0.f && std::isfinite(x.range[l]))
        f[l] = static_cast<float>(std::clamp(
            std::pow(static_cast<double>(x.range[l]), a) / std::pow(w_max[l], 1.0 - a), 1e-4, 1e4));
    return f;
  };
  if (alpha >= 0.f) return factors(std::min(alpha, 1.f));
  std::vector<double> want(static_cast<size_t>(samples * n));
  for (int64_t r = 0; r < samples; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t l = 0; l < depth; ++l)
        dot += static_cast<double>(x.rows[r * depth + l]) * nk[j * depth + l];
      want[r * n + j] = dot;
    }
  std::vector<float> got(static_cast<size_t>(samples * n)), tiled(static_cast<size_t>(depth));
  auto error = [&](const std::vector<float>& f) {
    for (int64_t l = 0; l < depth; ++l) tiled[l] = f.empty() ? 1.f : f[l % channels];
    const kernels::PackedInt8W w(nk, n, depth, depth, f.empty() ? nullptr : tiled.data());
    kernels::GemmInt8(samples, x.rows.data(), depth, w, nullptr, got.data(), n);
    double sum = 0;
    for (size_t i = 0; i < got.size(); ++i) sum += (got[i] - want[i]) * (got[i] - want[i]);
    return sum;
  };
  std::vector<float> f = factors(0.5);
  return error(f) < error({}) ? f : std::vector<float>();
}

void PackWeights(GraphBody& g, const GraphOptions& options) {
  int convs = 0, int8_convs = 0, winograd_convs = 0, smoothed = 0, calibrated = 0;
  std::vector<std::string> names(g.value_ids.size());
  for (const auto& [name, id] : g.value_ids)
    if (id >= 0 && static_cast<size_t>(id) < names.size()) names[id] = name;
  // The calibrated statistics of the layer writing 'node''s first output, with 'channels'.
  auto stats_of = [&](const Node& node, int64_t channels) -> const Int8InputStats* {
    if (!options.int8_calibration || node.outputs.empty() || node.outputs[0] < 0) return nullptr;
    auto it = options.int8_calibration->find(names[node.outputs[0]]);
    return it != options.int8_calibration->end() &&
                   it->second.range.size() == static_cast<size_t>(channels)
               ? &it->second
               : nullptr;
  };
  for (Node& node : g.nodes) {
    const std::string& op = node.op.op_type();
    if (op == "Conv" && node.inputs.size() >= 2 && g.IsConstant(node.inputs[1])) {
      const Tensor& w = g.constants[node.inputs[1]];
      const int64_t groups = node.op.AttrInt("group", 1);
      if (w.type() != DataType::kFp32 || (w.shape().size() != 3 && w.shape().size() != 4) ||
          groups < 1 || w.shape()[0] % groups != 0)
        continue;
      const size_t rank = w.shape().size();
      // The int8 precision quantizes the weights of every convolution but depthwise ones (their
      // kernel is fp32; they are a small share of the work) and those of fewer than 1,024
      // multiply-adds per output pixel (depth x output channels per group): there each pixel's
      // quantization and the int8 tiles' setup cost more than the products save. MobileNetV2 at
      // batch 1, one thread, fp32 against int8 per layer: the 3-channel stem (27 x 32) 287 vs
      // 522 us, a 1x1 of 32 -> 16 193 vs 277; from 2,304 (96 x 24) on int8 won (152 vs 130 us),
      // at 20k and more by 4-5x. Once the row quantizer took 64 values a step (fifteenth
      // 2026-12-07 session) 1,024 beat 2,048 as the line: RapidOCR's detector 1,391 -> 1,362 us,
      // classifier 466 -> 453, recogniser 7,649 -> 7,521, MobileNetV2 4,167 -> 4,153 (int8, one
      // thread).
      const int64_t kh = rank == 4 ? w.shape()[2] : 1, kw = w.shape()[rank - 1];
      const int64_t macs_per_pixel = w.shape()[1] * kh * kw * (w.shape()[0] / groups);
      const bool int8 = options.int8_weights && macs_per_pixel >= 1024;
      // 3x3 fp32 convolutions of stride and dilation 1 and one group, of 24 input channels and
      // more, 8 outputs and more and 256 input x output channels and more, run as Winograd's
      // F(2x2, 3x3) (ResNet-50, one thread, batch 1: 78.0 -> 66.5 ms; its 3x3 layers 1.5-2.1x
      // faster; RapidOCR's detector's 96 -> 24 at 24x32 486 -> 308 us). Shallower, its 16
      // GEMMs of 16 deep lose what they save (16 -> 16 at 32x32: 73 -> 82 us; 24 -> 8 270 -> 279).
      auto ones = [&](const char* attr) {
        const std::vector<int64_t> v = node.op.AttrInts(attr);
        return std::all_of(v.begin(), v.end(), [](int64_t e) { return e == 1; });
      };
      const bool winograd = !int8 && kernels::WinogradEnabled() && kh == 3 && kw == 3 &&
                            groups == 1 && w.shape()[1] >= 24 && w.shape()[0] >= 8 &&
                            w.shape()[0] * w.shape()[1] >= 256 && ones("strides") &&
                            ones("dilations");
      std::vector<float> smooth;
      const Int8InputStats* x = int8 && groups == 1 ? stats_of(node, w.shape()[1]) : nullptr;
      if (x != nullptr && x->depth == w.shape()[1] * kh * kw) {
        std::vector<float> nk(static_cast<size_t>(w.shape()[0] * x->depth));
        kernels::ConvWeights::GroupRows(w.data<float>(), w.shape()[0], w.shape()[1], kh * kw, 0,
                                        nk.data());
        smooth = SmoothingFor(*x, nk.data(), w.shape()[0], options.int8_smoothing);
        smoothed += !smooth.empty();
        ++calibrated;
      }
      auto plan =
          std::make_unique<ConvPlan>(w.data<float>(), w.shape()[0], w.shape()[1], kh, kw, groups,
                                     int8, winograd, smooth.empty() ? nullptr : smooth.data());
      int8_convs += plan->weights.int8();
      winograd_convs += plan->weights.winograd() != nullptr;
      if (node.inputs.size() > 2 && node.inputs[2] >= 0 && g.IsConstant(node.inputs[2])) {
        const Tensor& b = g.constants[node.inputs[2]];
        if (b.type() == DataType::kFp32 && b.elements() == w.shape()[0])
          plan->bias.assign(b.data<float>(), b.data<float>() + b.elements());
      }
      node.op.conv = plan.get();
      g.conv_plans.push_back(std::move(plan));
      ++convs;
      continue;
    }
    // Constant weights of Gemm/MatMul are packed once, here, into the GEMM's panel layout.
    if ((op != "Gemm" && op != "MatMul") || node.inputs.size() < 2 || node.inputs[1] < 0) continue;
    const int id = node.inputs[1];
    if (!g.IsConstant(id)) continue;  // (an initializer a request may replace is not constant)
    const Tensor& w = g.constants[id];
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
      std::vector<float> smooth;
      if (const Int8InputStats* x = stats_of(node, k); x != nullptr && x->depth == k) {
        smooth = SmoothingFor(*x, rows, n, options.int8_smoothing);
        smoothed += !smooth.empty();
        ++calibrated;
      }
      g.packed_int8.push_back(std::make_unique<kernels::PackedInt8W>(
          rows, n, k, k, smooth.empty() ? nullptr : smooth.data()));
      node.op.packed_int8 = g.packed_int8.back().get();
      continue;
    }
    g.packed.push_back(
        std::make_unique<kernels::PackedMatrixB>(trans, k, n, w.data<float>(), w.shape()[1]));
    node.op.packed_b = g.packed.back().get();
  }
  if (convs)
    g.pass_log.push_back("Conv weights packed: " + std::to_string(convs) +
                         (int8_convs ? " (" + std::to_string(int8_convs) + " in int8)" : "") +
                         (winograd_convs
                              ? " (" + std::to_string(winograd_convs) + " as Winograd F(2x2, 3x3))"
                              : ""));
  if (calibrated)
    g.pass_log.push_back("int8 activations smoothed per channel: " + std::to_string(smoothed) +
                         " of " + std::to_string(calibrated) + " calibrated layers");
}

// A 1x1 convolution (stride 1, no padding, one group, fp32 or int8 weights and a constant bias or
// none, channels-last) whose output only a depthwise convolution (channels-last, 2-D) reads, and
// one that alone reads a depthwise convolution's output (without a residual of its own): the
// depthwise's plan takes them as its expand and project stages (kernels::DepthwiseBlockNhwc);
// the node reads the first's input and, moved to the second's place (its residual may be computed
// after the depthwise), writes the second's output with its residual and activation. MobileNetV2:
// 16 expansions (all but the first block's, which has none) and 17 projections.
void FuseDepthwiseBlocks(GraphBody& g) {
  static const bool enabled = [] {  // NEREID_CONV_BLOCKS=0: each Conv its own node (comparisons)
    const char* v = std::getenv("NEREID_CONV_BLOCKS");
    return v == nullptr || std::string(v) != "0";
  }();
  if (!enabled) return;
  std::map<const ConvPlan*, ConvPlan*> plans;
  for (auto& plan : g.conv_plans) plans[plan.get()] = plan.get();
  auto all = [](const std::vector<int64_t>& v, int64_t e) {
    return std::all_of(v.begin(), v.end(), [e](int64_t x) { return x == e; });
  };
  // The 1x1's stage, where node 'n' is one the block takes.
  auto stage_of = [&](const Node& n, kernels::PointwiseStage* stage) {
    if (n.op.op_type() != "Conv" || n.op.conv == nullptr || !n.op.nhwc || n.outputs.size() != 1 ||
        n.inputs.size() < 2)
      return false;
    const kernels::ConvWeights& w = n.op.conv->weights;
    const Tensor& wt = g.constants[n.inputs[1]];
    const bool bias_ok = n.inputs.size() < 3 || n.inputs[2] < 0 || !n.op.conv->bias.empty();
    if (w.depthwise() || w.small_groups() || w.winograd() != nullptr || !bias_ok ||
        wt.shape().size() != 4 || wt.shape()[2] != 1 || wt.shape()[3] != 1 ||
        n.op.AttrInt("group", 1) != 1 || !all(n.op.AttrInts("strides"), 1) ||
        !all(n.op.AttrInts("pads"), 0) || !all(n.op.AttrInts("kernel_shape"), 1))
      return false;  // (a kernel_shape the weights contradict: the node's own error, unfused)
    if (w.int8())
      stage->int8 = &w.int8_group(0);
    else
      stage->weights = &w.group(0);
    stage->epilogue = EpilogueOf(n.op);
    stage->epilogue.bias = n.op.conv->bias.empty() ? nullptr : n.op.conv->bias.data();
    stage->c_in = wt.shape()[1];
    return true;
  };
  auto depthwise = [&](const Node& n) {
    return n.op.op_type() == "Conv" && n.op.conv != nullptr && n.op.conv->weights.depthwise() &&
           n.op.nhwc && !n.inputs.empty() && n.inputs[0] >= 0 && n.inputs.size() >= 2 &&
           g.IsConstant(n.inputs[1]) && g.constants[n.inputs[1]].shape().size() == 4;
  };
  int expanded = 0, projected = 0;
  for (bool project : {false, true}) {
    const std::vector<int> readers = g.Readers();
    std::map<int, size_t> producer, reader;  // value id -> the node writing it / reading it
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      for (int id : g.nodes[i].outputs)
        if (id >= 0) producer[id] = i;
      for (int id : g.nodes[i].inputs)
        if (id >= 0) reader[id] = i;
    }
    std::vector<bool> dead(g.nodes.size(), false);
    for (size_t d = 0; d < g.nodes.size(); ++d) {
      Node& dw = g.nodes[d];
      if (dead[d] || !depthwise(dw)) continue;
      ConvPlan* plan = plans[dw.op.conv];
      if ((project ? plan->project : plan->expand).present()) continue;  // (moved here)
      kernels::PointwiseStage stage;
      if (!project) {  // the 1x1 before it
        const int in = dw.inputs[0];
        if (readers[in] != 1 || !producer.count(in) || !stage_of(g.nodes[producer[in]], &stage) ||
            g.nodes[producer[in]].op.residual)
          continue;
        plan->expand = stage;
        dw.inputs[0] = g.nodes[producer[in]].inputs[0];
        dead[producer[in]] = true;
        ++expanded;
        continue;
      }
      // The 1x1 after it: its bias into the stage, its residual and activation to the node.
      const int out = dw.outputs.size() == 1 ? dw.outputs[0] : -1;
      if (out < 0 || dw.op.residual || readers[out] != 1 || !reader.count(out)) continue;
      const size_t r = reader[out];
      Node& pw = g.nodes[r];
      if (pw.inputs[0] != out || !stage_of(pw, &stage)) continue;
      stage.epilogue.activation = kernels::GemmEpilogue::kNone;  // (the node's, at run time)
      plan->project = stage;
      plan->depthwise_act = EpilogueOf(dw.op);
      dw.op.activation = pw.op.activation;
      dw.op.activation_a = pw.op.activation_a, dw.op.activation_b = pw.op.activation_b;
      dw.op.residual = pw.op.residual;
      if (pw.op.residual) {
        dw.inputs.resize(4, -1);
        dw.inputs[3] = pw.inputs[3];
      }
      dw.outputs = pw.outputs;
      g.nodes[r] = std::move(dw);
      dead[d] = true;
      ++projected;
    }
    EraseMarked(g, dead);
  }
  if (expanded || projected)
    g.pass_log.push_back("depthwise Conv blocks fused: " + std::to_string(expanded) +
                         " 1x1 before, " + std::to_string(projected) + " 1x1 after");
}

void ReleasePackedOriginals(GraphBody& g) {
  // Weights now packed and read by no other node keep only their shape: the packed copy serves
  // (SgemmPacked is at least as fast at every batch size).
  const std::vector<int> readers = g.Readers();
  for (const Node& node : g.nodes) {
    const bool packed =
        node.op.packed_b != nullptr || node.op.packed_int8 != nullptr || node.op.conv != nullptr;
    if (!packed) continue;
    const int id = node.inputs[1];
    if (readers[id] != 1) continue;
    const Tensor& w = g.constants[id];
    g.constants[id] = Tensor::Borrow(w.type(), w.shape(), nullptr);
  }
}

void PlanLifetimes(GraphBody& g) {
  const std::vector<int> readers = g.Readers();
  const size_t values = g.value_ids.size();
  g.constants.resize(values);
  // Constants nothing reads any more (folded away) are dropped, unless a request may set them.
  for (size_t id = 0; id < values; ++id)
    if (readers[id] == 0 && !g.overridable.count(static_cast<int>(id))) g.constants[id] = Tensor();
  g.last_use.assign(values, -1);
  g.keep.assign(values, false);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int id : g.nodes[i].inputs)
      if (id >= 0) g.last_use[id] = static_cast<int>(i);
  for (const auto& out : g.outputs) g.keep[g.ValueId(out.name)] = true;
  for (size_t id = 0; id < values; ++id)
    if (g.constants[id].valid()) g.keep[id] = true;
}

}  // namespace
}  // namespace nereid::native
