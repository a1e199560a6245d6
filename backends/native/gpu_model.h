// The GPU compiler's model (internal to the native engine's GPU path): the values and steps a
// Graph compiles to (GpuModel), and what the op families (gpu_ops/<family>.cc, one file per family
// as ops/ has for the CPU) share to compile their nodes. gpu_compile.cc walks the graph and looks
// each node's op up in the families' tables; gpu_engine.cc runs the steps.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cpu/gemm_int8.h"
#include "cuda/attention.h"
#include "cuda/common.h"
#include "cuda/conv.h"
#include "cuda/elementwise.h"
#include "cuda/tensor_ops.h"
#include "gpu_engine.h"
#include "gpu_graphs.h"
#include "graph.h"
#include "nereid/backend_util.h"

namespace nereid::native {
namespace kc = kernels::cuda;

// In a shape worked out at compile time (Shape of a value), the batch dimension.
constexpr int64_t kRowsDim = std::numeric_limits<int64_t>::min();

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
  enum Kind {
    kGemm,
    kBinary,
    kBroadcast,
    kUnary,
    kConvert,
    kActivation,  // an epilogue's activation standing alone (conv.act, act_a, act_b)
    kConv,
    kConvTranspose,
    kPool,
    kGlobalPool,
    kLayout,
    kSoftmax,
    kLrn,
    kStridedCopy,  // a Transpose, a Slice, or both: the input read through strides
    kResize,
    kConcat,
    kLayerNorm,
    kBatchedMatMul,
    kGather,    // rows of a constant table (w: table_rows x k) by the indices in value 'in'
    kReduce,    // pool (kSum, kAverage, kMax) over the middle of [rows x outer, m, k]
    kAttention  // fused attention: q from a.value, k from b.value, v from 'in', mask 'mask'
  } kind = kGemm;
  int in = -1, out = -1;
  // kGemm
  const void* w = nullptr;
  const float* w_scale = nullptr;  // int8 weights: one scale per output channel (w is n x k int8)
  const float* bias = nullptr;
  float alpha = 1.f;
  int64_t n = 0, k = 0;
  kc::Activation act = kc::Activation::kNone;
  bool residual_first = false;  // act(x w^T + bias + residual): a 1x1 convolution's order
  // A GEMM with a residual and no activation whose output only the next step, a LayerNorm without
  // its optional outputs, reads: where the GEMM runs on cuBLAS, that norm takes the sum from its
  // accumulators (kc::LayerNormOfSum) and the epilogue kernel goes (MarkNormsOfSums).
  bool norm_follows = false;
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
  // kLayout: NCHW -> NHWC (with zero channels added up to the output's count) or back; the
  // source's channels as the converting value sees them (an alias's, not its buffer's: a Transpose
  // or Reshape that keeps the bytes names other dims)
  bool to_last = false;
  int64_t layout_c = 0;
  // ... or space to depth (kc::SpaceToDepth, to_last set): 'window' its geometry (g.n set per run)
  bool space_to_depth = false;
  // kBroadcast (a, b and op as kBinary): dims[0] is the rows, set per run
  kc::BroadcastShape broadcast;
  // kSoftmax and kLayerNorm (rows x outer blocks of k), kGemm and kBatchedMatMul (rows x outer
  // products), kConcat (per row: outer blocks of each part's inner elements side by side)
  int64_t outer = 1;
  int64_t m = 0;        // kBatchedMatMul: a (value a) is m x k, b (value b) k x n per product
  float epsilon = 0.f;  // kLayerNorm (w: its scale, bias: its bias, each fp32 or null)
  int mean_out = -1, inv_std_out = -1;  // kLayerNorm's optional outputs (one value per vector)
  std::vector<std::pair<int, int64_t>> parts;  // kConcat: value, inner elements
  // kLrn: size n, alpha, beta, bias
  float lrn_alpha = 0.f, lrn_beta = 0.f, lrn_bias = 0.f;
  // kStridedCopy: the output's dims (rows first, set per run), the input's element stride of each
  // (the rows': a row of the input) and the first element read
  std::vector<int64_t> dims, strides;
  int64_t offset = 0;
  // kAttention: the problem without its pointers (set per run), and where Q, K and V start in
  // their buffers (elements)
  kc::AttentionProblem attention;
  int64_t q_offset = 0, k_offset = 0, v_offset = 0;
  int mask = -1;
  // Ragged plans (GpuModel::ragged): kAttention over the packed sequences (each query's own
  // sequence's keys), and kReduce pooling each sequence's tokens, read these values (the
  // engine's, GpuModel::token_sequence and sequence_ends); -1 otherwise.
  int token_sequence = -1, sequence_ends = -1;
  // Runs over the batch's sequences (rows: GpuModel::ragged_sequences) rather than its tokens:
  // what follows a pooling over each sequence's tokens in a ragged plan.
  bool sequences = false;
  // kResize: taps on the device (window.h/w/c_in -> window.oh/ow)
  const kc::ResizeTap* taps_y = nullptr;
  const kc::ResizeTap* taps_x = nullptr;
};
// "gemm", "layer norm", ... (GpuStepCounts' keys, the step profile's kinds).
const char* StepKindName(Step::Kind kind);

