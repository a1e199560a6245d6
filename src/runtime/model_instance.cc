#include "runtime/model_instance.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "common/logging.h"
#include "metrics/model_stats.h"
#include "nereid/backend_util.h"
#include "runtime/backend_abi.h"
#include "runtime/model.h"
#include "trace/trace.h"

namespace nereid {
namespace {

constexpr uint64_t kCancelCheckAfterNs = 1'000'000;  // 1 ms in the queue

}  // namespace

Status ModelInstance::Initialize() {
  RETURN_IF_ERROR(StatusFromBackend(
      model_->backend().instance_initialize(reinterpret_cast<NereidInstance*>(this))));
  initialized_ = true;
  return Status::Ok();
}

bool ModelInstance::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_.wait_until(lock, deadline, [&] { return outstanding_ == 0; });
}

void ModelInstance::Finalize() {
  if (!initialized_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (outstanding_ != 0) {
      LOG_ERROR << "instance '" << name_ << "': " << outstanding_
                << " request(s) never completed by backend '" << model_->backend().name()
                << "'; not finalizing the instance";
      return;
    }
  }
  initialized_ = false;
  Status s = StatusFromBackend(
      model_->backend().instance_finalize(reinterpret_cast<NereidInstance*>(this)));
  if (!s.ok()) LOG_WARNING << "instance '" << name_ << "' finalize: " << s.message();
}

ExecutionRecord BatchExecution::AsRecord(uint64_t end) const {
  return ExecutionRecord{&instance->name(),
                         instance->kind(),
                         instance->device_id(),
                         start_ns,
                         end,
                         rows,
                         requests,
                         device_busy_ns.load(std::memory_order_relaxed)};
}

void BatchExecution::Record(uint64_t end) {
  if (recorded.exchange(true)) return;
  end_ns.store(end, std::memory_order_release);
  const ExecutionRecord record = AsRecord(end);
  if (ExecutionObserver* observers = instance->executions()) observers->OnExecution(record);
}

void ModelInstance::AcquireTurn() {
  if (!rate_limit_ || turn_held_) return;
  rate_limit_->Acquire();
  turn_held_ = true;
}

void ModelInstance::ReturnTurn() {
  if (!turn_held_) return;
  turn_held_ = false;
  rate_limit_->Return();
}

ExecutionSummary ModelInstance::Execute(std::vector<std::unique_ptr<InferenceRequest>>& batch) {
  ExecutionSummary summary;
  std::vector<NereidRequest*> handles;
  handles.reserve(batch.size());
  AcquireTurn();       // unless the scheduler took it before forming the batch
  turn_held_ = false;  // this execution uses it up
  struct Held {        // released once the backend's execute has returned, whatever happens
    RateLimiter::Client* claim;
    ~Held() {
      if (claim) claim->Release();
    }
  } held{rate_limit_.get()};
  const uint64_t start = SteadyNowNs();
  auto execution = std::make_shared<BatchExecution>();
  execution->instance = this;
  execution->start_ns = start;
  for (auto& request : batch) {
    // A client that left while its request waited gets nothing computed. Only requests that waited
    // are checked: asking can cost a system call (HTTP peeks at the socket), and a request that
    // arrived a moment ago has a client that is almost surely still there.
    if (start - request->times.received_ns > kCancelCheckAfterNs && request->cancelled()) {
      ReportEnd(requests_, RequestRecord::End::kFailure, FailureReason::kCanceled, *request, start);
      CompleteWithError(std::move(request), Cancelled("request cancelled"));
      continue;
    }
    if (request->deadline_ns != 0 && start > request->deadline_ns) {
      ReportEnd(requests_, RequestRecord::End::kFailure, FailureReason::kRejected, *request, start);
      CompleteWithError(std::move(request), Unavailable("Request timeout expired"));
      continue;
    }
    request->times.compute_start_ns = start;
    if (request->trace) request->trace->SetPlacement(name_, placement_);
    summary.rows += request->batch_size;
    auto* r = new BackendRequest();
    r->request = std::move(request);
    r->response = std::make_unique<InferenceResponse>();
    r->instance = this;
    r->execution = execution;
    r->exec_start_ns = start;
    handles.push_back(r->handle());
  }
  batch.clear();
  if (handles.empty()) return summary;
  execution->rows = summary.rows;
  execution->requests = handles.size();
  {
    std::lock_guard<std::mutex> lock(mu_);
    outstanding_ += handles.size();
    execution->outstanding = handles.size();
  }
  if (forced_variant_ >= 0)
    variant_ = static_cast<uint32_t>(forced_variant_);
  else if (const VariantController* v = model_->variants())
    variant_ = v->active();
  Status batch_status = StatusFromBackend(
      model_->backend().instance_execute(reinterpret_cast<NereidInstance*>(this), handles.data(),
                                         static_cast<uint32_t>(handles.size())));
  const uint64_t end = SteadyNowNs();
  if (!batch_status.ok()) {
    // The backend took none of the requests.
    for (NereidRequest* h : handles) Complete(BackendRequest::From(h), batch_status);
  }
  summary.exec_ns = end - start;
  execution->Record(end);
  {
    std::lock_guard<std::mutex> lock(mu_);
    execution->returned = true;
    summary.latencies_ns = std::move(execution->latencies_ns);
    released_.fetch_add(execution->outstanding, std::memory_order_relaxed);
  }
  return summary;
}

