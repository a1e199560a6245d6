// Shape and data-movement ops: Identity, Reshape, Flatten, Squeeze, Unsqueeze (views); Concat,
// Transpose, Slice, Gather, Pad, Expand, Split; Shape, Size, ConstantOfShape, Range, Constant,
// Cast.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/parallel.h"
#include "nereid/half.h"
#include "ops/op.h"

namespace nereid::native {

Status CheckOutputShape(const OpNode& node, const std::vector<int64_t>& shape, DataType type) {
  // Shapes computed from tensor values (a request may supply them) are bounded before allocating.
  constexpr int64_t kMaxBytes = int64_t{1} << 32;
  int64_t bytes = static_cast<int64_t>(std::max<size_t>(DataTypeSize(type), 1));
  for (int64_t d : shape) {
    if (d < 0) return node.Error("negative dimension in output shape " + ShapeString(shape));
    if (d != 0 && bytes > kMaxBytes / d)
      return node.Error("output shape " + ShapeString(shape) + " is larger than 4 GiB");
    bytes *= d;
  }
  return Status::Ok();
}

void TransposeBytes(const uint8_t* src, const std::vector<int64_t>& shape,
                    const std::vector<int64_t>& perm, size_t esize, uint8_t* dst) {
  const size_t rank = shape.size();
  std::vector<int64_t> in_stride(rank, 1);
  for (size_t d = rank; d-- > 1;) in_stride[d - 1] = in_stride[d] * shape[d];
  std::vector<int64_t> out_shape(rank), stride(rank);
  for (size_t d = 0; d < rank; ++d) {
    out_shape[d] = shape[perm[d]];
    stride[d] = in_stride[perm[d]];
  }
  const int64_t inner = rank ? out_shape[rank - 1] : 1, inner_stride = rank ? stride[rank - 1] : 1;
  // Rows of the output over the thread team (attention's heads: thousands of rows); a row whose
  // source is contiguous (the last axis stays last) is one copy.
  ForEachRow(out_shape, [&](int64_t row, const std::vector<int64_t>& index) {
    const int64_t offset = RowOffset(index, stride);
    if (inner_stride == 1) {
      std::memcpy(dst + row * inner * esize, src + offset * esize,
                  static_cast<size_t>(inner) * esize);
      return;
    }
    auto copy = [&](auto tag) {
      using T = decltype(tag);
      const T* s = reinterpret_cast<const T*>(src) + offset;
      T* o = reinterpret_cast<T*>(dst) + row * inner;
      for (int64_t j = 0; j < inner; ++j) o[j] = s[j * inner_stride];
    };
    switch (esize) {
      case 1:
        copy(uint8_t{});
        break;
      case 2:
        copy(uint16_t{});
        break;
      case 4:
        copy(uint32_t{});
        break;
      default:
        copy(uint64_t{});
        break;
    }
  });
}

namespace {

Status NoBytes(const OpNode& node, const Tensor& t) {
  if (t.type() == DataType::kBytes) return node.Refuse("BYTES (STRING) tensors are not supported");
  return Status::Ok();
}

Status Identity(const OpNode& node, const std::vector<const Tensor*>& in,
                std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  out[0] = *in[0];
  return Status::Ok();
}

Status Reshape(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 2));
  const Tensor& x = *in[0];
  const Tensor& s = *in[1];
  if (s.type() != DataType::kInt64 || s.shape().size() != 1)
    return node.Error("shape must be 1-D INT64");
  const bool allow_zero = node.AttrInt("allowzero", 0) != 0;
  std::vector<int64_t> shape(s.data<int64_t>(), s.data<int64_t>() + s.elements());
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {
      if (i >= x.shape().size()) return node.Error("0 in shape refers past the input rank");
      shape[i] = x.shape()[i];
    }
    if (shape[i] == -1) {
      if (infer >= 0) return node.Error("more than one -1 in shape");
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      return node.Error("invalid dimension " + std::to_string(shape[i]));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.elements() % known != 0)
      return node.Error("cannot infer -1 in " + ShapeString(shape) + " for " +
                        ShapeString(x.shape()));
    shape[infer] = x.elements() / known;
  }
  if (ElementCount(shape.data(), shape.size()) != x.elements())
    return node.Error("cannot reshape " + ShapeString(x.shape()) + " to " + ShapeString(shape));
  out[0] = x.View(shape);
  return Status::Ok();
}

