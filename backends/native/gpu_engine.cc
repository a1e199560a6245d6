#include "gpu_engine.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <set>

#include "cpu/gemm_int8.h"
#include "cuda/conv.h"
#include "cuda/elementwise.h"
#include "cuda/epilogue.h"
#include "cuda/gemm.h"
#include "cuda/gemm_int8.h"
#include "gemm_tuner.h"
#include "gpu_graphs.h"
#include "nereid/backend_util.h"
#include "nereid/half.h"
#include "ops/conv.h"

namespace nereid::native {
namespace kc = kernels::cuda;

StatusOr<Precision> ParsePrecision(const std::string& name) {
  if (name.empty() || name == "fp32") return Precision::kFp32;
  if (name == "tf32") return Precision::kTf32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  if (name == "int8") return Precision::kInt8;
  return InvalidArgument("parameter 'precision' must be fp32, tf32, bf16, fp16 or int8, got '" +
                         name + "'");
}

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kTf32:
      return "tf32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
    case Precision::kInt8:
      return "int8";
  }
  return "?";
}

namespace {

const char* const kGpuOps =
    "Gemm, MatMul, Conv, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, Flatten, "
    "Reshape, Add, Sub, Mul, Div, Relu, Sigmoid, Tanh, Gelu, Identity";

}  // namespace

struct ValueSpec {
  bool defined = false;
  kc::ElemType type = kc::ElemType::kF32;  // storage on the device
  DataType logical = DataType::kInvalid;   // the graph's type
  std::vector<int64_t> dims;               // per row (the shape after the rows dimension)
  int64_t row_elems = 0;
  int alias = -1;  // Identity: the value whose buffer this one shares
  // A per-row image [c, h, w] stored channels-last (convolutions and pools run so; values of one
  // pixel are the same either way and are never marked).
  bool nhwc = false;
};

struct Operand {
  int value = -1;                  // a value, or
  const void* constant = nullptr;  // a constant on the device
  int64_t count = 0;               // the constant's elements (its broadcast period)
};

struct Step {
  enum Kind { kGemm, kBinary, kUnary, kConvert, kConv, kPool, kGlobalPool, kLayout } kind = kGemm;
  int in = -1, out = -1;
  // kGemm
  const void* w = nullptr;
  const float* w_scale = nullptr;  // int8 weights: one scale per output channel (w is n x k int8)
  const float* bias = nullptr;
  float alpha = 1.f;
  int64_t n = 0, k = 0;
  kc::Activation act = kc::Activation::kNone;
  // kBinary
  kc::BinaryOp op = kc::BinaryOp::kAdd;
  Operand a, b;
  // kConv (its x, y and residual set per run; g.n is the row count)
  kc::ConvProblem conv;
  int residual = -1;
  // kPool and kGlobalPool
  kc::PoolKind pool = kc::PoolKind::kMax;
  kernels::Conv2dGeometry window;
  int64_t pad_bottom = 0, pad_right = 0;
  bool count_include_pad = false;
  // kLayout: NCHW -> NHWC (with zero channels added up to the output's count) or back
  bool to_last = false;
};

struct IoSpec {
  std::string name;
  int value = -1;  // the device buffer the host copies to or from (in the graph's type)
  DataType type = DataType::kInvalid;
  std::vector<int64_t> dims;
  size_t row_bytes = 0;
};

class GpuModel {
 public:
  ~GpuModel() {
    if (!weights.empty()) cudaSetDevice(device);
    for (void* p : weights) cudaFree(p);
  }
  int device = 0;
  Precision precision = Precision::kFp32;
  kc::ElemType float_type = kc::ElemType::kF32;
  std::vector<ValueSpec> values;
  std::vector<Step> steps;
  std::vector<IoSpec> inputs, outputs;
  std::vector<void*> weights;
  size_t weight_bytes = 0;
  int gemms = 0, elementwise = 0;
  int convs = 0, pools = 0;
  std::map<std::string, int> conv_kernels;  // by kernel name: how many convolutions run on it
  std::map<int, int> layout_copies[2];      // [nhwc]: value id -> its copy in that layout
  int int8_gemms = 0;      // the int8 precision: GEMMs run in int8 (the others in bf16)
  int64_t int8_max_k = 0;  // their largest k (the per-row quantized activations' scratch)

