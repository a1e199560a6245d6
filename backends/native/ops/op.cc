#include "ops/op.h"

#include <onnx/onnx_pb.h>

#include <map>

namespace nereid::native {

// ---- OpNode -------------------------------------------------------------------------------------

const std::string& OpNode::op_type() const { return proto_->op_type(); }
const std::string& OpNode::name() const { return proto_->name(); }

static const onnx::AttributeProto* FindAttr(const onnx::NodeProto* node, const std::string& name) {
  for (const auto& a : node->attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

bool OpNode::HasAttr(const std::string& name) const { return FindAttr(proto_, name) != nullptr; }
int64_t OpNode::AttrInt(const std::string& name, int64_t fallback) const {
  const auto* a = FindAttr(proto_, name);
  return a ? a->i() : fallback;
}
float OpNode::AttrFloat(const std::string& name, float fallback) const {
  const auto* a = FindAttr(proto_, name);
  return a ? a->f() : fallback;
}
std::vector<int64_t> OpNode::AttrInts(const std::string& name) const {
  const auto* a = FindAttr(proto_, name);
  return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
}
std::vector<float> OpNode::AttrFloats(const std::string& name) const {
  const auto* a = FindAttr(proto_, name);
  return a ? std::vector<float>(a->floats().begin(), a->floats().end()) : std::vector<float>{};
}
std::string OpNode::AttrString(const std::string& name, const std::string& fallback) const {
  const auto* a = FindAttr(proto_, name);
  return a ? a->s() : fallback;
}
std::vector<std::string> OpNode::AttrNames() const {
  std::vector<std::string> names;
  for (const auto& a : proto_->attribute()) names.push_back(a.name());
  return names;
}
StatusOr<Tensor> OpNode::AttrTensor(const std::string& name) const {
  const auto* a = FindAttr(proto_, name);
  if (a == nullptr || !a->has_t()) return Error("missing tensor attribute '" + name + "'");
  return TensorFromProto(a->t());
}
Status OpNode::Error(const std::string& message) const {
  return InvalidArgument(op_type() + " node '" + name() + "': " + message);
}
Status OpNode::Refuse(const std::string& message) const {
  return Unsupported(op_type() + " node '" + name() + "': " + message);
}

// ---- helpers ------------------------------------------------------------------------------------

Status RequireInputs(const OpNode& node, const std::vector<const Tensor*>& in, size_t n) {
  if (in.size() < n) return node.Error("needs " + std::to_string(n) + " inputs");
  for (size_t i = 0; i < n; ++i)
    if (in[i] == nullptr) return node.Error("input " + std::to_string(i) + " is missing");
  return Status::Ok();
}

Status RequireFloat(const OpNode& node, const Tensor& t) {
  if (t.type() == DataType::kFp32) return Status::Ok();
  return node.Refuse("element type " + std::string(DataTypeName(t.type())) +
                     " is not supported (FP32 only)");
}

int64_t Product(const std::vector<int64_t>& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

StatusOr<std::vector<int64_t>> BroadcastShape(const OpNode& node, const std::vector<int64_t>& a,
                                              const std::vector<int64_t>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return node.Error("shapes " + ShapeString(a) + " and " + ShapeString(b) +
                        " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> BroadcastStrides(const std::vector<int64_t>& shape,
                                      const std::vector<int64_t>& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    const size_t o = i + (out.size() - shape.size());
    strides[o] = shape[i] == 1 ? 0 : stride;
    stride *= shape[i];
  }
  return strides;
}

void CollapseDims(std::vector<int64_t>& shape,
                  std::initializer_list<std::vector<int64_t>*> strides) {
  std::vector<int64_t> merged;
  std::vector<std::vector<int64_t>> merged_strides(strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool joins = !merged.empty();
    size_t k = 0;
    for (const std::vector<int64_t>* s : strides)
      joins = joins && merged_strides[k++].back() == (*s)[d] * shape[d];
    k = 0;
    if (joins) {
      merged.back() *= shape[d];
      for (const std::vector<int64_t>* s : strides) merged_strides[k++].back() = (*s)[d];
    } else {
      merged.push_back(shape[d]);
      for (const std::vector<int64_t>* s : strides) merged_strides[k++].push_back((*s)[d]);
    }
  }
  shape = std::move(merged);
  size_t k = 0;
  for (std::vector<int64_t>* s : strides) *s = std::move(merged_strides[k++]);
}

StatusOr<std::vector<int64_t>> IntValues(const OpNode& node, const Tensor& t, const char* what) {
  if (t.shape().size() > 1) return node.Error(std::string(what) + " must be 1-D");
  std::vector<int64_t> v(static_cast<size_t>(t.elements()));
  if (t.type() == DataType::kInt64)
    std::copy(t.data<int64_t>(), t.data<int64_t>() + t.elements(), v.begin());
  else if (t.type() == DataType::kInt32)
    std::copy(t.data<int32_t>(), t.data<int32_t>() + t.elements(), v.begin());
  else
    return node.Error(std::string(what) + " must be INT64 or INT32");
  return v;
}

// ---- the registry -------------------------------------------------------------------------------

namespace {

const std::map<std::string, OpDef>& Registry() {
  static const std::map<std::string, OpDef> ops = [] {
    std::map<std::string, OpDef> all;
    for (auto family :
         {ElementwiseOps, GemmOps, ShapeOps, ReduceOps, ConvOps, PoolOps, NormOps, ResizeOps})
      for (const OpDef& def : family()) all.emplace(def.op_type, def);
    return all;
  }();
  return ops;
}

}  // namespace

const OpDef* FindOpDef(const std::string& op_type) {
  auto it = Registry().find(op_type);
  return it == Registry().end() ? nullptr : &it->second;
}

std::vector<std::string> SupportedOps() {
  std::vector<std::string> names;
  for (const auto& [name, def] : Registry()) names.push_back(name);
  return names;
}

}  // namespace nereid::native
