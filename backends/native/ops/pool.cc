// The pool family: MaxPool and AveragePool (1-D and 2-D windows, strides, pads, auto_pad,
// ceil_mode; MaxPool's dilations; AveragePool's count_include_pad), GlobalAveragePool and
// GlobalMaxPool, on channels-last kernels (NCHW inputs are converted around them).
#include <algorithm>
#include <limits>

#include "ops/conv.h"

namespace nereid::native {
namespace {

Status CheckPool(const OpNode& node, const std::vector<const Tensor*>&) {
  const auto k = node.AttrInts("kernel_shape");
  if (k.size() != 1 && k.size() != 2)
    return node.Refuse("kernel_shape of " + std::to_string(k.size()) +
                       " values: only 1-D and 2-D pools are supported");
  if (node.op_type() == "MaxPool" && node.AttrInt("storage_order", 0) != 0)
    return node.Refuse("storage_order 1 is not supported");
  return Status::Ok();
}

template <bool kMax>
Status Pool(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  RETURN_IF_ERROR(CheckPool(node, {}));
  if (out.size() > 1) return node.Refuse("the Indices output is not supported");
  const Tensor& x = *in[0];
  RETURN_IF_ERROR(RequireFloat(node, x));
  ASSIGN_OR_RETURN(SpatialShape s, SpatialOf(node, x));
  const auto k = node.AttrInts("kernel_shape");
  if (k.size() + 2 != x.shape().size())
    return node.Error("kernel_shape does not match the input's rank");
  for (int64_t v : k)
    if (v < 1 || v > (int64_t{1} << 20)) return node.Error("kernel_shape value out of range");
  if (!kMax && node.HasAttr("dilations"))
    for (int64_t d : node.AttrInts("dilations"))
      if (d != 1) return node.Refuse("AveragePool dilations are not supported");
  int64_t pad_end[2];
  ASSIGN_OR_RETURN(kernels::Conv2dGeometry g,
                   WindowGeometry(node, s, k.size() == 2 ? k[0] : 1, k.back(),
                                  node.AttrInt("ceil_mode", 0) != 0, pad_end));
  g.c_out = s.c;
  Tensor xl = node.nhwc ? x : ToChannelsLast(x);
  Tensor y = Tensor::Uninitialized(DataType::kFp32, {g.n, g.oh, g.ow, s.c});
  if (kMax)
    kernels::MaxPoolNhwc(g, xl.data<float>(), y.mutable_data<float>());
  else
    kernels::AveragePoolNhwc(g, node.AttrInt("count_include_pad", 0) != 0, pad_end[0], pad_end[1],
                             xl.data<float>(), y.mutable_data<float>());
  const auto shape = LayoutShape(node, x.shape().size(), g.n, s.c, g.oh, g.ow);
  out[0] = node.nhwc ? std::move(y) : ToChannelsFirst(y).View(shape);
  return Status::Ok();
}

template <bool kMax>
Status GlobalPool(const OpNode& node, const std::vector<const Tensor*>& in,
                  std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  RETURN_IF_ERROR(RequireFloat(node, x));
  const auto& shape = x.shape();
  if (shape.size() < 3) return node.Error("input must have rank 3 or more");
  // Channels-last: [n, spatial..., c]; otherwise [n, c, spatial...] with the spatial dims
  // contiguous, reduced per plane.
  const int64_t n = shape[0];
  const int64_t c = node.nhwc ? shape.back() : shape[1];
  const int64_t hw = x.elements() / std::max<int64_t>(n * c, 1);
  std::vector<int64_t> y_shape(shape.size(), 1);
  y_shape[0] = n;
  y_shape[node.nhwc ? shape.size() - 1 : 1] = c;
  Tensor y = Tensor::Allocate(DataType::kFp32, y_shape);
  float* py = y.mutable_data<float>();
  if (node.nhwc) {
    if (kMax)
      kernels::GlobalMaxPoolNhwc(n, hw, c, x.data<float>(), py);
    else
      kernels::GlobalAveragePoolNhwc(n, hw, c, x.data<float>(), py);
  } else {
    // Each plane is a "pixel" of hw channels: the same kernels over [n * c, 1, hw] give the
    // per-plane result after a reduction over the last axis; done directly here.
    const float* px = x.data<float>();
    for (int64_t p = 0; p < n * c; ++p) {
      const float* plane = px + p * hw;
      if (kMax) {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < hw; ++i) m = std::max(m, plane[i]);
        py[p] = m;
      } else {
        double sum = 0;
        for (int64_t i = 0; i < hw; ++i) sum += plane[i];
        py[p] = hw ? static_cast<float>(sum / static_cast<double>(hw)) : 0.f;
      }
    }
  }
  out[0] = std::move(y);
  return Status::Ok();
}

}  // namespace

std::vector<OpDef> PoolOps() {
  return {{"MaxPool", Pool<true>, CheckPool},
          {"AveragePool", Pool<false>, CheckPool},
          {"GlobalAveragePool", GlobalPool<false>},
          {"GlobalMaxPool", GlobalPool<true>}};
}

}  // namespace nereid::native
