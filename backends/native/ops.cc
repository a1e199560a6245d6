#include "ops.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "cpu/elementwise.h"
#include "cpu/gemm.h"
#include "cpu/gemm_int8.h"
#include "nereid/half.h"

namespace nereid::native {

// ---- OpNode -------------------------------------------------------------------------------------

const std::string& OpNode::op_type() const { return proto_->op_type(); }
const std::string& OpNode::name() const { return proto_->name(); }

static const onnx::AttributeProto* FindAttr(const onnx::NodeProto* node, const std::string& name) {
  for (const auto& a : node->attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

bool OpNode::HasAttr(const std::string& name) const { return FindAttr(proto_, name) != nullptr; }
int64_t OpNode::AttrInt(const std::string& name, int64_t fallback) const {
  const auto* a = FindAttr(proto_, name);
  return a ? a->i() : fallback;
}
float OpNode::AttrFloat(const std::string& name, float fallback) const {
  const auto* a = FindAttr(proto_, name);
  return a ? a->f() : fallback;
}
std::vector<int64_t> OpNode::AttrInts(const std::string& name) const {
  const auto* a = FindAttr(proto_, name);
  return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
}
StatusOr<Tensor> OpNode::AttrTensor(const std::string& name) const {
  const auto* a = FindAttr(proto_, name);
  if (a == nullptr || !a->has_t()) return Error("missing tensor attribute '" + name + "'");
  return TensorFromProto(a->t());
}
Status OpNode::Error(const std::string& message) const {
  return InvalidArgument(op_type() + " node '" + name() + "': " + message);
}

namespace {

// ---- helpers ------------------------------------------------------------------------------------

// Calls f(T{}) with the C++ type of a numeric DataType.
template <typename F>
Status DispatchNumeric(const OpNode& node, DataType t, F&& f) {
  switch (t) {
    case DataType::kFp32:
      return f(float{});
    case DataType::kFp64:
      return f(double{});
    case DataType::kInt8:
      return f(int8_t{});
    case DataType::kInt16:
      return f(int16_t{});
    case DataType::kInt32:
      return f(int32_t{});
    case DataType::kInt64:
      return f(int64_t{});
    case DataType::kUint8:
      return f(uint8_t{});
    case DataType::kUint16:
      return f(uint16_t{});
    case DataType::kUint32:
      return f(uint32_t{});
    case DataType::kUint64:
      return f(uint64_t{});
    default:
      return Unsupported(node.op_type() + " node '" + node.name() + "': element type " +
                         std::string(DataTypeName(t)) + " is not supported");
  }
}

Status RequireInputs(const OpNode& node, const std::vector<const Tensor*>& in, size_t n) {
  if (in.size() < n) return node.Error("needs " + std::to_string(n) + " inputs");
  for (size_t i = 0; i < n; ++i)
    if (in[i] == nullptr) return node.Error("input " + std::to_string(i) + " is missing");
  return Status::Ok();
}

int64_t NormalizeAxis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

int64_t Product(const std::vector<int64_t>& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

StatusOr<std::vector<int64_t>> BroadcastShape(const OpNode& node, const std::vector<int64_t>& a,
                                              const std::vector<int64_t>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return node.Error("shapes " + ShapeString(a) + " and " + ShapeString(b) +
                        " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Element strides of 'shape' aligned to 'out' (rank-padded), 0 on broadcast dimensions.
std::vector<int64_t> BroadcastStrides(const std::vector<int64_t>& shape,
                                      const std::vector<int64_t>& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    const size_t o = i + (out.size() - shape.size());
    strides[o] = shape[i] == 1 ? 0 : stride;
    stride *= shape[i];
  }
  return strides;
}

template <typename T, typename Op>
void BinaryLoop(const Tensor& a, const Tensor& b, Tensor& y, Op op) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* py = y.mutable_data<T>();
  const int64_t n = y.elements();
  if (a.shape() == y.shape() && b.shape() == y.shape()) {
    for (int64_t i = 0; i < n; ++i) py[i] = op(pa[i], pb[i]);
    return;
  }
  if (b.elements() == 1 && a.shape() == y.shape()) {
    const T s = pb[0];
    for (int64_t i = 0; i < n; ++i) py[i] = op(pa[i], s);
    return;
  }
  const std::vector<int64_t>& shape = y.shape();
  const size_t rank = shape.size();
  const auto sa = BroadcastStrides(a.shape(), shape);
  const auto sb = BroadcastStrides(b.shape(), shape);
  // Walk rows of the last dimension; the inner loop is strided only by 0 or 1.
  const int64_t inner = rank ? shape[rank - 1] : 1;
  const int64_t ia = rank ? sa[rank - 1] : 0, ib = rank ? sb[rank - 1] : 0;
  std::vector<int64_t> index(rank, 0);
  for (int64_t row = 0; row < n / std::max<int64_t>(inner, 1); ++row) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d + 1 < rank; ++d) {
      oa += index[d] * sa[d];
      ob += index[d] * sb[d];
    }
    T* out = py + row * inner;
    for (int64_t j = 0; j < inner; ++j) out[j] = op(pa[oa + j * ia], pb[ob + j * ib]);
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

template <typename OpFactory>
Status Binary(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out,
              OpFactory factory) {
  RETURN_IF_ERROR(RequireInputs(node, in, 2));
  const Tensor& a = *in[0];
  const Tensor& b = *in[1];
  if (a.type() != b.type())
    return node.Error("input types differ: " + std::string(DataTypeName(a.type())) + " and " +
                      std::string(DataTypeName(b.type())));
  ASSIGN_OR_RETURN(auto shape, BroadcastShape(node, a.shape(), b.shape()));
  out[0] = Tensor::Allocate(a.type(), shape);
  return DispatchNumeric(node, a.type(), [&](auto tag) -> Status {
    using T = decltype(tag);
    BinaryLoop<T>(a, b, out[0], factory(tag));
    return Status::Ok();
  });
}

Status Add(const OpNode& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return Binary(n, in, out, [](auto tag) {
    using T = decltype(tag);
    return [](T x, T y) { return static_cast<T>(x + y); };
  });
}
Status Sub(const OpNode& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return Binary(n, in, out, [](auto tag) {
    using T = decltype(tag);
    return [](T x, T y) { return static_cast<T>(x - y); };
  });
}
Status Mul(const OpNode& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return Binary(n, in, out, [](auto tag) {
    using T = decltype(tag);
    return [](T x, T y) { return static_cast<T>(x * y); };
  });
}
Status Div(const OpNode& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return Binary(n, in, out, [](auto tag) {
    using T = decltype(tag);
    // Integer division by zero is undefined in ONNX; answer 0 rather than trap the server.
    return [](T x, T y) {
      if constexpr (std::is_integral_v<T>)
        return y == 0 ? T(0) : static_cast<T>(x / y);
      else
        return static_cast<T>(x / y);
    };
  });
}

template <typename FloatFn, typename DoubleFn>
Status UnaryFloat(const OpNode& node, const std::vector<const Tensor*>& in,
                  std::vector<Tensor>& out, FloatFn f, DoubleFn d) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  out[0] = Tensor::Allocate(x.type(), x.shape());
  if (x.type() == DataType::kFp32) {
    f(x.data<float>(), out[0].mutable_data<float>(), x.elements());
    return Status::Ok();
  }
  if (x.type() == DataType::kFp64) {
    const double* px = x.data<double>();
    double* py = out[0].mutable_data<double>();
    for (int64_t i = 0; i < x.elements(); ++i) py[i] = d(px[i]);
    return Status::Ok();
  }
  return node.Error("element type " + std::string(DataTypeName(x.type())) + " is not supported");
}

Status Relu(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  if (x.type() == DataType::kFp32) {
    out[0] = Tensor::Allocate(x.type(), x.shape());
    kernels::Relu(x.data<float>(), out[0].mutable_data<float>(), x.elements());
    return Status::Ok();
  }
  out[0] = Tensor::Allocate(x.type(), x.shape());
  return DispatchNumeric(node, x.type(), [&](auto tag) -> Status {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = out[0].mutable_data<T>();
    for (int64_t i = 0; i < x.elements(); ++i) py[i] = px[i] > T(0) ? px[i] : T(0);
    return Status::Ok();
  });
}

Status Sigmoid(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return UnaryFloat(node, in, out, kernels::Sigmoid,
                    [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
}

Status Tanh(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return UnaryFloat(node, in, out, kernels::Tanh, [](double v) { return std::tanh(v); });
}

Status Softmax(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  if (x.type() != DataType::kFp32) return node.Error("only FP32 is supported");
  const int64_t rank = static_cast<int64_t>(x.shape().size());
  const bool legacy = node.opset() < 13;  // before opset 13: coerce to 2-D at 'axis' (default 1)
  const int64_t axis = NormalizeAxis(node.AttrInt("axis", legacy ? 1 : -1), rank);
  if (axis < 0 || axis >= std::max<int64_t>(rank, 1)) return node.Error("axis out of range");
  out[0] = Tensor::Allocate(x.type(), x.shape());
  if (rank == 0) {
    out[0].mutable_data<float>()[0] = 1.f;
    return Status::Ok();
  }
  const auto& s = x.shape();
  if (legacy)
    kernels::Softmax(x.data<float>(), out[0].mutable_data<float>(), Product(s, 0, axis),
                     Product(s, axis, s.size()), 1);
  else
    kernels::Softmax(x.data<float>(), out[0].mutable_data<float>(), Product(s, 0, axis), s[axis],
                     Product(s, axis + 1, s.size()));
  return Status::Ok();
}

template <typename T>
void NaiveMatMul(int64_t m, int64_t n, int64_t k, const T* a, const T* b, T* c) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      T sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += a[i * k + p] * b[p * n + j];
      c[i * n + j] = sum;
    }
}

Status MatMul(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 2));
  const Tensor& a = *in[0];
  const Tensor& b = *in[1];
  if (a.type() != b.type()) return node.Error("input types differ");
  if (a.shape().empty() || b.shape().empty()) return node.Error("inputs must have rank >= 1");
  std::vector<int64_t> sa = a.shape(), sb = b.shape();
  const bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
  if (a_vec) sa.insert(sa.begin(), 1);
  if (b_vec) sb.push_back(1);
  const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  if (sb[sb.size() - 2] != k)
    return node.Error("cannot multiply " + ShapeString(a.shape()) + " by " +
                      ShapeString(b.shape()));
  std::vector<int64_t> ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  ASSIGN_OR_RETURN(auto batch, BroadcastShape(node, ba, bb));
  std::vector<int64_t> shape = batch;
  if (!a_vec) shape.push_back(m);
  if (!b_vec) shape.push_back(n);
  out[0] = Tensor::Allocate(a.type(), shape);
  const int64_t batches = Product(batch, 0, batch.size());
  const auto stride_a = BroadcastStrides(ba, batch), stride_b = BroadcastStrides(bb, batch);
  return DispatchNumeric(node, a.type(), [&](auto tag) -> Status {
    using T = decltype(tag);
    std::vector<int64_t> index(batch.size(), 0);
    for (int64_t bi = 0; bi < batches; ++bi) {
      int64_t oa = 0, ob = 0;
      for (size_t d = 0; d < batch.size(); ++d) {
        oa += index[d] * stride_a[d];
        ob += index[d] * stride_b[d];
      }
      const T* pa = a.data<T>() + oa * m * k;
      T* pc = out[0].mutable_data<T>() + bi * m * n;
      // Packed constant weights: their original bytes may be gone (the graph keeps only the
      // packed copy), so 'b' is read only on the other paths.
      if constexpr (std::is_same_v<T, float>) {
        if (node.packed_int8 != nullptr && !b_vec)
          kernels::GemmInt8(m, pa, k, *node.packed_int8, nullptr, pc, n);
        else if (node.packed_b != nullptr && !b_vec)
          kernels::SgemmPacked(false, m, 1.f, pa, k, *node.packed_b, 0.f, pc, n);
        else
          kernels::Sgemm(false, false, m, n, k, 1.f, pa, k, b.data<T>() + ob * k * n, n, 0.f, pc,
                         n);
      } else {
        NaiveMatMul<T>(m, n, k, pa, b.data<T>() + ob * k * n, pc);
      }
      for (size_t d = batch.size(); d-- > 0;) {
        if (++index[d] < batch[d]) break;
        index[d] = 0;
      }
    }
    return Status::Ok();
  });
}

Status Gemm(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 2));
  const Tensor& a = *in[0];
  const Tensor& b = *in[1];
  const Tensor* c = in.size() > 2 ? in[2] : nullptr;
  if (a.shape().size() != 2 || b.shape().size() != 2) return node.Error("A and B must be 2-D");
  if (a.type() != DataType::kFp32 || b.type() != DataType::kFp32 ||
      (c && c->type() != DataType::kFp32))
    return node.Error("only FP32 is supported");
  const bool ta = node.AttrInt("transA", 0) != 0, tb = node.AttrInt("transB", 0) != 0;
  const float alpha = node.AttrFloat("alpha", 1.f), beta = node.AttrFloat("beta", 1.f);
  const int64_t m = ta ? a.shape()[1] : a.shape()[0];
  const int64_t k = ta ? a.shape()[0] : a.shape()[1];
  const int64_t kb = tb ? b.shape()[1] : b.shape()[0];
  const int64_t n = tb ? b.shape()[0] : b.shape()[1];
  if (k != kb)
    return node.Error("cannot multiply " + ShapeString(a.shape()) + " by " +
                      ShapeString(b.shape()));
  out[0] = Tensor::Allocate(DataType::kFp32, {m, n});
  float* y = out[0].mutable_data<float>();
  float gemm_beta = 0.f;
  if (c != nullptr && beta != 0.f) {
    ASSIGN_OR_RETURN(auto cs, BroadcastShape(node, c->shape(), {m, n}));
    if (cs != std::vector<int64_t>{m, n}) return node.Error("C does not broadcast to [M, N]");
    const auto strides = BroadcastStrides(c->shape(), {m, n});
    const float* pc = c->data<float>();
    if (strides[0] == 0 && strides[1] == 1 && beta == 1.f) {
      // A bias row (the common case): row copies.
      for (int64_t i = 0; i < m; ++i) std::memcpy(y + i * n, pc, static_cast<size_t>(n) * 4);
    } else {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) y[i * n + j] = beta * pc[i * strides[0] + j * strides[1]];
    }
    gemm_beta = 1.f;
  }
  if (node.packed_int8 != nullptr)  // (never with transA)
    kernels::GemmInt8(m, a.data<float>(), a.shape()[1], *node.packed_int8, nullptr, y, n, alpha,
                      gemm_beta != 0.f);
  else if (node.packed_b != nullptr)  // the original bytes of packed weights may be gone
    kernels::SgemmPacked(ta, m, alpha, a.data<float>(), a.shape()[1], *node.packed_b, gemm_beta, y,
                         n);
  else
    kernels::Sgemm(ta, tb, m, n, k, alpha, a.data<float>(), a.shape()[1], b.data<float>(),
                   b.shape()[1], gemm_beta, y, n);
  if (node.activation == OpNode::Activation::kRelu) kernels::Relu(y, y, m * n);
  if (node.activation == OpNode::Activation::kSigmoid) kernels::Sigmoid(y, y, m * n);
  return Status::Ok();
}