Status Flatten(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  const int64_t rank = static_cast<int64_t>(x.shape().size());
  const int64_t axis = NormalizeAxis(node.AttrInt("axis", 1), rank);
  if (axis < 0 || axis > rank) return node.Error("axis out of range");
  out[0] = x.View({Product(x.shape(), 0, axis), Product(x.shape(), axis, rank)});
  return Status::Ok();
}

Status Concat(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  if (in.empty()) return node.Error("needs at least one input");
  RETURN_IF_ERROR(RequireInputs(node, in, in.size()));
  if (!node.HasAttr("axis")) return node.Error("attribute 'axis' is required");
  RETURN_IF_ERROR(NoBytes(node, *in[0]));
  const auto& first = in[0]->shape();
  const int64_t rank = static_cast<int64_t>(first.size());
  // Channels-last (the layout pass): the channel axis 1 of NCHW is axis 3.
  const int64_t axis = node.nhwc ? 3 : NormalizeAxis(node.AttrInt("axis", 0), rank);
  if (axis < 0 || axis >= rank) return node.Error("axis out of range");
  std::vector<int64_t> shape = first;
  shape[axis] = 0;
  for (const Tensor* t : in) {
    if (t->type() != in[0]->type() || t->shape().size() != first.size())
      return node.Error("inputs differ in type or rank");
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && t->shape()[d] != first[d])
        return node.Error("inputs differ outside the axis");
    shape[axis] += t->shape()[axis];
  }
  // (Every byte is written: no zeroing first. Rows of the outer dims over the intra-op team: the
  // channels-last Concat of RapidOCR's detector's four upsampled maps is 6,144 pixels of four
  // pieces at batch 8.)
  out[0] = Tensor::Uninitialized(in[0]->type(), shape);
  const size_t esize = DataTypeSize(in[0]->type());
  const int64_t outer = Product(first, 0, axis);
  std::vector<size_t> chunks;  // each input's bytes per outer row
  size_t row = 0;
  for (const Tensor* t : in) {
    chunks.push_back(static_cast<size_t>(Product(t->shape(), axis, rank)) * esize);
    row += chunks.back();
  }
  uint8_t* const base = out[0].mutable_raw();
  kernels::ParallelForWork(outer, outer * static_cast<int64_t>(row), [&](int64_t o) {
    uint8_t* dst = base + static_cast<size_t>(o) * row;
    for (size_t k = 0; k < in.size(); ++k) {
      if (chunks[k] != 0)
        std::memcpy(dst, in[k]->raw() + static_cast<size_t>(o) * chunks[k], chunks[k]);
      dst += chunks[k];
    }
  });
  return Status::Ok();
}

// Cast reads each element through ElementAsDouble (common/data_type.h) and writes it back here.
template <typename T>
void Store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

