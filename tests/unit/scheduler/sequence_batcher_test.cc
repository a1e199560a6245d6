// The sequence batcher against a recording executor that behaves like an accumulator with implicit
// state (OUTPUT = STATE_IN + INPUT, OUTPUT_STATE = OUTPUT): slot assignment across instances,
// Direct's padding rows, control tensors, state carried and reset, the backlog, the idle timeout,
// Oldest's batches, the errors clients see, and stopping with work queued.
#include "scheduler/sequence_batcher.h"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include "nereid/backend.h"
#include "test_repository.h"

namespace nereid {
namespace {

using std::chrono::milliseconds;

struct Row {
  std::string id;
  bool padding = false;
  int32_t start = -1, end = -1, ready = -1, state = -1, input = 0;
  uint64_t corrid = 0;
};

int32_t Int32(const InferInput& in) {
  int32_t v = 0;
  std::memcpy(&v, in.data, sizeof(v));
  return v;
}

class Recorder final : public BatchExecutor {
 public:
  explicit Recorder(int index) : index_(index) {}
  ExecutionSummary Execute(std::vector<std::unique_ptr<InferenceRequest>>& batch) override {
    std::vector<Row> rows;
    for (auto& r : batch) {
      Row row;
      row.id = r->id;
      row.padding = r->padding;
      for (const auto& in : r->inputs) {
        if (in.name == "START") row.start = Int32(in);
        if (in.name == "END") row.end = Int32(in);
        if (in.name == "READY") row.ready = Int32(in);
        if (in.name == "STATE_IN") row.state = Int32(in);
        if (in.name == "INPUT") row.input = Int32(in);
        if (in.name == "CORRID") std::memcpy(&row.corrid, in.data, sizeof(row.corrid));
      }
      rows.push_back(row);
    }
    if (delay_ms > 0) std::this_thread::sleep_for(milliseconds(delay_ms));
    {
      // Recorded before any request completes: a test that saw its answer sees its batch.
      std::lock_guard<std::mutex> lock(mu_);
      batches_.push_back(rows);
      cv_.notify_all();
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      auto response = std::make_unique<InferenceResponse>();
      const int32_t sum = rows[i].state + rows[i].input;
      for (const char* name : {"OUTPUT", "STATE_OUT"}) {
        InferOutput& o = response->outputs.emplace_back();
        o.name = name;
        o.datatype = DataType::kInt32;
        o.shape = {1, 1};
        std::vector<uint8_t> bytes(4);
        std::memcpy(bytes.data(), &sum, 4);
        o.SetBytes(std::move(bytes));
      }
      if (batch[i]->on_complete) batch[i]->on_complete(std::move(response));
    }
    return {};
  }
  // Waits for the n-th batch (0-based) of this instance.
  std::vector<Row> Batch(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    EXPECT_TRUE(cv_.wait_for(lock, std::chrono::seconds(5), [&] { return batches_.size() > n; }))
        << "instance " << index_ << " ran " << batches_.size() << " batches";
    return batches_.size() > n ? batches_[n] : std::vector<Row>{};
  }
  size_t batches() {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_.size();
  }
  int delay_ms = 0;

 private:
  int index_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<Row>> batches_;
};

SequenceControl Control(SequenceControl::Kind kind, const char* name) {
  SequenceControl c;
  c.kind = kind;
  c.name = name;
  c.type = kind == SequenceControl::Kind::kCorrelationId ? DataType::kUint64 : DataType::kInt32;
  for (int i = 0; i < 2; ++i) {
    c.false_true[i].resize(4);
    std::memcpy(c.false_true[i].data(), &i, 4);
  }
  return c;
}

SequenceBatcherConfig Config(int64_t max_batch_size, bool oldest = false) {
  SequenceBatcherConfig c;
  c.model = "acc";
  c.oldest = oldest;
  c.max_batch_size = max_batch_size;
  c.slots_per_instance = static_cast<size_t>(std::max<int64_t>(1, max_batch_size));
  c.preferred_batch_sizes = {std::max<int64_t>(1, max_batch_size)};
  using K = SequenceControl::Kind;
  c.controls = {Control(K::kStart, "START"), Control(K::kEnd, "END"), Control(K::kReady, "READY"),
                Control(K::kCorrelationId, "CORRID")};
  SequenceStateSpec state;
  state.input_name = "STATE_IN";
  state.output_name = "STATE_OUT";
  state.type = DataType::kInt32;
  state.initial_shape = {1};
  state.initial.assign(4, 0);
  c.states = {state};
  return c;
}

// Collects a request's response (status and OUTPUT's value, the outputs' names).
struct Answer {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  int32_t output = 0;
  std::vector<std::string> names;
  bool Wait() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(5), [&] { return done; });
  }
};

