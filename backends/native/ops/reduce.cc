// Reductions and normalising maps: Softmax, LogSoftmax, ArgMax, ArgMin, ReduceMean, ReduceSum,
// ReduceMax, ReduceMin.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/elementwise.h"
#include "cpu/parallel.h"
#include "ops/op.h"

namespace nereid::native {
namespace {

Status Softmax(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  if (x.type() != DataType::kFp32) return node.Error("only FP32 is supported");
  const int64_t rank = static_cast<int64_t>(x.shape().size());
  const bool legacy = node.opset() < 13;  // before opset 13: coerce to 2-D at 'axis' (default 1)
  const int64_t axis = NormalizeAxis(node.AttrInt("axis", legacy ? 1 : -1), rank);
  if (axis < 0 || axis >= std::max<int64_t>(rank, 1)) return node.Error("axis out of range");
  out[0] = Tensor::Uninitialized(x.type(), x.shape());
  if (rank == 0) {
    out[0].mutable_data<float>()[0] = 1.f;
    return Status::Ok();
  }
  const auto& s = x.shape();
  const int64_t outer = Product(s, 0, axis);
  const int64_t size = legacy ? Product(s, axis, s.size()) : s[axis];
  const int64_t inner = legacy ? 1 : Product(s, axis + 1, s.size());
  // Slices of 'outer' in pieces over the thread team (attention: batch x heads x tokens rows).
  const float* px = x.data<float>();
  float* py = out[0].mutable_data<float>();
  const int64_t pieces = std::min<int64_t>(outer, 64);
  kernels::ParallelForWork(pieces, x.elements(), [&](int64_t p) {
    const int64_t first = outer * p / pieces, last = outer * (p + 1) / pieces;
    const int64_t offset = first * size * inner;
    kernels::Softmax(px + offset, py + offset, last - first, size, inner);
  });
  return Status::Ok();
}

Status LogSoftmax(const OpNode& node, const std::vector<const Tensor*>& in,
                  std::vector<Tensor>& out) {
  RETURN_IF_ERROR(Softmax(node, in, out));
  float* y = out[0].mutable_data<float>();
  // log(softmax) loses precision where softmax underflows: recomputed from the inputs there.
  const float* x = in[0]->data<float>();
  const auto& s = in[0]->shape();
  const int64_t rank = static_cast<int64_t>(s.size());
  if (rank == 0) {
    y[0] = 0.f;
    return Status::Ok();
  }
  const bool legacy = node.opset() < 13;
  const int64_t axis = NormalizeAxis(node.AttrInt("axis", legacy ? 1 : -1), rank);
  const int64_t outer = Product(s, 0, axis);
  const int64_t len = legacy ? Product(s, axis, s.size()) : s[axis];
  const int64_t inner = legacy ? 1 : Product(s, axis + 1, s.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const float* xs = x + o * len * inner + i;
      float* ys = y + o * len * inner + i;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t a = 0; a < len; ++a) m = std::max(m, xs[a * inner]);
      double sum = 0;
      for (int64_t a = 0; a < len; ++a) sum += std::exp(static_cast<double>(xs[a * inner] - m));
      const float lse = m + static_cast<float>(std::log(sum));
      for (int64_t a = 0; a < len; ++a) ys[a * inner] = xs[a * inner] - lse;
    }
  return Status::Ok();
}

template <bool kMax>
Status ArgExtreme(const OpNode& node, const std::vector<const Tensor*>& in,
                  std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  const int64_t rank = static_cast<int64_t>(x.shape().size());
  const int64_t axis = NormalizeAxis(node.AttrInt("axis", 0), rank);
  if (axis < 0 || axis >= rank) return node.Error("axis out of range");
  const bool keepdims = node.AttrInt("keepdims", 1) != 0;
  const bool last = node.AttrInt("select_last_index", 0) != 0;
  std::vector<int64_t> shape = x.shape();
  if (keepdims)
    shape[axis] = 1;
  else
    shape.erase(shape.begin() + axis);
  out[0] = Tensor::Allocate(DataType::kInt64, shape);
  const int64_t outer = Product(x.shape(), 0, axis), len = x.shape()[axis];
  const int64_t inner = Product(x.shape(), axis + 1, rank);
  int64_t* y = out[0].mutable_data<int64_t>();
  return DispatchNumeric(node, x.type(), [&](auto tag) -> Status {
    using T = decltype(tag);
    const T* px = x.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t best = 0;
        T best_v = px[o * len * inner + i];
        for (int64_t a = 1; a < len; ++a) {
          const T v = px[(o * len + a) * inner + i];
          if ((kMax ? v > best_v : v < best_v) || (last && v == best_v)) {
            best_v = v;
            best = a;
          }
        }
        y[o * inner + i] = best;
      }
    return Status::Ok();
  });
}