struct IoSpec {
  std::string name;
  int value = -1;  // the device buffer the host copies to or from (in the graph's type)
  DataType type = DataType::kInvalid;
  std::vector<int64_t> dims;
  size_t row_bytes = 0;
  // Inputs of indices a Gather reads a table of this many rows by: every value of a request must
  // lie in [-index_limit, index_limit), checked on the host before it runs (0: no check).
  int64_t index_limit = 0;
  // Ragged plans: an input the engine makes itself (each token's position and sequence, each
  // sequence's end), not the caller; an input or output with a row per sequence (not per token).
  bool engine_made = false;
  bool sequences = false;
};

// Device copies of weights: one per distinct content, shared by every model compiled into the
// store (the plans of one graph for each value of its open dimensions: their weights are the
// same bytes; the constants worked out per shape are not, and get their own).
class GpuWeightStore {
 public:
  explicit GpuWeightStore(int device) : device_(device) {}
  ~GpuWeightStore() {
    if (!copies_.empty()) cudaSetDevice(device_);
    for (auto& [key, p] : copies_) cudaFree(p);
  }
  GpuWeightStore(const GpuWeightStore&) = delete;
  GpuWeightStore& operator=(const GpuWeightStore&) = delete;

  // The device copy of 'bytes' at 'data': an earlier one of the same content, else a new one.
  StatusOr<const void*> Upload(const void* data, size_t bytes) {
    const Key key = KeyOf(data, bytes);
    std::lock_guard lock(mu_);
    if (auto it = copies_.find(key); it != copies_.end())
      return static_cast<const void*>(it->second);
    void* p = nullptr;
    CUDA_RETURN(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc (weights)");
    if (cudaError_t e = cudaMemcpy(p, data, bytes, cudaMemcpyHostToDevice); e != cudaSuccess) {
      cudaFree(p);
      return Internal(std::string("cudaMemcpy (weights): ") + cudaGetErrorString(e));
    }
    copies_.emplace(key, p);
    stored_bytes_ += bytes;
    return static_cast<const void*>(p);
  }
  size_t stored_bytes() const {
    std::lock_guard lock(mu_);
    return stored_bytes_;
  }

 private:
  // The size and two independent 64-bit hashes of the content (a collision of both between two
  // weights of one model is not a practical concern; the device copies are never written).
  struct Key {
    size_t bytes;
    uint64_t h1, h2;
    bool operator<(const Key& o) const {
      return std::tie(bytes, h1, h2) < std::tie(o.bytes, o.h1, o.h2);
    }
  };
  static Key KeyOf(const void* data, size_t bytes) {
    const auto* p = static_cast<const uint8_t*>(data);
    uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x9e3779b97f4a7c15ull;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      h1 = (h1 ^ w) * 0x100000001b3ull;
      h2 = ((h2 + w) * 0xff51afd7ed558ccdull);
      h2 ^= h2 >> 29;
    }
    for (; i < bytes; ++i)
      h1 = (h1 ^ p[i]) * 0x100000001b3ull, h2 = (h2 + p[i]) * 0xc4ceb9fe1a85ec53ull;
    return {bytes, h1, h2};
  }
  int device_;
  mutable std::mutex mu_;
  std::map<Key, void*> copies_;
  size_t stored_bytes_ = 0;
};

