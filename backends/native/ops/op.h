// Operators of the native engine. Each ONNX op is a function looked up by op_type in a registry
// made of op families, one file each (ops/<family>.cc: elementwise, gemm, shape, reduce, conv,
// pool, norm, resize), listed once in ops/op.cc; ops/attention.cc holds the one node the graph's
// passes make that no file names (attention). Each op checks its inputs and attributes and
// returns a clear Status on anything it does not support; it never asserts. An attribute value an
// op cannot run exactly is also refused at load (OpDef::check), so a model is refused before it is
// READY, naming the node.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "cpu/parallel.h"
#include "tensor.h"

namespace onnx {
class NodeProto;
}

namespace nereid::kernels {
class PackedMatrixB;
class PackedInt8W;
}  // namespace nereid::kernels

namespace nereid::native {

struct ConvPlan;  // ops/conv.h: a Conv's constant weights prepared at load

// One node as an op sees it: attributes and the model's opset for the default domain.
class OpNode {
 public:
  OpNode(const onnx::NodeProto* proto, int64_t opset) : proto_(proto), opset_(opset) {}
  int64_t opset() const { return opset_; }
  const std::string& op_type() const;
  const std::string& name() const;
  int64_t AttrInt(const std::string& name, int64_t fallback) const;
  float AttrFloat(const std::string& name, float fallback) const;
  std::vector<int64_t> AttrInts(const std::string& name) const;
  std::vector<float> AttrFloats(const std::string& name) const;
  std::string AttrString(const std::string& name, const std::string& fallback) const;
  bool HasAttr(const std::string& name) const;
  StatusOr<Tensor> AttrTensor(const std::string& name) const;
  // The names of the node's attributes, in the file's order.
  std::vector<std::string> AttrNames() const;
  Status Error(const std::string& message) const;
  // Unsupported (not InvalidArgument): the engine cannot run what the node asks.
  Status Refuse(const std::string& message) const;

  // Input B (index 1) of Gemm/MatMul when it is a constant 2-D FP32 matrix, packed at load time.
  const kernels::PackedMatrixB* packed_b = nullptr;
  // ... or, with the int8 precision, quantized per output channel (Gemm without transA, MatMul).
  const kernels::PackedInt8W* packed_int8 = nullptr;
  // Conv: its weights packed for the CPU kernels (ops/conv.h), set by the graph's passes.
  const ConvPlan* conv = nullptr;
  // An activation that followed a Gemm or Conv in the graph, applied to its output while that is
  // still in cache (fused by the graph's passes when nothing else reads the output).
  enum class Activation {
    kNone,
    kRelu,
    kSigmoid,
    kClip,
    kLeakyRelu,
    kHardSigmoid,
    kHardSwish,
    kGelu
  } activation = Activation::kNone;
  // Parameters: kClip's bounds, kLeakyRelu's alpha (a), kHardSigmoid's alpha and beta, kGelu's
  // divisor (a; MatMul only, FuseGelus).
  float activation_a = 0.f, activation_b = 0.f;
  // Conv: a residual added to the output before the activation is the node's last input (the
  // graph's passes fuse Conv -> Add(x, residual) -> activation).
  bool residual = false;
  // The node reads and writes channels-last (NHWC) tensors where ONNX has NCHW: chosen by the
  // layout pass for convolutions and the ops between them (ops/layout.h).
  bool nhwc = false;

 private:
  const onnx::NodeProto* proto_;
  int64_t opset_;
};

// 'in' has one entry per node input (nullptr for an omitted optional input); 'out' has one slot per
// node output, to be filled.
using OpFn = Status (*)(const OpNode& node, const std::vector<const Tensor*>& in,
                        std::vector<Tensor>& out);
// Load-time check of a node's attributes (and constant inputs, nullptr where not constant): Ok or
// the reason the engine cannot run it exactly.
using OpCheck = Status (*)(const OpNode& node, const std::vector<const Tensor*>& constants);

struct OpDef {
  const char* op_type;
  OpFn fn;
  OpCheck check = nullptr;
  // How many (non-empty) outputs the op computes; a node asking for more is refused at load.
  int max_outputs = 1;
};

// The op families (one per file).
std::vector<OpDef> ElementwiseOps();
std::vector<OpDef> GemmOps();
std::vector<OpDef> ShapeOps();
std::vector<OpDef> ReduceOps();
std::vector<OpDef> ConvOps();
std::vector<OpDef> PoolOps();
std::vector<OpDef> NormOps();
std::vector<OpDef> ResizeOps();
// Attention fused by the graph's passes (ops/attention.cc; not an ONNX op: no file names it).
Status Attention(const OpNode& node, const std::vector<const Tensor*>& in,
                 std::vector<Tensor>& out);

// The activation fused into a Gemm or Conv (OpNode::activation), applied in place.
void ApplyActivation(const OpNode& node, float* y, int64_t n);
// Refuses output shapes with negative dimensions or more than 4 GiB (shapes computed from tensor
// values, which a request may supply).
Status CheckOutputShape(const OpNode& node, const std::vector<int64_t>& shape, DataType type);
// Permutes an array of 'shape' (element size 'esize') by 'perm' (output dim d is input perm[d]).
void TransposeBytes(const uint8_t* src, const std::vector<int64_t>& shape,
                    const std::vector<int64_t>& perm, size_t esize, uint8_t* dst);

const OpDef* FindOpDef(const std::string& op_type);
inline OpFn FindOp(const std::string& op_type) {
  const OpDef* def = FindOpDef(op_type);
  return def == nullptr ? nullptr : def->fn;
}
std::vector<std::string> SupportedOps();

// ---- helpers the families share -----------------------------------------------------------------

Status RequireInputs(const OpNode& node, const std::vector<const Tensor*>& in, size_t n);
// FP32 input 'i' (present); an error naming the type otherwise.
Status RequireFloat(const OpNode& node, const Tensor& t);
inline int64_t NormalizeAxis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }
int64_t Product(const std::vector<int64_t>& s, size_t from, size_t to);
StatusOr<std::vector<int64_t>> BroadcastShape(const OpNode& node, const std::vector<int64_t>& a,
                                              const std::vector<int64_t>& b);
