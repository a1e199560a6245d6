// The GPU's GEMM family: Gemm of [rows, K] activations and MatMul of [rows, ..., K] ones by
// constant 2-D weights, in the model's precision (int8 per output channel where K allows and each
// row is one vector), bias and Relu/Sigmoid fused; and MatMul of two activations of the same
// leading dims (attention's products), one small product per leading index.
#include <algorithm>

#include "gpu_model.h"

namespace nereid::native {
namespace {

// MatMul of two computed values [rows, ..., m, k] x [rows, ..., k, n] with equal leading dims.
Status ProductOfValues(const GpuNode& g) {
  ASSIGN_OR_RETURN(const ValueSpec a, g.Input(0));
  ASSIGN_OR_RETURN(const ValueSpec b, g.Input(1));
  if (a.logical != DataType::kFp32 || b.logical != DataType::kFp32)
    return Unsupported(g.who + ": FP32 only on the GPU");
  const size_t rank = a.dims.size();
  if (rank < 2 || b.dims.size() != rank ||
      !std::equal(a.dims.begin(), a.dims.end() - 2, b.dims.begin()))
    return Unsupported(g.who + ": the GPU engine multiplies two values of the same leading dims (" +
                       ShapeString(a.dims) + " and " + ShapeString(b.dims) + " per row)");
  if (a.dims[rank - 1] != b.dims[rank - 2])
    return InvalidArgument(g.who + ": shapes " + ShapeString(a.dims) + " and " +
                           ShapeString(b.dims) + " per row do not multiply");
  Step s;
  s.kind = Step::kBatchedMatMul;
  s.a.value = g.m.Resolve(InLayout(g.m, g.in(0), false));
  s.b.value = g.m.Resolve(InLayout(g.m, g.in(1), false));
  s.m = a.dims[rank - 2], s.k = a.dims[rank - 1], s.n = b.dims[rank - 1];
  s.outer = ElementCount(a.dims.data(), rank - 2);
  ValueSpec y = a;
  y.dims[rank - 1] = s.n;
  y.row_elems = ElementCount(y.dims.data(), rank);
  y.nhwc = false;
  return AddElementwise(g.m, s, y, g.out());
}

Status Gemm(const GpuNode& g) {
  const Graph::Node& node = g.node;
  GpuModel& m = g.m;
  const std::string& who = g.who;
  const std::string& op = node.op.op_type();
  const int out = g.out();
  ASSIGN_OR_RETURN(const ValueSpec x_spec, g.Input(0));
  const ValueSpec* x = &x_spec;
  const bool gemm = op == "Gemm";
  const Tensor& b = g.Constant(1);
  if (!gemm && !b.valid() && g.in(1) >= 0 && g.m.values[g.in(1)].defined) return ProductOfValues(g);
  if (b.valid() && b.raw() == nullptr)
    return Internal(who + ": the weights were released (the graph was loaded for the CPU)");
  if (x->logical != DataType::kFp32 || !b.valid() || b.type() != DataType::kFp32 ||
      b.shape().size() != 2 || x->dims.empty() || (gemm && x->dims.size() != 1))
    return Unsupported(who + ": the GPU engine runs FP32 [rows, K] (MatMul: [rows, ..., K]) x " +
                       "constant 2-D FP32 weights, or MatMul of two values");
  if (gemm && node.op.AttrInt("transA", 0) != 0)
    return Unsupported(who + ": transA is not supported on the GPU");
  const bool trans_b = gemm && node.op.AttrInt("transB", 0) != 0;
  const int64_t k = x->dims.back();
  // MatMul of [rows, ..., K]: each row's leading vectors are rows of the GEMM too.
  const int64_t outer = ElementCount(x->dims.data(), x->dims.size() - 1);
  const int64_t n = trans_b ? b.shape()[0] : b.shape()[1];
  if ((trans_b ? b.shape()[1] : b.shape()[0]) != k)
    return InvalidArgument(who + ": weight shape " + ShapeString(b.shape()) +
                           " does not fit an input of " + std::to_string(k) + " columns");
  // Weights stored n x k (a Linear layer's layout) in the model's precision.
  std::vector<float> w = FloatsOf(b);
  if (!trans_b) {
    std::vector<float> t(w.size());
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j) t[j * k + i] = w[i * n + j];
    w.swap(t);
  }
  Step s;
  s.kind = Step::kGemm;
  s.in = m.Resolve(x->dims.size() > 1 ? InLayout(m, node.inputs[0], false) : node.inputs[0]);
  s.n = n, s.k = k, s.outer = outer;
  if (m.precision == Precision::kInt8 && k % 16 == 0) {
    // Per output channel, the same arithmetic as the device's quantization of each vector of x
    // (each of a row's 'outer' vectors: a sequence's tokens each get their own scale). A GEMM whose
    // k is no multiple of 16 (no int8 kernel takes it) stays in bf16.
    RETURN_IF_ERROR(m.UploadInt8Rows(w, n, k, &s.w, &s.w_scale));
    ++m.int8_gemms;
    m.int8_max_in = std::max(m.int8_max_in, outer * k);
    m.int8_max_vectors = std::max(m.int8_max_vectors, outer);
  } else {
    ASSIGN_OR_RETURN(s.w, m.UploadFloats(w, m.float_type));
  }
  s.alpha = gemm ? node.op.AttrFloat("alpha", 1.f) : 1.f;
  // Gemm's C, or the bias FuseMatMulEpilogues gave a MatMul.
  if (node.inputs.size() > 2 && node.inputs[2] >= 0) {
    const Tensor& c = g.Constant(2);
    if (!c.valid() || c.elements() != n)
      return Unsupported(who + ": C must be a constant bias of " + std::to_string(n) +
                         " elements on the GPU");
    std::vector<float> bias = FloatsOf(c);
    const float beta = gemm ? node.op.AttrFloat("beta", 1.f) : 1.f;
    for (float& v : bias) v *= beta;
    ASSIGN_OR_RETURN(const void* dbias, m.UploadFloats(bias, kc::ElemType::kF32));
    s.bias = static_cast<const float*>(dbias);
  }
  ASSIGN_OR_RETURN(s.act, GpuActivationOf(node, who));
  std::vector<int64_t> dims(x->dims.begin(), x->dims.end() - 1);
  dims.push_back(n);
  // The residual FuseMatMulEpilogues gave a MatMul: a value of the output's shape, added last.
  if (!gemm && node.inputs.size() > 3 && node.inputs[3] >= 0) {
    ASSIGN_OR_RETURN(const ValueSpec r, g.Input(3));
    if (r.dims != dims || r.logical != DataType::kFp32)
      return Unsupported(who + ": a residual of " + ShapeString(r.dims) +
                         " per row on an output of " + ShapeString(dims));
    s.residual = m.Resolve(InLayout(m, node.inputs[3], false));
  }
  m.values[out] = ValueSpec{true, m.float_type, DataType::kFp32, dims, outer * n, -1};
  s.out = out;
  m.steps.push_back(s);
  ++m.gemms;
  return Status::Ok();
}

}  // namespace

std::vector<GpuOpDef> GpuGemmOps() { return {{"Gemm", Gemm}, {"MatMul", Gemm}}; }

}  // namespace nereid::native
