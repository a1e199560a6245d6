// Elementwise ops and activations: broadcasting binary arithmetic (Add, Sub, Mul, Div, Pow, PRelu),
// the variadic Max, Min, Sum and Mean, unary maths and activations (Relu, Sigmoid, Tanh, Clip,
// LeakyRelu, HardSigmoid, HardSwish, Abs, Neg, Exp, Log, Sqrt, Reciprocal, Floor, Ceil, Erf),
// comparisons into BOOL (Equal, Less, LessOrEqual, Greater, GreaterOrEqual), logic on BOOL (And,
// Or, Xor, Not) and Where.
#include "cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "cpu/parallel.h"
#include "ops/op.h"

namespace nereid::native {
namespace {

// Elements per piece when a loop is split over the thread team (smaller loops run inline).
constexpr int64_t kParallelGrain = int64_t{1} << 15;

// y = op(a, b) elementwise with broadcasting; operands of type T, the result of type R (BOOL,
// as uint8_t, for comparisons).
template <typename T, typename R = T, typename Op>
void BinaryLoop(const Tensor& a, const Tensor& b, Tensor& y, Op op) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  R* py = y.mutable_data<R>();
  const int64_t n = y.elements();
  if (n == 0) return;  // (an empty dimension: nothing to divide rows by)
  const int64_t pieces = std::max<int64_t>(1, n / kParallelGrain);
  // Operands of the output's shape or of one value (either side: x * 2 and 2 * x): one flat loop
  // per case, each element by index or the one value (the compiler vectorizes each).
  auto flat = [&](auto at_a, auto at_b) {
    kernels::ParallelFor(pieces, [&](int64_t p) {
      const int64_t begin = n * p / pieces, end = n * (p + 1) / pieces;
      for (int64_t i = begin; i < end; ++i) py[i] = op(at_a(i), at_b(i));
    });
  };
  auto each = [](const T* v) { return [v](int64_t i) { return v[i]; }; };
  auto one = [](const T* v) { return [s = v[0]](int64_t) { return s; }; };
  const bool full_a = a.shape() == y.shape(), full_b = b.shape() == y.shape();
  if (full_a && full_b) return flat(each(pa), each(pb));
  if (full_a && b.elements() == 1) return flat(each(pa), one(pb));
  if (full_b && a.elements() == 1) return flat(one(pa), each(pb));
  std::vector<int64_t> shape = y.shape();
  auto sa = BroadcastStrides(a.shape(), shape);
  auto sb = BroadcastStrides(b.shape(), shape);
  CollapseDims(shape, {&sa, &sb});
  const size_t rank = shape.size();
  // Rows of the last dimension, the inner loop strided only by 0 or 1.
  const int64_t inner = rank ? shape[rank - 1] : 1;
  const int64_t ia = rank ? sa[rank - 1] : 0, ib = rank ? sb[rank - 1] : 0;
  ForEachRow(shape, [&](int64_t row, const std::vector<int64_t>& index) {
    const int64_t oa = RowOffset(index, sa), ob = RowOffset(index, sb);
    R* out = py + row * inner;
    if (ib == 0 && ia == 1) {  // a row against one value (per-channel scale in NCHW)
      const T s = pb[ob];
      for (int64_t j = 0; j < inner; ++j) out[j] = op(pa[oa + j], s);
    } else if (ia == 0 && ib == 1) {  // one value against a row
      const T s = pa[oa];
      for (int64_t j = 0; j < inner; ++j) out[j] = op(s, pb[ob + j]);
    } else if (ia == 1 && ib == 1) {  // rows against rows (per-pixel scale in NHWC)
      for (int64_t j = 0; j < inner; ++j) out[j] = op(pa[oa + j], pb[ob + j]);
    } else {
      for (int64_t j = 0; j < inner; ++j) out[j] = op(pa[oa + j * ia], pb[ob + j * ib]);
    }
  });
}

// y = op(a, b) with broadcasting, into a new tensor.
template <typename OpFactory>
Status BinaryOf(const OpNode& node, const Tensor& a, const Tensor& b, Tensor& y,
                OpFactory factory) {
  if (a.type() != b.type())
    return node.Error("input types differ: " + std::string(DataTypeName(a.type())) + " and " +
                      std::string(DataTypeName(b.type())));
  ASSIGN_OR_RETURN(auto shape, BroadcastShape(node, a.shape(), b.shape()));
  Tensor result = Tensor::Uninitialized(a.type(), shape);
  RETURN_IF_ERROR(DispatchNumeric(node, a.type(), [&](auto tag) -> Status {
    using T = decltype(tag);
    BinaryLoop<T>(a, b, result, factory(tag));
    return Status::Ok();
  }));
  y = std::move(result);
  return Status::Ok();
}

template <typename OpFactory>
Status Binary(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out,
              OpFactory factory) {
  RETURN_IF_ERROR(RequireInputs(node, in, 2));
  return BinaryOf(node, *in[0], *in[1], out[0], factory);
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

Status Pow(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 2));
  if (in[0]->type() == DataType::kFp32 && in[1]->type() == DataType::kFp32 &&
      in[1]->elements() == 1 && in[1]->shape().size() <= in[0]->shape().size()) {
    // A square or a square root (spectrograms, norms): no pow per element.
    const float e = in[1]->data<float>()[0];
    const Tensor& x = *in[0];
    if (e == 2.f || e == 0.5f || e == 1.f) {
      Tensor y = Tensor::Uninitialized(DataType::kFp32, x.shape());
      const float* px = x.data<float>();
      float* py = y.mutable_data<float>();
      const int64_t n = x.elements();
      if (e == 2.f)
        for (int64_t k = 0; k < n; ++k) py[k] = px[k] * px[k];
      else if (e == 0.5f)
        for (int64_t k = 0; k < n; ++k) py[k] = std::sqrt(px[k]);
      else
        for (int64_t k = 0; k < n; ++k) py[k] = px[k];
      out[0] = std::move(y);
      return Status::Ok();
    }
  }
  if (in[0]->type() == in[1]->type())
    return Binary(node, in, out, [](auto tag) {
      using T = decltype(tag);
      return [](T x, T y) { return static_cast<T>(std::pow(x, y)); };
    });
  // Mixed types: computed in double, written in the base's type (as the spec's output type).
  auto as_double = [&](const Tensor& t) {
    Tensor d = Tensor::Allocate(DataType::kFp64, t.shape());
    const size_t size = DataTypeSize(t.type());
    for (int64_t i = 0; i < t.elements(); ++i)
      d.mutable_data<double>()[i] = ElementAsDouble(t.type(), t.raw() + i * size);
    return d;
  };
  RETURN_IF_ERROR(DispatchNumeric(node, in[0]->type(), [](auto) { return Status::Ok(); }));
  RETURN_IF_ERROR(DispatchNumeric(node, in[1]->type(), [](auto) { return Status::Ok(); }));
  Tensor result;
  RETURN_IF_ERROR(BinaryOf(node, as_double(*in[0]), as_double(*in[1]), result,
                           [](auto) { return [](double x, double y) { return std::pow(x, y); }; }));
  Tensor y = Tensor::Allocate(in[0]->type(), result.shape());
  RETURN_IF_ERROR(DispatchNumeric(node, in[0]->type(), [&](auto tag) -> Status {
    using T = decltype(tag);
    for (int64_t i = 0; i < y.elements(); ++i)
      y.mutable_data<T>()[i] = static_cast<T>(result.data<double>()[i]);
    return Status::Ok();
  }));
  out[0] = std::move(y);
  return Status::Ok();
}

