#include "runtime/model_instance.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "common/half.h"
#include "common/logging.h"
#include "metrics/model_stats.h"
#include "runtime/backend_api.h"
#include "runtime/model.h"

namespace nereid {
namespace {

std::string FormatScore(DataType type, double v) {
  const bool integral = type != DataType::kFp16 && type != DataType::kFp32 &&
                        type != DataType::kFp64 && type != DataType::kBf16;
  return integral ? std::to_string(static_cast<int64_t>(v)) : std::to_string(v);
}

void AppendBytesElement(std::vector<uint8_t>& out, const std::string& s) {
  const uint32_t len = static_cast<uint32_t>(s.size());
  const uint8_t prefix[4] = {static_cast<uint8_t>(len), static_cast<uint8_t>(len >> 8),
                             static_cast<uint8_t>(len >> 16), static_cast<uint8_t>(len >> 24)};
  out.insert(out.end(), prefix, prefix + 4);
  out.insert(out.end(), s.begin(), s.end());
}

// Classification extension: replaces a numeric output by its top-k entries as BYTES strings
// "score:index" or "score:index:label", per batch row when the model batches.
void Classify(InferOutput& output, uint32_t k, bool batching,
              const std::vector<std::string>* labels) {
  const int64_t rows = batching && !output.shape.empty() ? output.shape[0] : 1;
  const size_t esize = DataTypeSize(output.datatype);
  const int64_t total = static_cast<int64_t>(output.data.size() / std::max<size_t>(esize, 1));
  const int64_t per_row = rows > 0 ? total / rows : 0;
  const int64_t top = std::min<int64_t>(k, per_row);
  std::vector<uint8_t> strings;
  std::vector<int64_t> order(per_row);
  std::vector<double> values(per_row);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < per_row; ++i)
      values[i] = ElementAsDouble(output.datatype, output.data.data() + (r * per_row + i) * esize);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](int64_t a, int64_t b) {
      return values[a] > values[b] || (values[a] == values[b] && a < b);
    });
    for (int64_t i = 0; i < top; ++i) {
      const int64_t idx = order[i];
      std::string s = FormatScore(output.datatype, values[idx]) + ":" + std::to_string(idx);
      if (labels && idx < static_cast<int64_t>(labels->size())) s += ":" + (*labels)[idx];
      AppendBytesElement(strings, s);
    }
  }
  output.datatype = DataType::kBytes;
  output.shape = batching ? std::vector<int64_t>{rows, top} : std::vector<int64_t>{top};
  output.data = std::move(strings);
}

}  // namespace

Status ModelInstance::Initialize() {
  RETURN_IF_ERROR(StatusFromBackend(
      model_->backend().instance_initialize(reinterpret_cast<NereidInstance*>(this))));
  initialized_ = true;
  return Status::Ok();
}

void ModelInstance::Finalize() {
  if (!initialized_) return;
  initialized_ = false;
  Status s = StatusFromBackend(
      model_->backend().instance_finalize(reinterpret_cast<NereidInstance*>(this)));
  if (!s.ok()) LOG_WARNING << "instance '" << name_ << "' finalize: " << s.message();
}

ExecutionSummary ModelInstance::Execute(std::vector<std::unique_ptr<InferenceRequest>>& batch) {
  ExecutionSummary summary;
  std::vector<BackendRequest> wrapped(batch.size());
  std::vector<NereidRequest*> handles(batch.size());
  const uint64_t start = SteadyNowNs();
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i]->times.compute_start_ns = start;
    wrapped[i].request = batch[i].get();
    wrapped[i].response = std::make_unique<InferenceResponse>();
    handles[i] = wrapped[i].handle();
    summary.rows += batch[i]->batch_size;
  }
  const uint64_t infer_start = SteadyNowNs();
  Status batch_status = StatusFromBackend(
      model_->backend().instance_execute(reinterpret_cast<NereidInstance*>(this), handles.data(),
                                         static_cast<uint32_t>(handles.size())));
  const uint64_t infer_end = SteadyNowNs();
  summary.exec_ns = infer_end - infer_start;
  const bool batching = model_->config().max_batch_size() > 0;

  // Outputs first (ordering, classification), then statistics, then completion: the response is
  // final before anyone sees it.
  std::vector<Status> statuses(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    BackendRequest& w = wrapped[i];
    Status status = !batch_status.ok() ? batch_status : w.error;
    if (status.ok()) {
      std::vector<InferOutput> ordered;
      ordered.reserve(batch[i]->outputs.size());
      for (const auto& wanted : batch[i]->outputs) {
        auto it = std::find_if(w.response->outputs.begin(), w.response->outputs.end(),
                               [&](const InferOutput& o) { return o.name == wanted.name; });
        if (it == w.response->outputs.end()) {
          status = Internal("backend '" + model_->backend().name() + "' did not produce output '" +
                            wanted.name + "' for model '" + model_->name() + "'");
          break;
        }
        InferOutput out = std::move(*it);
        out.binary = wanted.binary;
        if (wanted.class_count > 0)
          Classify(out, wanted.class_count, batching, model_->Labels(out.name));
        ordered.push_back(std::move(out));
      }
      w.response->outputs = std::move(ordered);
    }
    statuses[i] = std::move(status);
  }
  const uint64_t end = SteadyNowNs();
  ModelStats& stats = model_->stats();
  stats.RecordExecution(summary.rows, infer_start - start, summary.exec_ns, end - infer_end);
  const uint64_t now_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());

  for (size_t i = 0; i < batch.size(); ++i) {
    std::unique_ptr<InferenceRequest> request = std::move(batch[i]);
    request->times.compute_end_ns = end;
    const uint64_t request_ns = end - request->times.received_ns;
    if (!statuses[i].ok()) {
      stats.RecordFailure(FailureReason::kBackend, request_ns);
      CompleteWithError(std::move(request), std::move(statuses[i]));
      continue;
    }
    stats.RecordSuccess(request->batch_size, request_ns, start - request->times.queued_ns,
                        infer_start - start, summary.exec_ns, end - infer_end, now_ms);
    summary.latencies_ns.push_back(request_ns);
    auto response = std::move(wrapped[i].response);
    response->model_name = model_->name();
    response->model_version = model_->version();
    response->id = request->id;
    ResponseCallback callback = std::move(request->on_complete);
    request.reset();
    if (callback) callback(std::move(response));
  }
  return summary;
}

}  // namespace nereid
