#include "metrics/observers.h"

namespace nereid {

void StatsObserver::OnExecution(const ExecutionRecord& r) {
  stats_->RecordExecution(r.rows, 0, r.end_ns - r.start_ns, 0);
}

void StatsObserver::OnRequestEnd(const RequestRecord& record) {
  const RequestTimestamps& t = record.request->times;
  switch (record.end) {
    case RequestRecord::End::kFailure:
      stats_->RecordFailure(record.reason, record.request_ns());
      return;
    case RequestRecord::End::kCacheHit:
      stats_->RecordCacheHit(record.request_ns(), record.cache_lookup_ns, UnixNowMs());
      return;
    case RequestRecord::End::kSuccess: {
      if (t.compute_start_ns == 0) {  // no execution of its own (an ensemble): all inference
        stats_->RecordSuccess(record.request->batch_size, record.request_ns(), 0, 0,
                              record.request_ns(), 0, UnixNowMs());
        return;
      }
      // The compute split: the backend's reported window where it gave one, else the whole
      // execution as inference.
      const uint64_t exec_start = t.compute_start_ns;
      const uint64_t infer_start = t.compute_input_end_ns ? t.compute_input_end_ns : exec_start;
      const uint64_t infer_end =
          t.compute_output_start_ns ? t.compute_output_start_ns : record.end_ns;
      stats_->RecordSuccess(record.request->batch_size, record.request_ns(),
                            exec_start > t.queued_ns ? exec_start - t.queued_ns : 0,
                            infer_start - exec_start, infer_end - infer_start,
                            record.end_ns > infer_end ? record.end_ns - infer_end : 0, UnixNowMs());
      return;
    }
  }
}

void TraceEndObserver::OnRequestEnd(const RequestRecord& record) { EndTrace(*record.request); }

}  // namespace nereid