Status PRelu(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return Binary(node, in, out, [](auto tag) {
    using T = decltype(tag);
    return [](T x, T slope) { return x < T(0) ? static_cast<T>(slope * x) : x; };
  });
}

// Max, Min, Sum, Mean: any number of inputs, broadcast together, folded left to right.
template <typename OpFactory>
Status Variadic(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out,
                OpFactory factory) {
  if (in.empty()) return node.Error("needs at least one input");
  RETURN_IF_ERROR(RequireInputs(node, in, in.size()));
  if (in.size() == 1) {
    out[0] = Tensor::Allocate(in[0]->type(), in[0]->shape());
    std::copy(in[0]->raw(), in[0]->raw() + in[0]->bytes(), out[0].mutable_raw());
    return DispatchNumeric(node, in[0]->type(), [](auto) { return Status::Ok(); });
  }
  Tensor acc;
  RETURN_IF_ERROR(BinaryOf(node, *in[0], *in[1], acc, factory));
  for (size_t i = 2; i < in.size(); ++i) {
    Tensor next;
    RETURN_IF_ERROR(BinaryOf(node, acc, *in[i], next, factory));
    acc = std::move(next);
  }
  out[0] = std::move(acc);
  return Status::Ok();
}

Status Max(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return Variadic(node, in, out, [](auto tag) {
    using T = decltype(tag);
    // NaN wins, as in numpy's maximum.
    return [](T x, T y) { return x != x ? x : (y != y ? y : std::max(x, y)); };
  });
}
Status Min(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return Variadic(node, in, out, [](auto tag) {
    using T = decltype(tag);
    return [](T x, T y) { return x != x ? x : (y != y ? y : std::min(x, y)); };
  });
}
Status Sum(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return Variadic(node, in, out, [](auto tag) {
    using T = decltype(tag);
    return [](T x, T y) { return static_cast<T>(x + y); };
  });
}
Status Mean(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  if (!in.empty() && in[0] != nullptr && in[0]->type() != DataType::kFp32 &&
      in[0]->type() != DataType::kFp64)
    return node.Refuse("element type " + std::string(DataTypeName(in[0]->type())) +
                       " is not supported (FP32, FP64)");
  RETURN_IF_ERROR(Sum(node, in, out));
  const double count = static_cast<double>(in.size());
  if (out[0].type() == DataType::kFp32)
    for (int64_t i = 0; i < out[0].elements(); ++i)
      out[0].mutable_data<float>()[i] = static_cast<float>(out[0].data<float>()[i] / count);
  else
    for (int64_t i = 0; i < out[0].elements(); ++i) out[0].mutable_data<double>()[i] /= count;
  return Status::Ok();
}

