// 2-D convolution and pooling on NHWC float tensors for the native engine's CPU path.
// Convolution is an implicit GEMM: A (one row per output pixel, depth kh x kw x channels of a
// group) is gathered from the image while the GEMM packs it, never materialized; B is the
// weights packed once at load; bias, residual add and activation are fused into the GEMM's
// epilogue. 1x1 stride-1 convolutions read the image as A directly. Depthwise convolutions
// (one channel per group) have their own kernel, vectorized over channels, and so do, on AVX-512,
// convolutions of small groups (up to 8 inputs and 16 outputs a group).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "conv_geometry.h"
#include "cpu/gemm.h"
#include "cpu/gemm_int8.h"
#include "cpu/winograd.h"

namespace nereid::kernels {

// Weights of a convolution, packed for the GEMM (one matrix per group, depth ordered
// (ky, kx, channel)), or with 'int8' quantized per output channel for GemmInt8 (the same
// matrices), or, depthwise, as [kh * kw][channels] (always fp32), or, for small groups (below),
// as [block of 16 outputs][kh * kw][c_in / groups][16] (fp32).
class ConvWeights {
 public:
  // 'w' in ONNX's layout: [c_out][c_in / groups][kh][kw]. 'winograd' (a 3x3 fp32 convolution of
  // one group whose stride and dilation are 1): the weights transformed for WinogradNhwc instead,
  // which ConvNhwc then runs. 'smooth' (int8 only; c_in factors or null): each input channel's
  // smoothing (PackedInt8W's), the same factor at every tap of the window.
  ConvWeights(const float* w, int64_t c_out, int64_t c_in_per_group, int64_t kh, int64_t kw,
              int64_t groups, bool int8 = false, bool winograd = false,
              const float* smooth = nullptr);
  // Group g's weights as GEMM rows: out[co][(t * c_in_per_group + ci)] = w[g * cog + co][ci][t]
  // for the cog = c_out / groups outputs of the group (the int8 form's layout).
  static void GroupRows(const float* w, int64_t cog, int64_t c_in_per_group, int64_t taps,
                        int64_t g, float* out);
  bool depthwise() const { return depthwise_; }
  // Small groups: more than one group, c_in / groups <= 8, c_in / groups <= c_out / groups <=
  // 16, fp32, and AVX-512 (ResNeXt's first two stages, 4 and 8 channels a group; channel
  // multipliers). These run a direct kernel (a 4-column GEMM a group wasted most of each tile) over
  // 'group_taps()', [block of 16 outputs][kh * kw] [c_in / groups][16], and, per block and input
  // channel j of a group, each lane's input channel counted from the block's first
  // (BlockFirstInput): 'group_lanes()' as [block][c_in / groups][16].
  bool small_groups() const { return !lanes_.empty(); }
  const float* group_taps() const { return taps_.data(); }
  const int32_t* group_lanes() const { return lanes_.data(); }
  int64_t BlockFirstInput(int64_t block) const { return block * 16 / cog_ * cig_; }
  const WinogradWeights* winograd() const { return winograd_.get(); }
  bool int8() const { return !int8_.empty(); }
  const PackedMatrixB& group(int64_t g) const { return *packed_[g]; }
  const PackedInt8W& int8_group(int64_t g) const { return *int8_[g]; }
  // int8 with each input pixel quantized once (QuantizePixelsInt8) and each window's taps scaled
  // apart (GemmInt8FusedTaps): windows of more than one tap over at least kPixelChannels
  // channels a group, a multiple of 4; group g's offsets per tap (PackedInt8W::TapOffsets).
  static constexpr int64_t kPixelChannels = 32;
  bool int8_pixels() const { return !tap_offsets_.empty(); }
  const int32_t* int8_tap_offsets(int64_t g) const { return tap_offsets_[g].data(); }
  const float* depthwise_taps() const { return taps_.data(); }

