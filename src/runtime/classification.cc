#include "runtime/classification.h"

#include <algorithm>
#include <numeric>

#include "nereid/backend_util.h"
#include "runtime/model.h"

namespace nereid {
namespace {

std::string FormatScore(DataType type, double v) {
  const bool integral = type != DataType::kFp16 && type != DataType::kFp32 &&
                        type != DataType::kFp64 && type != DataType::kBf16;
  return integral ? std::to_string(static_cast<int64_t>(v)) : std::to_string(v);
}

// Classification extension: replaces a numeric output by its top-k entries as BYTES strings
// "score:index" or "score:index:label", per batch row when the model batches.
void Classify(InferOutput& output, uint32_t k, bool batching,
              const std::vector<std::string>* labels) {
  const int64_t rows = batching && !output.shape.empty() ? output.shape[0] : 1;
  const size_t esize = DataTypeSize(output.datatype);
  const int64_t total = static_cast<int64_t>(output.byte_size() / std::max<size_t>(esize, 1));
  const int64_t per_row = rows > 0 ? total / rows : 0;
  const int64_t top = std::min<int64_t>(k, per_row);
  std::vector<uint8_t> strings;
  std::vector<int64_t> order(per_row);
  std::vector<double> values(per_row);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < per_row; ++i)
      values[i] = ElementAsDouble(output.datatype, output.bytes() + (r * per_row + i) * esize);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](int64_t a, int64_t b) {
      return values[a] > values[b] || (values[a] == values[b] && a < b);
    });
    for (int64_t i = 0; i < top; ++i) {
      const int64_t idx = order[i];
      std::string s = FormatScore(output.datatype, values[idx]) + ":" + std::to_string(idx);
      if (labels && idx < static_cast<int64_t>(labels->size())) s += ":" + (*labels)[idx];
      backend::AppendBytesElement(strings, s);
    }
  }
  output.datatype = DataType::kBytes;
  output.shape = batching ? std::vector<int64_t>{rows, top} : std::vector<int64_t>{top};
  output.SetBytes(std::move(strings));
}

}  // namespace

ClassificationRequest ClassificationOf(const std::vector<RequestedOutput>& outputs) {
  ClassificationRequest wanted;
  for (const auto& o : outputs)
    if (o.class_count > 0) wanted.emplace_back(o.name, o.class_count);
  return wanted;
}

void ApplyClassification(const ClassificationRequest& wanted, const Model& model,
                         InferenceResponse& response) {
  if (wanted.empty() || !response.status.ok()) return;
  const bool batching = model.config().max_batch_size() > 0;
  for (auto& out : response.outputs)
    for (const auto& [name, k] : wanted)
      if (out.name == name) Classify(out, k, batching, model.Labels(name));
}

}  // namespace nereid
