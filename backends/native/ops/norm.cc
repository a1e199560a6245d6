// The normalisation family: BatchNormalization (inference form; the graph's passes fold it into a
// preceding Conv), InstanceNormalization, LayerNormalization (also what the graph's passes make of
// its primitive form), LRN, and Dropout (the identity at inference).
#include <algorithm>
#include <cmath>

#include "cpu/parallel.h"
#include "ops/op.h"

namespace nereid::native {
namespace {

Status CheckBatchNorm(const OpNode& node, const std::vector<const Tensor*>&) {
  if (node.AttrInt("training_mode", 0) != 0)
    return node.Refuse("training_mode 1 is not supported (inference only)");
  return Status::Ok();
}

// y = (x - mean) / sqrt(var + epsilon) * scale + bias, per channel (axis 1, or the last axis in
// channels-last form).
Status BatchNormalization(const OpNode& node, const std::vector<const Tensor*>& in,
                          std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 5));
  RETURN_IF_ERROR(CheckBatchNorm(node, {}));
  if (out.size() > 1) return node.Refuse("the training outputs (mean, var) are not supported");
  const Tensor& x = *in[0];
  RETURN_IF_ERROR(RequireFloat(node, x));
  if (x.shape().size() < 2) return node.Error("input must have rank 2 or more");
  const int64_t c = node.nhwc ? x.shape().back() : x.shape()[1];
  for (int i = 1; i < 5; ++i) {
    RETURN_IF_ERROR(RequireFloat(node, *in[i]));
    if (in[i]->elements() != c)
      return node.Error("scale, B, mean and var must have " + std::to_string(c) + " values");
  }
  const float eps = node.AttrFloat("epsilon", 1e-5f);
  std::vector<float> scale(c), shift(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    scale[ch] = in[1]->data<float>()[ch] / std::sqrt(in[4]->data<float>()[ch] + eps);
    shift[ch] = in[2]->data<float>()[ch] - in[3]->data<float>()[ch] * scale[ch];
  }
  Tensor y = Tensor::Allocate(DataType::kFp32, x.shape());
  const float* px = x.data<float>();
  float* py = y.mutable_data<float>();
  const int64_t n = x.shape()[0];
  const int64_t inner = x.elements() / std::max<int64_t>(n * c, 1);
  if (node.nhwc) {
    for (int64_t p = 0; p < n * inner; ++p)
      for (int64_t ch = 0; ch < c; ++ch) py[p * c + ch] = px[p * c + ch] * scale[ch] + shift[ch];
  } else {
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch) {
        const int64_t base = (b * c + ch) * inner;
        for (int64_t i = 0; i < inner; ++i) py[base + i] = px[base + i] * scale[ch] + shift[ch];
      }
  }
  out[0] = std::move(y);
  return Status::Ok();
}

// y = (x - mean) / sqrt(var + epsilon) * scale + B, mean and var over each plane (NCHW).
Status InstanceNormalization(const OpNode& node, const std::vector<const Tensor*>& in,
                             std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 3));
  const Tensor& x = *in[0];
  RETURN_IF_ERROR(RequireFloat(node, x));
  if (node.nhwc) return Internal("InstanceNormalization has no channels-last form");
  if (x.shape().size() < 3) return node.Error("input must have rank 3 or more");
  const int64_t n = x.shape()[0], c = x.shape()[1];
  if (in[1]->elements() != c || in[2]->elements() != c || in[1]->type() != DataType::kFp32 ||
      in[2]->type() != DataType::kFp32)
    return node.Error("scale and B must have " + std::to_string(c) + " FP32 values");
  const int64_t inner = x.elements() / std::max<int64_t>(n * c, 1);
  const float eps = node.AttrFloat("epsilon", 1e-5f);
  Tensor y = Tensor::Allocate(DataType::kFp32, x.shape());
  for (int64_t p = 0; p < n * c; ++p) {
    const float* px = x.data<float>() + p * inner;
    float* py = y.mutable_data<float>() + p * inner;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < inner; ++i) mean += px[i];
    mean /= static_cast<double>(std::max<int64_t>(inner, 1));
    for (int64_t i = 0; i < inner; ++i) var += (px[i] - mean) * (px[i] - mean);
    var /= static_cast<double>(std::max<int64_t>(inner, 1));
    const float s = in[1]->data<float>()[p % c] / static_cast<float>(std::sqrt(var + eps));
    const float b = in[2]->data<float>()[p % c];
    for (int64_t i = 0; i < inner; ++i) py[i] = static_cast<float>(px[i] - mean) * s + b;
  }
  out[0] = std::move(y);
  return Status::Ok();
}

