// Convolution windows shared by the conv and pool families: attribute parsing (kernel_shape,
// strides, dilations, pads, auto_pad, ceil_mode) into the kernels' geometry, the layout
// conversions, and the load-time plan of a Conv with constant weights.
#pragma once

#include <optional>
#include <vector>

#include "cpu/conv.h"
#include "ops/op.h"

namespace nereid::native {

// A Conv's weights packed for the CPU kernels and its bias (BatchNormalization folded in by the
// graph's passes); built once at load when the weights are constant.
struct ConvPlan {
  ConvPlan(const float* w, int64_t c_out, int64_t c_in_per_group, int64_t kh, int64_t kw,
           int64_t groups, bool int8 = false, bool winograd = false, const float* smooth = nullptr)
      : weights(w, c_out, c_in_per_group, kh, kw, groups, int8, winograd, smooth) {}
  kernels::ConvWeights weights;
  std::vector<float> bias;  // c_out values, or empty
  // A depthwise convolution's: the 1x1 convolutions fused around it by the graph's passes
  // (FuseDepthwiseBlocks; not present() where none). With 'expand' the node reads its input; with
  // 'project' the node writes its output, and the node's residual and activation are the
  // projection's (its bias in project.epilogue), the depthwise's own activation in
  // 'depthwise_act'.
  kernels::PointwiseStage expand, project;
  kernels::GemmEpilogue depthwise_act;
};

// The spatial dims of an input of rank 3 (1-D) or 4 (2-D) in the node's layout, as
// n, c, h, w (h = 1 for 1-D).
struct SpatialShape {
  int64_t n, c, h, w;
};
StatusOr<SpatialShape> SpatialOf(const OpNode& node, const Tensor& x);

// The window geometry of a Conv or pool over 'in' with a kh x kw window (c_in/c_out left to the
// caller). 'pad_end' receives the bottom and right padding.
StatusOr<kernels::Conv2dGeometry> WindowGeometry(const OpNode& node, const SpatialShape& in,
                                                 int64_t kh, int64_t kw, bool ceil_mode,
                                                 int64_t pad_end[2]);

// The geometry of a ConvTranspose over 'in' with weights of 'w_shape' ([c_in][c_out / group]
// [kh][kw], or [kw] for 1-D): strides, dilations, the begin pads (output_padding, output_shape and
// auto_pad applied) and the output's size, as the CPU op and the GPU compiler run it.
StatusOr<kernels::Conv2dGeometry> ConvTransposeGeometry(const OpNode& node, const SpatialShape& in,
                                                        const std::vector<int64_t>& w_shape);

// Whether a 2-D ConvTranspose's taps tile its output (strides equal to the kernel, dilation 1, no
// padding, output_padding or output_shape: an upsampling head's 2x2 of stride 2), from its
// attributes and weights' shape alone: each output pixel is then one tap of one input pixel, and
// the op runs channels-last (the graph's layout pass takes it).
bool TapsTileTheOutput(const OpNode& node, const std::vector<int64_t>& w_shape);

// The kernels' epilogue for the node's fused activation (ops/gemm.cc).
kernels::GemmEpilogue EpilogueOf(const OpNode& node);

// NCHW <-> NHWC for rank-4 (or rank-3, as [n, c, w]) float tensors.
Tensor ToChannelsLast(const Tensor& x);
Tensor ToChannelsFirst(const Tensor& x);
// The output shape in the node's layout for n, c, oh, ow (rank 3 drops oh).
std::vector<int64_t> LayoutShape(const OpNode& node, size_t rank, int64_t n, int64_t c, int64_t h,
                                 int64_t w);

}  // namespace nereid::native

namespace nereid::native {

// The layout pass's conversions, as ops: NCHW -> NHWC and back (rank 4).
Status ToChannelsLastOp(const OpNode& node, const std::vector<const Tensor*>& in,
                        std::vector<Tensor>& out);
Status ToChannelsFirstOp(const OpNode& node, const std::vector<const Tensor*>& in,
                         std::vector<Tensor>& out);

}  // namespace nereid::native
