// Matrix products: MatMul (any batch broadcast, every numeric type) and Gemm (FP32), on the CPU
// SGEMM with weights packed at load (OpNode::packed_b) or quantized to int8 (packed_int8).
#include "cpu/gemm.h"

#include <cstring>
#include <type_traits>

#include "cpu/elementwise.h"
#include "cpu/gemm_int8.h"
#include "cpu/parallel.h"
#include "ops/op.h"

namespace nereid::native {

kernels::GemmEpilogue EpilogueOf(const OpNode& node) {
  using A = OpNode::Activation;
  using E = kernels::GemmEpilogue;
  kernels::GemmEpilogue ep;
  switch (node.activation) {
    case A::kRelu:
      ep.activation = E::kRelu;
      break;
    case A::kClip:
      ep.activation = E::kClip;
      break;
    case A::kLeakyRelu:
      ep.activation = E::kLeakyRelu;
      break;
    case A::kHardSigmoid:
      ep.activation = E::kHardSigmoid;
      break;
    case A::kHardSwish:
      ep.activation = E::kHardSwish;
      break;
    case A::kGelu:
      ep.activation = E::kGelu;
      break;
    case A::kNone:
    case A::kSigmoid:  // (Gemm only: applied by ApplyActivation)
      break;
  }
  ep.lo = node.activation_a, ep.hi = node.activation_b;
  return ep;
}

void ApplyActivation(const OpNode& node, float* y, int64_t n) {
  if (node.activation == OpNode::Activation::kSigmoid) return kernels::Sigmoid(y, y, n);
  if (node.activation == OpNode::Activation::kRelu) return kernels::Relu(y, y, n);
  kernels::ActivateEpilogueRow(y, n, EpilogueOf(node));
}

namespace {

template <typename T>
void NaiveMatMul(int64_t m, int64_t n, int64_t k, const T* a, const T* b, T* c) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      T sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += a[i * k + p] * b[p * n + j];
      c[i * n + j] = sum;
    }
}

// y + bias, then + residual, by the Add op itself (numpy broadcasting, a widening shape
// included), where the fused epilogue does not take them (FuseMatMulEpilogues).
Status AddEpilogue(const OpNode& node, const Tensor* bias, const Tensor* residual, Tensor& y) {
  const OpFn add = FindOp("Add");
  std::vector<Tensor> sum(1);
  for (const Tensor* term : {bias, residual}) {
    if (term == nullptr) continue;
    RETURN_IF_ERROR(add(node, {&y, term}, sum));
    y = std::move(sum[0]);
  }
  return Status::Ok();
}

Status MatMul(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 2));
  const Tensor& a = *in[0];
  const Tensor& b = *in[1];
  // Fused by the graph's passes: a bias of B's columns and a residual, added to the product.
  const Tensor* bias = in.size() > 2 ? in[2] : nullptr;
  const Tensor* residual = in.size() > 3 ? in[3] : nullptr;
  if ((bias && bias->type() != a.type()) || (residual && residual->type() != a.type()))
    return node.Error("the fused bias and residual must be of the product's type");
  if (a.type() != b.type()) return node.Error("input types differ");
  if (a.shape().empty() || b.shape().empty()) return node.Error("inputs must have rank >= 1");
  std::vector<int64_t> sa = a.shape(), sb = b.shape();
  const bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
  if (a_vec) sa.insert(sa.begin(), 1);
  if (b_vec) sb.push_back(1);
  const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  if (sb[sb.size() - 2] != k)
    return node.Error("cannot multiply " + ShapeString(a.shape()) + " by " +
                      ShapeString(b.shape()));
  std::vector<int64_t> ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  ASSIGN_OR_RETURN(auto batch, BroadcastShape(node, ba, bb));
  std::vector<int64_t> shape = batch;
  if (!a_vec) shape.push_back(m);
  if (!b_vec) shape.push_back(n);
  // Every path writes every element (a product over k = 0 is zeros: allocated zeroed).
  out[0] = k == 0 ? Tensor::Allocate(a.type(), shape) : Tensor::Uninitialized(a.type(), shape);
  int64_t batches = Product(batch, 0, batch.size());
  // One matrix B for every batch (a weight): the batches' rows are one product of batches * m
  // rows (A and Y are contiguous in that order), one call the kernels split as they choose.
  const bool one_b = bb.empty() && !b_vec && !a_vec;
  const int64_t rows = one_b ? batches * m : m;
  if (one_b) {
    batch.clear();
    ba.clear();
    batches = 1;
  }
  const auto stride_a = BroadcastStrides(ba, batch), stride_b = BroadcastStrides(bb, batch);
  // The fused epilogue, while each tile is in cache: one product over every row by packed
  // weights, the residual exactly of the output's shape.
  const bool activated = node.activation != OpNode::Activation::kNone;
  const bool fused = a.type() == DataType::kFp32 && one_b && (bias || residual || activated) &&
                     (node.packed_int8 != nullptr || node.packed_b != nullptr) &&
                     (!bias || (bias->elements() == n && bias->shape().size() <= shape.size())) &&
                     (!residual || residual->shape() == shape);
  if (fused) {
    const float* pa = a.data<float>();
    float* pc = out[0].mutable_data<float>();
    kernels::GemmEpilogue ep = EpilogueOf(node);
    ep.bias = bias ? bias->data<float>() : nullptr;
    ep.residual = residual ? residual->data<float>() : nullptr;
    ep.ld_residual = n;
    if (node.packed_int8 != nullptr) {
      kernels::GemmInt8Fused(rows, pa, k, *node.packed_int8, pc, n, ep);
    } else {
      kernels::SgemmPackedFused(
          rows,
          [pa, k](int64_t i0, int64_t, int64_t p0, int64_t, float*, int64_t* lda) {
            *lda = k;
            return pa + i0 * k + p0;
          },
          *node.packed_b, pc, n, ep);
    }
    return Status::Ok();
  }
  return DispatchNumeric(node, a.type(), [&](auto tag) -> Status {
    using T = decltype(tag);
    // One product per batch index; several (attention's batch x heads) run side by side over the
    // thread team, each product then on one thread.
    auto product = [&](int64_t bi) {
      int64_t oa = 0, ob = 0;
      for (size_t d = batch.size(), rest = bi; d-- > 0;) {
        const int64_t i = static_cast<int64_t>(rest) % batch[d];
        rest /= batch[d];
        oa += i * stride_a[d];
        ob += i * stride_b[d];
      }
      const T* pa = a.data<T>() + oa * rows * k;
      T* pc = out[0].mutable_data<T>() + bi * rows * n;
      // Packed constant weights: their original bytes may be gone (the graph keeps only the
      // packed copy), so 'b' is read only on the other paths.
      if constexpr (std::is_same_v<T, float>) {
        if (node.packed_int8 != nullptr && !b_vec)
          kernels::GemmInt8(rows, pa, k, *node.packed_int8, nullptr, pc, n);
        else if (node.packed_b != nullptr && !b_vec)
          kernels::SgemmPacked(false, rows, 1.f, pa, k, *node.packed_b, 0.f, pc, n);
        else
          kernels::Sgemm(false, false, rows, n, k, 1.f, pa, k, b.data<T>() + ob * k * n, n, 0.f, pc,
                         n);
      } else {
        NaiveMatMul<T>(rows, n, k, pa, b.data<T>() + ob * k * n, pc);
      }
    };
    if (batches == 1)
      product(0);
    else
      kernels::ParallelForWork(batches, batches * rows * n * k, product);
    if constexpr (std::is_same_v<T, float>) {
      RETURN_IF_ERROR(AddEpilogue(node, bias, residual, out[0]));
      if (activated) ApplyActivation(node, out[0].mutable_data<float>(), out[0].elements());
      return Status::Ok();
    }
    if (bias || residual || activated)
      return node.Error("a fused bias, residual or activation needs FP32");
    return Status::Ok();
  });
}