Status Identity(const OpNode& node, const std::vector<const Tensor*>& in,
                std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  out[0] = *in[0];
  return Status::Ok();
}

Status Reshape(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 2));
  const Tensor& x = *in[0];
  const Tensor& s = *in[1];
  if (s.type() != DataType::kInt64 || s.shape().size() != 1)
    return node.Error("shape must be 1-D INT64");
  const bool allow_zero = node.AttrInt("allowzero", 0) != 0;
  std::vector<int64_t> shape(s.data<int64_t>(), s.data<int64_t>() + s.elements());
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {
      if (i >= x.shape().size()) return node.Error("0 in shape refers past the input rank");
      shape[i] = x.shape()[i];
    }
    if (shape[i] == -1) {
      if (infer >= 0) return node.Error("more than one -1 in shape");
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      return node.Error("invalid dimension " + std::to_string(shape[i]));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.elements() % known != 0)
      return node.Error("cannot infer -1 in " + ShapeString(shape) + " for " +
                        ShapeString(x.shape()));
    shape[infer] = x.elements() / known;
  }
  if (ElementCount(shape.data(), shape.size()) != x.elements())
    return node.Error("cannot reshape " + ShapeString(x.shape()) + " to " + ShapeString(shape));
  out[0] = x.View(shape);
  return Status::Ok();
}

