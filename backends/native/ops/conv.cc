// The conv family: Conv (1-D and 2-D, groups, depthwise, dilations, every padding mode) as an
// implicit GEMM on the CPU kernels with bias, residual and activation fused, and ConvTranspose
// (1-D and 2-D): channels-last where its taps tile the output (kernels::ConvTransposeTiledNhwc),
// otherwise a GEMM and a col2im scatter on NCHW.
#include "ops/conv.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "cpu/elementwise.h"
#include "cpu/gemm.h"
#include "cpu/parallel.h"

namespace nereid::native {

StatusOr<SpatialShape> SpatialOf(const OpNode& node, const Tensor& x) {
  const auto& s = x.shape();
  if (s.size() == 4)
    return node.nhwc ? SpatialShape{s[0], s[3], s[1], s[2]} : SpatialShape{s[0], s[1], s[2], s[3]};
  if (s.size() == 3 && !node.nhwc) return SpatialShape{s[0], s[1], 1, s[2]};
  return node.Refuse("input of shape " + ShapeString(s) +
                     ": only 1-D and 2-D windows (inputs of rank 3 or 4) are supported");
}

std::vector<int64_t> LayoutShape(const OpNode& node, size_t rank, int64_t n, int64_t c, int64_t h,
                                 int64_t w) {
  if (rank == 3) return {n, c, w};
  return node.nhwc ? std::vector<int64_t>{n, h, w, c} : std::vector<int64_t>{n, c, h, w};
}

namespace {

// [n, a, b] -> [n, b, a] for 4-byte elements, split over the current thread team in square tiles
// (NCHW <-> NHWC with a = c, b = h * w, or the reverse). A tile's rows of source and destination
// stay in L1 while it is turned; walking whole rows of one side instead writes (or reads) the
// other a float per line, 'a' lines apart (112x112x64 to NCHW: 1.9 ms against 0.2).
// Few rows (an RGB image's channels, A of them): each output row written whole, A known to the
// compiler (3x224x224 to NHWC: 85 us with A a variable).
// The work of one value moved by a transpose (a strided load and a store), in ParallelForWork's
// multiply-adds: the team from about 32 K values on. At 1: a 224x224 RGB image (150 K values)
// stayed on one thread, 120 us where two threads take 50-60.
constexpr int64_t kMoveWork = 8;

template <int A>
void SwapFewRows(const float* src, int64_t n, int64_t b, float* dst) {
  constexpr int64_t kRun = 256;
  const int64_t runs = (b + kRun - 1) / kRun;
  kernels::ParallelForWork(n * runs, n * A * b * kMoveWork, [&](int64_t item) {
    const int64_t image = item / runs, b0 = (item % runs) * kRun, b1 = std::min(b, b0 + kRun);
    const float* s = src + image * A * b;
    float* d = dst + image * A * b;
    for (int64_t j = b0; j < b1; ++j)
#pragma GCC unroll 4
      for (int i = 0; i < A; ++i) d[j * A + i] = s[i * b + j];
  });
}

void SwapLastTwo(const float* src, int64_t n, int64_t a, int64_t b, float* dst) {
  switch (a) {
    case 1:
      return SwapFewRows<1>(src, n, b, dst);
    case 2:
      return SwapFewRows<2>(src, n, b, dst);
    case 3:
      return SwapFewRows<3>(src, n, b, dst);
    case 4:
      return SwapFewRows<4>(src, n, b, dst);
    default:
      break;
  }
  constexpr int64_t kTile = 8;
  const int64_t tiles_a = (a + kTile - 1) / kTile, tiles_b = (b + kTile - 1) / kTile;
  kernels::ParallelForWork(n * tiles_a * tiles_b, n * a * b * kMoveWork, [&](int64_t item) {
    const int64_t image = item / (tiles_a * tiles_b), tile = item % (tiles_a * tiles_b);
    const int64_t a0 = tile / tiles_b * kTile, b0 = tile % tiles_b * kTile;
    const int64_t a1 = std::min(a, a0 + kTile), b1 = std::min(b, b0 + kTile);
    const float* s = src + image * a * b;
    float* d = dst + image * a * b;
    for (int64_t j = b0; j < b1; ++j)
      for (int64_t i = a0; i < a1; ++i) d[j * a + i] = s[i * b + j];
  });
}

}  // namespace

namespace {

// NCHW -> NHWC ('to_last') or back; rank 3 ([n, c, w] <-> [n, w, c]) too. 4-byte elements of rank 4
// are two axes swapped per image, split over the thread team; the rest is a general transpose.
Tensor SwapChannels(const Tensor& x, bool to_last) {
  const auto& s = x.shape();
  const size_t rank = s.size();
  if (rank == 4 && DataTypeSize(x.type()) == 4) {
    const int64_t c = to_last ? s[1] : s[3], pixels = to_last ? s[2] * s[3] : s[1] * s[2];
    Tensor y =
        Tensor::Uninitialized(x.type(), to_last ? std::vector<int64_t>{s[0], s[2], s[3], s[1]}
                                                : std::vector<int64_t>{s[0], s[3], s[1], s[2]});
    SwapLastTwo(x.data<float>(), s[0], to_last ? c : pixels, to_last ? pixels : c,
                y.mutable_data<float>());
    return y;
  }
  const std::vector<int64_t> perm = rank == 3 ? std::vector<int64_t>{0, 2, 1}
                                    : to_last ? std::vector<int64_t>{0, 2, 3, 1}
                                              : std::vector<int64_t>{0, 3, 1, 2};
  std::vector<int64_t> shape;
  for (int64_t p : perm) shape.push_back(s[p]);
  Tensor y = Tensor::Uninitialized(x.type(), shape);
  TransposeBytes(x.raw(), s, perm, DataTypeSize(x.type()), y.mutable_raw());
  return y;
}

}  // namespace

Tensor ToChannelsLast(const Tensor& x) { return SwapChannels(x, true); }

Tensor ToChannelsFirst(const Tensor& x) {
  const auto& s = x.shape();
  // [n, 1, 1, c] and [n, h, w, 1] are the same bytes in both layouts.
  if (s.size() == 4 && ((s[1] == 1 && s[2] == 1) || s[3] == 1))
    return x.View({s[0], s[3], s[1], s[2]});
  return SwapChannels(x, false);
}

StatusOr<kernels::Conv2dGeometry> WindowGeometry(const OpNode& node, const SpatialShape& in,
                                                 int64_t kh, int64_t kw, bool ceil_mode,
                                                 int64_t pad_end[2]) {
  const bool one_d = in.h == 1 && kh == 1 && node.AttrInts("strides").size() <= 1 &&
                     node.AttrInts("kernel_shape").size() <= 1;
  const size_t dims = one_d ? 1 : 2;
  auto per_axis = [&](const char* name, int64_t fallback) -> StatusOr<std::vector<int64_t>> {
    std::vector<int64_t> v = node.AttrInts(name);
    if (v.empty()) v.assign(dims, fallback);
    if (v.size() != dims)
      return node.Error(std::string(name) + " must have " + std::to_string(dims) + " values");
    for (int64_t x : v)
      if (x < 1 || x > (int64_t{1} << 20))
        return node.Error(std::string(name) + " value " + std::to_string(x) + " is out of range");
    if (dims == 1) v.insert(v.begin(), 1);
    return v;
  };
  ASSIGN_OR_RETURN(auto strides, per_axis("strides", 1));
  ASSIGN_OR_RETURN(auto dilations, per_axis("dilations", 1));
  const int64_t size[2] = {in.h, in.w}, kernel[2] = {kh, kw};
  int64_t pads[4] = {0, 0, 0, 0};  // top, left, bottom, right
  const std::string auto_pad = node.AttrString("auto_pad", "NOTSET");
  int64_t out[2];
  if (auto_pad == "NOTSET") {
    std::vector<int64_t> p = node.AttrInts("pads");
    if (p.empty()) p.assign(2 * dims, 0);
    if (p.size() != 2 * dims)
      return node.Error("pads must have " + std::to_string(2 * dims) + " values");
    for (int64_t x : p)
      if (x < 0 || x > (int64_t{1} << 20)) return node.Error("pads value out of range");
    if (dims == 1)
      pads[1] = p[0], pads[3] = p[1];
    else
      pads[0] = p[0], pads[1] = p[1], pads[2] = p[2], pads[3] = p[3];
    for (int a = 0; a < 2; ++a) {
      const int64_t span = dilations[a] * (kernel[a] - 1) + 1;
      const int64_t room = size[a] + pads[a] + pads[a + 2] - span;
      if (room < 0) return node.Error("the window is larger than the padded input");
      out[a] = (ceil_mode ? (room + strides[a] - 1) / strides[a] : room / strides[a]) + 1;
      // With ceil_mode the last window must start inside the input or its leading padding.
      if (ceil_mode && (out[a] - 1) * strides[a] >= size[a] + pads[a]) --out[a];
    }
  } else if (auto_pad == "VALID") {
    for (int a = 0; a < 2; ++a) {
      const int64_t span = dilations[a] * (kernel[a] - 1) + 1;
      if (size[a] < span) return node.Error("the window is larger than the input");
      out[a] = ceil_mode ? (size[a] - span + strides[a] - 1) / strides[a] + 1
                         : (size[a] - span) / strides[a] + 1;
    }
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (int a = 0; a < 2; ++a) {
      out[a] = (size[a] + strides[a] - 1) / strides[a];
      const int64_t span = dilations[a] * (kernel[a] - 1) + 1;
      const int64_t total = std::max<int64_t>((out[a] - 1) * strides[a] + span - size[a], 0);
      const int64_t small = total / 2, large = total - small;
      pads[a] = auto_pad == "SAME_UPPER" ? small : large;
      pads[a + 2] = total - pads[a];
    }
  } else {
    return node.Error("auto_pad '" + auto_pad +
                      "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  }
  kernels::Conv2dGeometry g;
  g.n = in.n, g.h = in.h, g.w = in.w, g.c_in = in.c;
  g.oh = out[0], g.ow = out[1];
  g.kh = kh, g.kw = kw;
  g.stride_h = strides[0], g.stride_w = strides[1];
  g.dilation_h = dilations[0], g.dilation_w = dilations[1];
  g.pad_top = pads[0], g.pad_left = pads[1];
  pad_end[0] = pads[2], pad_end[1] = pads[3];
  return g;
}

Status ToChannelsLastOp(const OpNode& node, const std::vector<const Tensor*>& in,
                        std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  if (in[0]->shape().size() != 4) return Internal("a layout conversion of a tensor not of rank 4");
  out[0] = ToChannelsLast(*in[0]);
  return Status::Ok();
}

Status ToChannelsFirstOp(const OpNode& node, const std::vector<const Tensor*>& in,
                         std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  if (in[0]->shape().size() != 4) return Internal("a layout conversion of a tensor not of rank 4");
  out[0] = ToChannelsFirst(*in[0]);
  return Status::Ok();
}

namespace {

Status CheckConv(const OpNode& node, const std::vector<const Tensor*>& constants) {
  const Tensor* w = constants.size() > 1 ? constants[1] : nullptr;
  if (w != nullptr && w->shape().size() != 3 && w->shape().size() != 4)
    return node.Refuse("weights of shape " + ShapeString(w->shape()) +
                       ": only 1-D and 2-D convolutions are supported");
  return Status::Ok();
}

Status Conv(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 2));
  const Tensor& x = *in[0];
  const Tensor& w = *in[1];
  RETURN_IF_ERROR(RequireFloat(node, x));
  RETURN_IF_ERROR(RequireFloat(node, w));
  ASSIGN_OR_RETURN(SpatialShape s, SpatialOf(node, x));
  // 1x1 convolutions fused around a depthwise one (ConvPlan::expand, project): x is the first's
  // input, the output the second's.
  const ConvPlan* block =
      node.conv != nullptr && (node.conv->expand.present() || node.conv->project.present())
          ? node.conv
          : nullptr;
  if (block != nullptr && block->expand.present()) {
    if (s.c != block->expand.c_in)
      return node.Error("input of " + std::to_string(s.c) +
                        " channels; the fused 1x1 convolution before it takes " +
                        std::to_string(block->expand.c_in));
    s.c = block->expand.c_out();
  }
  const size_t rank = x.shape().size();
  if (w.shape().size() != rank)
    return node.Error("weights of shape " + ShapeString(w.shape()) + " do not fit an input of " +
                      ShapeString(x.shape()));
  const int64_t groups = node.AttrInt("group", 1);
  const int64_t c_out = w.shape()[0], cig = w.shape()[1];
  const int64_t kh = rank == 4 ? w.shape()[2] : 1, kw = w.shape()[rank - 1];
  if (groups < 1 || s.c != cig * groups || c_out % groups != 0)
    return node.Error("weights of shape " + ShapeString(w.shape()) + " and group " +
                      std::to_string(groups) + " do not fit " + std::to_string(s.c) +
                      " input channels");
  const auto kernel_shape = node.AttrInts("kernel_shape");
  if (!kernel_shape.empty() &&
      kernel_shape != std::vector<int64_t>(w.shape().begin() + 2, w.shape().end()))
    return node.Error("kernel_shape does not match the weights");
  int64_t pad_end[2];
  ASSIGN_OR_RETURN(kernels::Conv2dGeometry g, WindowGeometry(node, s, kh, kw, false, pad_end));
  g.c_out = c_out;
  g.groups = groups;

  // Inputs: x, w, optional bias, then (fused by the graph's passes) the residual.
  const Tensor* bias = in.size() > 2 ? in[2] : nullptr;
  if (node.residual && (in.size() != 4 || in[3] == nullptr))
    return Internal("a fused Conv lacks its residual");
  if (bias != nullptr && (bias->type() != DataType::kFp32 || bias->elements() != c_out))
    return node.Error("bias must have " + std::to_string(c_out) + " FP32 values");
  const Tensor* residual = node.residual ? in[3] : nullptr;

  std::unique_ptr<ConvPlan> local;
  const ConvPlan* plan = node.conv;
  if (plan == nullptr) {  // weights that are not constant: packed for this call
    if (w.raw() == nullptr) return Internal("the Conv's weights were released");
    local = std::make_unique<ConvPlan>(w.data<float>(), c_out, cig, kh, kw, groups);
    plan = local.get();
  }
  const float* b = !plan->bias.empty() ? plan->bias.data() : bias ? bias->data<float>() : nullptr;

  // The output's channels: the projection's where one is fused.
  const int64_t y_c = block != nullptr && block->project.present() ? block->project.c_out() : c_out;
  const std::vector<int64_t> y_shape = LayoutShape(node, rank, g.n, y_c, g.oh, g.ow);
  if (residual != nullptr && residual->shape() != y_shape) {
    // The fused Add broadcasts here (a residual of another shape): convolve, add, activate.
    OpNode plain = node;
    plain.residual = false;
    plain.activation = OpNode::Activation::kNone;
    std::vector<Tensor> conv(1);
    RETURN_IF_ERROR(Conv(plain, {in[0], in[1], in[2]}, conv));
    if (residual->type() != DataType::kFp32) return node.Error("the residual is not FP32");
    ASSIGN_OR_RETURN(auto shape, BroadcastShape(node, conv[0].shape(), residual->shape()));
    if (shape != conv[0].shape())
      return node.Error("the residual's shape " + ShapeString(residual->shape()) +
                        " does not broadcast to the output's " + ShapeString(y_shape));
    const auto strides = BroadcastStrides(residual->shape(), shape);
    float* py = conv[0].mutable_data<float>();
    std::vector<int64_t> index(shape.size(), 0);
    for (int64_t e = 0; e < conv[0].elements(); ++e) {
      int64_t offset = 0;
      for (size_t d = 0; d < shape.size(); ++d) offset += index[d] * strides[d];
      py[e] += residual->data<float>()[offset];
      for (size_t d = shape.size(); d-- > 0;) {
        if (++index[d] < shape[d]) break;
        index[d] = 0;
      }
    }
    ApplyActivation(node, py, conv[0].elements());
    out[0] = std::move(conv[0]);
    return Status::Ok();
  }
  Tensor xl = node.nhwc ? x : ToChannelsLast(x);
  Tensor rl;
  if (residual != nullptr) rl = node.nhwc ? *residual : ToChannelsLast(*residual);
  // The residual's own storage where the graph lent it (Graph::Run): written in place.
  const std::vector<int64_t> nhwc_shape = {g.n, g.oh, g.ow, y_c};
  const bool in_place = residual != nullptr && node.nhwc && out[0].valid() &&
                        out[0].raw() == residual->raw() && out[0].type() == DataType::kFp32 &&
                        out[0].shape() == nhwc_shape;
  Tensor y = in_place ? out[0] : Tensor::Uninitialized(DataType::kFp32, nhwc_shape);
  if (block != nullptr) {
    const bool projected = block->project.present();
    kernels::PointwiseStage project = block->project;
    if (projected) {  // the node's activation is the projection's
      const kernels::GemmEpilogue last = EpilogueOf(node);
      project.epilogue.activation = last.activation;
      project.epilogue.lo = last.lo, project.epilogue.hi = last.hi;
    }
    kernels::DepthwiseBlockNhwc(g, xl.data<float>(), block->expand, plan->weights.depthwise_taps(),
                                b, projected ? block->depthwise_act : EpilogueOf(node), project,
                                residual ? rl.data<float>() : nullptr, y.mutable_data<float>());
  } else {
    kernels::ConvNhwc(g, xl.data<float>(), plan->weights, b, residual ? rl.data<float>() : nullptr,
                      EpilogueOf(node), y.mutable_data<float>());
  }
  if (node.nhwc)
    out[0] = std::move(y);
  else
    out[0] = ToChannelsFirst(y).View(y_shape);
  return Status::Ok();
}

}  // namespace

StatusOr<kernels::Conv2dGeometry> ConvTransposeGeometry(const OpNode& node, const SpatialShape& s,
                                                        const std::vector<int64_t>& w_shape) {
  if (w_shape.size() != 3 && w_shape.size() != 4)
    return node.Error("weights of rank 3 (1-D) or 4 (2-D) expected");
  const size_t dims = w_shape.size() - 2;
  const int64_t groups = node.AttrInt("group", 1);
  if (groups < 1 || w_shape[0] != s.c || s.c % groups != 0)
    return node.Error("weights of shape " + ShapeString(w_shape) + " do not fit " +
                      std::to_string(s.c) + " input channels");
  const int64_t cog = w_shape[1], c_out = cog * groups;
  const int64_t kh = dims == 2 ? w_shape[2] : 1, kw = w_shape[dims + 1];
  // Per spatial axis; a 1-D window gets a leading axis of 'fallback' (the neutral value).
  auto per_axis = [&](const char* name, int64_t fallback, size_t count,
                      int64_t lo) -> StatusOr<std::vector<int64_t>> {
    std::vector<int64_t> v = node.AttrInts(name);
    if (v.empty()) v.assign(count, fallback);
    if (v.size() != count) return node.Error(std::string(name) + " has the wrong length");
    for (int64_t e : v)
      if (e < lo || e > (int64_t{1} << 20)) return node.Error(std::string(name) + " out of range");
    if (dims == 1) v.insert(v.begin(), fallback);
    return v;
  };
  ASSIGN_OR_RETURN(auto strides, per_axis("strides", 1, dims, 1));
  ASSIGN_OR_RETURN(auto dilations, per_axis("dilations", 1, dims, 1));
  ASSIGN_OR_RETURN(auto output_padding, per_axis("output_padding", 0, dims, 0));
  std::vector<int64_t> pads = node.AttrInts("pads");
  if (pads.empty()) pads.assign(2 * dims, 0);
  if (pads.size() != 2 * dims) return node.Error("pads has the wrong length");
  if (dims == 1) pads = {0, pads[0], 0, pads[1]};
  const int64_t in_size[2] = {s.h, s.w}, kernel[2] = {kh, kw};
  int64_t out_size[2];
  const std::string auto_pad = node.AttrString("auto_pad", "NOTSET");
  std::vector<int64_t> output_shape = node.AttrInts("output_shape");
  if (!output_shape.empty() && output_shape.size() != dims)
    return node.Error("output_shape must have one value per spatial axis");
  if (dims == 1 && !output_shape.empty()) output_shape.insert(output_shape.begin(), 1);
  for (int a = 0; a < 2; ++a) {
    const int64_t full =
        strides[a] * (in_size[a] - 1) + output_padding[a] + (kernel[a] - 1) * dilations[a] + 1;
    if (!output_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t target = !output_shape.empty() ? output_shape[a] : in_size[a] * strides[a];
      if (target < 0 || target > (int64_t{1} << 24)) return node.Error("output_shape out of range");
      // The spec's split (a negative total extends the output with zeros): SAME_UPPER puts the
      // smaller half first, otherwise the larger; halves round toward negative infinity.
      const int64_t total = full - target;
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      pads[a] = auto_pad == "SAME_UPPER" ? half : total - half;
      pads[a + 2] = total - pads[a];
      out_size[a] = target;
    } else if (auto_pad == "VALID" || auto_pad == "NOTSET") {
      if (auto_pad == "VALID") pads[a] = pads[a + 2] = 0;
      for (int64_t p : {pads[a], pads[a + 2]})
        if (p < 0 || p > (int64_t{1} << 20)) return node.Error("pads out of range");
      out_size[a] = full - pads[a] - pads[a + 2];
    } else {
      return node.Error("auto_pad '" + auto_pad + "' is not supported");
    }
    if (out_size[a] < 0) return node.Error("the output would be empty");
  }
  kernels::Conv2dGeometry g;
  g.n = s.n, g.h = s.h, g.w = s.w, g.c_in = s.c;
  g.oh = out_size[0], g.ow = out_size[1], g.c_out = c_out;
  g.kh = kh, g.kw = kw;
  g.stride_h = strides[0], g.stride_w = strides[1];
  g.dilation_h = dilations[0], g.dilation_w = dilations[1];
  g.pad_top = pads[0], g.pad_left = pads[1];
  g.groups = groups;
  return g;
}

bool TapsTileTheOutput(const OpNode& node, const std::vector<int64_t>& w_shape) {
  if (w_shape.size() != 4) return false;
  auto all = [&](const char* name, int64_t e, size_t count) {
    const std::vector<int64_t> v = node.AttrInts(name);
    return v.empty() || (v.size() == count &&
                         std::all_of(v.begin(), v.end(), [e](int64_t x) { return x == e; }));
  };
  const std::string auto_pad = node.AttrString("auto_pad", "NOTSET");
  return node.AttrInts("strides") == std::vector<int64_t>{w_shape[2], w_shape[3]} &&
         all("dilations", 1, 2) && all("pads", 0, 4) && all("output_padding", 0, 2) &&
         node.AttrInts("output_shape").empty() && (auto_pad == "NOTSET" || auto_pad == "VALID");
}

namespace {

// ConvTranspose on NCHW: per image and group, col = W_g^T x X_g (one row per output channel and
// tap), scattered into the output at each tap's position.
Status ConvTranspose(const OpNode& node, const std::vector<const Tensor*>& in,
                     std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 2));
  const Tensor& x = *in[0];
  const Tensor& w = *in[1];
  RETURN_IF_ERROR(RequireFloat(node, x));
  RETURN_IF_ERROR(RequireFloat(node, w));
  if (node.nhwc && !TapsTileTheOutput(node, w.shape()))
    return Internal("ConvTranspose has no channels-last form for these attributes");
  ASSIGN_OR_RETURN(SpatialShape s, SpatialOf(node, x));
  const size_t rank = x.shape().size();
  if (w.shape().size() != rank) return node.Error("weights do not fit the input's rank");
  ASSIGN_OR_RETURN(const kernels::Conv2dGeometry g, ConvTransposeGeometry(node, s, w.shape()));
  const int64_t groups = g.groups, cig = g.c_in / groups, cog = g.c_out / groups, c_out = g.c_out;
  const int64_t kh = g.kh, kw = g.kw;
  const int64_t strides[2] = {g.stride_h, g.stride_w}, dilations[2] = {g.dilation_h, g.dilation_w};
  const int64_t pads[2] = {g.pad_top, g.pad_left};
  const int64_t oh = g.oh, ow = g.ow;
  const std::vector<int64_t> y_shape = LayoutShape(node, rank, s.n, c_out, oh, ow);
  RETURN_IF_ERROR(CheckOutputShape(node, y_shape, DataType::kFp32));
  const Tensor* bias = in.size() > 2 ? in[2] : nullptr;
  if (bias != nullptr && (bias->type() != DataType::kFp32 || bias->elements() != c_out))
    return node.Error("bias must have " + std::to_string(c_out) + " FP32 values");
  const int64_t hw_in = s.h * s.w, taps = kh * kw, rows = cog * taps;
  // Taps that tile the output (stride = kernel, dilation 1, no padding, no output padding: an
  // upsampling head's 2x2 of stride 2): each output pixel is one tap of one input pixel, so each
  // is written once, bias included, output channels over the intra-op team (the general scatter
  // below sums into a zeroed output one element at a time: 114 us of RapidOCR's detector's 1.4
  // ms, for 1.8 M multiply-adds).
  const float* pb = bias != nullptr ? bias->data<float>() : nullptr;
  if (node.nhwc) {
    Tensor y = Tensor::Uninitialized(DataType::kFp32, y_shape);
    kernels::ConvTransposeTiledNhwc(g, x.data<float>(), w.data<float>(), pb, EpilogueOf(node),
                                    y.mutable_data<float>());
    out[0] = std::move(y);
    return Status::Ok();
  }
  if (strides[0] == kh && strides[1] == kw && dilations[0] == 1 && dilations[1] == 1 &&
      pads[0] == 0 && pads[1] == 0 && oh == s.h * kh && ow == s.w * kw) {
    Tensor y = Tensor::Uninitialized(DataType::kFp32, y_shape);
    float* py = y.mutable_data<float>();
    std::vector<float> col(static_cast<size_t>(s.n * groups * rows * hw_in));
    for (int64_t b = 0; b < s.n; ++b)
      for (int64_t grp = 0; grp < groups; ++grp)
        kernels::Sgemm(true, false, rows, hw_in, cig, 1.f, w.data<float>() + grp * cig * rows, rows,
                       x.data<float>() + (b * s.c + grp * cig) * hw_in, hw_in, 0.f,
                       col.data() + (b * groups + grp) * rows * hw_in, hw_in);
    kernels::ParallelForWork(s.n * c_out, s.n * c_out * oh * ow, [&](int64_t item) {
      const int64_t b = item / c_out, c = item % c_out, grp = c / cog, co = c % cog;
      const float* src = col.data() + ((b * groups + grp) * rows + co * taps) * hw_in;
      const float add = pb != nullptr ? pb[c] : 0.f;
      float* plane = py + item * oh * ow;
      for (int64_t iy = 0; iy < s.h; ++iy)
        for (int64_t ky = 0; ky < kh; ++ky) {
          float* out = plane + (iy * kh + ky) * ow;
          const float* in = src + ky * kw * hw_in + iy * s.w;
          if (kw == 2) {
            kernels::InterleavePairs(in, in + hw_in, s.w, add, out);
            continue;
          }
          for (int64_t kx = 0; kx < kw; ++kx)
            for (int64_t ix = 0; ix < s.w; ++ix) out[ix * kw + kx] = in[kx * hw_in + ix] + add;
        }
      // (A fused activation: FuseConvEpilogues.)
      if (node.activation != OpNode::Activation::kNone) ApplyActivation(node, plane, oh * ow);
    });
    out[0] = std::move(y);
    return Status::Ok();
  }
  Tensor y = Tensor::Allocate(DataType::kFp32, y_shape);
  std::vector<float> col(static_cast<size_t>(rows * hw_in));
  float* py = y.mutable_data<float>();
  for (int64_t b = 0; b < s.n; ++b)
    for (int64_t grp = 0; grp < groups; ++grp) {
      const float* xg = x.data<float>() + (b * s.c + grp * cig) * hw_in;
      const float* wg = w.data<float>() + grp * cig * rows;
      kernels::Sgemm(true, false, rows, hw_in, cig, 1.f, wg, rows, xg, hw_in, 0.f, col.data(),
                     hw_in);
      for (int64_t co = 0; co < cog; ++co) {
        float* plane = py + (b * c_out + grp * cog + co) * oh * ow;
        for (int64_t ky = 0; ky < kh; ++ky)
          for (int64_t kx = 0; kx < kw; ++kx) {
            const float* src = col.data() + ((co * kh + ky) * kw + kx) * hw_in;
            for (int64_t iy = 0; iy < s.h; ++iy) {
              const int64_t oy = iy * strides[0] - pads[0] + ky * dilations[0];
              if (oy < 0 || oy >= oh) continue;
              for (int64_t ix = 0; ix < s.w; ++ix) {
                const int64_t ox = ix * strides[1] - pads[1] + kx * dilations[1];
                if (ox >= 0 && ox < ow) plane[oy * ow + ox] += src[iy * s.w + ix];
              }
            }
          }
      }
    }
  if (pb != nullptr)
    for (int64_t b = 0; b < s.n; ++b)
      for (int64_t co = 0; co < c_out; ++co) {
        float* plane = py + (b * c_out + co) * oh * ow;
        const float v = pb[co];
        for (int64_t i = 0; i < oh * ow; ++i) plane[i] += v;
      }
  if (node.activation != OpNode::Activation::kNone) ApplyActivation(node, py, y.elements());
  out[0] = std::move(y);
  return Status::Ok();
}

}  // namespace

std::vector<OpDef> ConvOps() {
  return {{"Conv", Conv, CheckConv}, {"ConvTranspose", ConvTranspose, CheckConv}};
}

}  // namespace nereid::native