// fn(begin, end) over [0, n) in pieces of kParallelGrain or more (multiples of 64 elements),
// across the thread team.
template <typename F>
void ForPieces(int64_t n, F&& fn) {
  const int64_t pieces = std::max<int64_t>(1, n / kParallelGrain);
  kernels::ParallelFor(pieces, [&](int64_t p) {
    const int64_t begin = n * p / pieces / 64 * 64;
    const int64_t end = p + 1 == pieces ? n : n * (p + 1) / pieces / 64 * 64;
    fn(begin, end);
  });
}

// A float unary op: 'kernel' (a vector kernel of cpu/elementwise.h) on FP32 when given, else 'f'
// element by element on FP32 and FP64.
template <typename F>
Status UnaryFloat(const OpNode& node, const std::vector<const Tensor*>& in,
                  std::vector<Tensor>& out, void (*kernel)(const float*, float*, int64_t), F f) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  if (x.type() == DataType::kFp32) {
    out[0] = Tensor::Uninitialized(x.type(), x.shape());
    const float* px = x.data<float>();
    float* py = out[0].mutable_data<float>();
    if (kernel != nullptr)
      ForPieces(x.elements(),
                [&](int64_t begin, int64_t end) { kernel(px + begin, py + begin, end - begin); });
    else
      for (int64_t i = 0; i < x.elements(); ++i) py[i] = f(px[i]);
    return Status::Ok();
  }
  if (x.type() == DataType::kFp64) {
    out[0] = Tensor::Uninitialized(x.type(), x.shape());
    const double* px = x.data<double>();
    double* py = out[0].mutable_data<double>();
    for (int64_t i = 0; i < x.elements(); ++i) py[i] = f(px[i]);
    return Status::Ok();
  }
  return node.Refuse("element type " + std::string(DataTypeName(x.type())) +
                     " is not supported (FP32, FP64)");
}

// A unary op on every numeric type.
template <typename F>
Status UnaryNumeric(const OpNode& node, const std::vector<const Tensor*>& in,
                    std::vector<Tensor>& out, F f) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  Tensor y = Tensor::Uninitialized(x.type(), x.shape());
  RETURN_IF_ERROR(DispatchNumeric(node, x.type(), [&](auto tag) -> Status {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    for (int64_t i = 0; i < x.elements(); ++i) py[i] = f(px[i]);
    return Status::Ok();
  }));
  out[0] = std::move(y);
  return Status::Ok();
}