class GpuModel {
 public:
  int device = 0;
  Precision precision = Precision::kFp32;
  kc::ElemType float_type = kc::ElemType::kF32;
  std::vector<ValueSpec> values;
  std::vector<Step> steps;
  std::vector<IoSpec> inputs, outputs;
  size_t weight_bytes = 0;  // of the weights it reads (shared ones included)
  int gemms = 0, elementwise = 0;
  int fused_attention = 0;  // attention nodes on the fused kernel
  int convs = 0, pools = 0;
  std::map<std::string, int> conv_kernels;  // by kernel name: how many convolutions run on it
  std::map<int, int> layout_copies[2];      // [nhwc]: value id -> its copy in that layout
  // Integer vectors known at compile time though computed by nodes (Shape of a value and the
  // slicing and gathering after it), kRowsDim standing for the batch.
  std::map<int, std::vector<int64_t>> shape_values;
  std::set<int> scalar_shapes;  // those of them that are scalars (a Gather by a scalar index)
  // Values computed at compile time from constants and known shapes (the CPU's op run once on the
  // host): position ids sliced to the sequence, their embeddings, masks of known shape. Those in
  // row_broadcast stand for the same tensor in every row: a leading 1 where the batch goes.
  std::map<int, Tensor> host_constants;
  std::set<int> row_broadcast;
  // A value a Transpose made with the batch axis elsewhere than first (attention's
  // [3, rows, heads, seq, d] of Q, K and V): not computed but read as the source's buffer through
  // strides, until Slice and Squeeze bring the batch first again and one strided copy computes it.
  struct View {
    int source = -1;               // an NCHW value
    std::vector<int64_t> dims;     // the view's dims, the batch's (at batch_axis) 1
    std::vector<int64_t> strides;  // the source's element stride of each (the batch's: a row)
    int64_t offset = 0;
    size_t batch_axis = 0;
  };
  std::map<int, View> views;
  // Values a strided copy computed from another buffer (Transpose, Slice): a reader that takes
  // strides (fused attention) reads the source instead, and the copy goes if nothing else reads it.
  std::map<int, View> strided_copies;
  // By value id: how many nodes (and graph outputs) read it; and the fused attention step that
  // writes a value (a Transpose that alone reads it can have the step write its own output).
  std::vector<int> readers;
  std::map<int, size_t> attention_steps;
  // Ragged plans (GpuShapes::ragged_max_length): the graph compiled token-major, a row per token
  // of every sequence packed end to end (its tokens dimension 1), the ops along the tokens
  // (attention, pooling, position embeddings) made per sequence from the engine's own inputs:
  // each token's position in its sequence and sequence (INT32), each sequence's end (INT32, a row
  // per sequence). Steps after a pooling run on ragged_sequences rows.
  int64_t ragged_max_length = 0, ragged_sequences = 0;
  int positions = -1, token_sequence = -1, sequence_ends = -1;
  // While compiling a ragged plan: the same graph compiled without a device at the longest
  // length, whose dims and constants tell each value's tokens axis (and what depends on it).
  std::shared_ptr<const GpuModel> longest;
  bool ragged() const { return ragged_max_length > 0; }
  int64_t fixed_rows = 0;        // a model without batching whose config fixes its first dimension
  int int8_gemms = 0;            // the int8 precision: GEMMs run in int8 (the others in bf16)
  int64_t int8_max_vectors = 1;  // the most vectors of x in one row (a sequence's tokens, pixels)
  // ... and convolutions in int8 (one group, c_in a multiple of 16; the rest in bf16): the 1x1
  // ones as GEMMs (a scale per pixel), the others their image quantized per row (per image).
  int int8_convs = 0;
  // The int8 values of one row's largest quantized input (a GEMM's vectors x k, an image): the
  // scratch they are quantized into, per row.
  int64_t int8_max_in = 0;

  // The activations' memory plan (PlanArena, at the end of compiling): one device arena per
  // instance of arena_row_bytes per row of its capacity; value id's buffer (the owners: defined,
  // no alias) at arena_offset[id] per row, 256-byte aligned, -1 for the others. Values whose
  // lifetimes (first write to last read, in step order; inputs from before the first step,
  // outputs to after the last) overlap never share bytes. unplanned_row_bytes: the sum without
  // sharing.
  std::vector<int64_t> arena_offset;
  int64_t arena_row_bytes = 0, unplanned_row_bytes = 0;

