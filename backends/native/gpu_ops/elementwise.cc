// The GPU's elementwise family: Add, Sub, Mul, Div, Max, Min, Sum with numpy broadcasting (the
// simple kernel for equal shapes and trailing constants, the strided one otherwise), Relu,
// Sigmoid, Tanh, Gelu, the epilogue activations standing alone (Clip, LeakyRelu, HardSigmoid,
// HardSwish), Identity and Dropout (aliases of their input).
#include <algorithm>

#include "gpu_model.h"

namespace nereid::native {

// Binary arithmetic with numpy broadcasting: the output's rows are its first axis (a value
// operand has all the output's axes, a constant none that varies along the rows). Images stay
// channels-last where a value operand is; equal shapes and trailing constants run the simple
// kernel, anything else the strided one.
Status CompileBinary(GpuModel& m, kc::BinaryOp op, BinaryInput a, BinaryInput b, int out,
                     const std::string& who) {
  if (a.constant != nullptr && b.constant != nullptr)
    return Unsupported(who + ": both operands constant");
  BinaryInput in[2] = {a, b};
  std::vector<int64_t> shape[2];
  ValueSpec like;  // the value operand of most dimensions: the output's type
  for (int side = 0; side < 2; ++side) {
    if (in[side].constant != nullptr) {
      shape[side] = in[side].constant->shape();
      continue;
    }
    const ValueSpec v = m.values[in[side].value];
    shape[side] = v.dims;
    shape[side].insert(shape[side].begin(), 1);  // the rows
    if (v.dims.size() >= like.dims.size() || !like.defined) like = v;
  }
  const size_t rank = std::max({shape[0].size(), shape[1].size(), size_t{1}});
  if (rank > static_cast<size_t>(kc::kMaxBroadcastRank))
    return Unsupported(who + ": more than " + std::to_string(kc::kMaxBroadcastRank - 1) +
                       " dimensions per row on the GPU");
  for (auto& s : shape) s.insert(s.begin(), rank - s.size(), 1);
  std::vector<int64_t> out_shape(rank);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t x = shape[0][d], y = shape[1][d];
    if (x != y && x != 1 && y != 1)
      return InvalidArgument(who + ": shapes " + ShapeString(shape[0]) + " and " +
                             ShapeString(shape[1]) + " do not broadcast");
    out_shape[d] = std::max(x, y);
  }
  for (int side = 0; side < 2; ++side) {
    if (in[side].constant != nullptr) {
      if (shape[side][0] != 1)
        return Unsupported(who + ": a constant operand that varies along the batch");
      if (in[side].constant->type() != like.logical)
        return Unsupported(who + ": operands of different types");
    } else {
      const ValueSpec& v = m.values[in[side].value];
      if (v.dims.size() + 1 != rank)
        return Unsupported(who + ": a value broadcast over more dimensions than its own");
      if (v.logical != like.logical) return Unsupported(who + ": operands of different types");
    }
  }
  // Channels-last when the output is an image of several pixels and a value operand is so.
  const bool image = rank == 4 && out_shape[2] * out_shape[3] > 1;
  bool nhwc = false;
  for (int side = 0; side < 2; ++side)
    nhwc = nhwc || (image && in[side].constant == nullptr && m.values[in[side].value].nhwc);
  int64_t strides[2][kc::kMaxBroadcastRank] = {};
  for (int side = 0; side < 2; ++side) {
    const std::vector<int64_t>& sh = shape[side];
    int64_t* st = strides[side];
    int64_t step = 1;
    for (size_t d = rank; d-- > 0;) st[d] = step, step *= sh[d];
    if (in[side].constant == nullptr) {
      in[side].value = InLayout(m, in[side].value, nhwc);
      const ValueSpec& v = m.values[in[side].value];
      if (v.nhwc && IsImage(v)) {  // [rows, c, h, w] stored as [rows, h, w, c]
        const int64_t c = sh[1], h = sh[2], w = sh[3];
        st[0] = c * h * w, st[1] = 1, st[2] = w * c, st[3] = c;
      }
    }
    for (size_t d = in[side].constant == nullptr ? 1 : 0; d < rank; ++d)  // values vary by row
      if (sh[d] == 1) st[d] = 0;
  }
  // The output's own order: rows, h, w, c when channels-last.
  std::vector<size_t> order(rank);
  for (size_t d = 0; d < rank; ++d) order[d] = d;
  if (nhwc) order = {0, 2, 3, 1};
  Step s;
  s.op = op;
  s.broadcast.rank = static_cast<int>(rank);
  for (size_t d = 0; d < rank; ++d) {
    s.broadcast.dims[d] = out_shape[order[d]];
    s.broadcast.a_stride[d] = strides[0][order[d]];
    s.broadcast.b_stride[d] = strides[1][order[d]];
  }
  // The simple kernel: each operand whole, or a constant repeating with a period of the output's
  // last axes.
  bool simple = true;
  int64_t period[2] = {0, 0};
  for (int side = 0; side < 2; ++side) {
    const int64_t* st = side == 0 ? s.broadcast.a_stride : s.broadcast.b_stride;
    int64_t contiguous = 1, count = 1;
    size_t k = rank;  // the operand's axes from k on are the output's, contiguous
    while (k > 0 && (st[k - 1] == contiguous || s.broadcast.dims[k - 1] == 1)) {
      --k;
      contiguous *= s.broadcast.dims[k];
    }
    for (size_t d = 0; d < k; ++d)
      if (st[d] != 0 && s.broadcast.dims[d] != 1) simple = false;
    for (size_t d = k; d < rank; ++d) count *= s.broadcast.dims[d];
    period[side] = count;
    if (in[side].constant == nullptr && k > 0) simple = false;
  }
  for (int side = 0; side < 2; ++side) {
    Operand& operand = side == 0 ? s.a : s.b;
    if (in[side].constant == nullptr) {
      operand.value = m.Resolve(in[side].value);
      continue;
    }
    const Tensor& c = *in[side].constant;
    if (c.type() == DataType::kFp32) {
      ASSIGN_OR_RETURN(operand.constant, m.UploadFloats(FloatsOf(c), like.type));
    } else {
      ASSIGN_OR_RETURN(operand.constant, m.Upload(c.raw(), c.bytes()));
    }
    operand.count = period[side];
  }
  s.kind = simple ? Step::kBinary : Step::kBroadcast;
  ValueSpec result = like;
  result.dims.assign(out_shape.begin() + 1, out_shape.end());
  result.row_elems = ElementCount(result.dims.data(), result.dims.size());
  result.nhwc = nhwc;
  return AddElementwise(m, s, result, out);
}

