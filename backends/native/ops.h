// Operators of the native engine: one function per ONNX op, looked up by op_type. Each op checks
// its inputs and returns a clear Status on anything it does not support; it never asserts.
#pragma once

#include <string>
#include <vector>

#include "tensor.h"

namespace onnx {
class NodeProto;
}

namespace nereid::kernels {
class PackedMatrixB;
class PackedInt8W;
}  // namespace nereid::kernels

namespace nereid::native {

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
  bool HasAttr(const std::string& name) const;
  StatusOr<Tensor> AttrTensor(const std::string& name) const;
  Status Error(const std::string& message) const;
  // Input B (index 1) of Gemm/MatMul when it is a constant 2-D FP32 matrix, packed at load time.
  const kernels::PackedMatrixB* packed_b = nullptr;
  // ... or, with the int8 precision, quantized per output channel (Gemm without transA, MatMul).
  const kernels::PackedInt8W* packed_int8 = nullptr;
  // Gemm only: an activation that followed it in the graph, applied to its output while that is
  // still in cache (the graph fuses Gemm -> Relu / Sigmoid when nothing else reads the Gemm's
  // output).
  enum class Activation { kNone, kRelu, kSigmoid } activation = Activation::kNone;

 private:
  const onnx::NodeProto* proto_;
  int64_t opset_;
};

// 'in' has one entry per node input (nullptr for an omitted optional input); 'out' has one slot per
// node output, to be filled.
using OpFn = Status (*)(const OpNode& node, const std::vector<const Tensor*>& in,
                        std::vector<Tensor>& out);

OpFn FindOp(const std::string& op_type);
std::vector<std::string> SupportedOps();

}  // namespace nereid::native
