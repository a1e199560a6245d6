// Convolutions and pools of the native engine's GPU path, on NHWC tensors (the GPU compiler keeps
// every value between convolutions channels-last and converts at the model's edges):
//
//  - Conv2dNhwc runs a layer whose 128-pixel tiles fill a Hopper GPU as GemmSm90's implicit GEMM
//    (gemm.h: wgmma, the windows gathered by cp.async; ConvOnSm90), else one of three kernels:
//      tensor-core implicit GEMM (bf16/fp16, one group, c_in a multiple of 8; int8 with c_in a
//        multiple of 16, per-image and per-output-channel scales): M = output pixels,
//        N = output channels, K = kh x kw x c_in gathered from the image with 16-byte cp.async
//        loads (zero-filled outside the image), never materialized; mma.sync m16n8k16 with fp32
//        accumulators, three shared-memory stages; the epilogue fused into the stores; K split
//        over blocks for layers with fewer tiles than SMs (batch 1);
//      depthwise (one channel per group): each thread one output element, channels fastest;
//      generic implicit GEMM (any type, any groups, any c_in): CUDA cores, fp32 accumulation.
//    The epilogue is y = act(conv + bias + residual), converted to y's type once.
//  - Pool2dNhwc: MaxPool and AveragePool windows (pads, strides, dilations, ceil_mode as
//    geometry); GlobalPoolNhwc: GlobalAveragePool and GlobalMaxPool to [n, c].
//  - ChannelsLast / ChannelsFirst: NCHW <-> NHWC; SpaceToDepth: NCHW -> blocks of s x s pixels as
//    channels, NHWC.
// Types kF32, kBF16, kF16; arithmetic in fp32. Entry points check shapes and return
// cudaErrorInvalidValue for what they cannot run, never synchronize.
#pragma once

#include <vector>

#include "conv_geometry.h"
#include "cuda/common.h"
#include "cuda/gemm.h"

