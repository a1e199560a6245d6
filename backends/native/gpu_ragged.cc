// Ragged plans for the GPU (GpuShapes::ragged_max_length): an encoder exported for [batch, tokens]
// inputs compiled token-major, a row per token of every sequence of the batch packed end to end,
// no padding. The graph is compiled at one token per sequence; a second compile without a device
// at the longest length tells each value's tokens axis (the one axis that is 1 in the first and
// the longest length in the second). Per token the ops are then the same ones; those along the
// tokens are made per sequence from the engine's own inputs:
//  - attention: the fused kernel over each query's own sequence (kc::AttentionProblem's
//    token_sequence and sequence_ends);
//  - a ReduceSum/ReduceMean/ReduceMax over the tokens axis (a sentence embedding's pooling): each
//    sequence's tokens pooled into a row per sequence; the steps after it run on those rows;
//  - a constant worked out from the length that differs per position (position embeddings):
//    its rows at the longest length gathered by each token's position in its sequence.
// Anything else that reads across tokens (an op over the tokens axis, a reshape that moves it, a
// sequence value broadcast back over tokens) refuses the plan at load, naming the node.
#include <algorithm>
#include <cstring>
#include <set>

#include "gpu_model.h"

namespace nereid::native {
namespace {

constexpr int kMixed = -2;  // a value whose dims depend on the length other than by one axis
constexpr int kPerSequence = -1;

// Value 'id''s tokens axis (in its full dims, batch first), kPerSequence when its dims do not
// depend on the length, kMixed otherwise.
int TokensAxis(const GpuModel& m, int id) {
  const GpuModel& l = *m.longest;
  if (id < 0 || static_cast<size_t>(id) >= l.values.size()) return kMixed;
  // A fused attention's output, [heads, tokens, d] (at the longest length the transpose after it
  // may have taken its place).
  if (m.attention_steps.count(id) && !l.values[id].defined) return 2;
  std::vector<int64_t> a, b;
  if (auto v = m.views.find(id); v != m.views.end()) {
    auto w = l.views.find(id);
    if (w == l.views.end() || w->second.batch_axis != v->second.batch_axis) return kMixed;
    a = v->second.dims, b = w->second.dims;
  } else if (auto c = l.host_constants.find(id);
             m.values[id].defined && !l.values[id].defined && c != l.host_constants.end()) {
    // A constant per position made a value (PerPosition): its rows at the longest length.
    a = m.values[id].dims, b = c->second.shape();
    while (b.size() > a.size() && b[0] == 1) b.erase(b.begin());  // (a leading batch's 1)
    a.insert(a.begin(), 1), b.insert(b.begin(), 1);
  } else {
    if (!m.values[id].defined || !l.values[id].defined) return kMixed;
    a = m.values[id].dims, b = l.values[id].dims;
    a.insert(a.begin(), 1), b.insert(b.begin(), 1);
  }
  if (a.size() != b.size()) return kMixed;
  int axis = kPerSequence;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    if (axis != kPerSequence || a[i] != 1 || b[i] != m.ragged_max_length) return kMixed;
    axis = static_cast<int>(i);
  }
  return axis;
}

bool Computed(const GpuModel& m, int id) {
  return id >= 0 &&
         (m.views.count(id) > 0 || (static_cast<size_t>(id) < m.values.size() &&
                                    m.values[id].defined && m.host_constants.count(id) == 0));
}

Status Refuse(const GpuNode& n, const std::string& why) {
  return Unsupported(n.who + ": " + why +
                     ": ragged batching on the GPU runs an encoder whose ops work per token, "
                     "but for attention, pooling over the tokens and position embeddings");
}

// A host constant node 'n' reads as input 'k': kept when the same at every length (or the same
// value at every position), else, when it holds a row per position (position embeddings), made a
// value gathered from its rows at the longest length by each token's position.
Status PerPosition(const GpuNode& n, size_t k) {
  GpuModel& m = n.m;
  const int id = n.in(k);
  const Tensor& a = m.host_constants.at(id);
  auto it = m.longest->host_constants.find(id);
  if (it == m.longest->host_constants.end())
    return Refuse(n, "a constant input is not one at the longest length");
  const Tensor& b = it->second;
  if (a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0) return Status::Ok();
  int axis = -1;
  bool one_axis = a.shape().size() == b.shape().size() && a.type() == b.type();
  for (size_t i = 0; one_axis && i < a.shape().size(); ++i) {
    if (a.shape()[i] == b.shape()[i]) continue;
    one_axis = axis < 0 && a.shape()[i] == 1 && b.shape()[i] == m.ragged_max_length;
    axis = static_cast<int>(i);
  }
  if (!one_axis || axis < 0)
    return Refuse(n, "a constant worked out from the sequence length changes shape with it");
  // The same at every position: every slice along the axis equals the one-token constant.
  const int64_t inner = a.elements(), outer = ElementCount(a.shape().data(), axis);
  const size_t size = DataTypeSize(a.type()), block = static_cast<size_t>(inner / outer) * size;
  bool same = true;
  for (int64_t o = 0; same && o < outer; ++o)
    for (int64_t p = 0; same && p < m.ragged_max_length; ++p)
      same = std::memcmp(b.raw() + (o * m.ragged_max_length + p) * block, a.raw() + o * block,
                         block) == 0;
  if (same) return Status::Ok();
  // A row per position: [1, positions, rest...] or [positions, rest...].
  const bool leading_one = a.shape().size() >= 2 && a.shape()[0] == 1 && axis == 1;
  if ((axis != 0 && !leading_one) || a.type() != DataType::kFp32)
    return Refuse(n,
                  "a constant that differs per position along an axis other than the first "
                  "after the batch, or not FP32");
  std::vector<int64_t> dims(a.shape().begin() + (leading_one ? 1 : 0), a.shape().end());
  const int64_t width = ElementCount(dims.data(), dims.size());
  Step s;
  s.kind = Step::kGather;
  s.in = m.positions;
  s.n = m.ragged_max_length, s.k = width;
  ASSIGN_OR_RETURN(s.w, m.UploadFloats(FloatsOf(b), m.float_type));
  m.host_constants.erase(id);
  m.row_broadcast.erase(id);
  m.values[id] = ValueSpec{true, m.float_type, DataType::kFp32, dims, width, -1};
  s.out = id;
  m.steps.push_back(s);
  return Status::Ok();
}

int64_t Normalized(int64_t axis, size_t rank) {
  return axis < 0 ? axis + static_cast<int64_t>(rank) : axis;
}

// The rank of value 'id' with its batch (a view's own dims hold it).
size_t RankOf(const GpuModel& m, int id) {
  if (auto v = m.views.find(id); v != m.views.end()) return v->second.dims.size();
  return m.values[id].dims.size() + 1;
}

}  // namespace