void WriteFromDouble(DataType t, uint8_t* p, double v, const uint8_t* src, DataType src_type) {
  switch (t) {
    case DataType::kFp16:
      // From FP64 round once, from the double itself, as numpy's astype does.
      Store<uint16_t>(p, FloatToHalf(static_cast<float>(v)));
      break;
    case DataType::kBf16:
      Store<uint16_t>(p, FloatToBf16(static_cast<float>(v)));
      break;
    case DataType::kBool:
      *p = v != 0.0;
      break;
    case DataType::kFp32:
      Store<float>(p, static_cast<float>(v));
      break;
    case DataType::kFp64:
      Store<double>(p, v);
      break;
    case DataType::kInt8:
      Store<int8_t>(p, static_cast<int8_t>(v));
      break;
    case DataType::kUint8:
      Store<uint8_t>(p, static_cast<uint8_t>(v));
      break;
    case DataType::kInt16:
      Store<int16_t>(p, static_cast<int16_t>(v));
      break;
    case DataType::kUint16:
      Store<uint16_t>(p, static_cast<uint16_t>(v));
      break;
    case DataType::kInt32:
      Store<int32_t>(p, static_cast<int32_t>(v));
      break;
    case DataType::kUint32:
      Store<uint32_t>(p, static_cast<uint32_t>(v));
      break;
    case DataType::kInt64:
      if (src_type == DataType::kInt64 || src_type == DataType::kUint64)
        std::memcpy(p, src, 8);
      else
        Store<int64_t>(p, static_cast<int64_t>(v));
      break;
    case DataType::kUint64:
      if (src_type == DataType::kInt64 || src_type == DataType::kUint64)
        std::memcpy(p, src, 8);
      else
        Store<uint64_t>(p, static_cast<uint64_t>(v));
      break;
    default:
      break;
  }
}

Status Cast(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  const DataType to = FromOnnxType(static_cast<int32_t>(node.AttrInt("to", 0)));
  if (x.type() == DataType::kBytes || to == DataType::kBytes)
    return node.Error("casts to or from STRING are not supported");
  if (to == DataType::kInvalid)
    return node.Error("unsupported target type " + std::to_string(node.AttrInt("to", 0)));
  out[0] = Tensor::Uninitialized(to, x.shape());
  // To FP32 from the integer types masks and ids come in: one rounding, as static_cast does.
  if (to == DataType::kFp32) {
    float* y = out[0].mutable_data<float>();
    auto from = [&](auto tag) {
      const auto* v = x.data<decltype(tag)>();
      for (int64_t i = 0; i < x.elements(); ++i) y[i] = static_cast<float>(v[i]);
      return true;
    };
    if ((x.type() == DataType::kInt64 && from(int64_t{})) ||
        (x.type() == DataType::kInt32 && from(int32_t{})) ||
        (x.type() == DataType::kUint8 && from(uint8_t{})) ||
        (x.type() == DataType::kFp32 && from(float{})))
      return Status::Ok();
  }
  const size_t si = DataTypeSize(x.type()), so = DataTypeSize(to);
  const uint8_t* src = x.raw();
  uint8_t* dst = out[0].mutable_raw();
  for (int64_t i = 0; i < x.elements(); ++i)
    WriteFromDouble(to, dst + i * so, ElementAsDouble(x.type(), src + i * si), src + i * si,
                    x.type());
  return Status::Ok();
}
Status Constant(const OpNode& node, const std::vector<const Tensor*>&, std::vector<Tensor>& out) {
  if (node.HasAttr("value")) {
    ASSIGN_OR_RETURN(out[0], node.AttrTensor("value"));
    return Status::Ok();
  }
  if (node.HasAttr("value_float")) {
    out[0] = Tensor::Allocate(DataType::kFp32, {});
    out[0].mutable_data<float>()[0] = node.AttrFloat("value_float", 0.f);
    return Status::Ok();
  }
  if (node.HasAttr("value_int")) {
    out[0] = Tensor::Allocate(DataType::kInt64, {});
    out[0].mutable_data<int64_t>()[0] = node.AttrInt("value_int", 0);
    return Status::Ok();
  }
  if (node.HasAttr("value_ints")) {
    const auto v = node.AttrInts("value_ints");
    out[0] = Tensor::Allocate(DataType::kInt64, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), out[0].mutable_data<int64_t>());
    return Status::Ok();
  }
  return node.Error("only value, value_float, value_int and value_ints are supported");
}