Status Flatten(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  const int64_t rank = static_cast<int64_t>(x.shape().size());
  const int64_t axis = NormalizeAxis(node.AttrInt("axis", 1), rank);
  if (axis < 0 || axis > rank) return node.Error("axis out of range");
  out[0] = x.View({Product(x.shape(), 0, axis), Product(x.shape(), axis, rank)});
  return Status::Ok();
}

Status Concat(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  if (in.empty()) return node.Error("needs at least one input");
  RETURN_IF_ERROR(RequireInputs(node, in, in.size()));
  if (!node.HasAttr("axis")) return node.Error("attribute 'axis' is required");
  if (in[0]->type() == DataType::kBytes)
    return node.Error("BYTES (STRING) tensors are not supported");
  const auto& first = in[0]->shape();
  const int64_t rank = static_cast<int64_t>(first.size());
  const int64_t axis = NormalizeAxis(node.AttrInt("axis", 0), rank);
  if (axis < 0 || axis >= rank) return node.Error("axis out of range");
  std::vector<int64_t> shape = first;
  shape[axis] = 0;
  for (const Tensor* t : in) {
    if (t->type() != in[0]->type() || t->shape().size() != first.size())
      return node.Error("inputs differ in type or rank");
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && t->shape()[d] != first[d])
        return node.Error("inputs differ outside the axis");
    shape[axis] += t->shape()[axis];
  }
  out[0] = Tensor::Allocate(in[0]->type(), shape);
  const size_t esize = DataTypeSize(in[0]->type());
  const int64_t outer = Product(first, 0, axis);
  uint8_t* dst = out[0].mutable_raw();
  for (int64_t o = 0; o < outer; ++o)
    for (const Tensor* t : in) {
      const size_t chunk = static_cast<size_t>(Product(t->shape(), axis, rank)) * esize;
      std::memcpy(dst, t->raw() + o * chunk, chunk);
      dst += chunk;
    }
  return Status::Ok();
}