namespace nereid::kernels::cuda {

// The activations a convolution's epilogue applies (ONNX's Relu, Clip(a, b), LeakyRelu(alpha a),
// HardSigmoid(alpha a, beta b), HardSwish).
enum class ConvActivation { kNone, kRelu, kClip, kLeakyRelu, kHardSigmoid, kHardSwish };

struct ConvProblem {
  Conv2dGeometry g;                // x: n x h x w x c_in; y: n x oh x ow x c_out
  ElemType type = ElemType::kF32;  // x, w, residual and y
  const void* x = nullptr;
  const void* w = nullptr;         // in ConvWeightsLayout's order
  const float* bias = nullptr;     // c_out, or null
  const void* residual = nullptr;  // like y, or null
  void* y = nullptr;
  ConvActivation act = ConvActivation::kNone;
  float act_a = 0.f, act_b = 0.f;
  // Layers with fewer tiles than the GPU has SMs split their depth over blocks: on a cluster where
  // the GPU launches them ('clusters'; false for tests and comparisons), else with fp32 partial
  // sums in 'workspace' (kConvWorkspaceFloats, or null: no split), added up by a second kernel.
  bool clusters = true;
  float* workspace = nullptr;
  // int8: x and w int8 (x per image with x_scale[image], w per output channel with w_scale[co];
  // value = q * scale), y and residual in 'type' (bf16 or fp16): the tensor-core kernel's int8
  // form (one group, c_in a multiple of 16; Int8ConvSupported).
  bool int8 = false;
  const float* x_scale = nullptr;
  const float* w_scale = nullptr;
};
bool Int8ConvSupported(const ConvProblem& p);
constexpr int kConvMaxSplits = 8;
constexpr int64_t kConvWorkspaceFloats = int64_t{1} << 23;  // 32 MiB

enum class ConvKernel { kTensorCore, kDepthwise, kGeneric };
// The kernel Conv2dNhwc runs for 'p' (its shape and type; tensor cores need a Volta-or-later GPU,
// which every device this engine runs on is), and over how many splits of the depth.
ConvKernel ChooseConvKernel(const ConvProblem& p);
// The GEMM epilogue's activation for a convolution's, where it has one (None and Relu).
bool GemmActivationOf(ConvActivation act, Activation* out);
// 'p' as an implicit GEMM (GemmProblem::implicit: pixels x c_out x kh kw c_in, the residual before
// the activation; int8: kI8 operands with p's scales), for GemmSm90; its activation must have a
// GEMM form (GemmActivationOf).
GemmProblem ImplicitGemm(const ConvProblem& p);
// Whether Conv2dNhwc runs 'p' as GemmSm90's implicit GEMM instead (Hopper, bf16/fp16 with c_in a
// multiple of 8 or int8 to bf16 with c_in a multiple of 16, one group, Relu or no activation,
// tiles that fill the GPU; decided per call, as the batch's pixels change).
bool ConvOnSm90(const ConvProblem& p);
// Over how many blocks Conv2dNhwc splits the depth of 'p' (1: none). Where the GPU launches
// thread-block clusters the splits are one cluster and meet in distributed shared memory (one
// kernel, no workspace); elsewhere they need p.workspace and a second kernel.
int ConvSplits(const ConvProblem& p);
const char* ConvKernelName(ConvKernel k);

// Reorders ONNX weights ([c_out][c_in / groups][kh][kw]) into what the chosen kernel reads:
// depthwise [kh][kw][c_out], otherwise [c_out][kh][kw][c_in / groups].
std::vector<float> ConvWeightsLayout(const ConvProblem& p, const float* oihw);

cudaError_t Conv2dNhwc(const ConvProblem& p, cudaStream_t stream);

// A GEMM as a 1x1 convolution over m one-pixel images on the tensor-core implicit GEMM, whose
// cluster splits run a batch-1 layer as one kernel (a candidate the engine's GEMM tuner times
// against cuBLAS). Takes bf16/fp16 operands with y in their type, or int8 operands (x_scale per
// row) with y in bf16/fp16; alpha 1; no activation or Relu, with the residual before it; k a
// multiple of 8 (16 for int8); 16-byte aligned x and w; a current device of compute capability 8.0
// or later.
bool GemmAsConvSupported(const GemmProblem& p);
cudaError_t GemmAsConv(const GemmProblem& p, cudaStream_t stream);
// The 1x1 convolution GemmAsConv runs for 'p' (its activation must have a convolution form; no
// workspace: it splits only on clusters).
ConvProblem GemmAsConvProblem(const GemmProblem& p);

// y[i] = act(x[i]) for an activation standing alone (not after a convolution); in place allowed.
cudaError_t ActivateLikeConv(ConvActivation act, float a, float b, ElemType type, const void* x,
                             void* y, int64_t count, cudaStream_t stream);

// pads at the bottom and right follow from g.oh and g.ow; 'count_include_pad' divides
// AveragePool's sums by the window clipped to the padded image (ONNX's rule) rather than to the
// image. g.c_out is ignored (a pool keeps g.c_in channels).
enum class PoolKind { kMax, kAverage, kSum };  // kSum: GlobalPoolNhwc only
cudaError_t Pool2dNhwc(PoolKind kind, const Conv2dGeometry& g, int64_t pad_bottom,
                       int64_t pad_right, bool count_include_pad, ElemType type, const void* x,
                       void* y, cudaStream_t stream);
// x: n x hw x c; y: n x c (also ReduceMax, ReduceMean and ReduceSum over a middle axis). With
// 'ends' (device memory, n values) image i is pixels [ends[i - 1] (0 for the first), ends[i]) of
// x (hw ignored): the packed sequences of a ragged batch pooled over their own tokens; an empty
// one gives 0.
cudaError_t GlobalPoolNhwc(PoolKind kind, int64_t n, int64_t hw, int64_t c, ElemType type,
                           const void* x, void* y, cudaStream_t stream,
                           const int32_t* ends = nullptr);

// x: n x c x hw -> y: n x hw x c, and back. 'c_pad' > c gives y c_pad channels, the extra ones
// zero (a first convolution's 3 channels made 8, for the tensor-core kernel).
cudaError_t ChannelsLast(ElemType type, const void* x, int64_t n, int64_t c, int64_t hw, void* y,
                         cudaStream_t stream, int64_t c_pad = 0);
cudaError_t ChannelsFirst(ElemType type, const void* x, int64_t n, int64_t c, int64_t hw, void* y,
                          cudaStream_t stream);
// Space to depth for a strided first convolution: x NCHW (g.n x g.c_in x g.h x g.w) -> y NHWC
// (g.n x g.oh x g.ow x g.c_out), each output pixel (by, bx) the s x s block of every channel
// (s = g.stride_h = g.stride_w) at rows by s + dy - g.pad_top, columns bx s + dx - g.pad_left
// (zero outside the image), channel (dy s + dx) g.c_in + ci; channels from s s c_in up to c_out
// zero. A convolution of stride s then reads whole 16- or 32-byte taps of one block each. y is of
// 'type'; x of 'x_type', 'type' or kF32 (a model's fp32 input converted on the way).
cudaError_t SpaceToDepth(ElemType type, const void* x, const Conv2dGeometry& g, void* y,
                         cudaStream_t stream, ElemType x_type);

}  // namespace nereid::kernels::cuda