Status Shape(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const auto& shape = in[0]->shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  auto clamp = [rank](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
  const int64_t start = clamp(node.AttrInt("start", 0)), end = clamp(node.AttrInt("end", rank));
  const int64_t n = std::max<int64_t>(end - start, 0);
  out[0] = Tensor::Allocate(DataType::kInt64, {n});
  std::copy(shape.begin() + start, shape.begin() + start + n, out[0].mutable_data<int64_t>());
  return Status::Ok();
}

// The input's element count as an INT64 scalar.
Status Size(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  out[0] = Tensor::Allocate(DataType::kInt64, {});
  out[0].mutable_data<int64_t>()[0] = in[0]->elements();
  return Status::Ok();
}

// The axes of Squeeze and Unsqueeze: an attribute before opset 13, an optional input from 13 on.
StatusOr<std::vector<int64_t>> AxesOf(const OpNode& node, const std::vector<const Tensor*>& in) {
  if (node.opset() < 13) return node.AttrInts("axes");
  if (in.size() > 1 && in[1] != nullptr) return IntValues(node, *in[1], "axes");
  return std::vector<int64_t>{};
}

Status Unsqueeze(const OpNode& node, const std::vector<const Tensor*>& in,
                 std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  ASSIGN_OR_RETURN(auto axes, AxesOf(node, in));
  const auto& shape = in[0]->shape();
  const int64_t rank = static_cast<int64_t>(shape.size() + axes.size());
  std::vector<bool> inserted(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    const int64_t axis = NormalizeAxis(a, rank);
    if (axis < 0 || axis >= rank || inserted[axis]) return node.Error("invalid or repeated axis");
    inserted[axis] = true;
  }
  std::vector<int64_t> result;
  size_t next = 0;
  for (int64_t d = 0; d < rank; ++d) result.push_back(inserted[d] ? 1 : shape[next++]);
  out[0] = in[0]->View(result);
  return Status::Ok();
}

Status Squeeze(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  ASSIGN_OR_RETURN(auto axes, AxesOf(node, in));
  const auto& shape = in[0]->shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<bool> removed(shape.size(), false);
  for (int64_t a : axes) {
    const int64_t axis = NormalizeAxis(a, rank);
    if (axis < 0 || axis >= rank) return node.Error("axis out of range");
    if (shape[axis] != 1)
      return node.Error("cannot squeeze a dimension of size " + std::to_string(shape[axis]));
    removed[axis] = true;
  }
  std::vector<int64_t> result;
  for (int64_t d = 0; d < rank; ++d)
    if (!(axes.empty() ? shape[d] == 1 : removed[d])) result.push_back(shape[d]);
  out[0] = in[0]->View(result);
  return Status::Ok();
}

Status Transpose(const OpNode& node, const std::vector<const Tensor*>& in,
                 std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  RETURN_IF_ERROR(NoBytes(node, x));
  const int64_t rank = static_cast<int64_t>(x.shape().size());
  std::vector<int64_t> perm = node.AttrInts("perm");
  if (perm.empty())
    for (int64_t d = rank; d-- > 0;) perm.push_back(d);
  if (static_cast<int64_t>(perm.size()) != rank) return node.Error("perm does not match the rank");
  std::vector<bool> seen(perm.size(), false);
  std::vector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p]) return node.Error("perm is not a permutation");
    seen[p] = true;
    shape.push_back(x.shape()[p]);
  }
  out[0] = Tensor::Uninitialized(x.type(), shape);
  TransposeBytes(x.raw(), x.shape(), perm, DataTypeSize(x.type()), out[0].mutable_raw());
  return Status::Ok();
}