  int Resolve(int id) const {
    while (id >= 0 && values[id].alias >= 0) id = values[id].alias;
    return id;
  }
  int AddValue(ValueSpec spec) {
    values.push_back(std::move(spec));
    return static_cast<int>(values.size()) - 1;
  }
  // Copies host bytes to a new device allocation owned by the model.
  StatusOr<const void*> Upload(const void* data, size_t bytes) {
    void* p = nullptr;
    CUDA_RETURN(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc (weights)");
    weights.push_back(p);
    weight_bytes += bytes;
    CUDA_RETURN(cudaMemcpy(p, data, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (weights)");
    return static_cast<const void*>(p);
  }
  // Uploads float values converted to 'type'.
  StatusOr<const void*> UploadFloats(const std::vector<float>& v, kc::ElemType type) {
    if (type == kc::ElemType::kF32) return Upload(v.data(), v.size() * 4);
    std::vector<uint16_t> half(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      half[i] = type == kc::ElemType::kBF16 ? FloatToBf16(v[i]) : FloatToHalf(v[i]);
    return Upload(half.data(), half.size() * 2);
  }
};

namespace {

StatusOr<kc::ElemType> StorageType(DataType t, kc::ElemType float_type, const std::string& what) {
  switch (t) {
    case DataType::kFp32:
      return float_type;
    case DataType::kInt32:
      return kc::ElemType::kI32;
    case DataType::kInt64:
      return kc::ElemType::kI64;
    default:
      return Unsupported(what + " is " + std::string(DataTypeName(t)) +
                         ": the GPU engine runs FP32, INT32 and INT64 tensors");
  }
}

std::vector<float> FloatsOf(const Tensor& t) {
  std::vector<float> v(t.elements());
  const size_t size = DataTypeSize(t.type());
  for (int64_t i = 0; i < t.elements(); ++i)
    v[i] = static_cast<float>(ElementAsDouble(t.type(), t.raw() + i * size));
  return v;
}

// A constant as an operand of a binary op whose other operand has per-row 'dims': its shape,
// without leading 1s, must be a suffix of [rows, dims...] that stays inside one row.
bool BroadcastsOverRow(const std::vector<int64_t>& constant, const std::vector<int64_t>& dims) {
  size_t first = 0;
  while (first < constant.size() && constant[first] == 1) ++first;
  const size_t rank = constant.size() - first;
  if (rank > dims.size()) return false;
  for (size_t i = 0; i < rank; ++i)
    if (constant[first + i] != dims[dims.size() - rank + i]) return false;
  return true;
}

// An elementwise step whose output 'out' has the shape and type of 'like'.
Status AddElementwise(GpuModel& m, Step s, const ValueSpec& like, int out) {
  ValueSpec result = like;
  result.alias = -1;
  m.values[out] = result;
  s.out = out;
  m.steps.push_back(s);
  ++m.elementwise;
  return Status::Ok();
}

bool IsImage(const ValueSpec& v) { return v.dims.size() == 3; }

// A new value 'spec' computed from buffer 'source' by a layout step: NCHW -> NHWC when spec.nhwc
// (zero channels added up to spec's count), else back.
int AddLayoutCopy(GpuModel& m, int source, ValueSpec spec) {
  spec.alias = -1;
  const int out = m.AddValue(spec);
  Step s;
  s.kind = Step::kLayout;
  s.in = source, s.out = out, s.to_last = spec.nhwc;
  m.steps.push_back(s);
  return out;
}

// Value 'id' in the layout asked for: itself, or a copy converted once (every later reader shares
// it). Values of one pixel per image are both layouts at once.
int InLayout(GpuModel& m, int id, bool nhwc) {
  const ValueSpec v = m.values[id];  // an alias's own dims (Flatten's are not its buffer's)
  if (v.nhwc == nhwc || !IsImage(v) || v.dims[1] * v.dims[2] == 1) return id;
  id = m.Resolve(id);
  auto& copies = m.layout_copies[nhwc ? 1 : 0];
  if (auto it = copies.find(id); it != copies.end()) return it->second;
  ValueSpec converted = v;
  converted.nhwc = nhwc;
  return copies[id] = AddLayoutCopy(m, id, converted);
}

// An image value [c, h, w] per row, channels-last unless it has one pixel.
ValueSpec ImageValue(kc::ElemType type, int64_t c, int64_t h, int64_t w) {
  return ValueSpec{true, type, DataType::kFp32, {c, h, w}, c * h * w, -1, h * w > 1};
}

StatusOr<kc::ConvActivation> ConvActivationOf(const OpNode& op, const std::string& who) {
  using A = OpNode::Activation;
  switch (op.activation) {
    case A::kNone:
      return kc::ConvActivation::kNone;
    case A::kRelu:
      return kc::ConvActivation::kRelu;
    case A::kClip:
      return kc::ConvActivation::kClip;
    case A::kLeakyRelu:
      return kc::ConvActivation::kLeakyRelu;
    case A::kHardSigmoid:
      return kc::ConvActivation::kHardSigmoid;
    case A::kHardSwish:
      return kc::ConvActivation::kHardSwish;
    default:
      return Unsupported(who + ": its fused activation has no GPU epilogue");
  }
}

// Conv with constant weights on an image [rows, c, h, w]: BatchNormalization, the residual Add
// and the activation the graph's passes fused run in its epilogue.
Status CompileConv(const Graph& graph, const Graph::Node& node, const ValueSpec& x, GpuModel& m,
                   const std::string& who) {
  const OpNode& op = node.op;
  const Tensor& w =
      node.inputs.size() > 1 && node.inputs[1] >= 0 ? graph.constant(node.inputs[1]) : Tensor();
  if (!w.valid() || w.type() != DataType::kFp32 || w.shape().size() != 4 || w.raw() == nullptr)
    return Unsupported(who + ": the GPU engine runs 2-D convolutions with constant FP32 weights");
  if (x.logical != DataType::kFp32 || !IsImage(x))
    return Unsupported(who +
                       ": the GPU engine runs 2-D convolutions of FP32 images [rows, c, h, w]");
  const int64_t groups = op.AttrInt("group", 1);
  const int64_t c_out = w.shape()[0], cig = w.shape()[1], kh = w.shape()[2], kw = w.shape()[3];
  if (groups < 1 || x.dims[0] != cig * groups || c_out % groups != 0)
    return op.Error("weights of shape " + ShapeString(w.shape()) + " and group " +
                    std::to_string(groups) + " do not fit " + std::to_string(x.dims[0]) +
                    " input channels");
  const auto kernel_shape = op.AttrInts("kernel_shape");
  if (!kernel_shape.empty() && kernel_shape != std::vector<int64_t>{kh, kw})
    return op.Error("kernel_shape does not match the weights");
  int64_t pad_end[2];
  ASSIGN_OR_RETURN(
      kernels::Conv2dGeometry g,
      WindowGeometry(op, SpatialShape{1, x.dims[0], x.dims[1], x.dims[2]}, kh, kw, false, pad_end));
  g.c_out = c_out, g.groups = groups;
  Step s;
  s.kind = Step::kConv;
  s.conv.g = g;
  s.conv.type = m.float_type;
  ASSIGN_OR_RETURN(s.conv.act, ConvActivationOf(op, who));
  s.conv.act_a = op.activation_a, s.conv.act_b = op.activation_b;
  if (node.inputs.size() > 2 && node.inputs[2] >= 0) {
    const Tensor& b = graph.constant(node.inputs[2]);
    if (!b.valid() || b.type() != DataType::kFp32 || b.elements() != c_out)
      return Unsupported(who + ": the bias must be " + std::to_string(c_out) +
                         " constant FP32 values on the GPU");
    ASSIGN_OR_RETURN(const void* bias, m.UploadFloats(FloatsOf(b), kc::ElemType::kF32));
    s.conv.bias = static_cast<const float*>(bias);
  }
  const ValueSpec y = ImageValue(m.float_type, c_out, g.oh, g.ow);
  // A first convolution of few channels (an RGB image) in bf16/fp16: the conversion to
  // channels-last pads them to 8 with zeros, and the weights alike, so the tensor cores take it.
  const ValueSpec in = m.values[node.inputs[0]];
  std::vector<float> oihw = FloatsOf(w);
  if (m.float_type != kc::ElemType::kF32 && groups == 1 && g.c_in % 8 != 0 && !in.nhwc &&
      in.dims[1] * in.dims[2] > 1) {
    const int64_t c_pad = (g.c_in + 7) / 8 * 8;
    std::vector<float> padded(static_cast<size_t>(c_out * c_pad * kh * kw), 0.f);
    for (int64_t co = 0; co < c_out; ++co)
      for (int64_t ci = 0; ci < g.c_in; ++ci)
        std::copy_n(oihw.begin() + ((co * g.c_in + ci) * kh * kw), kh * kw,
                    padded.begin() + ((co * c_pad + ci) * kh * kw));
    oihw.swap(padded);
    s.conv.g.c_in = c_pad;
    ValueSpec wide = in;
    wide.nhwc = true;
    wide.dims[0] = c_pad, wide.row_elems = c_pad * in.dims[1] * in.dims[2];
    s.in = AddLayoutCopy(m, m.Resolve(node.inputs[0]), wide);
  } else {
    s.in = InLayout(m, node.inputs[0], true);
  }
  ASSIGN_OR_RETURN(s.conv.w,
                   m.UploadFloats(kc::ConvWeightsLayout(s.conv, oihw.data()), m.float_type));
  if (op.residual) {
    const int r = node.inputs.size() > 3 ? node.inputs[3] : -1;
    const ValueSpec* rv = r >= 0 && static_cast<size_t>(r) < graph.value_count() &&
                                  !graph.constant(r).valid() && m.values[r].defined
                              ? &m.values[r]
                              : nullptr;
    if (rv == nullptr || rv->logical != DataType::kFp32 || rv->dims != y.dims)
      return Unsupported(who + ": a residual of the output's shape " + ShapeString(y.dims) +
                         " per row is the only one the GPU epilogue adds");
    s.residual = InLayout(m, r, true);
  }
  m.values[node.outputs[0]] = y;
  s.out = node.outputs[0];
  m.steps.push_back(s);
  ++m.convs;
  ++m.conv_kernels[kc::ConvKernelName(kc::ChooseConvKernel(s.conv))];
  return Status::Ok();
}

// MaxPool and AveragePool windows, GlobalAveragePool and GlobalMaxPool, channels-last.
Status CompilePool(const Graph::Node& node, const ValueSpec& x, GpuModel& m,
                   const std::string& who) {
  const OpNode& op = node.op;
  const std::string& type = op.op_type();
  if (x.logical != DataType::kFp32 || !IsImage(x))
    return Unsupported(who + ": the GPU engine pools FP32 images [rows, c, h, w]");
  Step s;
  s.pool =
      type == "MaxPool" || type == "GlobalMaxPool" ? kc::PoolKind::kMax : kc::PoolKind::kAverage;
  s.in = InLayout(m, node.inputs[0], true);
  const int64_t c = x.dims[0];
  if (type == "GlobalAveragePool" || type == "GlobalMaxPool") {
    s.kind = Step::kGlobalPool;
    m.values[node.outputs[0]] = ImageValue(m.float_type, c, 1, 1);
  } else {
    if (type == "MaxPool" && op.AttrInt("storage_order", 0) != 0)
      return op.Refuse("storage_order 1 is not supported");
    const auto kernel = op.AttrInts("kernel_shape");
    if (kernel.size() != 2) return Unsupported(who + ": the GPU engine pools 2-D windows");
    if (type == "AveragePool")
      for (int64_t d : op.AttrInts("dilations"))
        if (d != 1) return op.Refuse("AveragePool dilations are not supported");
    int64_t pad_end[2];
    ASSIGN_OR_RETURN(
        s.window, WindowGeometry(op, SpatialShape{1, c, x.dims[1], x.dims[2]}, kernel[0], kernel[1],
                                 op.AttrInt("ceil_mode", 0) != 0, pad_end));
    s.window.c_out = c;
    s.pad_bottom = pad_end[0], s.pad_right = pad_end[1];
    s.count_include_pad = op.AttrInt("count_include_pad", 0) != 0;
    s.kind = Step::kPool;
    m.values[node.outputs[0]] = ImageValue(m.float_type, c, s.window.oh, s.window.ow);
  }
  s.out = node.outputs[0];
  m.steps.push_back(s);
  ++m.pools;
  return Status::Ok();
}

// Flatten (axis 1) and Reshape to a constant shape that keeps the rows: the same buffer read in
// NCHW order with other per-row dims.
Status CompileReshape(const Graph& graph, const Graph::Node& node, const ValueSpec& x, GpuModel& m,
                      const std::string& who) {
  const OpNode& op = node.op;
  std::vector<int64_t> dims;
  if (op.op_type() == "Flatten") {
    if (op.AttrInt("axis", 1) != 1)
      return Unsupported(who + ": the GPU engine flattens from axis 1 only");
    dims = {x.row_elems};
  } else {
    const Tensor& shape =
        node.inputs.size() > 1 && node.inputs[1] >= 0 ? graph.constant(node.inputs[1]) : Tensor();
    if (!shape.valid() || shape.type() != DataType::kInt64 || shape.elements() < 1)
      return Unsupported(who + ": the GPU engine reshapes to a constant INT64 shape");
    const int64_t* v = shape.data<int64_t>();
    const bool allow_zero = op.AttrInt("allowzero", 0) != 0;
    if (allow_zero || (v[0] != 0 && v[0] != -1))
      return Unsupported(who + ": the new shape must keep the rows (0 or -1 first) on the GPU");
    int64_t known = 1, infer_at = -1;
    for (int64_t i = 1; i < shape.elements(); ++i) {
      int64_t d = v[i];
      if (d == 0 && static_cast<size_t>(i) <= x.dims.size()) d = x.dims[i - 1];
      if (d == -1 && v[0] == 0 && infer_at < 0) {
        infer_at = static_cast<int64_t>(dims.size());
        dims.push_back(1);
        continue;
      }
      if (d < 1) return op.Error("shape value " + std::to_string(v[i]) + " is not supported");
      if (known > x.row_elems) break;
      known *= d;
      dims.push_back(d);
    }
    if (infer_at >= 0 && known > 0 && x.row_elems % known == 0)
      dims[infer_at] = x.row_elems / known;
    if (ElementCount(dims.data(), dims.size()) != x.row_elems)
      return op.Error("cannot reshape " + ShapeString(x.dims) + " per row to " +
                      ShapeString(shape.shape()) + " values of this shape");
  }
  const int source = InLayout(m, node.inputs[0], false);
  ValueSpec alias = m.values[source];
  alias.alias = source;
  alias.dims = dims;
  alias.nhwc = false;
  m.values[node.outputs[0]] = alias;
  return Status::Ok();
}

Status CompileNode(const Graph& graph, const Graph::Node& node, GpuModel& m) {
  const std::string& op = node.op.op_type();
  const std::string who = "node '" + node.op.name() + "' (" + op + ")";
  auto value = [&](int id) -> StatusOr<const ValueSpec*> {
    if (id < 0 || (static_cast<size_t>(id) < graph.value_count() && graph.constant(id).valid()) ||
        !m.values[id].defined)
      return Unsupported(who +
                         ": the GPU engine needs this input computed from the model's "
                         "inputs, not a constant or an optional input");
    return &m.values[id];  // its own shape; steps resolve aliases to buffers
  };
  if (node.outputs.size() != 1 || node.outputs[0] < 0)
    return Unsupported(who + ": one output expected");
  const int out = node.outputs[0];

  if (op == "Gemm" || op == "MatMul") {
    ASSIGN_OR_RETURN(const ValueSpec* x, value(node.inputs[0]));
    const Tensor& b =
        node.inputs.size() > 1 && node.inputs[1] >= 0 ? graph.constant(node.inputs[1]) : Tensor();
    if (b.valid() && b.raw() == nullptr)
      return Internal(who + ": the weights were released (the graph was loaded for the CPU)");
    if (x->logical != DataType::kFp32 || !b.valid() || b.type() != DataType::kFp32 ||
        b.shape().size() != 2 || x->dims.size() != 1)
      return Unsupported(who + ": the GPU engine runs FP32 [rows, K] x constant 2-D FP32 weights");
    const bool gemm = op == "Gemm";
    if (gemm && node.op.AttrInt("transA", 0) != 0)
      return Unsupported(who + ": transA is not supported on the GPU");
    const bool trans_b = gemm && node.op.AttrInt("transB", 0) != 0;
    const int64_t k = x->dims[0];
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
    s.in = m.Resolve(node.inputs[0]);
    s.n = n, s.k = k;
    if (m.precision == Precision::kInt8 && k % 16 == 0) {
      // Per output channel, the same arithmetic as the device's per-row quantization. A GEMM whose
      // k is no multiple of 16 (no int8 kernel takes it) stays in bf16.
      std::vector<int8_t> q(w.size());
      std::vector<float> scale(static_cast<size_t>(n));
      kernels::QuantizeRowsInt8(w.data(), n, k, k, q.data(), scale.data());
      ASSIGN_OR_RETURN(s.w, m.Upload(q.data(), q.size()));
      ASSIGN_OR_RETURN(const void* dscale, m.Upload(scale.data(), scale.size() * 4));
      s.w_scale = static_cast<const float*>(dscale);
      ++m.int8_gemms;
      m.int8_max_k = std::max(m.int8_max_k, k);
    } else {
      ASSIGN_OR_RETURN(s.w, m.UploadFloats(w, m.float_type));
    }
    s.alpha = gemm ? node.op.AttrFloat("alpha", 1.f) : 1.f;
    if (gemm && node.inputs.size() > 2 && node.inputs[2] >= 0) {
      const Tensor& c = graph.constant(node.inputs[2]);
      if (!c.valid() || c.elements() != n)
        return Unsupported(who + ": C must be a constant bias of " + std::to_string(n) +
                           " elements on the GPU");
      std::vector<float> bias = FloatsOf(c);
      const float beta = node.op.AttrFloat("beta", 1.f);
      for (float& v : bias) v *= beta;
      ASSIGN_OR_RETURN(const void* dbias, m.UploadFloats(bias, kc::ElemType::kF32));
      s.bias = static_cast<const float*>(dbias);
    }
    s.act = node.op.activation == OpNode::Activation::kRelu      ? kc::Activation::kRelu
            : node.op.activation == OpNode::Activation::kSigmoid ? kc::Activation::kSigmoid
                                                                 : kc::Activation::kNone;
    m.values[out] = ValueSpec{true, m.float_type, DataType::kFp32, {n}, n, -1};
    s.out = out;
    m.steps.push_back(s);
    ++m.gemms;
    return Status::Ok();
  }

  if (op == "Conv") {
    ASSIGN_OR_RETURN(const ValueSpec* x, value(node.inputs[0]));
    return CompileConv(graph, node, ValueSpec(*x), m, who);
  }
  if (op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool" ||
      op == "GlobalMaxPool") {
    ASSIGN_OR_RETURN(const ValueSpec* x, value(node.inputs[0]));
    return CompilePool(node, ValueSpec(*x), m, who);
  }
  if (op == "Flatten" || op == "Reshape") {
    ASSIGN_OR_RETURN(const ValueSpec* x, value(node.inputs[0]));
    return CompileReshape(graph, node, ValueSpec(*x), m, who);
  }

  static const std::map<std::string, kc::BinaryOp> kBinary = {{"Add", kc::BinaryOp::kAdd},
                                                              {"Sub", kc::BinaryOp::kSub},
                                                              {"Mul", kc::BinaryOp::kMul},
                                                              {"Div", kc::BinaryOp::kDiv}};
  if (auto it = kBinary.find(op); it != kBinary.end()) {
    if (node.inputs.size() != 2) return InvalidArgument(who + ": two inputs expected");
    int ia = node.inputs[0], ib = node.inputs[1];
    const bool ca = ia >= 0 && graph.constant(ia).valid(),
               cb = ib >= 0 && graph.constant(ib).valid();
    if (ca && cb) return Unsupported(who + ": both operands constant");
    // Channels-last images stay so when every operand is one (and constants are scalars);
    // otherwise the operands are brought back to NCHW.
    bool any_last = false, all_last = true;
    for (int side = 0; side < 2; ++side) {
      const int id = side == 0 ? ia : ib;
      if (side == 0 ? ca : cb) {
        all_last = all_last && graph.constant(id).elements() == 1;
        continue;
      }
      ASSIGN_OR_RETURN(const ValueSpec* v, value(id));
      any_last = any_last || v->nhwc;
      all_last = all_last && v->nhwc;
    }
    if (any_last) {
      if (!ca) ia = InLayout(m, ia, all_last);
      if (!cb) ib = InLayout(m, ib, all_last);
    }
    const ValueSpec* shape_of = nullptr;
    ASSIGN_OR_RETURN(shape_of, value(ca ? ib : ia));
    Step s;
    s.kind = Step::kBinary;
    s.op = it->second;
    for (int side = 0; side < 2; ++side) {
      const int id = side == 0 ? ia : ib;
      Operand& operand = side == 0 ? s.a : s.b;
      if (side == 0 ? ca : cb) {
        const Tensor& c = graph.constant(id);
        if (c.type() != shape_of->logical || !BroadcastsOverRow(c.shape(), shape_of->dims))
          return Unsupported(who + ": constant of shape " + ShapeString(c.shape()) +
                             " does not broadcast over rows of " + ShapeString(shape_of->dims) +
                             " on the GPU");
        if (c.type() == DataType::kFp32) {
          ASSIGN_OR_RETURN(operand.constant, m.UploadFloats(FloatsOf(c), shape_of->type));
        } else {
          ASSIGN_OR_RETURN(operand.constant, m.Upload(c.raw(), c.bytes()));
        }
        operand.count = c.elements();
      } else {
        ASSIGN_OR_RETURN(const ValueSpec* v, value(id));
        if (v->logical != shape_of->logical || v->dims != shape_of->dims)
          return Unsupported(who + ": operands of shapes " + ShapeString(v->dims) + " and " +
                             ShapeString(shape_of->dims) +
                             " per row; the GPU engine broadcasts only constants");
        operand.value = m.Resolve(id);
      }
    }
    return AddElementwise(m, s, *shape_of, out);
  }

  static const std::map<std::string, kc::Activation> kUnary = {
      {"Relu", kc::Activation::kRelu},
      {"Sigmoid", kc::Activation::kSigmoid},
      {"Tanh", kc::Activation::kTanh},
      {"Gelu", kc::Activation::kGelu}};
  if (auto it = kUnary.find(op); it != kUnary.end()) {
    ASSIGN_OR_RETURN(const ValueSpec* x, value(node.inputs[0]));
    if (x->logical != DataType::kFp32) return Unsupported(who + ": FP32 only on the GPU");
    if (op == "Gelu" && node.op.HasAttr("approximate") && node.op.AttrInt("approximate", 0) != 0)
      return Unsupported(who + ": the tanh approximation of Gelu is not on the GPU");
    Step s;
    s.kind = Step::kUnary;
    s.act = it->second;
    s.in = m.Resolve(node.inputs[0]);
    return AddElementwise(m, s, *x, out);
  }

  if (op == "Identity") {
    ASSIGN_OR_RETURN(const ValueSpec* x, value(node.inputs[0]));
    ValueSpec alias = *x;
    alias.alias = m.Resolve(node.inputs[0]);
    m.values[out] = alias;
    return Status::Ok();
  }
  return Unsupported(who + " has no GPU kernel (GPU ops: " + kGpuOps + ")");
}

}  // namespace

StatusOr<std::shared_ptr<const GpuModel>> CompileForGpu(const Graph& graph, int device,
                                                        Precision precision) {
  CUDA_RETURN(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  auto m = std::make_shared<GpuModel>();
  m->device = device;
  m->precision = precision;
  // int8: GEMM operands in int8, everything between them in bf16.
  m->float_type = precision == Precision::kBf16 || precision == Precision::kInt8
                      ? kc::ElemType::kBF16
                  : precision == Precision::kFp16 ? kc::ElemType::kF16
                                                  : kc::ElemType::kF32;
  if (precision == Precision::kInt8) {
    // Batches over 16 rows run on Hopper's int8 tensor cores, the only int8 kernel for them.
    alignas(16) static const int8_t probe[16] = {};
    static const float scale[1] = {1.f};
    kc::GemmProblem p;
    p.m = 256, p.n = 256, p.k = 64, p.ab_type = kc::ElemType::kI8, p.x = p.w = probe;
    p.x_scale = p.w_scale = scale;
    if (!kc::Sm90Supported(p))
      return Unsupported(
          "precision int8 needs a Hopper GPU (compute capability 9.0) and a build "
          "for sm_90a: batches over 16 rows run on its int8 tensor cores");
  }
  m->values.resize(graph.value_count());
  for (const ValueInfo& v : graph.inputs()) {
    const std::string what = "input '" + v.name + "'";
    if (v.has_default) return Unsupported(what + " is optional: not supported on the GPU");
    std::vector<int64_t> dims(v.dims.begin() + (v.dims.empty() ? 0 : 1), v.dims.end());
    if (v.dims.empty() || std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 1; }))
      return Unsupported(what + " has shape " + ShapeString(v.dims) +
                         ": the GPU engine needs [rows, fixed dims...]");
    ASSIGN_OR_RETURN(kc::ElemType type, StorageType(v.type, m->float_type, what));
    const int id = graph.FindValue(v.name);
    const int64_t row_elems = ElementCount(dims.data(), dims.size());
    m->values[id] = ValueSpec{true, type, v.type, dims, row_elems, -1};
    IoSpec io{v.name, id, v.type, dims, static_cast<size_t>(row_elems) * DataTypeSize(v.type)};
    if (v.type == DataType::kFp32 && type != kc::ElemType::kF32) {
      io.value = m->AddValue(ValueSpec{true, kc::ElemType::kF32, v.type, dims, row_elems, -1});
      Step s;
      s.kind = Step::kConvert;
      s.in = io.value, s.out = id;
      m->steps.push_back(s);
    }
    m->inputs.push_back(io);
  }
  for (const auto& node : graph.nodes()) RETURN_IF_ERROR(CompileNode(graph, node, *m));
  for (const ValueInfo& v : graph.outputs()) {
    int id = graph.FindValue(v.name);
    if (id < 0 || !m->values[id].defined)
      return Unsupported("output '" + v.name + "' is not computed from the inputs on the GPU");
    id = InLayout(*m, id, false);
    const ValueSpec spec = m->values[id];
    IoSpec io{v.name, id, spec.logical, spec.dims,
              static_cast<size_t>(spec.row_elems) * DataTypeSize(spec.logical)};
    if (spec.logical == DataType::kFp32 && spec.type != kc::ElemType::kF32) {
      io.value = m->AddValue(
          ValueSpec{true, kc::ElemType::kF32, spec.logical, spec.dims, spec.row_elems, -1});
      Step s;
      s.kind = Step::kConvert;
      s.in = id, s.out = io.value;
      m->steps.push_back(s);
    }
    m->outputs.push_back(io);
  }
  return std::shared_ptr<const GpuModel>(std::move(m));
}

std::string Describe(const GpuModel& m) {
  char mib[32];
  std::snprintf(mib, sizeof(mib), "%.1f", static_cast<double>(m.weight_bytes) / (1 << 20));
  std::string precision = PrecisionName(m.precision);
  if (m.precision == Precision::kInt8)
    precision += " (" + std::to_string(m.int8_gemms) + " of " + std::to_string(m.gemms) +
                 " GEMMs in int8, the rest in bf16)";
  if (m.precision == Precision::kInt8 && m.convs > 0) precision += "; convolutions in bf16";
  std::string convs;
  if (m.convs > 0) {
    convs = std::to_string(m.convs) + " convolution(s) (";
    const char* sep = "";
    for (const auto& [kernel, count] : m.conv_kernels)
      convs += sep + std::to_string(count) + " " + kernel, sep = ", ";
    convs += "), " + std::to_string(m.pools) + " pool(s), ";
  }
  return convs + std::to_string(m.gemms) + " GEMM(s), " + std::to_string(m.elementwise) +
         " elementwise op(s); " + precision + ", " + mib + " MiB of weights on GPU " +
         std::to_string(m.device);
}

// Buckets tuned when an instance starts; larger ones on first use.
constexpr int64_t kEagerTuneRows = 64;

class GpuInstance final : public GemmBench {
 public:
  explicit GpuInstance(std::shared_ptr<const GpuModel> model) : m_(std::move(model)) {}
  ~GpuInstance() override {
    cudaSetDevice(m_->device);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    graphs_.Clear();
    ReleaseBuffers();
    cublas_.reset();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status Init() {
    CUDA_RETURN(cudaSetDevice(m_->device), "cudaSetDevice");
    CUDA_RETURN(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    RETURN_IF_ERROR(phases_.Init());
    cublas_ = std::make_unique<kc::CublasGemm>();
    if (std::string e = cublas_->Init(stream_); !e.empty()) return Internal(e);
    std::vector<size_t> gemms;
    for (size_t i = 0; i < m_->steps.size(); ++i)
      if (m_->steps[i].kind == Step::kGemm) gemms.push_back(i);
    tuner_ = std::make_unique<GemmTuner>(m_->steps.size(), std::move(gemms));
    RETURN_IF_ERROR(Grow(kEagerTuneRows));  // once, rather than bucket by bucket
    for (int64_t rows = 1; rows <= kEagerTuneRows; rows = TuneBucket(rows + 1))
      RETURN_IF_ERROR(tuner_->Tune(*this, rows));
    return Status::Ok();
  }

  std::string tuning() const { return tuner_->Describe(); }
  uint64_t device_ns() const { return device_ns_; }

  Status Run(int64_t rows, const std::vector<GpuFeed>& feeds,
             const std::vector<GpuDestination>& destinations, std::vector<GpuResult>* results,
             uint64_t* start_ns, uint64_t* end_ns) {
    if (rows < 1) return InvalidArgument("a GPU run needs at least one row");
    CUDA_RETURN(cudaSetDevice(m_->device), "cudaSetDevice");
    RETURN_IF_ERROR(Grow(rows));
    if (const int64_t bucket = TuneBucket(rows); !tuner_->Tuned(bucket))
      RETURN_IF_ERROR(tuner_->Tune(*this, bucket));
    *start_ns = NereidNowNs();
    // Which copies go straight between request memory and the device (bit i: input i; bit
    // inputs + o: output o); the others pass through staging. A graph is captured per row count
    // and mask.
    constexpr size_t kDirectMin = 64 << 10;
    const size_t ni = m_->inputs.size();
    uint64_t direct = 0;
    direct_src_.assign(ni, {});
    direct_dst_.assign(m_->outputs.size(), nullptr);
    for (size_t i = 0; i < ni; ++i) {
      const IoSpec& io = m_->inputs[i];
      const GpuFeed* feed = nullptr;
      for (const auto& f : feeds)
        if (f.name == io.name) feed = &f;
      if (feed == nullptr) return InvalidArgument("input '" + io.name + "' is missing");
      const size_t want = static_cast<size_t>(rows) * io.row_bytes;
      size_t total = 0;
      bool on_device = false;
      for (const GpuPart& part : feed->parts) total += part.bytes, on_device |= part.device;
      if (total != want)
        return InvalidArgument("input '" + io.name + "' has the wrong size for " +
                               std::to_string(rows) + " rows");
      const bool large_pinned =
          feed->parts.size() == 1 && feed->parts[0].pinned && want >= kDirectMin;
      if ((on_device || large_pinned) && i < 32) {
        direct |= uint64_t{1} << i;
        direct_src_[i] = feed->parts;
        continue;
      }
      if (on_device) return Unsupported("more than 32 inputs in device memory");
      // Host -> staging: each request's part lands at its rows (this is also the batch gather).
      uint8_t* dst = static_cast<uint8_t*>(staging_in_[i].data);
      size_t at = 0;
      for (const GpuPart& part : feed->parts) {
        std::memcpy(dst + at, part.data, part.bytes);
        at += part.bytes;
      }
    }
    for (size_t o = 0; o < m_->outputs.size() && o < destinations.size(); ++o) {
      const GpuDestination& d = destinations[o];
      if (d.data == nullptr || ni + o >= 64) continue;
      if (d.device || static_cast<size_t>(rows) * m_->outputs[o].row_bytes >= kDirectMin) {
        direct |= uint64_t{1} << (ni + o);
        direct_dst_[o] = d.data;
      }
    }
    const uint64_t gathered_ns = NereidNowNs();
    const bool measured = phases_.Begin();
    auto mark = [&](int i) { return phases_.Mark(i, stream_); };
    CUDA_RETURN(mark(0), "cudaEventRecord");
    RETURN_IF_ERROR(EnqueueDirect(rows, direct, true));
    if (!copies_in_graph_) RETURN_IF_ERROR(EnqueueCopies(rows, true, direct));
    CUDA_RETURN(mark(1), "cudaEventRecord");
    RETURN_IF_ERROR(LaunchGraph(rows, direct));
    CUDA_RETURN(mark(2), "cudaEventRecord");
    if (!copies_in_graph_) RETURN_IF_ERROR(EnqueueCopies(rows, false, direct));
    RETURN_IF_ERROR(EnqueueDirect(rows, direct, false));
    CUDA_RETURN(mark(3), "cudaEventRecord");
    const uint64_t enqueued_ns = NereidNowNs();
    CUDA_RETURN(cudaStreamSynchronize(stream_), "GPU execution");
    *end_ns = NereidNowNs();
    if (measured)
      phases_.Note(rows, direct, copies_in_graph_, {*start_ns, gathered_ns, enqueued_ns, *end_ns});
    device_ns_ = phases_.DeviceNs();
    results->clear();
    for (size_t i = 0; i < m_->outputs.size(); ++i) {
      const IoSpec& io = m_->outputs[i];
      GpuResult r;
      r.name = io.name;
      r.type = io.type;
      r.shape = {rows};
      r.shape.insert(r.shape.end(), io.dims.begin(), io.dims.end());
      r.in_destination = direct_dst_[i] != nullptr;
      r.data =
          static_cast<const uint8_t*>(r.in_destination ? direct_dst_[i] : staging_out_[i].data);
      r.bytes = static_cast<size_t>(rows) * io.row_bytes;
      results->push_back(std::move(r));
    }
    return Status::Ok();
  }

  std::vector<GpuOutputInfo> outputs() const {
    std::vector<GpuOutputInfo> out;
    for (const IoSpec& io : m_->outputs) out.push_back({io.name, io.type, io.dims, io.row_bytes});
    return out;
  }

 private:
  void* Buf(int id) const { return buffers_[m_->Resolve(id)].data; }

  Status Allocate(NereidMemoryType type, size_t bytes, NereidBuffer* out) {
    RETURN_IF_ERROR(backend::FromError(
        NereidMemoryAllocate(type, m_->device, std::max<size_t>(bytes, 1), out)));
    return Status::Ok();
  }

  void ReleaseBuffers() {
    for (auto* list : {&buffers_, &staging_in_, &staging_out_})
      for (auto& b : *list)
        if (b.data != nullptr) NereidMemoryRelease(b.data);
    for (auto* b : {&acc_, &quantized_, &row_scale_, &conv_workspace_})
      if (b->data != nullptr) NereidMemoryRelease(b->data);
    buffers_.clear(), staging_in_.clear(), staging_out_.clear();
    acc_ = quantized_ = row_scale_ = conv_workspace_ = NereidBuffer{};
  }

  // Sizes every buffer for at least 'rows' rows (doubling), dropping graphs captured for the old
  // buffers.
  Status Grow(int64_t rows) {
    if (rows <= capacity_) return Status::Ok();
    const int64_t capacity = std::max(rows, capacity_ * 2);
    cudaStreamSynchronize(stream_);
    graphs_.Clear();
    ReleaseBuffers();
    capacity_ = 0;
    buffers_.assign(m_->values.size(), NereidBuffer{});
    for (size_t id = 0; id < m_->values.size(); ++id) {
      const ValueSpec& v = m_->values[id];
      if (!v.defined || v.alias >= 0) continue;
      RETURN_IF_ERROR(Allocate(NEREID_MEMORY_GPU,
                               static_cast<size_t>(capacity * v.row_elems) * kc::ElemSize(v.type),
                               &buffers_[id]));
    }
    // cuBLAS's accumulators (rows x n), or the partial sums of a K-split GemmSm90 (up to 4 splits
    // up to 512 rows, 8 up to 64: beyond that the tiles alone fill the GPU).
    int64_t acc = 1;
    for (const Step& s : m_->steps)
      if (s.kind == Step::kGemm)
        acc = std::max({acc, s.n * capacity, 4 * s.n * std::min<int64_t>(capacity, 512),
                        8 * s.n * std::min<int64_t>(capacity, 64)});
    RETURN_IF_ERROR(Allocate(NEREID_MEMORY_GPU, static_cast<size_t>(acc) * 4, &acc_));
    acc_floats_ = acc;
    if (m_->int8_gemms > 0) {  // an int8 GEMM's activations, quantized per row
      RETURN_IF_ERROR(
          Allocate(NEREID_MEMORY_GPU, static_cast<size_t>(capacity * m_->int8_max_k), &quantized_));
      RETURN_IF_ERROR(Allocate(NEREID_MEMORY_GPU, static_cast<size_t>(capacity) * 4, &row_scale_));
    }
    // The partial sums of convolutions split over blocks (only the tensor-core kernel, bf16/fp16,
    // splits; without the workspace it runs unsplit).
    if (m_->convs > 0 && m_->float_type != kc::ElemType::kF32)
      RETURN_IF_ERROR(
          Allocate(NEREID_MEMORY_GPU, kc::kConvWorkspaceFloats * sizeof(float), &conv_workspace_));
    bool pinned = true;
    for (int dir = 0; dir < 2; ++dir) {
      const auto& ios = dir == 0 ? m_->inputs : m_->outputs;
      auto& staging = dir == 0 ? staging_in_ : staging_out_;
      staging.assign(ios.size(), NereidBuffer{});
      for (size_t i = 0; i < ios.size(); ++i) {
        RETURN_IF_ERROR(
            Allocate(NEREID_MEMORY_CPU_PINNED, capacity * ios[i].row_bytes, &staging[i]));
        pinned = pinned && staging[i].memory_type == NEREID_MEMORY_CPU_PINNED;
      }
    }
    // Copies from page-locked staging are captured in the graph; from pageable memory they run as
    // separate (driver-staged) copies around it.
    copies_in_graph_ = pinned;
    // Where the device sees page-locked staging (the same address under unified addressing): small
    // copies then run as a kernel reading or writing it (kc::CopyBytes) instead of a copy node.
    for (int dir = 0; dir < 2; ++dir) {
      const auto& staging = dir == 0 ? staging_in_ : staging_out_;
      auto& mapped = dir == 0 ? mapped_in_ : mapped_out_;
      mapped.assign(staging.size(), nullptr);
      for (size_t i = 0; i < staging.size() && pinned; ++i)
        if (cudaHostGetDevicePointer(&mapped[i], staging[i].data, 0) != cudaSuccess) {
          cudaGetLastError();  // not mapped: copy nodes serve
          mapped[i] = nullptr;
        }
    }
    capacity_ = capacity;
    return Status::Ok();
  }

  // The copies between request memory (host or device) and the device buffers chosen for this
  // run, outside any graph: inputs part by part at their rows, outputs whole.
  Status EnqueueDirect(int64_t rows, uint64_t direct, bool to_device) {
    const size_t ni = m_->inputs.size();
    const auto& ios = to_device ? m_->inputs : m_->outputs;
    for (size_t i = 0; i < ios.size(); ++i) {
      if (!(direct >> (to_device ? i : ni + i) & 1)) continue;
      uint8_t* device = static_cast<uint8_t*>(Buf(ios[i].value));
      if (to_device) {
        size_t at = 0;
        for (const GpuPart& part : direct_src_[i]) {
          CUDA_RETURN(
              cudaMemcpyAsync(device + at, part.data, part.bytes, cudaMemcpyDefault, stream_),
              "copy to the GPU");
          at += part.bytes;
        }
      } else {
        const size_t bytes = static_cast<size_t>(rows) * ios[i].row_bytes;
        CUDA_RETURN(cudaMemcpyAsync(direct_dst_[i], device, bytes, cudaMemcpyDefault, stream_),
                    "copy from the GPU");
      }
    }
    return Status::Ok();
  }

  // The staging copies (those not direct in this run).
  Status EnqueueCopies(int64_t rows, bool to_device, uint64_t direct) {
    const size_t ni = m_->inputs.size();
    const auto& ios = to_device ? m_->inputs : m_->outputs;
    for (size_t i = 0; i < ios.size(); ++i) {
      if (direct >> (to_device ? i : ni + i) & 1) continue;
      const size_t bytes = static_cast<size_t>(rows) * ios[i].row_bytes;
      void* host = (to_device ? staging_in_ : staging_out_)[i].data;
      void* device = Buf(ios[i].value);
      void* mapped = (to_device ? mapped_in_ : mapped_out_)[i];
      constexpr size_t kKernelCopyMax = 64 << 10;  // beyond this the copy engine is faster
      if (mapped != nullptr && bytes <= kKernelCopyMax) {
        CUDA_RETURN(to_device ? kc::CopyBytes(device, mapped, bytes, stream_)
                              : kc::CopyBytes(mapped, device, bytes, stream_),
                    to_device ? "copy to the GPU" : "copy from the GPU");
        continue;
      }
      CUDA_RETURN(to_device ? cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_)
                            : cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_),
                  to_device ? "copy to the GPU" : "copy from the GPU");
    }
    return Status::Ok();
  }

  Status EnqueueSteps(int64_t rows) {
    for (const Step& s : m_->steps) {
      const ValueSpec& out = m_->values[s.out];
      const int64_t count = rows * out.row_elems;
      switch (s.kind) {
        case Step::kGemm: {
          RETURN_IF_ERROR(
              RunGemm(s, rows, tuner_->Choice(static_cast<size_t>(&s - m_->steps.data()), rows)));
          break;
        }
        case Step::kBinary: {
          auto ptr = [&](const Operand& o) {
            return o.value >= 0 ? static_cast<const void*>(Buf(o.value)) : o.constant;
          };
          auto n = [&](const Operand& o) { return o.value >= 0 ? count : o.count; };
          CUDA_RETURN(kc::Binary(s.op, out.type, ptr(s.a), n(s.a), ptr(s.b), n(s.b), Buf(s.out),
                                 count, stream_),
                      "elementwise kernel");
          break;
        }
        case Step::kUnary:
          CUDA_RETURN(kc::Unary(s.act, out.type, Buf(s.in), Buf(s.out), count, stream_),
                      "activation kernel");
          break;
        case Step::kConvert:
          CUDA_RETURN(
              kc::Convert(m_->values[s.in].type, Buf(s.in), out.type, Buf(s.out), count, stream_),
              "conversion kernel");
          break;
        case Step::kConv: {
          kc::ConvProblem p = s.conv;
          p.g.n = rows;
          p.x = Buf(s.in), p.y = Buf(s.out);
          p.residual = s.residual >= 0 ? Buf(s.residual) : nullptr;
          p.workspace = static_cast<float*>(conv_workspace_.data);
          CUDA_RETURN(kc::Conv2dNhwc(p, stream_), "convolution kernel");
          break;
        }
        case Step::kPool: {
          kernels::Conv2dGeometry g = s.window;
          g.n = rows;
          CUDA_RETURN(kc::Pool2dNhwc(s.pool, g, s.pad_bottom, s.pad_right, s.count_include_pad,
                                     out.type, Buf(s.in), Buf(s.out), stream_),
                      "pooling kernel");
          break;
        }
        case Step::kGlobalPool: {
          const ValueSpec& in = m_->values[s.in];
          CUDA_RETURN(kc::GlobalPoolNhwc(s.pool, rows, in.dims[1] * in.dims[2], in.dims[0],
                                         out.type, Buf(s.in), Buf(s.out), stream_),
                      "pooling kernel");
          break;
        }
        case Step::kLayout: {
          const int64_t c = m_->values[s.in].dims[0], hw = out.dims[1] * out.dims[2];
          CUDA_RETURN(
              s.to_last ? kc::ChannelsLast(out.type, Buf(s.in), rows, c, hw, Buf(s.out), stream_,
                                           out.dims[0])
                        : kc::ChannelsFirst(out.type, Buf(s.in), rows, c, hw, Buf(s.out), stream_),
              "layout kernel");
          break;
        }
      }
    }
    return Status::Ok();
  }

  kc::GemmProblem Problem(const Step& s, int64_t rows) const {
    kc::GemmProblem p;
    p.m = rows, p.n = s.n, p.k = s.k;
    p.ab_type = m_->float_type;
    p.x = Buf(s.in), p.w = s.w, p.y = Buf(s.out);
    p.out_type = m_->values[s.out].type;
    p.alpha = s.alpha, p.bias = s.bias, p.act = s.act;
    p.tf32 = m_->precision == Precision::kTf32;
    p.workspace = static_cast<float*>(acc_.data), p.workspace_floats = acc_floats_;
    if (s.w_scale != nullptr) {
      p.ab_type = kc::ElemType::kI8;
      p.x = quantized_.data, p.x_scale = static_cast<const float*>(row_scale_.data);
      p.w_scale = s.w_scale;
    }
    return p;
  }

  // One GEMM on the implementation 'choice' names (cuBLAS with the epilogue kernel when null).
  Status RunGemm(const Step& s, int64_t rows, const GemmChoice* choice) {
    const kc::GemmProblem p = Problem(s, rows);
    if (p.ab_type == kc::ElemType::kI8) {
      CUDA_RETURN(kc::QuantizeRowsInt8(m_->values[s.in].type, Buf(s.in), rows, s.k,
                                       static_cast<int8_t*>(quantized_.data),
                                       static_cast<float*>(row_scale_.data), stream_),
                  "int8 quantization");
      if (choice != nullptr && choice->impl == GemmChoice::Impl::kSm90)
        return CudaError(kc::GemmSm90(p, stream_, choice->sm90), "int8 GEMM kernel");
      if (choice != nullptr && choice->impl == GemmChoice::Impl::kSmallM)
        return CudaError(kc::GemmSmallM(p, stream_, choice->variant), "int8 GEMM kernel");
      if (choice == nullptr && !kc::SmallMInt8Supported(p))
        return CudaError(kc::GemmSm90(p, stream_), "int8 GEMM kernel");
      return CudaError(kc::GemmSmallMInt8(p, stream_), "int8 GEMM kernel");
    }
    if (choice != nullptr && choice->impl == GemmChoice::Impl::kSmallM)
      return CudaError(kc::GemmSmallM(p, stream_, choice->variant), "GEMM kernel");
    if (choice != nullptr && choice->impl == GemmChoice::Impl::kSm90)
      return CudaError(kc::GemmSm90(p, stream_, choice->sm90), "GEMM kernel");
    if (std::string e = cublas_->Run(p, static_cast<float*>(acc_.data)); !e.empty())
      return Internal(e);
    return Status::Ok();
  }

  // ---- GemmBench: what the tuner runs and times ----

  Status PrepareTuning(int64_t rows) override {
    RETURN_IF_ERROR(Grow(rows));
    // A small non-zero pattern (about 0.0115 as fp32, bf16 or fp16): never time on zeros.
    for (size_t id = 0; id < m_->values.size(); ++id) {
      const ValueSpec& v = m_->values[id];
      if (buffers_[id].data == nullptr) continue;
      CUDA_RETURN(cudaMemsetAsync(
                      buffers_[id].data, 0x3C,
                      static_cast<size_t>(capacity_ * v.row_elems) * kc::ElemSize(v.type), stream_),
                  "cudaMemset");
    }
    return Status::Ok();
  }

  kc::GemmProblem Problem(size_t step, int64_t rows) const override {
    return Problem(m_->steps[step], rows);
  }

  // Each candidate is timed as it runs when serving, inside a CUDA graph: 20 launches captured
  // once, the graph uploaded, then replayed 3 times (CUDA events, the fastest replay counts).
  // Timed eagerly instead, cuBLAS's host cost per call (its heuristics) would count against it
  // although a graph replay never pays it.
  StatusOr<float> Time(size_t step, int64_t rows, const GemmChoice& choice) override {
    const Step& s = m_->steps[step];
    for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(RunGemm(s, rows, &choice));
    ASSIGN_OR_RETURN(cudaGraphExec_t exec, CaptureGraph(stream_, [&] {
                       for (int i = 0; i < 20; ++i) RETURN_IF_ERROR(RunGemm(s, rows, &choice));
                       return Status::Ok();
                     }));
    cudaEvent_t start = nullptr, stop = nullptr;
    cudaError_t e = cudaEventCreate(&start);
    if (e == cudaSuccess) e = cudaEventCreate(&stop);
    if (e == cudaSuccess) e = cudaGraphUpload(exec, stream_);  // no timed replay pays the upload
    float best_ms = -1;
    for (int replay = 0; replay < 3 && e == cudaSuccess; ++replay) {
      float ms = 0;
      if ((e = cudaEventRecord(start, stream_)) != cudaSuccess ||
          (e = cudaGraphLaunch(exec, stream_)) != cudaSuccess ||
          (e = cudaEventRecord(stop, stream_)) != cudaSuccess ||
          (e = cudaEventSynchronize(stop)) != cudaSuccess ||
          (e = cudaEventElapsedTime(&ms, start, stop)) != cudaSuccess)
        break;
      if (best_ms < 0 || ms < best_ms) best_ms = ms;
    }
    cudaStreamSynchronize(stream_);
    cudaGraphExecDestroy(exec);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    CUDA_RETURN(e, "GEMM tuning");
    return best_ms;
  }

  // Replays the graph captured for 'rows' and this run's direct copies (capturing it on first
  // use).
  Status LaunchGraph(int64_t rows, uint64_t direct) {
    return graphs_.Launch({rows, direct}, stream_, [&] {
      if (copies_in_graph_) RETURN_IF_ERROR(EnqueueCopies(rows, true, direct));
      RETURN_IF_ERROR(EnqueueSteps(rows));
      if (copies_in_graph_) RETURN_IF_ERROR(EnqueueCopies(rows, false, direct));
      return Status::Ok();
    });
  }

  std::shared_ptr<const GpuModel> m_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<kc::CublasGemm> cublas_;
  int64_t capacity_ = 0;
  std::vector<NereidBuffer> buffers_, staging_in_, staging_out_;
  std::vector<void*> mapped_in_, mapped_out_;  // the staging buffers' device addresses, or null
  NereidBuffer acc_{};
  int64_t acc_floats_ = 0;
  NereidBuffer quantized_{}, row_scale_{};  // int8 GEMMs: x quantized per row, and its scales
  NereidBuffer conv_workspace_{};           // kc::kConvWorkspaceFloats: split convolutions
  bool copies_in_graph_ = false;
  GraphCache graphs_;                             // by (rows, direct mask)
  std::vector<std::vector<GpuPart>> direct_src_;  // per input: this run's direct parts, or none
  std::vector<void*> direct_dst_;     // per output: this run's direct destination, or null
  std::unique_ptr<GemmTuner> tuner_;  // which implementation runs each GEMM, by row count
  PhaseLog phases_;
  uint64_t device_ns_ = 0;  // the last run's device time
};

StatusOr<GpuInstancePtr> CreateGpuInstance(std::shared_ptr<const GpuModel> model) {
  GpuInstancePtr instance(new GpuInstance(std::move(model)));
  RETURN_IF_ERROR(instance->Init());
  return instance;
}

uint64_t LastDeviceNs(const GpuInstance& instance) { return instance.device_ns(); }

Status RunOnGpu(GpuInstance& instance, int64_t rows, const std::vector<GpuFeed>& feeds,
                const std::vector<GpuDestination>& destinations, std::vector<GpuResult>* results,
                uint64_t* compute_start_ns, uint64_t* compute_end_ns) {
  return instance.Run(rows, feeds, destinations, results, compute_start_ns, compute_end_ns);
}

std::vector<GpuOutputInfo> GpuOutputs(const GpuInstance& instance) { return instance.outputs(); }

void DestroyGpuInstance(GpuInstance* instance) { delete instance; }

std::string GemmTuning(const GpuInstance& instance) { return instance.tuning(); }

}  // namespace nereid::native