// Cast reads each element through ElementAsDouble (common/data_type.h) and writes it back here.
template <typename T>
void Store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

void WriteFromDouble(DataType t, uint8_t* p, double v, const uint8_t* src, DataType src_type) {
  switch (t) {
    case DataType::kFp16:
      // From FP64 round once, from the double itself, as numpy's astype does.
      Store<uint16_t>(p, FloatToHalf(static_cast<float>(v)));
      break;
    case DataType::kBf16:
      Store<uint16_t>(p, FloatToBf16(static_cast<float>(v)));
      break;
    case DataType::kBool:
      *p = v != 0.0;
      break;
    case DataType::kFp32:
      Store<float>(p, static_cast<float>(v));
      break;
    case DataType::kFp64:
      Store<double>(p, v);
      break;
    case DataType::kInt8:
      Store<int8_t>(p, static_cast<int8_t>(v));
      break;
    case DataType::kUint8:
      Store<uint8_t>(p, static_cast<uint8_t>(v));
      break;
    case DataType::kInt16:
      Store<int16_t>(p, static_cast<int16_t>(v));
      break;
    case DataType::kUint16:
      Store<uint16_t>(p, static_cast<uint16_t>(v));
      break;
    case DataType::kInt32:
      Store<int32_t>(p, static_cast<int32_t>(v));
      break;
    case DataType::kUint32:
      Store<uint32_t>(p, static_cast<uint32_t>(v));
      break;
    case DataType::kInt64:
      if (src_type == DataType::kInt64 || src_type == DataType::kUint64)
        std::memcpy(p, src, 8);
      else
        Store<int64_t>(p, static_cast<int64_t>(v));
      break;
    case DataType::kUint64:
      if (src_type == DataType::kInt64 || src_type == DataType::kUint64)
        std::memcpy(p, src, 8);
      else
        Store<uint64_t>(p, static_cast<uint64_t>(v));
      break;
    default:
      break;
  }
}