  int Resolve(int id) const {
    while (id >= 0 && values[id].alias >= 0) id = values[id].alias;
    return id;
  }
  int AddValue(ValueSpec spec) {
    values.push_back(std::move(spec));
    return static_cast<int>(values.size()) - 1;
  }
  // The device copy of host bytes: in the store the model shares with the other plans of its
  // graph, else in its own.
  std::shared_ptr<GpuWeightStore> store;
  StatusOr<const void*> Upload(const void* data, size_t bytes) {
    weight_bytes += bytes;
    if (device == kGpuPlanOnly) {  // no device: any aligned address stands for the weights
      alignas(256) static const uint8_t kNowhere[256] = {};
      return static_cast<const void*>(kNowhere);
    }
    if (!store) store = std::make_shared<GpuWeightStore>(device);
    return store->Upload(data, bytes);
  }
  // Uploads float values converted to 'type'. A finite value stays finite: beyond the type's
  // range it becomes the largest finite one of its sign (an attention mask's FP32 lowest, -3.4e38,
  // is bf16's and fp16's lowest, not -inf, whose product with 0 would be NaN).
  StatusOr<const void*> UploadFloats(const std::vector<float>& v, kc::ElemType type) {
    if (type == kc::ElemType::kF32) return Upload(v.data(), v.size() * 4);
    const float max = type == kc::ElemType::kBF16 ? Bf16ToFloat(0x7f7f) : 65504.f;
    std::vector<uint16_t> half(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const float x = std::isfinite(v[i]) ? std::clamp(v[i], -max, max) : v[i];
      half[i] = type == kc::ElemType::kBF16 ? FloatToBf16(x) : FloatToHalf(x);
    }
    return Upload(half.data(), half.size() * 2);
  }
  // Weights as int8, 'rows' rows of 'depth' values (row-major) each quantized with its own scale
  // (per output channel: the arithmetic of the CPU's int8 and the GPU's run-time quantizers):
  // the device bytes in *w, the scales in *scale.
  Status UploadInt8Rows(const std::vector<float>& v, int64_t rows, int64_t depth, const void** w,
                        const float** scale) {
    std::vector<int8_t> q(v.size());
    std::vector<float> scales(static_cast<size_t>(rows));
    kernels::QuantizeRowsInt8(v.data(), rows, depth, depth, q.data(), scales.data());
    ASSIGN_OR_RETURN(*w, Upload(q.data(), q.size()));
    ASSIGN_OR_RETURN(const void* device_scales, Upload(scales.data(), scales.size() * 4));
    *scale = static_cast<const float*>(device_scales);
    return backend::Status::Ok();
  }
};

// ---- what the op families share ----------------------------------------------------------------

// One node being compiled, and "node 'name' (Op)" for its messages.
struct GpuNode {
  const Graph& graph;
  const Graph::Node& node;
  GpuModel& m;
  std::string who;

  int in(size_t k) const { return k < node.inputs.size() ? node.inputs[k] : -1; }
  int out() const { return node.outputs[0]; }
  // Input k's constant (invalid when it is computed or absent).
  const Tensor& Constant(size_t k) const;
  // Input k as a value computed from the model's inputs (a copy: adding values may move them);
  // refused for constants and absent inputs.
  StatusOr<ValueSpec> Input(size_t k) const;
};

// An op the GPU compiler runs: its compile function adds the node's steps and output values.
using GpuCompileFn = Status (*)(const GpuNode& node);
struct GpuOpDef {
  const char* op_type;
  GpuCompileFn compile;
  int max_outputs = 1;  // outputs beyond the first stay undefined (their readers are refused)
};
// The families (gpu_ops/*.cc).
std::vector<GpuOpDef> GpuAttentionOps();    // Attention (FuseAttention's node)
std::vector<GpuOpDef> GpuConvOps();         // Conv, ConvTranspose, the pools
std::vector<GpuOpDef> GpuElementwiseOps();  // arithmetic, activations, Identity, Dropout
std::vector<GpuOpDef> GpuGemmOps();         // Gemm, MatMul
std::vector<GpuOpDef> GpuNormOps();         // BatchNormalization, LRN, Softmax
std::vector<GpuOpDef> GpuReduceOps();       // ReduceSum, ReduceMean, ReduceMax
std::vector<GpuOpDef> GpuResizeOps();       // Resize
std::vector<GpuOpDef> GpuShapeOps();  // Flatten, Reshape, Transpose, Concat, Gather, Expand, Cast
// Shape, and Cast, Slice, Gather, Concat, Unsqueeze, Squeeze, Identity of its results: worked out
// at compile time (kRowsDim for the batch) where the inputs are known; false for any other node.
StatusOr<bool> CompileShapeOp(const GpuNode& n);