// Slice's starts, ends, axes and steps: attributes before opset 10, inputs from 10 on.
Status Slice(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, node.opset() < 10 ? 1 : 3));
  const Tensor& x = *in[0];
  RETURN_IF_ERROR(NoBytes(node, x));
  std::vector<int64_t> starts, ends, axes, steps;
  if (node.opset() < 10) {
    starts = node.AttrInts("starts");
    ends = node.AttrInts("ends");
    axes = node.AttrInts("axes");
  } else {
    ASSIGN_OR_RETURN(starts, IntValues(node, *in[1], "starts"));
    ASSIGN_OR_RETURN(ends, IntValues(node, *in[2], "ends"));
    if (in.size() > 3 && in[3] != nullptr) {
      ASSIGN_OR_RETURN(axes, IntValues(node, *in[3], "axes"));
    }
    if (in.size() > 4 && in[4] != nullptr) {
      ASSIGN_OR_RETURN(steps, IntValues(node, *in[4], "steps"));
    }
  }
  const int64_t rank = static_cast<int64_t>(x.shape().size());
  if (starts.size() != ends.size()) return node.Error("starts and ends differ in length");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    return node.Error("starts, ends, axes and steps differ in length");
  std::vector<int64_t> begin(rank, 0), step(rank, 1), shape = x.shape();
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = NormalizeAxis(axes[i], rank);
    if (axis < 0 || axis >= rank || seen[axis]) return node.Error("invalid or repeated axis");
    seen[axis] = true;
    if (steps[i] == 0) return node.Error("step 0");
    const int64_t dim = x.shape()[axis], s = steps[i];
    auto clamp = [dim](int64_t v, int64_t lo, int64_t hi) {
      if (v < 0) v = v < -dim ? lo - 1 : v + dim;  // (no overflow for INT64_MIN)
      return std::clamp(v, lo, hi);
    };
    const int64_t b = s > 0 ? clamp(starts[i], 0, dim) : clamp(starts[i], 0, dim - 1);
    const int64_t e = s > 0 ? clamp(ends[i], 0, dim) : clamp(ends[i], -1, dim - 1);
    // Counted without overflow: at most dim elements.
    int64_t count = 0;
    if (s > 0 && e > b) count = (e - b - 1) / s + 1;
    if (s < 0 && b > e) count = s == INT64_MIN ? 1 : (b - e - 1) / -s + 1;
    begin[axis] = b;
    step[axis] = s;
    shape[axis] = count;
  }
  out[0] = Tensor::Allocate(x.type(), shape);
  const size_t esize = DataTypeSize(x.type());
  std::vector<int64_t> in_stride(rank, 1);
  for (int64_t d = rank; d-- > 1;) in_stride[d - 1] = in_stride[d] * x.shape()[d];
  const int64_t total = out[0].elements();
  std::vector<int64_t> index(rank, 0);
  uint8_t* dst = out[0].mutable_raw();
  for (int64_t e = 0; e < total; ++e) {
    int64_t offset = 0;
    for (int64_t d = 0; d < rank; ++d) offset += (begin[d] + index[d] * step[d]) * in_stride[d];
    std::memcpy(dst + e * esize, x.raw() + offset * esize, esize);
    for (int64_t d = rank; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return Status::Ok();
}

Status Gather(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 2));
  const Tensor& x = *in[0];
  RETURN_IF_ERROR(NoBytes(node, x));
  const int64_t rank = static_cast<int64_t>(x.shape().size());
  const int64_t axis = NormalizeAxis(node.AttrInt("axis", 0), rank);
  if (axis < 0 || axis >= rank) return node.Error("axis out of range");
  const Tensor& idx = *in[1];
  std::vector<int64_t> indices(static_cast<size_t>(idx.elements()));
  if (idx.type() == DataType::kInt64)
    std::copy(idx.data<int64_t>(), idx.data<int64_t>() + idx.elements(), indices.begin());
  else if (idx.type() == DataType::kInt32)
    std::copy(idx.data<int32_t>(), idx.data<int32_t>() + idx.elements(), indices.begin());
  else
    return node.Error("indices must be INT64 or INT32");
  const int64_t dim = x.shape()[axis];
  for (int64_t& i : indices) {
    if (i < -dim || i >= dim)
      return node.Error("index " + std::to_string(i) + " is out of range for a dimension of " +
                        std::to_string(dim));
    if (i < 0) i += dim;
  }
  std::vector<int64_t> shape(x.shape().begin(), x.shape().begin() + axis);
  shape.insert(shape.end(), idx.shape().begin(), idx.shape().end());
  shape.insert(shape.end(), x.shape().begin() + axis + 1, x.shape().end());
  out[0] = Tensor::Allocate(x.type(), shape);
  const size_t chunk =
      static_cast<size_t>(Product(x.shape(), axis + 1, rank)) * DataTypeSize(x.type());
  const int64_t outer = Product(x.shape(), 0, axis);
  uint8_t* dst = out[0].mutable_raw();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i : indices) {
      std::memcpy(dst, x.raw() + (o * dim + i) * chunk, chunk);
      dst += chunk;
    }
  return Status::Ok();
}