std::unique_ptr<InferenceRequest> Request(uint64_t sequence, int32_t value, bool start, bool end,
                                          Answer* answer, const std::string& id = "") {
  auto r = std::make_unique<InferenceRequest>();
  r->model_name = "acc";
  r->id = id.empty() ? std::to_string(sequence) + ":" + std::to_string(value) : id;
  r->correlation_id.present = true;
  r->correlation_id.number = sequence;
  r->flags = (start ? NEREID_REQUEST_FLAG_SEQUENCE_START : 0u) |
             (end ? NEREID_REQUEST_FLAG_SEQUENCE_END : 0u);
  InferInput& in = r->inputs.emplace_back();
  in.name = "INPUT";
  in.datatype = DataType::kInt32;
  in.shape = {1, 1};
  std::vector<uint8_t> bytes(4);
  std::memcpy(bytes.data(), &value, 4);
  in.Own(std::move(bytes));
  r->outputs.emplace_back().name = "OUTPUT";
  r->times.received_ns = SteadyNowNs();
  r->on_complete = [answer](std::unique_ptr<InferenceResponse> response) {
    if (answer == nullptr) return;
    std::lock_guard<std::mutex> lock(answer->mu);
    answer->status = response->status;
    for (const auto& o : response->outputs) {
      answer->names.push_back(o.name);
      if (o.name == "OUTPUT") std::memcpy(&answer->output, o.bytes(), 4);
    }
    answer->done = true;
    answer->cv.notify_all();
  };
  return r;
}

Status Send(SequenceBatcher& b, std::unique_ptr<InferenceRequest> r) { return b.Enqueue(r); }

TEST(SequenceBatcherTest, SlotsFillLowestIndexFirstAcrossInstances) {
  Recorder i0(0), i1(1);
  i0.delay_ms = i1.delay_ms = 20;  // the three STARTs arrive while the first batches run
  SequenceBatcher b(Config(2), {&i0, &i1}, nullptr);
  Answer a, c, d;
  ASSERT_TRUE(Send(b, Request(1, 10, true, false, &a)).ok());
  ASSERT_TRUE(Send(b, Request(2, 20, true, false, &c)).ok());
  ASSERT_TRUE(Send(b, Request(3, 30, true, false, &d)).ok());
  ASSERT_TRUE(a.Wait() && c.Wait() && d.Wait());
  // Sequence 1: slot 0 of instance 0; 2: slot 0 of instance 1; 3: slot 1 of instance 0.
  std::vector<Row> rows0;
  for (size_t n = 0; n < i0.batches(); ++n)
    for (const Row& r : i0.Batch(n))
      if (!r.padding) rows0.push_back(r);
  ASSERT_EQ(i1.Batch(0).size(), 1u);
  EXPECT_EQ(i1.Batch(0)[0].corrid, 2u);
  ASSERT_EQ(rows0.size(), 2u);
  EXPECT_EQ(rows0[0].corrid, 1u);
  EXPECT_EQ(rows0[1].corrid, 3u);
  EXPECT_EQ(b.ActiveSequences(), 3u);
}