#define NEREID_FLOAT_UNARY(Name, expr)                                                     \
  Status Name(const OpNode& node, const std::vector<const Tensor*>& in,                    \
              std::vector<Tensor>& out) {                                                  \
    return UnaryFloat(node, in, out, nullptr, [](auto v) -> decltype(v) { return expr; }); \
  }
NEREID_FLOAT_UNARY(Exp, std::exp(v))
NEREID_FLOAT_UNARY(Log, std::log(v))
NEREID_FLOAT_UNARY(Sqrt, std::sqrt(v))
NEREID_FLOAT_UNARY(Reciprocal, 1 / v)
NEREID_FLOAT_UNARY(Floor, std::floor(v))
NEREID_FLOAT_UNARY(Ceil, std::ceil(v))
NEREID_FLOAT_UNARY(HardSwish, v* std::max<decltype(v)>(0, std::min<decltype(v)>(1, v / 6 + 0.5)))
#undef NEREID_FLOAT_UNARY
// ONNX's Gelu (opset 20, approximate "none"): x * (erf(x / sqrt(2)) + 1) * 0.5. The GELU pass
// (FuseGelus) makes Gelu nodes of the written-out form with its divisor as a second input.
Status Gelu(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  float divisor = std::sqrt(2.f);
  if (in.size() > 1 && in[1] != nullptr) {
    if (in[1]->type() != DataType::kFp32 || in[1]->elements() != 1)
      return node.Error("the divisor must be one FP32 value");
    divisor = in[1]->data<float>()[0];
  }
  if (x.type() != DataType::kFp32) return node.Refuse("only FP32 is supported");
  out[0] = Tensor::Uninitialized(x.type(), x.shape());
  const float* px = x.data<float>();
  float* py = out[0].mutable_data<float>();
  ForPieces(x.elements(), [&](int64_t begin, int64_t end) {
    kernels::GeluErf(px + begin, py + begin, end - begin, divisor);
  });
  return Status::Ok();
}

Status CheckGelu(const OpNode& node, const std::vector<const Tensor*>&) {
  const std::string approximate = node.AttrString("approximate", "none");
  if (approximate != "none")
    return node.Refuse("approximate '" + approximate + "' is not supported (only 'none')");
  return Status::Ok();
}

Status Erf(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return UnaryFloat(node, in, out, kernels::Erf, [](auto v) -> decltype(v) { return std::erf(v); });
}

Status Abs(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return UnaryNumeric(node, in, out, [](auto v) -> decltype(v) {
    if constexpr (std::is_unsigned_v<decltype(v)>)
      return v;
    else
      return v < 0 ? static_cast<decltype(v)>(-v) : v;
  });
}
Status Neg(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return UnaryNumeric(node, in, out, [](auto v) { return static_cast<decltype(v)>(-v); });
}

Status LeakyRelu(const OpNode& node, const std::vector<const Tensor*>& in,
                 std::vector<Tensor>& out) {
  const float alpha = node.AttrFloat("alpha", 0.01f);
  return UnaryFloat(node, in, out, nullptr,
                    [alpha](auto v) -> decltype(v) { return v < 0 ? v * alpha : v; });
}

Status HardSigmoid(const OpNode& node, const std::vector<const Tensor*>& in,
                   std::vector<Tensor>& out) {
  const float alpha = node.AttrFloat("alpha", 0.2f), beta = node.AttrFloat("beta", 0.5f);
  return UnaryFloat(node, in, out, nullptr, [alpha, beta](auto v) -> decltype(v) {
    using T = decltype(v);
    const T t = alpha * v + beta;
    return t < 0 ? T(0) : (t > 1 ? T(1) : t);  // (NaN kept)
  });
}

// Clip: bounds are attributes before opset 11, optional scalar inputs from 11 on.
Status Clip(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  for (size_t i = 1; i < in.size() && i < 3; ++i)
    if (in[i] != nullptr && (in[i]->type() != x.type() || in[i]->elements() != 1))
      return node.Error("min and max must be scalars of the input's type");
  Tensor y = Tensor::Uninitialized(x.type(), x.shape());
  RETURN_IF_ERROR(DispatchNumeric(node, x.type(), [&](auto tag) -> Status {
    using T = decltype(tag);
    T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
    if (node.opset() < 11) {
      lo = static_cast<T>(node.AttrFloat("min", -std::numeric_limits<float>::max()));
      hi = static_cast<T>(node.AttrFloat("max", std::numeric_limits<float>::max()));
    } else {
      if (in.size() > 1 && in[1] != nullptr) lo = in[1]->data<T>()[0];
      if (in.size() > 2 && in[2] != nullptr) hi = in[2]->data<T>()[0];
    }
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    const int64_t n = x.elements();
    for (int64_t i = 0; i < n; ++i) {  // (NaN stays NaN)
      const T v = px[i] < lo ? lo : px[i];
      py[i] = v > hi ? hi : v;
    }
    return Status::Ok();
  }));
  out[0] = std::move(y);
  return Status::Ok();
}