// Element strides of 'shape' aligned to 'out' (rank-padded), 0 on broadcast dimensions.
std::vector<int64_t> BroadcastStrides(const std::vector<int64_t>& shape,
                                      const std::vector<int64_t>& out);
// Rewrites a walk over 'shape' (each of 'strides' an operand's BroadcastStrides over it) as one
// over fewer dimensions: those of size 1 dropped, and a dimension merged into the one before
// where every operand steps through the two as one (the outer's stride the inner's times its
// size; broadcast, stride 0, on both counts). An NHWC tensor times a per-channel vector,
// [1, 12, 96, 8] x [1, 1, 1, 8], walks as 1,152 rows of 8 against one row.
void CollapseDims(std::vector<int64_t>& shape,
                  std::initializer_list<std::vector<int64_t>*> strides);
// The rows of 'shape''s last dimension (rank 0: one row of one element), in pieces of about
// 2^15 elements over the thread team: fn(row, index) for each, 'index' the row's coordinates in
// the leading dimensions (rank - 1 of them), found by division for a piece's first row and then
// counted on. Nothing for an empty shape. The broadcasting ops' and the data movers' walk.
template <typename F>
void ForEachRow(const std::vector<int64_t>& shape, F&& fn) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t n = Product(shape, 0, shape.size());
  if (n == 0) return;
  const int64_t rows = n / (rank > 0 ? shape[rank - 1] : 1);
  const int64_t pieces = std::max<int64_t>(1, std::min<int64_t>(rows, n >> 15));
  kernels::ParallelFor(pieces, [&](int64_t p) {
    const int64_t first = rows * p / pieces, last = rows * (p + 1) / pieces;
    std::vector<int64_t> index(std::max<int64_t>(rank - 1, 0), 0);
    for (int64_t d = rank - 2, r = first; d >= 0; --d) {
      index[d] = r % shape[d];
      r /= shape[d];
    }
    for (int64_t row = first; row < last; ++row) {
      fn(row, static_cast<const std::vector<int64_t>&>(index));
      for (int64_t d = rank - 2; d >= 0; --d) {
        if (++index[d] < shape[d]) break;
        index[d] = 0;
      }
    }
  });
}
// The offset of a row at 'index' (ForEachRow's) in an operand of 'strides' (its element strides
// over the walk's shape, BroadcastStrides).
inline int64_t RowOffset(const std::vector<int64_t>& index, const std::vector<int64_t>& strides) {
  int64_t offset = 0;
  for (size_t d = 0; d < index.size(); ++d) offset += index[d] * strides[d];
  return offset;
}

// An INT64 or INT32 1-D (or scalar) tensor's values.
StatusOr<std::vector<int64_t>> IntValues(const OpNode& node, const Tensor& t, const char* what);

// Calls f(T{}) with the C++ type of a numeric DataType.
template <typename F>
Status DispatchNumeric(const OpNode& node, DataType t, F&& f) {
  switch (t) {
    case DataType::kFp32:
      return f(float{});
    case DataType::kFp64:
      return f(double{});
    case DataType::kInt8:
      return f(int8_t{});
    case DataType::kInt16:
      return f(int16_t{});
    case DataType::kInt32:
      return f(int32_t{});
    case DataType::kInt64:
      return f(int64_t{});
    case DataType::kUint8:
      return f(uint8_t{});
    case DataType::kUint16:
      return f(uint16_t{});
    case DataType::kUint32:
      return f(uint32_t{});
    case DataType::kUint64:
      return f(uint64_t{});
    default:
      return Unsupported(node.op_type() + " node '" + node.name() + "': element type " +
                         std::string(DataTypeName(t)) + " is not supported");
  }
}

}  // namespace nereid::native