Status Expand(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 2));
  const Tensor& x = *in[0];
  RETURN_IF_ERROR(NoBytes(node, x));
  ASSIGN_OR_RETURN(auto target, IntValues(node, *in[1], "shape"));
  ASSIGN_OR_RETURN(auto shape, BroadcastShape(node, x.shape(), target));
  RETURN_IF_ERROR(CheckOutputShape(node, shape, x.type()));
  out[0] = Tensor::Uninitialized(x.type(), shape);
  auto strides = BroadcastStrides(x.shape(), shape);
  CollapseDims(shape, {&strides});
  const size_t esize = DataTypeSize(x.type());
  const int64_t rank = static_cast<int64_t>(shape.size());
  // Rows of the last dimension: a copy of x's row (stride 1) or one element repeated (stride 0).
  const int64_t inner = rank ? shape[rank - 1] : 1;
  const int64_t inner_stride = rank ? strides[rank - 1] : 0;
  ForEachRow(shape, [&](int64_t row, const std::vector<int64_t>& index) {
    uint8_t* dst = out[0].mutable_raw() + row * inner * esize;
    const uint8_t* src = x.raw() + RowOffset(index, strides) * esize;
    if (inner_stride == 1) {
      std::memcpy(dst, src, static_cast<size_t>(inner) * esize);
      return;
    }
    // One element, then doubling copies of what is written.
    std::memcpy(dst, src, esize);
    for (int64_t done = 1; done < inner;) {
      const int64_t n = std::min(done, inner - done);
      std::memcpy(dst + done * esize, dst, static_cast<size_t>(n) * esize);
      done += n;
    }
  });
  return Status::Ok();
}

Status ConstantOfShape(const OpNode& node, const std::vector<const Tensor*>& in,
                       std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  ASSIGN_OR_RETURN(auto shape, IntValues(node, *in[0], "shape"));
  Tensor value = Tensor::Allocate(DataType::kFp32, {1});
  if (node.HasAttr("value")) {
    ASSIGN_OR_RETURN(value, node.AttrTensor("value"));
  }
  if (value.elements() != 1) return node.Error("value must hold one element");
  RETURN_IF_ERROR(NoBytes(node, value));
  RETURN_IF_ERROR(CheckOutputShape(node, shape, value.type()));
  out[0] = Tensor::Allocate(value.type(), shape);
  const size_t esize = DataTypeSize(value.type());
  for (int64_t e = 0; e < out[0].elements(); ++e)
    std::memcpy(out[0].mutable_raw() + e * esize, value.raw(), esize);
  return Status::Ok();
}

// Range(start, limit, delta): start, start + delta, ... while short of limit (scalars of one
// numeric type); count max(ceil((limit - start) / delta), 0). A zero, NaN or infinite step or
// bound is an error, and a count past the output limit is refused (CheckOutputShape).
Status Range(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 3));
  const DataType type = in[0]->type();
  for (const Tensor* t : in)
    if (t->type() != type || t->elements() != 1)
      return node.Error("start, limit and delta must be scalars of one type");
  return DispatchNumeric(node, type, [&](auto tag) -> Status {
    using T = decltype(tag);
    const T start = in[0]->data<T>()[0], limit = in[1]->data<T>()[0], delta = in[2]->data<T>()[0];
    const double span =
        (static_cast<double>(limit) - static_cast<double>(start)) / static_cast<double>(delta);
    if (delta == T(0) || !std::isfinite(span))
      return node.Error("the range from " + std::to_string(static_cast<double>(start)) + " to " +
                        std::to_string(static_cast<double>(limit)) + " by " +
                        std::to_string(static_cast<double>(delta)) + " has no finite count");
    const double count = std::max(std::ceil(span), 0.0);
    if (count > static_cast<double>(int64_t{1} << 40))
      return node.Error("the range has " + std::to_string(count) + " elements");
    const std::vector<int64_t> shape{static_cast<int64_t>(count)};
    RETURN_IF_ERROR(CheckOutputShape(node, shape, type));
    out[0] = Tensor::Uninitialized(type, shape);
    T* y = out[0].template mutable_data<T>();
    for (int64_t i = 0; i < shape[0]; ++i) y[i] = static_cast<T>(start + static_cast<T>(i) * delta);
    return Status::Ok();
  });
}