Status Relu(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  if (x.type() == DataType::kFp32) {
    out[0] = Tensor::Uninitialized(x.type(), x.shape());
    kernels::Relu(x.data<float>(), out[0].mutable_data<float>(), x.elements());
    return Status::Ok();
  }
  out[0] = Tensor::Uninitialized(x.type(), x.shape());
  return DispatchNumeric(node, x.type(), [&](auto tag) -> Status {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = out[0].mutable_data<T>();
    for (int64_t i = 0; i < x.elements(); ++i) py[i] = px[i] > T(0) ? px[i] : T(0);
    return Status::Ok();
  });
}

Status Sigmoid(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return UnaryFloat(node, in, out, kernels::Sigmoid, [](auto v) { return 1 / (1 + std::exp(-v)); });
}

Status Tanh(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return UnaryFloat(node, in, out, kernels::Tanh, [](auto v) { return std::tanh(v); });
}

// ---- comparisons, logic, Where
// -------------------------------------------------------------------

// y = cmp(a, b) into BOOL: numeric operands of one type (BOOL ones too, for Equal).
template <typename Cmp>
Status Compare(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out,
               Cmp cmp) {
  RETURN_IF_ERROR(RequireInputs(node, in, 2));
  const Tensor &a = *in[0], &b = *in[1];
  if (a.type() != b.type())
    return node.Error("input types differ: " + std::string(DataTypeName(a.type())) + " and " +
                      std::string(DataTypeName(b.type())));
  ASSIGN_OR_RETURN(auto shape, BroadcastShape(node, a.shape(), b.shape()));
  Tensor result = Tensor::Uninitialized(DataType::kBool, shape);
  if (a.type() == DataType::kBool) {
    BinaryLoop<uint8_t, uint8_t>(
        a, b, result, [&](uint8_t x, uint8_t y) -> uint8_t { return cmp(x != 0, y != 0) ? 1 : 0; });
  } else {
    RETURN_IF_ERROR(DispatchNumeric(node, a.type(), [&](auto tag) -> Status {
      using T = decltype(tag);
      BinaryLoop<T, uint8_t>(a, b, result, [&](T x, T y) -> uint8_t { return cmp(x, y) ? 1 : 0; });
      return Status::Ok();
    }));
  }
  out[0] = std::move(result);
  return Status::Ok();
}

#define NEREID_COMPARISON(Name, expr)                                                            \
  Status Name(const OpNode& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) { \
    return Compare(n, in, out, [](auto x, auto y) -> bool { return expr; });                     \
  }
NEREID_COMPARISON(Equal, x == y)
NEREID_COMPARISON(Less, x < y)
NEREID_COMPARISON(LessOrEqual, x <= y)
NEREID_COMPARISON(Greater, x > y)
NEREID_COMPARISON(GreaterOrEqual, x >= y)
#undef NEREID_COMPARISON

// And, Or, Xor: BOOL operands only (as ONNX defines them).
template <typename Logic>
Status BinaryLogic(const OpNode& node, const std::vector<const Tensor*>& in,
                   std::vector<Tensor>& out, Logic logic) {
  RETURN_IF_ERROR(RequireInputs(node, in, 2));
  for (const Tensor* t : in)
    if (t->type() != DataType::kBool)
      return node.Error("inputs must be BOOL, not " + std::string(DataTypeName(t->type())));
  return Compare(node, in, out, logic);  // (its BOOL path: the operands as bool)
}
Status And(const OpNode& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return BinaryLogic(n, in, out, [](bool x, bool y) { return x && y; });
}
Status Or(const OpNode& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return BinaryLogic(n, in, out, [](bool x, bool y) { return x || y; });
}
Status Xor(const OpNode& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return BinaryLogic(n, in, out, [](bool x, bool y) { return x != y; });
}
Status Not(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  if (x.type() != DataType::kBool)
    return node.Error("input must be BOOL, not " + std::string(DataTypeName(x.type())));
  Tensor y = Tensor::Uninitialized(DataType::kBool, x.shape());
  const uint8_t* px = x.data<uint8_t>();
  uint8_t* py = y.mutable_data<uint8_t>();
  for (int64_t i = 0; i < x.elements(); ++i) py[i] = px[i] == 0 ? 1 : 0;
  out[0] = std::move(y);
  return Status::Ok();
}