enum class Reduction { kMean, kSum, kMax, kMin };

// The reduce ops: axes an attribute, or (ReduceSum from opset 13, the others from 18) an optional
// input; no axes reduces all of them unless noop_with_empty_axes.
template <Reduction kOp>
Status Reduce(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  const int64_t rank = static_cast<int64_t>(x.shape().size());
  std::vector<int64_t> axes = node.AttrInts("axes");
  if (in.size() > 1 && in[1] != nullptr) {
    ASSIGN_OR_RETURN(axes, IntValues(node, *in[1], "axes"));
  }
  const bool keepdims = node.AttrInt("keepdims", 1) != 0;
  if (axes.empty() && node.AttrInt("noop_with_empty_axes", 0) != 0) {
    out[0] = x;
    return Status::Ok();
  }
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) {
    const int64_t axis = NormalizeAxis(a, rank);
    if (axis < 0 || axis >= rank) return node.Error("axis out of range");
    reduced[axis] = true;
  }
  std::vector<int64_t> shape, kept_shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[d]) shape.push_back(x.shape()[d]);
    if (keepdims) kept_shape.push_back(reduced[d] ? 1 : x.shape()[d]);
  }
  Tensor y = Tensor::Allocate(x.type(), keepdims ? kept_shape : shape);
  // Each output element's input offset base, then the reduced offsets: two odometers.
  std::vector<int64_t> stride(rank, 1);
  for (int64_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * x.shape()[d];
  std::vector<int64_t> kept_dims, red_dims;
  for (int64_t d = 0; d < rank; ++d) (reduced[d] ? red_dims : kept_dims).push_back(d);
  std::vector<int64_t> red_offsets{0};
  for (int64_t d : red_dims) {
    std::vector<int64_t> next;
    for (int64_t base : red_offsets)
      for (int64_t i = 0; i < x.shape()[d]; ++i) next.push_back(base + i * stride[d]);
    red_offsets.swap(next);
  }
  const int64_t count = static_cast<int64_t>(red_offsets.size());
  if (count == 0 && (kOp == Reduction::kMax || kOp == Reduction::kMin || kOp == Reduction::kMean))
    return node.Error("reduces an empty axis");
  RETURN_IF_ERROR(DispatchNumeric(node, x.type(), [&](auto tag) -> Status {
    using T = decltype(tag);
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    std::vector<int64_t> index(kept_dims.size(), 0);
    for (int64_t e = 0; e < y.elements(); ++e) {
      int64_t base = 0;
      for (size_t k = 0; k < kept_dims.size(); ++k) base += index[k] * stride[kept_dims[k]];
      Acc acc = count ? static_cast<Acc>(px[base + red_offsets[0]]) : Acc(0);
      for (int64_t r = 1; r < count; ++r) {
        const Acc v = static_cast<Acc>(px[base + red_offsets[r]]);
        if constexpr (kOp == Reduction::kMax)
          acc = v != v || v > acc ? v : acc;
        else if constexpr (kOp == Reduction::kMin)
          acc = v != v || v < acc ? v : acc;
        else
          acc += v;
      }
      if constexpr (kOp == Reduction::kMean) acc = static_cast<Acc>(acc / static_cast<Acc>(count));
      py[e] = static_cast<T>(acc);
      for (size_t k = kept_dims.size(); k-- > 0;) {
        if (++index[k] < x.shape()[kept_dims[k]]) break;
        index[k] = 0;
      }
    }
    return Status::Ok();
  }));
  out[0] = std::move(y);
  return Status::Ok();
}

}  // namespace

std::vector<OpDef> ReduceOps() {
  return {{"Softmax", Softmax},
          {"LogSoftmax", LogSoftmax},
          {"ArgMax", ArgExtreme<true>},
          {"ArgMin", ArgExtreme<false>},
          {"ReduceMean", Reduce<Reduction::kMean>},
          {"ReduceSum", Reduce<Reduction::kSum>},
          {"ReduceMax", Reduce<Reduction::kMax>},
          {"ReduceMin", Reduce<Reduction::kMin>}};
}

}  // namespace nereid::native
