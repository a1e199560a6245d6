// Attention as transformer encoders export it, fused by the graph's passes (FuseAttention):
// MatMul(Q, Kt) -> Div (or Mul) by a constant -> Add(mask) -> Softmax(last axis) -> MatMul(., V)
// in one node. Per batch x head, one block of scores (queries x keys) lives in the thread's scratch
// (48-64 KiB at 128 tokens, in cache) from its product to the product with V: the scores tensor
// of every head is never written out, and the scale, mask and softmax touch each score once, in
// the graph's own order of operations (the same arithmetic as the nodes it replaces). Shapes the
// kernel does not take (batch dims that differ, a mask that widens the scores) run the nodes'
// own ops one after another.
#include "cpu/attention.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/elementwise.h"
#include "cpu/gemm.h"
#include "cpu/parallel.h"
#include "ops/op.h"

namespace nereid::native {
namespace {

// The nodes' ops in turn: MatMul, Div/Mul, Add, Softmax, MatMul.
Status AttentionUnfused(const OpNode& node, const std::vector<const Tensor*>& in,
                        std::vector<Tensor>& out, bool divide) {
  std::vector<Tensor> t(1);
  RETURN_IF_ERROR(FindOp("MatMul")(node, {in[0], in[1]}, t));
  Tensor scores = std::move(t[0]);
  RETURN_IF_ERROR(FindOp(divide ? "Div" : "Mul")(node, {&scores, in[2]}, t));
  scores = std::move(t[0]);
  if (in[3] != nullptr) {
    RETURN_IF_ERROR(FindOp("Add")(node, {&scores, in[3]}, t));
    scores = std::move(t[0]);
  }
  RETURN_IF_ERROR(FindOp("Softmax")(node, {&scores}, t));
  scores = std::move(t[0]);
  return FindOp("MatMul")(node, {&scores, in[4]}, out);
}

}  // namespace

// Inputs: Q [..., S, D], Kt [..., D, T], the scale (one FP32 value), the mask (broadcasting to
// [..., S, T]; absent: none), V [..., T, Dv]; attribute "divide" (1: scores / scale, 0: * scale).
Status Attention(const OpNode& node, const std::vector<const Tensor*>& in,
                 std::vector<Tensor>& out) {
  if (in.size() != 5 || !in[0] || !in[1] || !in[2] || !in[4])
    return node.Error("attention needs Q, Kt, the scale and V");
  const Tensor &q = *in[0], &kt = *in[1], &scale = *in[2], &v = *in[4];
  const Tensor* mask = in[3];
  const bool divide = node.AttrInt("divide", 1) != 0;
  const auto& sq = q.shape();
  const size_t rank = sq.size();
  const bool fits = rank >= 2 && kt.shape().size() == rank && v.shape().size() == rank &&
                    q.type() == DataType::kFp32 && kt.type() == DataType::kFp32 &&
                    v.type() == DataType::kFp32 && scale.type() == DataType::kFp32 &&
                    scale.elements() == 1 &&
                    std::equal(sq.begin(), sq.end() - 2, kt.shape().begin()) &&
                    std::equal(sq.begin(), sq.end() - 2, v.shape().begin()) &&
                    kt.shape()[rank - 2] == sq.back() && v.shape()[rank - 2] == kt.shape().back() &&
                    (!mask || mask->type() == DataType::kFp32);
  if (!fits) return AttentionUnfused(node, in, out, divide);
  const int64_t s = sq[rank - 2], d = sq[rank - 1], t = kt.shape()[rank - 1],
                dv = v.shape()[rank - 1];
  std::vector<int64_t> scores_shape(sq.begin(), sq.end() - 1);
  scores_shape.push_back(t);
  std::vector<int64_t> mask_strides;
  if (mask != nullptr) {
    ASSIGN_OR_RETURN(auto widened, BroadcastShape(node, scores_shape, mask->shape()));
    if (widened != scores_shape) return AttentionUnfused(node, in, out, divide);
    mask_strides = BroadcastStrides(mask->shape(), scores_shape);
  }
  std::vector<int64_t> shape(sq.begin(), sq.end() - 1);
  shape.push_back(dv);
  RETURN_IF_ERROR(CheckOutputShape(node, shape, DataType::kFp32));
  out[0] = Tensor::Uninitialized(DataType::kFp32, shape);
  const int64_t heads = Product(sq, 0, rank - 2);  // (batch x heads: the dims before S, D)
  const float c = scale.data<float>()[0];
  const float* pq = q.data<float>();
  const float* pk = kt.data<float>();
  const float* pv = v.data<float>();
  float* py = out[0].mutable_data<float>();
  kernels::ParallelForWork(heads, heads * s * t * (d + dv), [&](int64_t h) {
    thread_local kernels::Scratch<float> scratch;
    float* p = scratch.Get(static_cast<size_t>(s * t));
    if (!kernels::AttentionHeadProduct(pq + h * s * d, s, d, pk + h * d * t, t, p))
      kernels::Sgemm(false, false, s, t, d, 1.f, pq + h * s * d, d, pk + h * d * t, t, 0.f, p, t);
    // The mask's offset of this head's first score: the batch dims of index h.
    int64_t mask_base = 0;
    if (mask != nullptr)
      for (size_t dim = rank - 2, rest = h; dim-- > 0;) {
        mask_base += static_cast<int64_t>(rest % scores_shape[dim]) * mask_strides[dim];
        rest /= scores_shape[dim];
      }
    for (int64_t r = 0; r < s; ++r) {
      float* row = p + r * t;
      if (divide)
        for (int64_t j = 0; j < t; ++j) row[j] = row[j] / c;
      else
        for (int64_t j = 0; j < t; ++j) row[j] = row[j] * c;
      if (mask != nullptr) {
        const float* m = mask->data<float>() + mask_base + r * mask_strides[rank - 2];
        const int64_t step = mask_strides[rank - 1];
        for (int64_t j = 0; j < t; ++j) row[j] += m[j * step];
      }
      kernels::Softmax(row, row, 1, t, 1);
    }
    if (!kernels::AttentionHeadProduct(p, s, t, pv + h * t * dv, dv, py + h * s * dv))
      kernels::Sgemm(false, false, s, dv, t, 1.f, p, t, pv + h * t * dv, dv, 0.f, py + h * s * dv,
                     dv);
  });
  return Status::Ok();
}

}  // namespace nereid::native
