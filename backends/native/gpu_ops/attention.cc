// The GPU's attention family: the Attention node of the graph's passes (FuseAttention:
// MatMul(Q, Kt) -> Div or Mul by a constant -> Add(mask) -> Softmax -> MatMul(., V)). In bf16 and
// fp16, heads of 32 or 64 and a padding mask (one value per key and row) it is one fused kernel
// (kernels/cuda/attention.h) reading Q, K and V where the projections wrote them (the transposing
// copies between go unread: RemoveDeadSteps drops them); otherwise the five ops' own steps.
#include "gpu_model.h"

namespace nereid::native {
namespace {

// Value 'id' per row as [dims] read from a buffer through strides: a strided copy's source (that
// copy's own source where it was itself a strided copy and the two compose), or the value itself,
// contiguous. dims and strides include the rows' (first: a row's elements).
GpuModel::View StridedSource(GpuModel& m, int id) {
  if (auto it = m.strided_copies.find(id); it != m.strided_copies.end()) {
    GpuModel::View v = it->second;
    for (auto inner = m.strided_copies.find(v.source); inner != m.strided_copies.end();
         inner = m.strided_copies.find(v.source))
      if (!ComposeViews(v, inner->second, &v)) break;
    return v;
  }
  return ViewOf(m, id);
}

// The replaced ops one after another: scores = Q Kt, scaled, masked, softmax, times V.
Status Unfused(const GpuNode& n, const ValueSpec& q, const ValueSpec& kt, const ValueSpec& v,
               const Tensor& scale, bool divide) {
  GpuModel& m = n.m;
  const size_t rank = q.dims.size();
  if (rank < 2 || kt.dims.size() != rank || v.dims.size() != rank ||
      !std::equal(q.dims.begin(), q.dims.end() - 2, kt.dims.begin()) ||
      !std::equal(q.dims.begin(), q.dims.end() - 2, v.dims.begin()) ||
      q.dims[rank - 1] != kt.dims[rank - 2] || kt.dims[rank - 1] != v.dims[rank - 2])
    return Unsupported(n.who +
                       ": the GPU engine runs attention over Q, Kt and V of the same "
                       "leading dims");
  const int64_t outer = ElementCount(q.dims.data(), rank - 2);
  const int64_t s = q.dims[rank - 2], d = q.dims[rank - 1], t = kt.dims[rank - 1],
                dv = v.dims[rank - 1];
  auto product = [&](int a, int b, int64_t rows, int64_t k, int64_t cols, int out) {
    Step st;
    st.kind = Step::kBatchedMatMul;
    st.a.value = m.Resolve(InLayout(m, a, false));
    st.b.value = m.Resolve(InLayout(m, b, false));
    st.m = rows, st.k = k, st.n = cols, st.outer = outer;
    ValueSpec y{true, m.float_type, DataType::kFp32, q.dims, 0, -1};
    y.dims[rank - 2] = rows, y.dims[rank - 1] = cols;
    y.row_elems = ElementCount(y.dims.data(), rank);
    return AddElementwise(m, st, y, out);
  };
  const int scores = m.AddValue(ValueSpec{});
  RETURN_IF_ERROR(product(n.in(0), n.in(1), s, d, t, scores));
  const int scaled = m.AddValue(ValueSpec{});
  RETURN_IF_ERROR(CompileBinary(m, divide ? kc::BinaryOp::kDiv : kc::BinaryOp::kMul, {scores},
                                {-1, &scale}, scaled, n.who));
  int masked = scaled;
  if (n.in(3) >= 0) {
    masked = m.AddValue(ValueSpec{});
    const BinaryInput mask =
        n.Constant(3).valid() ? BinaryInput{-1, &n.Constant(3)} : BinaryInput{n.in(3)};
    if (mask.constant == nullptr) RETURN_IF_ERROR(n.Input(3).status());
    RETURN_IF_ERROR(CompileBinary(m, kc::BinaryOp::kAdd, {scaled}, mask, masked, n.who));
    if (m.values[masked].row_elems != outer * s * t)
      return Unsupported(n.who + ": a mask that widens the scores");
  }
  Step softmax;
  softmax.kind = Step::kSoftmax;
  softmax.in = m.Resolve(masked);
  softmax.outer = outer * s, softmax.k = t;
  const int probs = m.AddValue(ValueSpec{});
  ValueSpec spec = m.values[masked];
  spec.alias = -1;
  RETURN_IF_ERROR(AddElementwise(m, softmax, spec, probs));
  return product(probs, n.in(4), s, t, dv, n.out());
}

Status Attention(const GpuNode& n) {
  GpuModel& m = n.m;
  ASSIGN_OR_RETURN(const ValueSpec q, n.Input(0));
  ASSIGN_OR_RETURN(const ValueSpec kt, n.Input(1));
  ASSIGN_OR_RETURN(const ValueSpec v, n.Input(4));
  const Tensor& scale = n.Constant(2);
  if (!scale.valid() || scale.type() != DataType::kFp32 || scale.elements() != 1)
    return Unsupported(n.who + ": the scores' scale must be one constant FP32 value");
  const bool divide = n.node.op.AttrInt("divide", 1) != 0;
  const float c = scale.data<float>()[0];
  if (q.logical != DataType::kFp32 || kt.logical != DataType::kFp32 || v.logical != DataType::kFp32)
    return Unsupported(n.who + ": FP32 only on the GPU");
  // The fused kernel: [heads, tokens, d] per row, self-attention, a mask of [1, 1, tokens].
  bool fused = (m.float_type == kc::ElemType::kBF16 || m.float_type == kc::ElemType::kF16) &&
               q.dims.size() == 3 && kt.dims.size() == 3 && v.dims.size() == 3 && c != 0.f &&
               std::isfinite(c);
  int mask = -1;
  if (fused) {
    const int64_t h = q.dims[0], s = q.dims[1], d = q.dims[2];
    fused = kt.dims == std::vector<int64_t>{h, d, s} && v.dims == std::vector<int64_t>{h, s, d};
    if (fused && n.in(3) >= 0) {
      mask = n.Constant(3).valid() ? -1 : n.in(3);
      const ValueSpec* mv = mask >= 0 ? &m.values[mask] : nullptr;
      fused = mv != nullptr && mv->defined && mv->type == m.float_type && !mv->nhwc &&
              mv->dims == std::vector<int64_t>{1, 1, s};
    }
  }
  if (fused) {
    const GpuModel::View qs = StridedSource(m, n.in(0)), ks = StridedSource(m, n.in(1)),
                         vs = StridedSource(m, n.in(4));
    kc::AttentionProblem p;
    p.type = m.float_type;
    p.heads = q.dims[0], p.tokens = q.dims[1], p.d = q.dims[2];
    // Q and V [row, head, token, d]; Kt [row, head, d, token]: d contiguous in each.
    p.q_row = qs.strides[0], p.q_head = qs.strides[1], p.q_token = qs.strides[2];
    p.k_row = ks.strides[0], p.k_head = ks.strides[1], p.k_token = ks.strides[3];
    p.v_row = vs.strides[0], p.v_head = vs.strides[1], p.v_token = vs.strides[2];
    p.mask_row = p.tokens;
    p.scale = divide ? 1.f / c : c;
    const bool contiguous_d = qs.strides[3] == 1 && ks.strides[2] == 1 && vs.strides[3] == 1;
    const bool aligned = qs.offset % 8 == 0 && ks.offset % 8 == 0 && vs.offset % 8 == 0;
    p.rows = 1;  // (the checks of the kernel's own: strides and sizes)
    if (contiguous_d && aligned && kc::AttentionSupported(p)) {
      Step st;
      st.kind = Step::kAttention;
      st.attention = p;
      st.a.value = qs.source, st.b.value = ks.source, st.in = vs.source, st.mask = mask;
      st.q_offset = qs.offset, st.k_offset = ks.offset, st.v_offset = vs.offset;
      ValueSpec y{true, m.float_type, DataType::kFp32, q.dims, 0, -1};
      y.row_elems = ElementCount(y.dims.data(), y.dims.size());
      ++m.fused_attention;
      m.attention_steps[n.out()] = m.steps.size();
      return AddElementwise(m, st, y, n.out());
    }
  }
  return Unfused(n, q, kt, v, scale, divide);
}

}  // namespace

std::vector<GpuOpDef> GpuAttentionOps() { return {{"Attention", Attention}}; }

}  // namespace nereid::native