TEST(SequenceBatcherTest, DirectPadsRowsBelowTheHighestBusySlot) {
  Recorder i0(0);
  SequenceBatcher b(Config(3), {&i0}, nullptr);
  Answer a0, b0;
  // Sequence 1 takes slot 0 and ends; sequence 2 holds slot 1.
  ASSERT_TRUE(Send(b, Request(1, 5, true, true, &a0)).ok());
  ASSERT_TRUE(a0.Wait());
  ASSERT_TRUE(Send(b, Request(2, 7, true, false, &b0)).ok());
  ASSERT_TRUE(b0.Wait());
  const std::vector<Row> batch = i0.Batch(i0.batches() - 1);
  // Slot 0 was freed and sequence 2 took it again (lowest first): no padding needed.
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_FALSE(batch[0].padding);
  // Now two sequences: 3 in slot 1; when only sequence 3 has a request, slot 0 is padding.
  Answer c0;
  ASSERT_TRUE(Send(b, Request(3, 1, true, false, &c0)).ok());
  ASSERT_TRUE(c0.Wait());
  const std::vector<Row> padded = i0.Batch(i0.batches() - 1);
  ASSERT_EQ(padded.size(), 2u);
  EXPECT_TRUE(padded[0].padding);
  EXPECT_EQ(padded[0].ready, 0);
  EXPECT_EQ(padded[0].start, 0);
  EXPECT_EQ(padded[0].corrid, 0u);
  EXPECT_FALSE(padded[1].padding);
  EXPECT_EQ(padded[1].ready, 1);
  EXPECT_EQ(padded[1].start, 1);
  EXPECT_EQ(padded[1].corrid, 3u);
}

TEST(SequenceBatcherTest, StateCarriesAcrossRequestsAndResetsOnStart) {
  Recorder i0(0);
  SequenceBatcher b(Config(4), {&i0}, nullptr);
  int32_t expected = 0;
  for (int32_t v : {3, 4, 5}) {
    Answer a;
    ASSERT_TRUE(Send(b, Request(9, v, v == 3, false, &a)).ok());
    ASSERT_TRUE(a.Wait());
    expected += v;
    EXPECT_TRUE(a.status.ok()) << a.status.message();
    EXPECT_EQ(a.output, expected);
    // The state output was not asked for: it is not in the response.
    EXPECT_EQ(a.names, std::vector<std::string>{"OUTPUT"});
  }
  Answer restart;
  ASSERT_TRUE(Send(b, Request(9, 100, true, true, &restart)).ok());
  ASSERT_TRUE(restart.Wait());
  EXPECT_EQ(restart.output, 100);  // START: the initial state again
}

TEST(SequenceBatcherTest, ClientErrorsAreTritons) {
  Recorder i0(0);
  SequenceBatcher b(Config(2), {&i0}, nullptr);
  auto r = Request(5, 1, false, false, nullptr);
  Status s = b.Enqueue(r);
  EXPECT_EQ(s.message(),
            "inference request for sequence 5 to model 'acc' must specify the START flag on the "
            "first request of the sequence");
  r = Request(0, 1, true, false, nullptr);
  EXPECT_EQ(b.Enqueue(r).message(),
            "inference request to model 'acc' must specify a non-zero or non-empty correlation ID");
  r = Request(6, 1, true, false, nullptr);
  r->batch_size = 2;
  EXPECT_EQ(b.Enqueue(r).message(),
            "inference request to model 'acc' must specify batch-size 1 due to requirements of "
            "sequence batcher");
  r = Request(7, 1, true, false, nullptr);
  r->correlation_id.is_text = true;
  r->correlation_id.text = "seven";
  EXPECT_EQ(b.Enqueue(r).message(),
            "sequence batching control 'CORRID' data-type is 'BYTES', but model 'acc' expects "
            "'UINT64'");
  EXPECT_NE(r, nullptr);  // refused requests stay with the caller
}

TEST(SequenceBatcherTest, BackloggedSequenceRunsWhenASlotFrees) {
  Recorder i0(0);
  SequenceBatcher b(Config(0), {&i0}, nullptr);  // one slot
  Answer a0, b0, a1;
  ASSERT_TRUE(Send(b, Request(1, 1, true, false, &a0)).ok());
  ASSERT_TRUE(a0.Wait());
  ASSERT_TRUE(Send(b, Request(2, 2, true, false, &b0)).ok());
  EXPECT_EQ(b.BackloggedSequences(), 1u);
  std::this_thread::sleep_for(milliseconds(50));
  {
    std::lock_guard<std::mutex> lock(b0.mu);
    EXPECT_FALSE(b0.done);  // waits for the slot
  }
  ASSERT_TRUE(Send(b, Request(1, 1, false, true, &a1)).ok());
  ASSERT_TRUE(a1.Wait() && b0.Wait());
  EXPECT_EQ(b0.output, 2);
  EXPECT_EQ(b.BackloggedSequences(), 0u);
}