Status Gemm(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 2));
  const Tensor& a = *in[0];
  const Tensor& b = *in[1];
  const Tensor* c = in.size() > 2 ? in[2] : nullptr;
  if (a.shape().size() != 2 || b.shape().size() != 2) return node.Error("A and B must be 2-D");
  if (a.type() != DataType::kFp32 || b.type() != DataType::kFp32 ||
      (c && c->type() != DataType::kFp32))
    return node.Error("only FP32 is supported");
  const bool ta = node.AttrInt("transA", 0) != 0, tb = node.AttrInt("transB", 0) != 0;
  const float alpha = node.AttrFloat("alpha", 1.f), beta = node.AttrFloat("beta", 1.f);
  const int64_t m = ta ? a.shape()[1] : a.shape()[0];
  const int64_t k = ta ? a.shape()[0] : a.shape()[1];
  const int64_t kb = tb ? b.shape()[1] : b.shape()[0];
  const int64_t n = tb ? b.shape()[0] : b.shape()[1];
  if (k != kb)
    return node.Error("cannot multiply " + ShapeString(a.shape()) + " by " +
                      ShapeString(b.shape()));
  out[0] = Tensor::Allocate(DataType::kFp32, {m, n});
  float* y = out[0].mutable_data<float>();
  float gemm_beta = 0.f;
  if (c != nullptr && beta != 0.f) {
    ASSIGN_OR_RETURN(auto cs, BroadcastShape(node, c->shape(), {m, n}));
    if (cs != std::vector<int64_t>{m, n}) return node.Error("C does not broadcast to [M, N]");
    const auto strides = BroadcastStrides(c->shape(), {m, n});
    const float* pc = c->data<float>();
    if (strides[0] == 0 && strides[1] == 1 && beta == 1.f) {
      // A bias row (the common case): row copies.
      for (int64_t i = 0; i < m; ++i) std::memcpy(y + i * n, pc, static_cast<size_t>(n) * 4);
    } else {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) y[i * n + j] = beta * pc[i * strides[0] + j * strides[1]];
    }
    gemm_beta = 1.f;
  }
  if (node.packed_int8 != nullptr)  // (never with transA)
    kernels::GemmInt8(m, a.data<float>(), a.shape()[1], *node.packed_int8, nullptr, y, n, alpha,
                      gemm_beta != 0.f);
  else if (node.packed_b != nullptr)  // the original bytes of packed weights may be gone
    kernels::SgemmPacked(ta, m, alpha, a.data<float>(), a.shape()[1], *node.packed_b, gemm_beta, y,
                         n);
  else
    kernels::Sgemm(ta, tb, m, n, k, alpha, a.data<float>(), a.shape()[1], b.data<float>(),
                   b.shape()[1], gemm_beta, y, n);
  ApplyActivation(node, y, m * n);
  return Status::Ok();
}

}  // namespace

std::vector<OpDef> GemmOps() { return {{"MatMul", MatMul}, {"Gemm", Gemm}}; }

}  // namespace nereid::native