// Where(condition, X, Y): X's element where the BOOL condition holds, else Y's, all three
// broadcast to one shape; X and Y of one type (any fixed-size type: elements are copied).
Status Where(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 3));
  const Tensor &c = *in[0], &x = *in[1], &y = *in[2];
  if (c.type() != DataType::kBool)
    return node.Error("condition must be BOOL, not " + std::string(DataTypeName(c.type())));
  if (x.type() != y.type())
    return node.Error("X and Y types differ: " + std::string(DataTypeName(x.type())) + " and " +
                      std::string(DataTypeName(y.type())));
  if (x.type() == DataType::kBytes) return node.Refuse("BYTES (STRING) tensors are not supported");
  ASSIGN_OR_RETURN(auto xy, BroadcastShape(node, x.shape(), y.shape()));
  ASSIGN_OR_RETURN(auto shape, BroadcastShape(node, c.shape(), xy));
  RETURN_IF_ERROR(CheckOutputShape(node, shape, x.type()));
  Tensor result = Tensor::Uninitialized(x.type(), shape);
  const size_t esize = DataTypeSize(x.type());
  auto sc = BroadcastStrides(c.shape(), shape);
  auto sx = BroadcastStrides(x.shape(), shape);
  auto sy = BroadcastStrides(y.shape(), shape);
  CollapseDims(shape, {&sc, &sx, &sy});
  const size_t rank = shape.size();
  const int64_t inner = rank ? shape[rank - 1] : 1;
  const int64_t jc = rank ? sc[rank - 1] : 0, jx = rank ? sx[rank - 1] : 0,
                jy = rank ? sy[rank - 1] : 0;
  const uint8_t* pc = c.data<uint8_t>();
  const uint8_t *px = x.raw(), *py = y.raw();
  uint8_t* po = result.mutable_raw();
  ForEachRow(shape, [&](int64_t row, const std::vector<int64_t>& index) {
    const int64_t oc = RowOffset(index, sc), ox = RowOffset(index, sx), oy = RowOffset(index, sy);
    uint8_t* out = po + row * inner * esize;
    for (int64_t j = 0; j < inner; ++j)
      std::memcpy(out + j * esize,
                  pc[oc + j * jc] ? px + (ox + j * jx) * esize : py + (oy + j * jy) * esize, esize);
  });
  out[0] = std::move(result);
  return Status::Ok();
}

}  // namespace

std::vector<OpDef> ElementwiseOps() {
  return {{"Add", Add},
          {"Sub", Sub},
          {"Mul", Mul},
          {"Div", Div},
          {"Pow", Pow},
          {"PRelu", PRelu},
          {"Max", Max},
          {"Min", Min},
          {"Sum", Sum},
          {"Mean", Mean},
          {"Relu", Relu},
          {"Sigmoid", Sigmoid},
          {"Tanh", Tanh},
          {"Clip", Clip},
          {"LeakyRelu", LeakyRelu},
          {"HardSigmoid", HardSigmoid},
          {"HardSwish", HardSwish},
          {"Abs", Abs},
          {"Neg", Neg},
          {"Exp", Exp},
          {"Log", Log},
          {"Sqrt", Sqrt},
          {"Reciprocal", Reciprocal},
          {"Floor", Floor},
          {"Ceil", Ceil},
          {"Erf", Erf},
          {"Gelu", Gelu, CheckGelu},
          {"Equal", Equal},
          {"Less", Less},
          {"LessOrEqual", LessOrEqual},
          {"Greater", Greater},
          {"GreaterOrEqual", GreaterOrEqual},
          {"And", And},
          {"Or", Or},
          {"Xor", Xor},
          {"Not", Not},
          {"Where", Where}};
}

}  // namespace nereid::native
