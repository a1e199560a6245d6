// SequenceBatcher: Triton's sequence batcher (config `sequence_batching`) for stateful models.
// Every request of a sequence (one correlation id) goes to the same batch slot of the same
// instance, in order, with the control tensors the config names (START, END, READY, CORRID) added
// as inputs and, with implicit state, the previous request's output state fed back as an input.
//
// Slots: each instance has max(1, max_batch_size) of them (Oldest: max_candidate_sequences when
// set); a new sequence takes the free slot of lowest index, across instances (slot 0 of every
// instance before slot 1 of any), else waits in an ordered backlog until a sequence ends or idles
// out (max_sequence_idle_microseconds, default 1 s, counted from its last request's arrival).
//
// Direct: a batch row is a slot; rows below the highest busy slot that have nothing to run get a
// padding request (a copy of a real one with READY false, START/END false, CORRID 0), which is
// executed and counted in the batch's size but not as an inference. Oldest: each instance batches
// the heads of its sequences like the dynamic batcher (preferred sizes, a queue delay), rows in
// arrival order. Both strategies keep at most one request per sequence in flight: the next one
// runs when the previous one has completed, so a state update is never lost.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "config/model_config.h"
#include "scheduler/scheduler.h"
#include "scheduler/sequence_inputs.h"

namespace nereid {

class RequestObserver;

class SequenceBatcher : public InstanceThreadsScheduler {
 public:
  SequenceBatcher(SequenceBatcherConfig config, std::vector<BatchExecutor*> instances,
                  RequestObserver* requests);
  ~SequenceBatcher() override;
  Status Enqueue(std::unique_ptr<InferenceRequest>& request) override;

  // For tests and the statistics: sequences holding a slot, and waiting for one.
  size_t ActiveSequences() const;
  size_t BackloggedSequences() const;

 private:
  struct Sequence {
    std::string key;
    CorrelationId id;
    std::deque<std::unique_ptr<InferenceRequest>> queue;
    uint64_t last_arrival_ns = 0;
  };
  struct Slot {
    std::shared_ptr<Sequence> sequence;  // null: free
    int in_flight = 0;                   // requests run and not completed (at most one)
    SequenceState state;
  };
  struct Instance {
    BatchExecutor* executor = nullptr;
    std::vector<Slot> slots;
  };

  void Run(BatchExecutor* executor) override;
  size_t QueuedLocked() const override { return queued_; }

  bool ReadyLocked(const Slot& slot) const {
    return slot.sequence && slot.in_flight == 0 && !slot.sequence->queue.empty();
  }
  // Drops the id's entry if it still names 'sequence' (a later START may have begun another).
  void ForgetLocked(const Sequence& sequence);
  // Gives the slot to the oldest backlogged sequence, or back to the free pool.
  void ReleaseSlotLocked(size_t instance, size_t slot);
  // Releases this instance's slots whose sequence idled out; fails backlogged sequences whose
  // request timeout passed. Returns the next time something may expire (ns, 0: nothing).
  uint64_t ExpireLocked(size_t instance, uint64_t now);
  // When the batch of 'ready' slots may be formed (0: now).
  uint64_t HoldUntilLocked(const std::vector<size_t>& ready, size_t instance, uint64_t now) const;
  std::vector<std::unique_ptr<InferenceRequest>> FormBatchLocked(size_t instance,
                                                                 std::vector<size_t> ready);
  // Pops the slot's next request and dresses it: controls, state, completion hook.
  std::unique_ptr<InferenceRequest> TakeLocked(size_t instance, size_t slot);
  void OnComplete(size_t instance, size_t slot, const InferenceResponse& response);
  size_t BackloggedRequestsLocked() const;

  const SequenceBatcherConfig config_;
  RequestObserver* requests_;
  const SequenceControl* correlation_control_ = nullptr;
  std::vector<Instance> instances_;
  std::unordered_map<std::string, std::shared_ptr<Sequence>> sequences_;
  std::deque<std::shared_ptr<Sequence>> backlog_;
  std::set<std::pair<size_t, size_t>> free_;                // (slot, instance): lowest slot first
  size_t queued_ = 0;                                       // requests in sequences' queues
  std::vector<std::unique_ptr<InferenceRequest>> expired_;  // to fail outside the lock
  bool holding_ = false;                                    // a test hook's hold is still on
};

}  // namespace nereid
