// The resize family: Resize (opset 10 on) with nearest and linear modes over the spatial axes
// (the two last of NCHW, or the one last of NCW), every coordinate transformation but
// tf_crop_and_resize, every nearest_mode. Cubic interpolation and antialiasing are refused at
// load.
#include "ops/resize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/parallel.h"

namespace nereid::native {
namespace {

Status CheckResize(const OpNode& node, const std::vector<const Tensor*>&) {
  const std::string mode = node.AttrString("mode", "nearest");
  if (mode != "nearest" && mode != "linear")
    return node.Refuse("mode '" + mode + "' is not supported (nearest, linear)");
  const std::string ct = node.AttrString("coordinate_transformation_mode", "half_pixel");
  if (ct != "half_pixel" && ct != "pytorch_half_pixel" && ct != "align_corners" &&
      ct != "asymmetric" && ct != "tf_half_pixel_for_nearest" && ct != "tf_half_pixel_for_nn" &&
      ct != "half_pixel_symmetric")
    return node.Refuse("coordinate_transformation_mode '" + ct + "' is not supported");
  const std::string nm = node.AttrString("nearest_mode", "round_prefer_floor");
  if (nm != "round_prefer_floor" && nm != "round_prefer_ceil" && nm != "floor" && nm != "ceil")
    return node.Refuse("nearest_mode '" + nm + "' is not supported");
  if (node.AttrInt("antialias", 0) != 0) return node.Refuse("antialias is not supported");
  if (node.AttrString("keep_aspect_ratio_policy", "stretch") != "stretch")
    return node.Refuse("keep_aspect_ratio_policy other than stretch is not supported");
  if (node.HasAttr("axes")) return node.Refuse("the axes attribute is not supported");
  return Status::Ok();
}

}  // namespace

StatusOr<ResizePlan> PlanResize(const OpNode& node, const std::vector<const Tensor*>& in,
                                const std::vector<int64_t>& shape) {
  RETURN_IF_ERROR(CheckResize(node, {}));
  const size_t rank = shape.size();
  if (rank != 3 && rank != 4) return node.Refuse("only inputs of rank 3 and 4 are supported");
  // Opset 10: (X, scales). From 11: (X, roi, scales, sizes), scales or sizes given.
  const Tensor* scales =
      node.opset() < 11 ? (in.size() > 1 ? in[1] : nullptr) : (in.size() > 2 ? in[2] : nullptr);
  const Tensor* sizes = node.opset() < 11 ? nullptr : (in.size() > 3 ? in[3] : nullptr);
  if (scales != nullptr && scales->elements() == 0) scales = nullptr;
  if (sizes != nullptr && sizes->elements() == 0) sizes = nullptr;
  if ((scales == nullptr) == (sizes == nullptr))
    return node.Error("exactly one of scales and sizes must be given");
  std::vector<double> scale(rank, 1.0);
  ResizePlan plan;
  std::vector<int64_t>& out_shape = plan.out_shape;
  out_shape.resize(rank);
  if (scales != nullptr) {
    if (scales->type() != DataType::kFp32 || scales->elements() != static_cast<int64_t>(rank))
      return node.Error("scales must have one FP32 value per axis");
    for (size_t d = 0; d < rank; ++d) {
      scale[d] = scales->data<float>()[d];
      if (!(scale[d] > 0.0) || !std::isfinite(scale[d]) || scale[d] > 65536.0)
        return node.Error("scale " + std::to_string(scale[d]) + " is out of range");
      out_shape[d] = static_cast<int64_t>(std::floor(static_cast<double>(shape[d]) * scale[d]));
    }
  } else {
    ASSIGN_OR_RETURN(out_shape, IntValues(node, *sizes, "sizes"));
    if (out_shape.size() != rank) return node.Error("sizes must have one value per axis");
    for (size_t d = 0; d < rank; ++d) {
      if (out_shape[d] < 0) return node.Error("negative size");
      scale[d] = shape[d] ? static_cast<double>(out_shape[d]) / static_cast<double>(shape[d]) : 1;
    }
  }
  if (out_shape[0] != shape[0] || out_shape[1] != shape[1])
    return node.Refuse("only the spatial axes may be resized (batch and channels keep their size)");
  RETURN_IF_ERROR(CheckOutputShape(node, out_shape, DataType::kFp32));

  const std::string mode = node.AttrString("mode", "nearest");
  const std::string ct = node.AttrString("coordinate_transformation_mode",
                                         node.opset() < 11 ? "asymmetric" : "half_pixel");
  const std::string nm =
      node.AttrString("nearest_mode", node.opset() < 11 ? "floor" : "round_prefer_floor");
  // The source coordinate of output index o along an axis of 'in' -> 'out' at 'scale'; with
  // scales, the output length in these formulas is in * scale, unrounded (as the spec's
  // reference computes it).
  auto source = [&](int64_t o, int64_t in_size, double out_size, double s) {
    const double x = static_cast<double>(o);
    if (ct == "half_pixel") return (x + 0.5) / s - 0.5;
    if (ct == "pytorch_half_pixel") return out_size > 1 ? (x + 0.5) / s - 0.5 : 0.0;
    if (ct == "align_corners")
      return out_size > 1 ? x * static_cast<double>(in_size - 1) / (out_size - 1) : 0.0;
    if (ct == "tf_half_pixel_for_nearest" || ct == "tf_half_pixel_for_nn") return (x + 0.5) / s;
    if (ct == "half_pixel_symmetric") {
      const double adj = out_size / (s * static_cast<double>(in_size));
      const double offset = static_cast<double>(in_size) / 2.0 * (1.0 - adj);
      return offset + (x + 0.5) / s - 0.5;
    }
    return x / s;  // asymmetric
  };
  auto nearest = [&](double v, int64_t in_size) {
    int64_t i;
    if (nm == "floor")
      i = static_cast<int64_t>(std::floor(v));
    else if (nm == "ceil")
      i = static_cast<int64_t>(std::ceil(v));
    else if (nm == "round_prefer_ceil")
      i = static_cast<int64_t>(std::floor(v + 0.5));
    else  // round_prefer_floor: halves go down
      i = v == std::floor(v) + 0.5 ? static_cast<int64_t>(std::floor(v))
                                   : static_cast<int64_t>(std::round(v));
    return std::clamp<int64_t>(i, 0, in_size - 1);
  };
  auto taps = [&](size_t d) {
    std::vector<ResizePlan::Tap> t(static_cast<size_t>(out_shape[d]));
    if (shape[d] == 0) return t;
    for (int64_t o = 0; o < out_shape[d]; ++o) {
      const double length = scales != nullptr ? static_cast<double>(shape[d]) * scale[d]
                                              : static_cast<double>(out_shape[d]);
      const double v = source(o, shape[d], length, scale[d]);
      if (mode == "nearest") {
        const int64_t i = nearest(v, shape[d]);
        t[o] = {i, i, 0.f};
      } else {
        const double c = std::clamp(v, 0.0, static_cast<double>(shape[d] - 1));
        const int64_t i0 = static_cast<int64_t>(std::floor(c));
        t[o] = {i0, std::min(i0 + 1, shape[d] - 1),
                static_cast<float>(c - static_cast<double>(i0))};
      }
    }
    return t;
  };
  plan.taps_y = rank == 4 ? taps(2) : std::vector<ResizePlan::Tap>{{0, 0, 0.f}};
  plan.taps_x = taps(rank - 1);
  return plan;
}

namespace {

Status Resize(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  RETURN_IF_ERROR(RequireFloat(node, x));
  // Channels-last (the layout pass's choice between convolutions): planned on the NCHW shape the
  // scales and sizes describe.
  const bool nhwc = node.nhwc && x.shape().size() == 4;
  std::vector<int64_t> shape = x.shape();
  if (nhwc) shape = {shape[0], shape[3], shape[1], shape[2]};
  ASSIGN_OR_RETURN(const ResizePlan plan, PlanResize(node, in, shape));
  const std::vector<int64_t>& out_shape = plan.out_shape;
  const size_t rank = shape.size();
  const int64_t h = rank == 4 ? shape[2] : 1, w = shape[rank - 1];
  const int64_t oh = rank == 4 ? out_shape[2] : 1, ow = out_shape[rank - 1];
  Tensor y = Tensor::Uninitialized(  // (every value written below)
      DataType::kFp32, nhwc ? std::vector<int64_t>{out_shape[0], oh, ow, out_shape[1]} : out_shape);
  if (y.elements() == 0 || x.elements() == 0) {
    out[0] = std::move(y);
    return Status::Ok();
  }
  const std::vector<ResizePlan::Tap>& ty = plan.taps_y;
  const std::vector<ResizePlan::Tap>& tx = plan.taps_x;
  const float* px = x.data<float>();
  float* py = y.mutable_data<float>();
  // An output pixel whose taps both read one input pixel (every pixel in the nearest modes) is a
  // copy of it: the blend would turn an infinite value into NaN (inf + (inf - inf) * 0). The GPU's
  // kernel follows the same rule. RapidOCR's detector upsamples its pyramid's maps 2x to 8x in
  // the nearest mode before its Concat (batch 8, 2 threads: 767 us in six Resize nodes).
  auto copy = [](const ResizePlan::Tap& t) { return t.i0 == t.i1 && t.f == 0.f; };
  const bool nearest =
      std::all_of(ty.begin(), ty.end(), copy) && std::all_of(tx.begin(), tx.end(), copy);
  if (nhwc && nearest) {  // per output pixel, its source pixel's channels
    const int64_t c = shape[1];
    kernels::ParallelForWork(shape[0] * oh, y.elements(), [&](int64_t row) {
      const int64_t b = row / oh, oy = row % oh;
      const float* r0 = px + (b * h + ty[oy].i0) * w * c;
      float* dst = py + row * ow * c;
      for (int64_t ox = 0; ox < ow; ++ox)
        std::memcpy(dst + ox * c, r0 + tx[ox].i0 * c, static_cast<size_t>(c) * sizeof(float));
    });
    out[0] = std::move(y);
    return Status::Ok();
  }
  if (nhwc) {  // per output pixel, its four source pixels' channels at once (vectorized)
    const int64_t c = shape[1];
    kernels::ParallelForWork(shape[0] * oh, y.elements(), [&](int64_t row) {
      const int64_t b = row / oh, oy = row % oh;
      const ResizePlan::Tap& a = ty[oy];
      const float* r0 = px + (b * h + a.i0) * w * c;
      const float* r1 = px + (b * h + a.i1) * w * c;
      float* dst = py + row * ow * c;
      for (int64_t ox = 0; ox < ow; ++ox) {
        const ResizePlan::Tap& t = tx[ox];
        const float *p00 = r0 + t.i0 * c, *p01 = r0 + t.i1 * c;
        const float *p10 = r1 + t.i0 * c, *p11 = r1 + t.i1 * c;
        float* d = dst + ox * c;
        if (copy(a) && copy(t)) {
          std::memcpy(d, p00, static_cast<size_t>(c) * sizeof(float));
          continue;
        }
        for (int64_t ch = 0; ch < c; ++ch) {
          const float top = p00[ch] + (p01[ch] - p00[ch]) * t.f;
          const float bottom = p10[ch] + (p11[ch] - p10[ch]) * t.f;
          d[ch] = top + (bottom - top) * a.f;
        }
      }
    });
    out[0] = std::move(y);
    return Status::Ok();
  }
  for (int64_t plane = 0; plane < shape[0] * shape[1]; ++plane) {
    const float* src = px + plane * h * w;
    float* dst = py + plane * oh * ow;
    for (int64_t oy = 0; oy < oh; ++oy) {
      const ResizePlan::Tap& a = ty[oy];
      const float* r0 = src + a.i0 * w;
      const float* r1 = src + a.i1 * w;
      if (nearest) {
        for (int64_t ox = 0; ox < ow; ++ox) dst[oy * ow + ox] = r0[tx[ox].i0];
        continue;
      }
      for (int64_t ox = 0; ox < ow; ++ox) {
        const ResizePlan::Tap& b = tx[ox];
        const float top = r0[b.i0] + (r0[b.i1] - r0[b.i0]) * b.f;
        const float bottom = r1[b.i0] + (r1[b.i1] - r1[b.i0]) * b.f;
        dst[oy * ow + ox] = copy(a) && copy(b) ? r0[b.i0] : top + (bottom - top) * a.f;
      }
    }
  }
  out[0] = std::move(y);
  return Status::Ok();
}

}  // namespace

std::vector<OpDef> ResizeOps() { return {{"Resize", Resize, CheckResize}}; }

}  // namespace nereid::native