Status ModelInstance::FinishOutputs(const InferenceRequest& request,
                                    InferenceResponse& response) const {
  std::vector<InferOutput> ordered;
  ordered.reserve(request.outputs.size());
  for (const auto& wanted : request.outputs) {
    auto it = std::find_if(response.outputs.begin(), response.outputs.end(),
                           [&](const InferOutput& o) { return o.name == wanted.name; });
    if (it == response.outputs.end()) {
      // Sent without it, as Triton sends a response its backend left an output out of.
      LOG_VERBOSE(1) << "model '" << model_->name() << "' did not produce requested output '"
                     << wanted.name << "'";
      continue;
    }
    InferOutput out = std::move(*it);
    out.binary = wanted.binary;
    if (!out.destination.empty()) {
      const Buffer& d = out.destination;
      RETURN_IF_ERROR(CopyIntoRegion(d, out.buffer.data(), out.buffer.size()));
      out.buffer = d;
      out.destination = Buffer();
    }
    ordered.push_back(std::move(out));
  }
  response.outputs = std::move(ordered);
  return Status::Ok();
}

void ModelInstance::Deliver(InferenceRequest& request,
                            std::unique_ptr<InferenceResponse> response) {
  response->model_name = model_->name();
  response->model_version = model_->version();
  response->id = request.id;
  if (request.on_complete) request.on_complete(std::move(response));
}

void ModelInstance::ShowFinal(const BackendRequest& r, InferenceResponse& response) const {
  if (requests_ == nullptr) return;
  // A second request of the batch may complete before the first has recorded the batch's end.
  const uint64_t now = SteadyNowNs();
  uint64_t end = r.execution->end_ns.load(std::memory_order_acquire);
  if (end == 0) end = now;
  const ExecutionRecord execution = r.execution->AsRecord(end);
  RequestRecord record;
  record.request = r.request.get();
  record.end_ns = now;
  record.execution = &execution;
  requests_->OnFinalResponse(record, response);
}

void ModelInstance::Send(BackendRequest* r, bool final) {
  auto response = std::move(r->response);
  r->response = std::make_unique<InferenceResponse>();
  Status status = FinishOutputs(*r->request, *response);
  if (!status.ok()) {
    response = std::make_unique<InferenceResponse>();
    response->status = std::move(status);
  }
  response->final = final;
  r->final_sent = final;
  if (final && response->status.ok()) ShowFinal(*r, *response);
  Deliver(*r->request, std::move(response));
}

void ModelInstance::Complete(BackendRequest* r, Status status) {
  std::unique_ptr<BackendRequest> owned(r);
  InferenceRequest& request = *r->request;
  const bool decoupled = model_->decoupled();
  const uint64_t end = SteadyNowNs();
  // A decoupled model's completion with nothing in it is the final flag alone, not a response
  // lacking its outputs.
  const bool flag_only = decoupled && (r->final_sent || r->response->outputs.empty());
  if (status.ok() && !flag_only) status = FinishOutputs(request, *r->response);
  r->execution->Record(end);
  const uint64_t request_ns = end - request.times.received_ns;
  request.times.compute_end_ns = end;
  request.times.compute_input_end_ns = r->compute_start_ns;
  request.times.compute_output_start_ns = r->compute_end_ns;
  // The observers (statistics, variant feedback, the end of the trace) before the response goes.
  const bool succeeded = status.ok() && !request.padding;
  if (request.padding) {
    // A sequence batcher's padding row: nobody waits for it, and it is no inference.
  } else if (!status.ok()) {
    ReportEnd(requests_, RequestRecord::End::kFailure,
              status.code() == Status::Code::kCancelled ? FailureReason::kCanceled
                                                        : FailureReason::kBackend,
              request, end);
    if (!r->final_sent) {
      auto response = std::make_unique<InferenceResponse>();
      response->status = std::move(status);
      Deliver(request, std::move(response));
    } else {
      LOG_WARNING << "model '" << model_->name() << "': request '" << request.id
                  << "' failed after its final response: " << status.message();
    }
  } else {
    ReportEnd(requests_, RequestRecord::End::kSuccess, FailureReason::kOther, request, end);
    if (!r->final_sent) {
      auto response = std::move(r->response);
      if (decoupled && response->outputs.empty()) response->empty_final = true;
      response->final = true;
      ShowFinal(*r, *response);
      Deliver(request, std::move(response));
    }
  }
  // The request (and what keeps its inputs alive) goes before the count drops; the model it
  // referenced stays alive until this instance is done with its own lock.
  std::shared_ptr<Model> keep = std::move(request.model);
  std::shared_ptr<BatchExecution> execution = std::move(r->execution);
  owned.reset();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (succeeded && !execution->returned) execution->latencies_ns.push_back(request_ns);
    --execution->outstanding;
    if (execution->returned) released_.fetch_sub(1, std::memory_order_relaxed);
    if (--outstanding_ == 0) idle_.notify_all();
  }
}

}  // namespace nereid