// Pad: 'pads' (begin for each axis, then end; negative crops) and the value as attributes before
// opset 11, inputs from 11 on (with the optional 'axes' of opset 18). Modes constant, reflect,
// edge.
Status Pad(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, node.opset() < 11 ? 1 : 2));
  const Tensor& x = *in[0];
  RETURN_IF_ERROR(NoBytes(node, x));
  const int64_t rank = static_cast<int64_t>(x.shape().size());
  const std::string mode = node.AttrString("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    return node.Refuse("mode '" + mode + "' is not supported (constant, reflect, edge)");
  std::vector<int64_t> pads;
  double value = 0.0;
  if (node.opset() < 11) {
    pads = node.AttrInts(node.opset() < 2 ? "paddings" : "pads");
    value = node.AttrFloat("value", 0.f);
  } else {
    ASSIGN_OR_RETURN(pads, IntValues(node, *in[1], "pads"));
    if (in.size() > 2 && in[2] != nullptr) {
      if (in[2]->elements() != 1 || in[2]->type() != x.type())
        return node.Error("constant_value must be one element of the input's type");
      value = ElementAsDouble(x.type(), in[2]->raw());
    }
    if (in.size() > 3 && in[3] != nullptr) {
      ASSIGN_OR_RETURN(auto axes, IntValues(node, *in[3], "axes"));
      if (pads.size() != 2 * axes.size()) return node.Error("pads must have 2 values per axis");
      std::vector<int64_t> full(2 * rank, 0);
      for (size_t i = 0; i < axes.size(); ++i) {
        const int64_t axis = NormalizeAxis(axes[i], rank);
        if (axis < 0 || axis >= rank) return node.Error("axis out of range");
        full[axis] = pads[i];
        full[axis + rank] = pads[i + axes.size()];
      }
      pads = full;
    }
  }
  if (static_cast<int64_t>(pads.size()) != 2 * rank)
    return node.Error("pads must have 2 x rank values");
  std::vector<int64_t> shape(rank);
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t dim = x.shape()[d];
    constexpr int64_t kLimit = int64_t{1} << 32;  // (compared, not abs(): INT64_MIN)
    if (pads[d] < -kLimit || pads[d] > kLimit || pads[d + rank] < -kLimit ||
        pads[d + rank] > kLimit)
      return node.Error("pads out of range");
    shape[d] = dim + pads[d] + pads[d + rank];
    if (shape[d] < 0) return node.Error("pads crop more than the input has");
    if (mode != "constant" && dim == 0 && shape[d] > 0)
      return node.Error("cannot pad an empty axis in mode " + mode);
    if (mode == "reflect" && (pads[d] >= dim || pads[d + rank] >= dim) && shape[d] > dim)
      return node.Refuse("reflect pads must be smaller than the axis");
  }
  RETURN_IF_ERROR(CheckOutputShape(node, shape, x.type()));
  Tensor y = Tensor::Allocate(x.type(), shape);
  const size_t esize = DataTypeSize(x.type());
  std::vector<uint8_t> fill(esize);
  RETURN_IF_ERROR(DispatchNumeric(node, x.type(), [&](auto tag) -> Status {
    const auto t = static_cast<decltype(tag)>(value);
    std::memcpy(fill.data(), &t, sizeof(t));
    return Status::Ok();
  }));
  std::vector<int64_t> in_stride(rank, 1);
  for (int64_t d = rank; d-- > 1;) in_stride[d - 1] = in_stride[d] * x.shape()[d];
  std::vector<int64_t> index(rank, 0);
  for (int64_t e = 0; e < y.elements(); ++e) {
    int64_t offset = 0;
    bool outside = false;
    for (int64_t d = 0; d < rank && !outside; ++d) {
      const int64_t dim = x.shape()[d];
      int64_t i = index[d] - pads[d];
      if (i < 0 || i >= dim) {
        if (mode == "constant") {
          outside = true;
        } else if (mode == "edge") {
          i = std::clamp<int64_t>(i, 0, dim - 1);
        } else {  // reflect, excluding the edge: -1 -> 1, dim -> dim - 2
          const int64_t period = dim == 1 ? 1 : 2 * (dim - 1);
          i = ((i % period) + period) % period;
          if (i >= dim) i = period - i;
        }
      }
      offset += i * in_stride[d];
    }
    std::memcpy(y.mutable_raw() + e * esize, outside ? fill.data() : x.raw() + offset * esize,
                esize);
    for (int64_t d = rank; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  out[0] = std::move(y);
  return Status::Ok();
}

Status Split(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  RETURN_IF_ERROR(NoBytes(node, x));
  const int64_t rank = static_cast<int64_t>(x.shape().size());
  const int64_t axis = NormalizeAxis(node.AttrInt("axis", 0), rank);
  if (axis < 0 || axis >= rank) return node.Error("axis out of range");
  std::vector<int64_t> sizes;
  if (node.opset() < 13) {
    sizes = node.AttrInts("split");
  } else if (in.size() > 1 && in[1] != nullptr) {
    ASSIGN_OR_RETURN(sizes, IntValues(node, *in[1], "split"));
  }
  const int64_t dim = x.shape()[axis], parts = static_cast<int64_t>(out.size());
  if (sizes.empty()) {
    const int64_t each = (dim + parts - 1) / std::max<int64_t>(parts, 1);
    for (int64_t p = 0, left = dim; p < parts; ++p, left -= each)
      sizes.push_back(std::clamp<int64_t>(left, 0, each));
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0 || s > dim) return node.Error("split size " + std::to_string(s) + " out of range");
    total += s;  // (at most 65536 sizes of at most dim each: no overflow)
  }
  if (static_cast<int64_t>(sizes.size()) != parts || total != dim)
    return node.Error("split sizes do not add up to the axis");
  const int64_t outer = Product(x.shape(), 0, axis);
  const size_t inner =
      static_cast<size_t>(Product(x.shape(), axis + 1, rank)) * DataTypeSize(x.type());
  int64_t at = 0;
  for (int64_t p = 0; p < parts; ++p) {
    std::vector<int64_t> shape = x.shape();
    shape[axis] = sizes[p];
    out[p] = Tensor::Allocate(x.type(), shape);
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(out[p].mutable_raw() + o * sizes[p] * inner, x.raw() + (o * dim + at) * inner,
                  sizes[p] * inner);
    at += sizes[p];
  }
  return Status::Ok();
}

}  // namespace

std::vector<OpDef> ShapeOps() {
  return {{"Identity", Identity},
          {"Reshape", Reshape},
          {"Flatten", Flatten},
          {"Squeeze", Squeeze},
          {"Unsqueeze", Unsqueeze},
          {"Concat", Concat},
          {"Transpose", Transpose},
          {"Slice", Slice},
          {"Gather", Gather},
          {"Pad", Pad},
          {"Expand", Expand},
          {"Split", Split, nullptr, 1 << 16},
          {"Shape", Shape},
          {"Size", Size},
          {"ConstantOfShape", ConstantOfShape},
          {"Range", Range},
          {"Constant", Constant},
          {"Cast", Cast}};
}

}  // namespace nereid::native
