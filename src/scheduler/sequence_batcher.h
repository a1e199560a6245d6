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

namespace nereid {

class RequestObserver;

// One control tensor the batcher adds to every request it runs.
struct SequenceControl {
  enum class Kind { kStart, kEnd, kReady, kCorrelationId };
  Kind kind = Kind::kStart;
  std::string name;
  DataType type = DataType::kInvalid;
  std::array<std::vector<uint8_t>, 2> false_true;  // one element each (not for CORRID)
};

// One implicit state: the input it is fed as, the output it is read from, and what a sequence
// starts with (initial_state's zeros or file, else zeros with variable dimensions as 1).
struct SequenceStateSpec {
  std::string input_name, output_name;
  DataType type = DataType::kInvalid;
  std::vector<int64_t> initial_shape;  // without the batch dimension
  std::vector<uint8_t> initial;
};

struct SequenceBatcherConfig {
  std::string model;
  bool oldest = false;
  int64_t max_batch_size = 0;
  size_t slots_per_instance = 1;
  uint64_t idle_ns = 1'000'000'000;
  uint64_t max_queue_delay_ns = 0;
  double minimum_slot_utilization = 0;         // Direct
  std::vector<int64_t> preferred_batch_sizes;  // Oldest, ascending
  std::vector<SequenceControl> controls;
  std::vector<SequenceStateSpec> states;
  // The instances read device memory (ReadsDeviceInputs): a state the engine writes on a GPU
  // stays there for the sequence's next request.
  bool device_state = false;
  // Triton's test hooks: no batch is formed until this many requests are queued in slots
  // (TRITONSERVER_DELAY_SCHEDULER) and, with that set, this many wait in the backlog
  // (TRITONSERVER_BACKLOG_DELAY_SCHEDULER), once.
  size_t hold_until_queued = 0;
  size_t hold_until_backlogged = 0;
};

// The batcher's settings from a validated config; an initial_state data_file is read from
// '<model_dir>/initial_state/' (and must stay inside the model's directory).
StatusOr<SequenceBatcherConfig> ReadSequenceBatcherConfig(const inference::ModelConfig& config,
                                                          const std::filesystem::path& model_dir);

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
    // Per SequenceStateSpec (empty: initial): the last state, in host memory, or left in device
    // memory where the engine wrote it (device_state).
    std::vector<Buffer> state;
    std::vector<std::vector<int64_t>> state_shape;
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
  // A padding row: a copy of 'like' (a real row of the batch), its state included, with READY
  // false, START and END false and CORRID 0.
  std::unique_ptr<InferenceRequest> PaddingLocked(const InferenceRequest& like);
  void AddControls(InferenceRequest& request, bool start, bool end, bool ready,
                   const CorrelationId* id) const;
  // Adds the state inputs; returns the state outputs it added to what the client asked for.
  std::vector<std::string> AddState(InferenceRequest& request, const Slot& slot,
                                    bool initial) const;
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
