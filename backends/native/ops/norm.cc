// The normalisation family: BatchNormalization (inference form; the graph's passes fold it into a
// preceding Conv) and InstanceNormalization.
#include <cmath>

#include "ops/op.h"

namespace nereid::native {
namespace {

Status CheckBatchNorm(const OpNode& node, const std::vector<const Tensor*>&) {
  if (node.AttrInt("training_mode", 0) != 0)
    return node.Refuse("training_mode 1 is not supported (inference only)");
  if (node.opset() < 7 && node.AttrInt("is_test", 0) == 0 && node.HasAttr("is_test"))
    return node.Refuse("is_test 0 (training) is not supported");
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

}  // namespace

std::vector<OpDef> NormOps() {
  return {{"BatchNormalization", BatchNormalization, CheckBatchNorm},
          {"InstanceNormalization", InstanceNormalization}};
}

}  // namespace nereid::native