Status CheckLayerNorm(const OpNode& node, const std::vector<const Tensor*>&) {
  if (node.AttrInt("stash_type", 1) != 1)
    return node.Refuse("stash_type " + std::to_string(node.AttrInt("stash_type", 1)) +
                       " is not supported (FP32 statistics only)");
  const float eps = node.AttrFloat("epsilon", 1e-5f);
  if (!(eps >= 0.f) || std::isinf(eps)) return node.Error("epsilon must be finite and >= 0");
  return Status::Ok();
}

// y = (x - mean) / sqrt(var + epsilon) * scale + B over the dims from 'axis' on, the statistics in
// double; outputs 1 and 2 (optional) the mean and 1 / sqrt(var + epsilon) with those dims kept as
// 1. Scale and B hold one value per normalised element or one in all; the passes' fused form may
// omit Scale (ones).
// The sum of x[0..n), or with 'squares' of (x[i] - center)^2 (the variance's numerator), in 16
// float lanes the compiler keeps in vectors, each of n / 16 terms, added up in double.
double LaneSum(const float* x, int64_t n, bool squares, float center = 0.f) {
  constexpr int kLanes = 16;
  float lanes[kLanes] = {};
  int64_t i = 0;
  if (squares) {
    for (; i + kLanes <= n; i += kLanes)
      for (int l = 0; l < kLanes; ++l) lanes[l] += (x[i + l] - center) * (x[i + l] - center);
  } else {
    for (; i + kLanes <= n; i += kLanes)
      for (int l = 0; l < kLanes; ++l) lanes[l] += x[i + l];
  }
  double sum = 0;
  for (float v : lanes) sum += v;
  for (; i < n; ++i) sum += squares ? double(x[i] - center) * (x[i] - center) : double(x[i]);
  return sum;
}

Status LayerNormalization(const OpNode& node, const std::vector<const Tensor*>& in,
                          std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  RETURN_IF_ERROR(CheckLayerNorm(node, {}));
  const Tensor& x = *in[0];
  RETURN_IF_ERROR(RequireFloat(node, x));
  const int64_t rank = static_cast<int64_t>(x.shape().size());
  const int64_t axis = NormalizeAxis(node.AttrInt("axis", -1), rank);
  if (rank == 0 || axis < 0 || axis >= rank)
    return node.Error("axis " + std::to_string(node.AttrInt("axis", -1)) +
                      " is out of range for rank " + std::to_string(rank));
  const int64_t inner = Product(x.shape(), axis, rank);
  const int64_t rows = inner == 0 ? 0 : x.elements() / inner;
  const float* param[2] = {nullptr, nullptr};
  bool one[2] = {false, false};
  for (int k = 0; k < 2; ++k) {
    const Tensor* t = in.size() > static_cast<size_t>(k + 1) ? in[k + 1] : nullptr;
    if (t == nullptr) continue;
    RETURN_IF_ERROR(RequireFloat(node, *t));
    if (t->elements() != inner && t->elements() != 1)
      return node.Error(std::string(k == 0 ? "Scale" : "B") + " must have " +
                        std::to_string(inner) + " values (or one), got " +
                        std::to_string(t->elements()));
    param[k] = t->data<float>();
    one[k] = t->elements() == 1 && inner != 1;
  }
  Tensor y = Tensor::Uninitialized(DataType::kFp32, x.shape());
  std::vector<int64_t> stat_shape = x.shape();
  for (int64_t d = axis; d < rank; ++d) stat_shape[d] = 1;
  Tensor mean_out, inv_out;
  if (out.size() > 1) mean_out = Tensor::Allocate(DataType::kFp32, stat_shape);
  if (out.size() > 2) inv_out = Tensor::Allocate(DataType::kFp32, stat_shape);
  const float eps = node.AttrFloat("epsilon", 1e-5f);
  const bool full_scale = param[0] != nullptr && !one[0];
  const bool full_bias = param[1] != nullptr && !one[1];
  const float* px = x.data<float>();
  float* py = y.mutable_data<float>();
  kernels::ParallelForWork(rows, rows * inner, [&](int64_t r) {
    const float* xr = px + r * inner;
    float* yr = py + r * inner;
    // Sums in 16 float lanes (vectors; short chains) added up in double.
    const double mean = LaneSum(xr, inner, false) / static_cast<double>(inner);
    const double squares = LaneSum(xr, inner, true, static_cast<float>(mean));
    const double inv = 1.0 / std::sqrt(squares / static_cast<double>(inner) + eps);
    const float m = static_cast<float>(mean), s = static_cast<float>(inv);
    if (full_scale && full_bias) {  // the common form: one loop the compiler vectorizes
      const float* scale = param[0];
      const float* shift = param[1];
      for (int64_t i = 0; i < inner; ++i) yr[i] = (xr[i] - m) * s * scale[i] + shift[i];
    } else {
      for (int64_t i = 0; i < inner; ++i) {
        float v = (xr[i] - m) * s;
        if (param[0] != nullptr) v *= param[0][one[0] ? 0 : i];
        if (param[1] != nullptr) v += param[1][one[1] ? 0 : i];
        yr[i] = v;
      }
    }
    if (mean_out.valid()) mean_out.mutable_data<float>()[r] = m;
    if (inv_out.valid()) inv_out.mutable_data<float>()[r] = s;
  });
  out[0] = std::move(y);
  if (out.size() > 1) out[1] = std::move(mean_out);
  if (out.size() > 2) out[2] = std::move(inv_out);
  return Status::Ok();
}