Status Cast(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  const DataType to = FromOnnxType(static_cast<int32_t>(node.AttrInt("to", 0)));
  if (x.type() == DataType::kBytes || to == DataType::kBytes)
    return node.Error("casts to or from STRING are not supported");
  if (to == DataType::kInvalid)
    return node.Error("unsupported target type " + std::to_string(node.AttrInt("to", 0)));
  out[0] = Tensor::Allocate(to, x.shape());
  const size_t si = DataTypeSize(x.type()), so = DataTypeSize(to);
  const uint8_t* src = x.raw();
  uint8_t* dst = out[0].mutable_raw();
  for (int64_t i = 0; i < x.elements(); ++i)
    WriteFromDouble(to, dst + i * so, ElementAsDouble(x.type(), src + i * si), src + i * si,
                    x.type());
  return Status::Ok();
}

Status ArgMax(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  const int64_t rank = static_cast<int64_t>(x.shape().size());
  const int64_t axis = NormalizeAxis(node.AttrInt("axis", 0), rank);
  if (axis < 0 || axis >= rank) return node.Error("axis out of range");
  const bool keepdims = node.AttrInt("keepdims", 1) != 0;
  const bool last = node.AttrInt("select_last_index", 0) != 0;
  std::vector<int64_t> shape = x.shape();
  if (keepdims)
    shape[axis] = 1;
  else
    shape.erase(shape.begin() + axis);
  out[0] = Tensor::Allocate(DataType::kInt64, shape);
  const int64_t outer = Product(x.shape(), 0, axis), len = x.shape()[axis];
  const int64_t inner = Product(x.shape(), axis + 1, rank);
  int64_t* y = out[0].mutable_data<int64_t>();
  return DispatchNumeric(node, x.type(), [&](auto tag) -> Status {
    using T = decltype(tag);
    const T* px = x.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t best = 0;
        T best_v = px[o * len * inner + i];
        for (int64_t a = 1; a < len; ++a) {
          const T v = px[(o * len + a) * inner + i];
          if (v > best_v || (last && v == best_v)) {
            best_v = v;
            best = a;
          }
        }
        y[o * inner + i] = best;
      }
    return Status::Ok();
  });
}

