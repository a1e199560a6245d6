#include "runtime/request_pipeline.h"

#include <optional>
#include <string>
#include <utility>

#include "request/response_path.h"
#include "runtime/classification.h"
#include "runtime/model.h"
#include "runtime/request_validation.h"
#include "trace/trace.h"

namespace nereid {
namespace {

// The ensemble step's stage: the ensemble reads the response's shapes knowing whether they lead
// with a batch dimension.
void DeclareEnsembleStep(const Model& model, InferenceRequest& request) {
  if (!request.ensemble_step) return;
  const bool batches = model.config().max_batch_size() > 0;
  ResponsePath::Of(request).Set(ResponseStage::kEnsembleStep,
                                [batches](std::unique_ptr<InferenceResponse>& response,
                                          ResponsePath&) { response->model_batches = batches; });
}

// Classification, for the few requests that ask for it: their responses are rewritten before
// whoever asked sees them. (The request keeps its model alive while its responses go.)
void DeclareClassification(const Model& model, InferenceRequest& request) {
  ClassificationRequest wanted = ClassificationOf(request.outputs);
  if (wanted.empty()) return;
  ResponsePath::Of(request).Set(ResponseStage::kClassification,
                                [wanted = std::move(wanted), model = &model](
                                    std::unique_ptr<InferenceResponse>& response, ResponsePath&) {
                                  ApplyClassification(wanted, *model, *response);
                                });
}

// The TENSORS trace level (a client's request or an ensemble step alike): the inputs as given
// (host memory) now, the outputs the final response carries as it goes.
void DeclareTraceTensors(InferenceRequest& request) {
  if (!request.trace) return;
  request.trace->SetVersion(request.model_version);
  if (!request.trace->tensors()) return;
  for (const InferInput& in : request.inputs)
    if (in.location.type != MemoryType::kGpu)
      request.trace->RecordTensor("TENSOR_QUEUE_INPUT", in.name, in.datatype, in.shape, in.data,
                                  in.byte_size);
  ResponsePath::Of(request).Set(
      ResponseStage::kTraceTensors,
      [trace = request.trace](std::unique_ptr<InferenceResponse>& response, ResponsePath&) {
        if (!response->status.ok()) return;
        for (const InferOutput& out : response->outputs)
          if (!out.in_shared_memory)
            trace->RecordTensor("TENSOR_BACKEND_OUTPUT", out.name, out.datatype, out.shape,
                                out.bytes(), out.byte_size());
      });
}

// The response cache: a hit answers 'request' at once through the stages after the cache (true:
// the request is done with); a miss declares the cache's stage, which stores the response.
bool AnswerFromCache(Model& model, ResponseCache& cache,
                     std::unique_ptr<InferenceRequest>& request) {
  const uint64_t start = SteadyNowNs();
  const std::optional<ResponseCache::Key> key =
      ResponseCache::KeyOf(*request, model.name(), model.version(), model.generation());
  if (!key) return false;  // an input outside host memory or an output to shared memory
  std::unique_ptr<InferenceResponse> hit = cache.Lookup(*key, *request);
  const uint64_t looked = SteadyNowNs();
  if (hit) {
    RequestRecord record;
    record.end = RequestRecord::End::kCacheHit;
    record.request = request.get();
    record.end_ns = looked;
    record.cache_lookup_ns = looked - start;
    model.request_observers().OnRequestEnd(record);
    hit->model_name = model.name();
    hit->model_version = model.version();
    hit->id = request->id;
    ResponseCallback done = std::move(request->on_complete);  // only stages after the cache yet
    request.reset();
    if (done) done(std::move(hit));
    return true;
  }
  ResponsePath::Of(*request).Set(
      ResponseStage::kCache,
      [&cache, observers = &model.request_observers(), key = *key, lookup_ns = looked - start](
          std::unique_ptr<InferenceResponse>& response, ResponsePath&) {
        const uint64_t insert_start = SteadyNowNs();
        if (response->status.ok()) cache.Insert(key, *response);
        observers->OnCacheMiss(lookup_ns + (SteadyNowNs() - insert_start));
      });
  return false;
}

// A request refused on its way in: what its stages took is given back, the failure counted, and
// the request left to the caller as it came.
Status Refuse(Model& model, InferenceRequest& request, Status status) {
  ResponsePath::Unwind(request);
  const bool rejected = status.code() == Status::Code::kUnavailable ||
                        status.code() == Status::Code::kResourceExhausted;
  ReportEnd(&model.request_observers(), RequestRecord::End::kFailure,
            rejected ? FailureReason::kRejected : FailureReason::kOther, request, SteadyNowNs());
  return status;
}

}  // namespace

Status EnterModel(Model& model, std::unique_ptr<InferenceRequest>& request) {
  InferenceRequest& r = *request;
  r.model_version = model.version();  // routed: errors from here on name this version
  if (r.ensemble_step) FitEnsembleStep(model.config(), r);
  if (Status valid = ValidateRequest(model.config(), model.name(), r); !valid.ok())
    return Refuse(model, r, std::move(valid));
  // The stages every response passes, however the request is answered (sink: its on_complete).
  DeclareTraceTensors(r);
  DeclareClassification(model, r);
  DeclareEnsembleStep(model, r);
  if (ResponseCache* cache = model.cache();
      cache != nullptr && AnswerFromCache(model, *cache, request))
    return Status::Ok();
  // The stages of a request that runs: admission's, then the scheduler's as it takes it.
  if (Admission* admission = model.admission())
    if (Status admitted = admission->Admit(r, model.name()); !admitted.ok())
      return Refuse(model, r, std::move(admitted));
  if (VariantController* variants = model.variants()) variants->OnArrival(r.batch_size);
  if (Status queued = model.scheduler()->Enqueue(request); !queued.ok())
    return Refuse(model, *request, std::move(queued));
  return Status::Ok();
}

}  // namespace nereid