namespace {

kc::BinaryOp BinaryOpOf(const std::string& op) {
  static const std::map<std::string, kc::BinaryOp> kOps = {
      {"Add", kc::BinaryOp::kAdd}, {"Sub", kc::BinaryOp::kSub}, {"Mul", kc::BinaryOp::kMul},
      {"Div", kc::BinaryOp::kDiv}, {"Max", kc::BinaryOp::kMax}, {"Min", kc::BinaryOp::kMin},
      {"Sum", kc::BinaryOp::kAdd}};
  return kOps.at(op);
}

// The output 'out' as another name of input 0's buffer.
Status Alias(const GpuNode& n) {
  ASSIGN_OR_RETURN(ValueSpec alias, n.Input(0));
  alias.alias = n.m.Resolve(n.in(0));
  n.m.values[n.out()] = alias;
  return Status::Ok();
}

Status Binary(const GpuNode& n) {
  const std::string& op = n.node.op.op_type();
  const bool variadic = op == "Sum" || op == "Max" || op == "Min";
  const size_t count = n.node.inputs.size();
  if (count < (variadic ? 1u : 2u) || (!variadic && count != 2))
    return InvalidArgument(n.who + ": " + (variadic ? "one or more" : "two") + " inputs expected");
  std::vector<BinaryInput> in;
  for (size_t k = 0; k < count; ++k) {
    if (n.Constant(k).valid()) {
      in.push_back({-1, &n.Constant(k)});
    } else {
      RETURN_IF_ERROR(n.Input(k).status());
      in.push_back({n.in(k)});
    }
  }
  if (in.size() == 1) {
    if (in[0].constant != nullptr) return Unsupported(n.who + ": a constant");
    return Alias(n);
  }
  // Three or more operands: folded left to right through values of their own.
  BinaryInput acc = in[0];
  for (size_t k = 1; k < in.size(); ++k) {
    const int target = k + 1 == in.size() ? n.out() : n.m.AddValue(ValueSpec{});
    RETURN_IF_ERROR(CompileBinary(n.m, BinaryOpOf(op), acc, in[k], target, n.who));
    acc = {target};
  }
  return Status::Ok();
}

Status Unary(const GpuNode& n) {
  static const std::map<std::string, kc::Activation> kActivations = {
      {"Relu", kc::Activation::kRelu},
      {"Sigmoid", kc::Activation::kSigmoid},
      {"Tanh", kc::Activation::kTanh},
      {"Gelu", kc::Activation::kGelu}};
  const std::string& op = n.node.op.op_type();
  ASSIGN_OR_RETURN(const ValueSpec x, n.Input(0));
  if (x.logical != DataType::kFp32) return Unsupported(n.who + ": FP32 only on the GPU");
  if (op == "Gelu" && n.node.op.HasAttr("approximate") && n.node.op.AttrInt("approximate", 0) != 0)
    return Unsupported(n.who + ": the tanh approximation of Gelu is not on the GPU");
  Step s;
  s.kind = Step::kUnary;
  s.act = kActivations.at(op);
  float divisor = kSqrt2;  // a fused GELU's x / d inside erf (FuseGelus): the kernel's is sqrt(2)
  if (op == "Gelu" && n.in(1) >= 0 && (!ScalarOf(n.Constant(1), &divisor) || !IsSqrt2(divisor)))
    return Unsupported(n.who + ": erf(x / " + std::to_string(divisor) +
                       "): the GPU's GELU divides by sqrt(2)");
  s.in = n.m.Resolve(n.in(0));
  return AddElementwise(n.m, s, x, n.out());
}

// Clip, LeakyRelu, HardSigmoid, HardSwish: the convolution epilogue's activations, alone.
Status EpilogueActivation(const GpuNode& n) {
  ASSIGN_OR_RETURN(const ValueSpec x, n.Input(0));
  if (x.logical != DataType::kFp32) return Unsupported(n.who + ": FP32 only on the GPU");
  OpNode::Activation act = OpNode::Activation::kNone;
  Step s;
  if (!FusableActivation(
          n.node, [&](int id) { return id >= 0 && n.graph.constant(id).valid(); },
          [&](int id) -> const Tensor& { return n.graph.constant(id); }, &act, &s.conv.act_a,
          &s.conv.act_b))
    return Unsupported(n.who + ": Clip's bounds must be constant FP32 scalars on the GPU");
  ASSIGN_OR_RETURN(s.conv.act, ConvActivationOf(act, n.who));
  s.kind = Step::kActivation;
  s.in = n.m.Resolve(n.in(0));
  return AddElementwise(n.m, s, x, n.out());
}

}  // namespace

std::vector<GpuOpDef> GpuElementwiseOps() {
  std::vector<GpuOpDef> ops;
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum"})
    ops.push_back({op, Binary});
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Gelu"}) ops.push_back({op, Unary});
  for (const char* op : {"Clip", "LeakyRelu", "HardSigmoid", "HardSwish"})
    ops.push_back({op, EpilogueActivation});
  ops.push_back({"Identity", Alias});
  // Inference: the identity; a mask output stays undefined (a reader of it is refused).
  ops.push_back({"Dropout", Alias, 2});
  return ops;
}

}  // namespace nereid::native