Status Constant(const OpNode& node, const std::vector<const Tensor*>&, std::vector<Tensor>& out) {
  if (node.HasAttr("value")) {
    ASSIGN_OR_RETURN(out[0], node.AttrTensor("value"));
    return Status::Ok();
  }
  if (node.HasAttr("value_float")) {
    out[0] = Tensor::Allocate(DataType::kFp32, {});
    out[0].mutable_data<float>()[0] = node.AttrFloat("value_float", 0.f);
    return Status::Ok();
  }
  if (node.HasAttr("value_int")) {
    out[0] = Tensor::Allocate(DataType::kInt64, {});
    out[0].mutable_data<int64_t>()[0] = node.AttrInt("value_int", 0);
    return Status::Ok();
  }
  if (node.HasAttr("value_ints")) {
    const auto v = node.AttrInts("value_ints");
    out[0] = Tensor::Allocate(DataType::kInt64, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), out[0].mutable_data<int64_t>());
    return Status::Ok();
  }
  return node.Error("only value, value_float, value_int and value_ints are supported");
}

const std::map<std::string, OpFn>& Registry() {
  static const std::map<std::string, OpFn> ops = {
      {"Add", Add},           {"Sub", Sub},         {"Mul", Mul},           {"Div", Div},
      {"Relu", Relu},         {"Sigmoid", Sigmoid}, {"Tanh", Tanh},         {"Softmax", Softmax},
      {"MatMul", MatMul},     {"Gemm", Gemm},       {"Identity", Identity}, {"Reshape", Reshape},
      {"Flatten", Flatten},   {"Concat", Concat},   {"Cast", Cast},         {"ArgMax", ArgMax},
      {"Constant", Constant},
  };
  return ops;
}

}  // namespace

OpFn FindOp(const std::string& op_type) {
  auto it = Registry().find(op_type);
  return it == Registry().end() ? nullptr : it->second;
}

std::vector<std::string> SupportedOps() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : Registry()) names.push_back(name);
  return names;
}

}  // namespace nereid::native