TEST(SequenceBatcherTest, BackloggedSequencePastItsTimeoutFails) {
  Recorder i0(0);
  SequenceBatcher b(Config(0), {&i0}, nullptr);
  Answer a0, b0;
  ASSERT_TRUE(Send(b, Request(1, 1, true, false, &a0)).ok());
  auto r = Request(2, 2, true, false, &b0);
  r->timeout_us = 30'000;
  ASSERT_TRUE(Send(b, std::move(r)).ok());
  ASSERT_TRUE(b0.Wait());
  EXPECT_EQ(b0.status.code(), Status::Code::kUnavailable);
  EXPECT_EQ(b0.status.message(), "timeout of the corresponding sequence has been expired");
  EXPECT_EQ(b.BackloggedSequences(), 0u);
}

TEST(SequenceBatcherTest, AnIdIsForgottenOnceItsEndIsQueued) {
  Recorder i0(0);
  i0.delay_ms = 50;
  SequenceBatcher b(Config(0), {&i0}, nullptr);  // one slot
  Answer first, last, again;
  ASSERT_TRUE(Send(b, Request(4, 1, true, false, &first)).ok());
  ASSERT_TRUE(Send(b, Request(4, 2, false, true, &last)).ok());
  // The same id with START while the first sequence still holds the slot: a new sequence, which
  // waits in the backlog (Triton's test_backlog_same_correlation_id).
  ASSERT_TRUE(Send(b, Request(4, 10, true, false, &again)).ok());
  EXPECT_EQ(b.BackloggedSequences(), 1u);
  ASSERT_TRUE(first.Wait() && last.Wait() && again.Wait());
  EXPECT_EQ(last.output, 3);
  EXPECT_EQ(again.output, 10);  // its own initial state
  auto after_end = Request(4, 1, false, true, nullptr);
  EXPECT_TRUE(b.Enqueue(after_end).ok());  // the new sequence's own END
}

TEST(SequenceBatcherTest, DelayHookHoldsUntilSlotsHoldEnoughRequests) {
  Recorder i0(0);
  SequenceBatcherConfig c = Config(2);
  c.hold_until_queued = 3;
  SequenceBatcher b(c, {&i0}, nullptr);
  Answer a, b1, b2;
  ASSERT_TRUE(Send(b, Request(1, 1, true, false, &a)).ok());
  ASSERT_TRUE(Send(b, Request(2, 1, true, false, &b1)).ok());
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(i0.batches(), 0u);  // two queued: held
  ASSERT_TRUE(Send(b, Request(2, 1, false, false, &b2)).ok());
  ASSERT_TRUE(a.Wait() && b1.Wait() && b2.Wait());
  EXPECT_EQ(i0.Batch(0).size(), 2u);  // both sequences' first requests together
}

TEST(SequenceBatcherTest, IdleSequenceLosesItsSlot) {
  Recorder i0(0);
  SequenceBatcherConfig c = Config(1);
  c.idle_ns = 50'000'000;  // 50 ms
  SequenceBatcher b(c, {&i0}, nullptr);
  Answer a0, waiting;
  ASSERT_TRUE(Send(b, Request(1, 1, true, false, &a0)).ok());
  ASSERT_TRUE(a0.Wait());
  ASSERT_TRUE(Send(b, Request(2, 5, true, false, &waiting)).ok());  // backlogged behind 1
  ASSERT_TRUE(waiting.Wait());  // sequence 1 idled out, 2 took its slot
  EXPECT_EQ(waiting.output, 5);
  auto late = Request(1, 1, false, false, nullptr);
  EXPECT_NE(b.Enqueue(late).message().find("must specify the START flag"), std::string::npos);
}