 private:
  bool depthwise_ = false;
  int64_t cig_ = 0, cog_ = 0;
  std::vector<int32_t> lanes_;
  std::vector<std::unique_ptr<PackedMatrixB>> packed_;
  std::vector<std::unique_ptr<PackedInt8W>> int8_;
  std::vector<std::vector<int32_t>> tap_offsets_;
  std::vector<float> taps_;
  std::unique_ptr<WinogradWeights> winograd_;
};

// y = act(conv(x, w) + bias + residual), all NHWC; bias has c_out values (or is null), residual
// has y's shape (or is null). int8 weights: each output pixel's window (its row of the implicit
// GEMM) is quantized per row as GemmInt8 does, blocks of 64 pixels split over the intra-op team;
// or, where int8_pixels() and the CPU runs GemmInt8FusedTaps, each input pixel once, its bytes
// gathered into the windows.
void ConvNhwc(const Conv2dGeometry& g, const float* x, const ConvWeights& w, const float* bias,
              const float* residual, const GemmEpilogue& act, float* y);

// A depthwise convolution with the 1x1 convolutions (stride 1, no padding, one group, fp32 or
// int8 weights) around it that alone feed it and alone read it, run as one (MobileNet's inverted
// residual block: 1x1 to 6x the channels, depthwise 3x3, 1x1 back): per image and band of the
// depthwise's output rows, the first 1x1's output rows the band needs into a buffer of this
// thread's (the rows the next band shares moved to its front, not computed again), the depthwise
// rows from there into a second one, and the second 1x1 from that into y. The wide images between
// them are never written to memory.
struct PointwiseStage {
  const PackedMatrixB* weights = nullptr;  // c_in x c_out, or
  const PackedInt8W* int8 = nullptr;       // c_out x c_in in int8 (GemmInt8Fused); both null: none
  GemmEpilogue epilogue;                   // its bias and activation (residual: per call)
  int64_t c_in = 0;

  bool present() const { return weights != nullptr || int8 != nullptr; }
  int64_t c_out() const { return int8 != nullptr ? int8->n() : weights->n(); }
};
// 'g': the depthwise's geometry (c_in = c_out = groups); 'expand' (or none): the 1x1 before it, x
// then [n, h, w, expand.c_in], else x is the depthwise's input; taps (ConvWeights::depthwise_taps),
// bias and act: the depthwise's; 'project' (or none): the 1x1 after it, y then [n, oh, ow,
// project.c_out()]. 'residual' (or null) is added to the block's output (the projection's,
// else the depthwise's) before its activation.
void DepthwiseBlockNhwc(const Conv2dGeometry& g, const float* x, const PointwiseStage& expand,
                        const float* taps, const float* bias, const GemmEpilogue& act,
                        const PointwiseStage& project, const float* residual, float* y);

// ConvTranspose whose taps tile the output (strides equal to the kernel, dilation 1, no padding),
// all NHWC: y [n, h * kh, w * kw, c_out] = act(x [n, h, w, c_in] by w (ONNX's [c_in][c_out /
// groups][kh][kw]) + bias (c_out values or null)). Each output pixel is one tap of one input
// pixel, so each value is written once, bias and activation applied as it is.
void ConvTransposeTiledNhwc(const Conv2dGeometry& g, const float* x, const float* w,
                            const float* bias, const GemmEpilogue& act, float* y);

// Output pixel i's window of group 'group' (depth ordered (ky, kx, channel), zeros where it
// leaves the image): kh * kw * c_in / groups values into 'out', as the int8 convolution
// quantizes them.
void ConvWindow(const Conv2dGeometry& g, const float* x, int64_t group, int64_t i, float* out);

// Pooling windows: max, or average over the window (count_include_pad: padded positions count,
// up to the explicit padding; otherwise only positions inside the image).
void MaxPoolNhwc(const Conv2dGeometry& g, const float* x, float* y);
void AveragePoolNhwc(const Conv2dGeometry& g, bool count_include_pad, int64_t pad_bottom,
                     int64_t pad_right, const float* x, float* y);
// Global pools: [n, h, w, c] -> [n, c].
void GlobalAveragePoolNhwc(int64_t n, int64_t hw, int64_t c, const float* x, float* y);
void GlobalMaxPoolNhwc(int64_t n, int64_t hw, int64_t c, const float* x, float* y);

}  // namespace nereid::kernels
