// The GPU's convolution family: Conv (BatchNormalization, residual Add and activation fused by the
// graph's passes), ConvTranspose, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool; images
// channels-last (kernels/cuda/conv.h, tensor_ops.h).
#include "ops/conv.h"

#include <algorithm>

#include "gpu_model.h"

namespace nereid::native {
namespace {

// A 1x1 convolution of stride 1 without padding, one group: on channels-last images it is the
// GEMM [pixels, c_in] x [c_out, c_in]^T, run by the GEMM family's kernels (the tuner's pick per row
// count: the Hopper wgmma/TMA kernel, cuBLAS, the small-M kernels) rather than the convolution's.
bool IsPointwise(const kernels::Conv2dGeometry& g, const int64_t (&pad_end)[2]) {
  return g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_top == 0 &&
         g.pad_left == 0 && pad_end[0] == 0 && pad_end[1] == 0 && g.groups == 1;
}

// A strided first convolution of few channels in bf16/fp16 (ResNet's 7x7 stem of stride 2 over
// RGB) runs as one of stride 1 over the image's s x s blocks (kc::SpaceToDepth): s^2 c_in channels
// (padded to a multiple of 8, at most 16) and ceil(k / s)^2 taps, where padding the 3 channels to 8
// leaves 49 taps of 16 bytes: 256 products a pixel and output channel against 392, each tap one
// 32-byte piece of the image. Only where that is fewer products, and windows larger than the
// stride (a window of the stride's size would be a 1x1 over the blocks).
int64_t SpaceToDepthChannels(const kernels::Conv2dGeometry& g) {
  const int64_t s = g.stride_h;
  if (s < 2 || g.stride_w != s || g.dilation_h != 1 || g.dilation_w != 1 || g.kh <= s ||
      g.kw <= s || g.groups != 1)
    return 0;
  const int64_t c = (s * s * g.c_in + 7) / 8 * 8;
  const int64_t taps = (g.kh + s - 1) / s * ((g.kw + s - 1) / s);
  return c <= 16 && taps * c < g.kh * g.kw * ((g.c_in + 7) / 8 * 8) ? c : 0;
}

// Rewrites conv step 's' (its geometry, ONNX weights 'oihw' [c_out][c_in][kh][kw]) as the
// stride-1 convolution over 'c' space-to-depth channels, and adds the layout step that makes its
// input from image 'source' (NCHW).
void UseSpaceToDepth(GpuModel& m, int source, int64_t c, Step& s, std::vector<float>& oihw) {
  const kernels::Conv2dGeometry g = s.conv.g;
  const int64_t st = g.stride_h, kbh = (g.kh + st - 1) / st, kbw = (g.kw + st - 1) / st;
  std::vector<float> packed(static_cast<size_t>(g.c_out * c * kbh * kbw), 0.f);
  for (int64_t co = 0; co < g.c_out; ++co)
    for (int64_t ci = 0; ci < g.c_in; ++ci)
      for (int64_t ky = 0; ky < g.kh; ++ky)
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const int64_t channel = ((ky % st) * st + kx % st) * g.c_in + ci;
          packed[static_cast<size_t>(((co * c + channel) * kbh + ky / st) * kbw + kx / st)] =
              oihw[static_cast<size_t>(((co * g.c_in + ci) * g.kh + ky) * g.kw + kx)];
        }
  oihw.swap(packed);
  kernels::Conv2dGeometry blocks = g;  // the layout step's: source image -> block grid
  blocks.oh = g.oh + kbh - 1, blocks.ow = g.ow + kbw - 1, blocks.c_out = c;
  s.conv.g.h = blocks.oh, s.conv.g.w = blocks.ow, s.conv.g.c_in = c;
  s.conv.g.kh = kbh, s.conv.g.kw = kbw, s.conv.g.stride_h = s.conv.g.stride_w = 1;
  s.conv.g.pad_top = s.conv.g.pad_left = 0;
  ValueSpec spec = ImageValue(m.float_type, c, blocks.oh, blocks.ow);
  spec.nhwc = true;
  // A model input converted from fp32 is read as fp32 and converted on the way (the conversion
  // step is then dead unless something else reads its output).
  for (const Step& convert : m.steps)
    if (convert.kind == Step::kConvert && convert.out == source &&
        m.values[convert.in].type == kernels::cuda::ElemType::kF32) {
      source = convert.in;
      break;
    }
  s.in = AddLayoutCopy(m, source, g.c_in, spec);
  m.steps.back().space_to_depth = true;
  m.steps.back().window = blocks;
  ++m.conv_kernels["space-to-depth first"];
}

// Residual (value id or -1) of a Conv the passes fused an Add into, channels-last; checked against
// the output's shape.
StatusOr<int> ConvResidual(const Graph& graph, const Graph::Node& node, const ValueSpec& y,
                           GpuModel& m, const std::string& who) {
  if (!node.op.residual) return -1;
  const int r = node.inputs.size() > 3 ? node.inputs[3] : -1;
  const ValueSpec* rv = r >= 0 && static_cast<size_t>(r) < graph.value_count() &&
                                !graph.constant(r).valid() && m.values[r].defined
                            ? &m.values[r]
                            : nullptr;
  if (rv == nullptr || rv->logical != DataType::kFp32 || rv->dims != y.dims)
    return Unsupported(who + ": a residual of the output's shape " + ShapeString(y.dims) +
                       " per row is the only one the GPU epilogue adds");
  return InLayout(m, r, true);
}

// The pointwise convolution 'conv' (IsPointwise; its input and bias set, its activation 'act' in
// the GEMM's form) as a GEMM step: each pixel a row, the residual added before the activation, as
// the convolution orders it.
Status CompilePointwiseAsGemm(const Graph& graph, const Graph::Node& node, const Step& conv,
                              kc::Activation act, const std::vector<float>& weights,
                              const ValueSpec& y, GpuModel& m, const std::string& who) {
  Step s;
  s.kind = Step::kGemm;
  s.in = conv.in;
  s.n = conv.conv.g.c_out, s.k = conv.conv.g.c_in, s.outer = conv.conv.g.oh * conv.conv.g.ow;
  if (m.precision == Precision::kInt8) {
    // int8 (c_in a multiple of 16): weights per output channel, each pixel's channels quantized
    // at run time as a GEMM's rows are (finer than a convolution's scale per image).
    RETURN_IF_ERROR(m.UploadInt8Rows(weights, s.n, s.k, &s.w, &s.w_scale));
    ++m.int8_convs;
    m.int8_max_in = std::max(m.int8_max_in, s.outer * s.k);
    m.int8_max_vectors = std::max(m.int8_max_vectors, s.outer);
  } else {
    ASSIGN_OR_RETURN(s.w, m.UploadFloats(weights, m.float_type));  // [c_out][c_in]: n x k
  }
  s.bias = conv.conv.bias;
  s.act = act;
  ASSIGN_OR_RETURN(s.residual, ConvResidual(graph, node, y, m, who));
  s.residual_first = true;
  m.values[node.outputs[0]] = y;
  s.out = node.outputs[0];
  m.steps.push_back(s);
  ++m.convs;
  ++m.conv_kernels[s.w_scale != nullptr ? "int8 1x1 as GEMM" : "1x1 as GEMM"];
  return Status::Ok();
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
  ASSIGN_OR_RETURN(s.conv.act, ConvActivationOf(op.activation, who));
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
  const bool first = m.float_type != kc::ElemType::kF32 && groups == 1 && g.c_in % 8 != 0 &&
                     !in.nhwc && in.dims[1] * in.dims[2] > 1;
  if (const int64_t c = first ? SpaceToDepthChannels(g) : 0; c > 0) {
    UseSpaceToDepth(m, m.Resolve(node.inputs[0]), c, s, oihw);
  } else if (first) {
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
    s.in = AddLayoutCopy(m, m.Resolve(node.inputs[0]), in.dims[0], wide);
  } else {
    s.in = InLayout(m, node.inputs[0], true);
  }
  std::vector<float> layout = kc::ConvWeightsLayout(s.conv, oihw.data());
  if (kc::Activation act; IsPointwise(s.conv.g, pad_end) &&
                          kc::GemmActivationOf(s.conv.act, &act) &&
                          (m.precision != Precision::kInt8 || s.conv.g.c_in % 16 == 0)) {
    return CompilePointwiseAsGemm(graph, node, s, act, layout, y, m, who);
  }
  // (int8 leaves a first convolution over the image in bf16, space to depth or not.)
  if (m.precision == Precision::kInt8 && groups == 1 && s.conv.g.c_in % 16 == 0 && !first) {
    // Weights per output channel ([c_out][kh][kw][c_in] rows), the image per row at run time,
    // with the arithmetic of the CPU's and the GEMMs' int8.
    RETURN_IF_ERROR(
        m.UploadInt8Rows(layout, c_out, kh * kw * s.conv.g.c_in, &s.conv.w, &s.conv.w_scale));
    s.conv.int8 = true;
    ++m.int8_convs;
    m.int8_max_in = std::max(m.int8_max_in, m.values[s.in].row_elems);
  } else {
    ASSIGN_OR_RETURN(s.conv.w, m.UploadFloats(layout, m.float_type));
  }
  ASSIGN_OR_RETURN(s.residual, ConvResidual(graph, node, y, m, who));
  m.values[node.outputs[0]] = y;
  s.out = node.outputs[0];
  m.steps.push_back(s);
  ++m.convs;
  ++m.conv_kernels[s.conv.int8 ? "int8 tensor-core implicit GEMM"
                               : kc::ConvKernelName(kc::ChooseConvKernel(s.conv))];
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

// ConvTranspose with constant weights on an image, channels-last.
Status CompileConvTranspose(const Graph& graph, const Graph::Node& node, GpuModel& m,
                            const std::string& who) {
  const OpNode& op = node.op;
  const ValueSpec x = m.values[node.inputs[0]];
  const Tensor& w =
      node.inputs.size() > 1 && node.inputs[1] >= 0 ? graph.constant(node.inputs[1]) : Tensor();
  if (!w.valid() || w.type() != DataType::kFp32 || w.shape().size() != 4 || w.raw() == nullptr ||
      x.logical != DataType::kFp32 || !IsImage(x))
    return Unsupported(who +
                       ": the GPU engine runs 2-D ConvTranspose of FP32 images with "
                       "constant FP32 weights");
  if (op.activation != OpNode::Activation::kNone || op.residual)
    return Unsupported(who + ": no fused epilogue on the GPU");
  ASSIGN_OR_RETURN(
      kernels::Conv2dGeometry g,
      ConvTransposeGeometry(op, SpatialShape{1, x.dims[0], x.dims[1], x.dims[2]}, w.shape()));
  Step s;
  s.kind = Step::kConvTranspose;
  s.window = g;
  std::vector<float> packed(static_cast<size_t>(w.elements()));
  kc::ConvTransposeWeights(g, FloatsOf(w).data(), packed.data());
  ASSIGN_OR_RETURN(s.w, m.UploadFloats(packed, m.float_type));
  if (node.inputs.size() > 2 && node.inputs[2] >= 0) {
    const Tensor& b = graph.constant(node.inputs[2]);
    if (!b.valid() || b.type() != DataType::kFp32 || b.elements() != g.c_out)
      return Unsupported(who + ": the bias must be " + std::to_string(g.c_out) +
                         " constant FP32 values on the GPU");
    ASSIGN_OR_RETURN(const void* bias, m.UploadFloats(FloatsOf(b), kc::ElemType::kF32));
    s.bias = static_cast<const float*>(bias);
  }
  s.in = InLayout(m, node.inputs[0], true);
  m.values[node.outputs[0]] = ImageValue(m.float_type, g.c_out, g.oh, g.ow);
  s.out = node.outputs[0];
  m.steps.push_back(s);
  ++m.convs;
  ++m.conv_kernels["transposed"];
  return Status::Ok();
}

Status Conv(const GpuNode& n) {
  ASSIGN_OR_RETURN(const ValueSpec x, n.Input(0));
  return CompileConv(n.graph, n.node, x, n.m, n.who);
}

Status ConvTranspose(const GpuNode& n) {
  RETURN_IF_ERROR(n.Input(0).status());
  return CompileConvTranspose(n.graph, n.node, n.m, n.who);
}

Status Pool(const GpuNode& n) {
  ASSIGN_OR_RETURN(const ValueSpec x, n.Input(0));
  return CompilePool(n.node, x, n.m, n.who);
}

}  // namespace

std::vector<GpuOpDef> GpuConvOps() {
  return {{"Conv", Conv},        {"ConvTranspose", ConvTranspose}, {"MaxPool", Pool},
          {"AveragePool", Pool}, {"GlobalAveragePool", Pool},      {"GlobalMaxPool", Pool}};
}

}  // namespace nereid::native