Status AddRaggedInputs(GpuModel& m) {
  const auto add = [&](const char* name, bool sequences) {
    const int id = m.AddValue(ValueSpec{true, kc::ElemType::kI32, DataType::kInt32, {1}, 1, -1});
    IoSpec io{name, id, DataType::kInt32, {1}, 4};
    io.engine_made = true;
    io.sequences = sequences;
    m.inputs.push_back(io);
    return id;
  };
  m.positions = add("(each token's position)", false);
  m.token_sequence = add("(each token's sequence)", false);
  m.sequence_ends = add("(each sequence's end)", true);
  for (const IoSpec& io : m.inputs)
    if (!io.engine_made && TokensAxis(m, io.value) != 1)
      return Unsupported("input '" + io.name +
                         "': ragged batching on the GPU takes inputs [batch, tokens, ...] whose "
                         "tokens dimension is open (-1 in the config)");
  return Status::Ok();
}

StatusOr<RaggedRole> PrepareRaggedNode(const GpuNode& n) {
  GpuModel& m = n.m;
  const OpNode& op = n.node.op;
  const std::string& type = op.op_type();
  bool tokens = false, sequences = false;
  int first_axis = kMixed;  // the first computed input's tokens axis
  for (size_t k = 0; k < n.node.inputs.size(); ++k) {
    const int id = n.in(k);
    if (id < 0) continue;
    if (m.host_constants.count(id)) {
      RETURN_IF_ERROR(PerPosition(n, k));
      if (m.host_constants.count(id)) continue;  // kept as a constant
    }
    if (!Computed(m, id)) continue;
    const int axis = TokensAxis(m, id);
    if (axis == kMixed) return Refuse(n, "an input's shape depends on the length in another way");
    (axis == kPerSequence ? sequences : tokens) = true;
    if (k == 0 || first_axis == kMixed) first_axis = axis;
  }
  if (tokens && sequences)
    return Refuse(n, "it reads a value per sequence (pooled) with values per token");
  if (!tokens) return RaggedRole::kSequences;
  if (type == "Attention") return RaggedRole::kAttention;
  const size_t rank = RankOf(m, n.in(0) >= 0 && Computed(m, n.in(0)) ? n.in(0) : n.out());
  if (type == "ReduceSum" || type == "ReduceMean" || type == "ReduceMax") {
    std::vector<int64_t> axes = op.AttrInts("axes");
    if (auto v = IntsOf(n.graph, m, op, n.in(1)); v && n.in(1) >= 0) axes = *v;
    bool over_tokens = false, others = false;
    for (int64_t a : axes) (Normalized(a, rank) == first_axis ? over_tokens : others) = true;
    if (!over_tokens) return RaggedRole::kTokens;
    if (others || first_axis != 1)
      return Refuse(n,
                    "a reduction over the tokens and other axes, or with the tokens not first "
                    "after the batch");
    return RaggedRole::kPool;
  }
  if (type == "Softmax" || type == "LogSoftmax") {
    const int64_t axis = Normalized(op.AttrInt("axis", op.opset() >= 13 ? -1 : 1), rank);
    if (op.opset() >= 13 ? axis == first_axis : first_axis >= axis)
      return Refuse(n, "a softmax over the tokens axis");
  } else if (type == "LayerNormalization") {
    if (first_axis >= Normalized(op.AttrInt("axis", -1), rank))
      return Refuse(n, "a normalization over the tokens axis");
  } else if (type == "MatMul") {
    if (Computed(m, n.in(1))) return Refuse(n, "a product of two activations (not attention)");
    if (first_axis == static_cast<int>(rank) - 1) return Refuse(n, "a product over the tokens");
  } else if (type == "Gather") {
    if (Computed(m, n.in(0)) && Normalized(op.AttrInt("axis", 0), rank) == first_axis)
      return Refuse(n, "a gather along the tokens axis");
  } else {
    static const std::set<std::string> kPerToken = {
        "Add",         "Sub",       "Mul",      "Div",       "Pow",     "Sqrt",      "Erf",
        "Relu",        "Gelu",      "Tanh",     "Sigmoid",   "Cast",    "Where",     "Equal",
        "Not",         "Neg",       "Identity", "Dropout",   "Clip",    "Min",       "Max",
        "Sum",         "Abs",       "Exp",      "Less",      "Greater", "HardSwish", "LeakyRelu",
        "HardSigmoid", "Transpose", "Squeeze",  "Unsqueeze", "Expand",  "Concat",    "Slice",
        "Reshape",     "Flatten"};  // (a reshape checked once its output exists: FinishRaggedNode)
    if (!kPerToken.count(type)) return Refuse(n, "an op not known to work per token");
  }
  return RaggedRole::kTokens;
}