// Local response normalisation across channels (NCHW): y = x / (bias + alpha / size *
// sum of x^2 over the 'size' channels around c)^beta.
Status LRN(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const Tensor& x = *in[0];
  RETURN_IF_ERROR(RequireFloat(node, x));
  if (node.nhwc) return Internal("LRN has no channels-last form");
  if (x.shape().size() < 3) return node.Error("input must have rank 3 or more");
  const int64_t size = node.AttrInt("size", 0);
  if (size < 1 || size > 4096) return node.Error("size must be a positive odd number");
  const float alpha = node.AttrFloat("alpha", 1e-4f), beta = node.AttrFloat("beta", 0.75f);
  const float bias = node.AttrFloat("bias", 1.f);
  const int64_t n = x.shape()[0], c = x.shape()[1];
  const int64_t inner = x.elements() / std::max<int64_t>(n * c, 1);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  Tensor y = Tensor::Allocate(DataType::kFp32, x.shape());
  const float* px = x.data<float>();
  float* py = y.mutable_data<float>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch) {
      const int64_t lo = std::max<int64_t>(ch - before, 0), hi = std::min(ch + after, c - 1);
      for (int64_t i = 0; i < inner; ++i) {
        double sum = 0;
        for (int64_t k = lo; k <= hi; ++k) {
          const double v = px[(b * c + k) * inner + i];
          sum += v * v;
        }
        const int64_t at = (b * c + ch) * inner + i;
        py[at] = static_cast<float>(px[at] / std::pow(bias + alpha / size * sum, beta));
      }
    }
  out[0] = std::move(y);
  return Status::Ok();
}

// Dropout at inference: the identity, and a mask of ones (BOOL from opset 10, the input's type
// before). Training mode is refused.
Status CheckDropout(const OpNode& node, const std::vector<const Tensor*>& constants) {
  if (constants.size() > 2 && constants[2] != nullptr) {
    const Tensor& t = *constants[2];
    if (t.elements() != 1 || t.type() != DataType::kBool || t.raw()[0] != 0)
      return node.Refuse("training_mode must be false");
  } else if (node.opset() >= 12 && constants.size() > 2) {
    return node.Refuse("training_mode must be a constant false");
  }
  return Status::Ok();  // (opset < 7's is_test is ignored, as ONNX Runtime does at inference)
}

Status Dropout(const OpNode& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  RETURN_IF_ERROR(RequireInputs(node, in, 1));
  out[0] = *in[0];
  if (out.size() > 1) {
    const DataType type = node.opset() >= 10 ? DataType::kBool : in[0]->type();
    Tensor mask = Tensor::Allocate(type, in[0]->shape());
    RETURN_IF_ERROR(type == DataType::kBool ? Status::Ok()
                                            : DispatchNumeric(node, type, [&](auto tag) -> Status {
                                                using T = decltype(tag);
                                                std::fill(mask.mutable_data<T>(),
                                                          mask.mutable_data<T>() + mask.elements(),
                                                          T(1));
                                                return Status::Ok();
                                              }));
    if (type == DataType::kBool)
      std::fill(mask.mutable_raw(), mask.mutable_raw() + mask.bytes(), 1);
    out[1] = std::move(mask);
  }
  return Status::Ok();
}

}  // namespace

std::vector<OpDef> NormOps() {
  return {{"BatchNormalization", BatchNormalization, CheckBatchNorm},
          {"InstanceNormalization", InstanceNormalization},
          {"LayerNormalization", LayerNormalization, CheckLayerNorm, 3},
          {"LRN", LRN},
          {"Dropout", Dropout, CheckDropout, 2}};
}

}  // namespace nereid::native