TEST(SequenceBatcherTest, OldestBatchesOneRequestPerSequence) {
  Recorder i0(0);
  SequenceBatcherConfig c = Config(4, /*oldest=*/true);
  c.max_queue_delay_ns = 200'000'000;  // waits for a full batch of 4 or 200 ms
  SequenceBatcher b(c, {&i0}, nullptr);
  std::vector<std::unique_ptr<Answer>> answers;
  for (uint64_t s = 1; s <= 4; ++s) {
    answers.push_back(std::make_unique<Answer>());
    ASSERT_TRUE(Send(b, Request(s, int32_t(s), true, false, answers.back().get())).ok());
  }
  // Two more requests of sequence 1: they may not join the batch its first request is in.
  answers.push_back(std::make_unique<Answer>());
  ASSERT_TRUE(Send(b, Request(1, 10, false, false, answers.back().get())).ok());
  for (auto& a : answers) ASSERT_TRUE(a->Wait());
  const std::vector<Row> first = i0.Batch(0);
  ASSERT_EQ(first.size(), 4u);
  for (const Row& r : first) EXPECT_EQ(r.start, 1);
  EXPECT_EQ(answers.back()->output, 11);  // 1 + 10: the state of sequence 1 carried over
}

TEST(SequenceBatcherTest, StopFinishesWhatWasAccepted) {
  Recorder i0(0);
  i0.delay_ms = 5;
  auto b = std::make_unique<SequenceBatcher>(Config(0), std::vector<BatchExecutor*>{&i0}, nullptr);
  std::vector<std::unique_ptr<Answer>> answers;
  for (uint64_t s = 1; s <= 3; ++s)  // one slot: two sequences wait in the backlog
    for (int v = 0; v < 3; ++v) {
      answers.push_back(std::make_unique<Answer>());
      ASSERT_TRUE(Send(*b, Request(s, v, v == 0, false, answers.back().get())).ok());
    }
  b->Stop();
  for (auto& a : answers) {
    ASSERT_TRUE(a->Wait());
    EXPECT_TRUE(a->status.ok()) << a->status.message();
  }
  auto late = Request(9, 1, true, false, nullptr);
  EXPECT_EQ(b->Enqueue(late).code(), Status::Code::kUnavailable);
}

// Triton zeroes a STRING state's buffer after reading its initial_state file: the state starts as
// empty strings whatever the file holds (its own QA writes the int32 100 there); a size that is no
// whole number of 4-byte length prefixes is refused in Triton's words.
TEST(SequenceBatcherConfigTest, StringStateFromAFileStartsAsEmptyStrings) {
  testing::TempRepository repo;
  const auto dir = repo.root() / "m";
  std::filesystem::create_directories(dir / "initial_state");
  std::ofstream(dir / "initial_state" / "four", std::ios::binary).write("\x64\0\0\0", 4);
  std::ofstream(dir / "initial_state" / "five", std::ios::binary).write("\x64\0\0\0\0", 5);
  auto config = [](const char* file) {
    inference::ModelConfig c;
    const std::string text =
        std::string(
            "name: 'm' max_batch_size: 4 sequence_batching { state [ { input_name: 'IN_STATE' "
            "output_name: 'OUT_STATE' data_type: TYPE_STRING dims: [ 1 ] initial_state: [ { "
            "data_type: TYPE_STRING dims: [ 1 ] data_file: '") +
        file + "' } ] } ] }";
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &c));
    return c;
  };
  auto four = ReadSequenceBatcherConfig(config("four"), dir);
  ASSERT_TRUE(four.ok()) << four.status().message();
  ASSERT_EQ(four->states.size(), 1u);
  EXPECT_EQ(four->states[0].initial, std::vector<uint8_t>(4, 0));  // one empty string
  auto five = ReadSequenceBatcherConfig(config("five"), dir);
  ASSERT_FALSE(five.ok());
  EXPECT_EQ(five.status().message(),
            "model 'm': The total byte size must be a multiple of 4 when setting the sequence "
            "state to zero.");
}

}  // namespace
}  // namespace nereid