Status FinishRaggedNode(const GpuNode& n, RaggedRole role, size_t first_step) {
  GpuModel& m = n.m;
  for (size_t i = first_step; i < m.steps.size(); ++i)
    m.steps[i].sequences = role == RaggedRole::kSequences;
  for (int id : n.node.outputs) {
    // (Attention's output is [heads, tokens, d] by its construction; at the longest length the
    // transpose after it may have taken its place.)
    if (id < 0 || !Computed(m, id) || role == RaggedRole::kAttention) continue;
    const int axis = TokensAxis(m, id);
    const bool want_tokens = role == RaggedRole::kTokens || role == RaggedRole::kAttention;
    if (want_tokens ? axis < 0 : axis != kPerSequence)
      return Refuse(n, want_tokens ? "its output's tokens axis is lost or merged with another"
                                   : "its output depends on the length");
    if (role == RaggedRole::kTokens && n.node.inputs.size() > 0 &&
        (n.node.op.op_type() == "Reshape" || n.node.op.op_type() == "Flatten")) {
      // The same elements before the tokens axis in and out: each token's elements stay its own.
      const GpuModel& l = *m.longest;
      const int in = n.in(0);
      if (m.views.count(in) || m.views.count(id))
        return Refuse(n, "a reshape of a transposed view");
      const int ai = TokensAxis(m, in);
      if (ai < 1 || ElementCount(l.values[in].dims.data(), ai - 1) !=
                        ElementCount(l.values[id].dims.data(), axis - 1))
        return Refuse(n, "a reshape that moves the tokens among the other axes");
    }
  }
  if (role == RaggedRole::kAttention) {
    auto it = m.attention_steps.find(n.out());
    if (it == m.attention_steps.end())
      return Refuse(n,
                    "attention not on the fused kernel (it needs precision bf16, fp16 or int8, "
                    "heads of 32 or 64 and a padding mask of one value per key)");
    Step& s = m.steps[it->second];
    if (s.mask >= 0 && m.values[m.Resolve(s.mask)].row_elems != 1)
      return Refuse(n, "an attention mask other than one value per key");
    s.token_sequence = m.token_sequence, s.sequence_ends = m.sequence_ends;
  }
  if (role == RaggedRole::kPool) {
    if (m.steps.size() != first_step + 1 || m.steps.back().kind != Step::kReduce)
      return Refuse(n, "a pooling the GPU compiler did not make one reduction");
    Step& s = m.steps.back();
    s.k *= s.outer, s.outer = 1;  // each token's elements, summed over the sequence's tokens
    s.sequence_ends = m.sequence_ends;
    s.sequences = true;
  }
  return Status::Ok();
}

int RaggedTokensAxis(const GpuModel& m, int id) { return TokensAxis(m, id); }

Status FinishRagged(GpuModel& m) {
  for (Step& s : m.steps) {
    if (s.kind != Step::kAttention || s.token_sequence < 0) continue;
    // One row of every token: the tokens' stride is a row's.
    kc::AttentionProblem& p = s.attention;
    p.q_token = p.q_row, p.k_token = p.k_row, p.v_token = p.v_row;
    p.out_token = m.values[m.Resolve(s.out)].row_elems, p.out_head = p.d, p.out_row = 0;
    p.q_row = p.k_row = p.v_row = p.mask_row = 0;
  }
  m.longest.reset();
  return Status::Ok();
}

}  // namespace nereid::native