// ONNX Shape's result for a tensor of 'shape': its dims from the node's start to its end
// (negative counting from the rank, clamped), as the three places a shape is known at compile
// time (a value's, a constant's the same in every row, a shape vector's) take it.
std::vector<int64_t> ShapeOpResult(const OpNode& op, const std::vector<int64_t>& shape);
// The storage of a graph type at the model's float type; refused beyond FP32/INT32/INT64.
StatusOr<kc::ElemType> StorageType(DataType t, kc::ElemType float_type, const std::string& what);
std::vector<float> FloatsOf(const Tensor& t);
// An image value [c, h, w] per row.
bool IsImage(const ValueSpec& v);
// An image value [c, h, w] per row, channels-last unless it has one pixel.
ValueSpec ImageValue(kc::ElemType type, int64_t c, int64_t h, int64_t w);
// A step whose output 'out' has the shape and type of 'like'.
Status AddElementwise(GpuModel& m, Step s, const ValueSpec& like, int out);
// A new value 'spec' computed from buffer 'source' (read as 'channels' x the spec's pixels) by a
// layout step: NCHW -> NHWC when spec.nhwc (zero channels added up to spec's count), else back.
int AddLayoutCopy(GpuModel& m, int source, int64_t channels, ValueSpec spec);
// Value 'id' in the layout asked for: itself, or a copy converted once (every later reader shares
// it). Values of one pixel per image are both layouts at once.
int InLayout(GpuModel& m, int id, bool nhwc);
// Value 'id' per row as a view: its own (a Transpose moved its batch), or its NCHW buffer whole
// (dims and strides include the rows', first: a row's elements).
GpuModel::View ViewOf(GpuModel& m, int id);
// View 'outer' of a buffer that a strided copy made from 'copy' (a contiguous [copy.dims]) as a
// view of copy's own source, when each of outer's axes walks within one axis of the copy (a
// transpose of a column slice: Q sliced from a merged projection, then its heads moved): *out, and
// true; false otherwise.
bool ComposeViews(const GpuModel::View& outer, const GpuModel::View& copy, GpuModel::View* out);
// The integers of value 'id' where they are known at load: a 1-D INT64/INT32 constant's (read
// as the CPU ops read them, IntValues), or a shape worked out by CompileShapeOp.
std::optional<std::vector<int64_t>> IntsOf(const Graph& graph, const GpuModel& m,
                                           const OpNode& node, int id);
// The values a step reads and writes (their buffers' owners, aliases resolved): every field that
// names one (the activations' memory plan follows them).
std::vector<int> StepReads(const GpuModel& m, const Step& s);
std::vector<int> StepWrites(const GpuModel& m, const Step& s);
// sqrt(2), the divisor inside erf of the GPU's GELU; whether a model's divisor is it (to float
// rounding), and a constant's one FP32 value.
constexpr float kSqrt2 = 1.41421356237f;
bool IsSqrt2(float d);
bool ScalarOf(const Tensor& t, float* v);
// A Gemm or MatMul node's fused activation as the GEMM epilogues name it (Relu, Sigmoid, GELU);
// refused for others.
StatusOr<kc::Activation> GpuActivationOf(const Graph::Node& node, const std::string& who);
// An epilogue's activation as the kernels name it; refused for those without one.
StatusOr<kc::ConvActivation> ConvActivationOf(OpNode::Activation act, const std::string& who);

// Ragged plans (gpu_ragged.cc; GpuModel::ragged): the engine's inputs (after the graph's, whose
// tokens dimension is checked); each node the device runs is checked before it compiles (its
// constants that differ per position made values gathered by position) and given a role, its
// steps fixed after; the attention steps' strides once every node has compiled.
enum class RaggedRole { kTokens, kSequences, kAttention, kPool };
Status AddRaggedInputs(GpuModel& m);
StatusOr<RaggedRole> PrepareRaggedNode(const GpuNode& n);
Status FinishRaggedNode(const GpuNode& n, RaggedRole role, size_t first_step);
Status FinishRagged(GpuModel& m);
// The tokens axis of value 'id' in a ragged plan being compiled (its full dims, batch first), -1
// for a value per sequence, -2 for one whose dims depend on the length otherwise.
int RaggedTokensAxis(const GpuModel& m, int id);

// An operand of a binary op: a value of the graph, or a constant (a graph's, or one the compiler
// made).
struct BinaryInput {
  int value = -1;
  const Tensor* constant = nullptr;
};
// out = a op b with numpy broadcasting (gpu_ops/elementwise.cc).
Status CompileBinary(GpuModel& m, kc::BinaryOp op, BinaryInput a, BinaryInput b, int out,
                     const std::string& who);

}  // namespace nereid::native
