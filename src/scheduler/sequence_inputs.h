// What a sequence's requests carry besides the client's inputs (the sequence batcher's inputs):
// the control tensors the config names (START, END, READY, CORRID) and, with implicit state, the
// previous request's output state fed back as an input (initial_state's zeros or file for the
// first). The settings come from a validated config; the functions dress a request the batcher
// runs, make its padding rows, and keep the state a response carries for the sequence's next
// request.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/model_config.h"
#include "memory/buffer.h"
#include "request/inference_request.h"

namespace nereid {

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

// A slot's state between a sequence's requests: per SequenceStateSpec (empty: the initial one),
// the last value, in host memory, or left in device memory where the engine wrote it
// (device_state), and its shape.
struct SequenceState {
  std::vector<Buffer> values;
  std::vector<std::vector<int64_t>> shapes;
};

// Adds the control inputs to 'request' (one element each; CORRID from 'id', 0 when null).
void AddControls(const SequenceBatcherConfig& config, InferenceRequest& request, bool start,
                 bool end, bool ready, const CorrelationId* id);
// Adds the state inputs ('initial': the initial state, else 'state'); returns the state outputs it
// added to what the client asked for (to be dropped from its response).
std::vector<std::string> AddState(const SequenceBatcherConfig& config, InferenceRequest& request,
                                  const SequenceState& state, bool initial);
// Keeps the state outputs of a successful 'response' in 'state'.
void KeepState(const SequenceBatcherConfig& config, const InferenceResponse& response,
               SequenceState* state);
// A padding row: a copy of 'like' (a real row of the batch), its state included, with READY
// false, START and END false and CORRID 0.
std::unique_ptr<InferenceRequest> PaddingRow(const SequenceBatcherConfig& config,
                                             const InferenceRequest& like);

}  // namespace nereid
