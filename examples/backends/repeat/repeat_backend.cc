// "repeat": the minimal example backend of docs/backend-abi.md, built with include/ alone on its
// include path. It shows the parts of ABI v2 a real backend needs:
//
//   - asynchronous completion: Execute hands the batch to the instance's worker thread and returns;
//     the worker completes each request afterwards;
//   - decoupled responses: a decoupled model answers each request with 'repeat' responses (request
//     parameter, default 3) and then the final flag;
//   - output placement: the output goes where the config's "output_memory" parameter prefers
//     (CPU or CPU_PINNED), and the backend reports where the server put it.
//
// Model: input IN (INT32, any shape), outputs OUT (IN * response number, 1-based), MEMORY_TYPE
// (INT32 [1]: the NereidMemoryType of OUT's buffer) and AFTER_EXECUTE (INT32 [1]: 1 when the
// request completed after Execute returned).
//
// A model shaped as Triton's own repeat backend's (its QA model repeat_int32, which
// simple_grpc_custom_repeat.py uses: decoupled, inputs IN (INT32 [-1]), DELAY (UINT32 [-1]) and
// WAIT (UINT32 [1]), outputs OUT and IDX) gets that backend's behaviour instead: one response per
// element of IN, OUT = [IN[i]] and IDX = [i], each after DELAY[i] ms, then WAIT ms before the final
// flag.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nereid/backend_util.h"

namespace {

namespace nb = nereid::backend;

struct Job {
  NereidRequest* request;
  uint64_t execute;  // the Execute call that handed it over
};

struct Instance {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> queue;
  uint64_t executes_started = 0;
  uint64_t executes_finished = 0;  // Execute calls whose work is done (about to return)
  bool stop = false;
  bool decoupled = false;
  bool batching = false;  // max_batch_size > 0: the first dimension of every tensor is the batch
  bool triton_repeat = false;  // shaped as Triton's repeat_int32 (a DELAY input)
  NereidMemoryType output_memory = NEREID_MEMORY_CPU;
  std::thread worker;
};

// One response: OUT = IN * k, plus where OUT landed and whether Execute had returned.
nb::Status Respond(Instance& inst, NereidRequest* request, int32_t k, bool after_execute) {
  ASSIGN_OR_RETURN(NereidTensor in, nb::Input(request, "IN"));
  if (in.datatype != NEREID_TYPE_INT32) return nb::InvalidArgument("IN must be INT32");
  ASSIGN_OR_RETURN(NereidBuffer out,
                   nb::AllocateOutput(request, "OUT", nb::DataType::kInt32, nb::Shape(in),
                                      in.byte_size, inst.output_memory));
  const auto* src = static_cast<const int32_t*>(in.data);
  auto* dst = static_cast<int32_t*>(out.data);
  for (uint64_t i = 0; i < in.byte_size / 4; ++i) dst[i] = src[i] * k;
  // One value per batch row: shape [rows, 1] when the model batches, [1] when it does not.
  const int64_t rows = inst.batching && in.dims_count > 0 ? in.shape[0] : 1;
  const std::vector<int64_t> shape =
      inst.batching ? std::vector<int64_t>{rows, 1} : std::vector<int64_t>{1};
  const int32_t facts[2] = {static_cast<int32_t>(out.memory_type), after_execute ? 1 : 0};
  const char* names[2] = {"MEMORY_TYPE", "AFTER_EXECUTE"};
  for (int f = 0; f < 2; ++f) {
    ASSIGN_OR_RETURN(NereidBuffer b, nb::AllocateOutput(request, names[f], nb::DataType::kInt32,
                                                        shape, static_cast<uint64_t>(rows) * 4));
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(b.data) + 4 * r, &facts[f], 4);
  }
  return nb::Status::Ok();
}

int64_t RepeatCount(NereidRequest* request) {
  for (uint32_t i = 0; i < NereidRequestParameterCount(request); ++i) {
    NereidParameter p;
    if (NereidError* e = NereidRequestParameter(request, i, &p)) {
      NereidErrorDelete(e);
      continue;
    }
    if (std::string(p.name) == "repeat" && p.type == NEREID_PARAMETER_INT64) return p.int_value;
  }
  return 3;
}

// A UINT32 or INT32 input in host memory, as numbers.
nb::StatusOr<std::vector<int64_t>> Values(NereidRequest* request, const char* name) {
  ASSIGN_OR_RETURN(NereidTensor t, nb::Input(request, name));
  if ((t.datatype != NEREID_TYPE_INT32 && t.datatype != NEREID_TYPE_UINT32) ||
      t.memory_type == NEREID_MEMORY_GPU)
    return nb::InvalidArgument(std::string(name) + " must be INT32 or UINT32 in host memory");
  std::vector<int64_t> out(t.byte_size / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t v;
    std::memcpy(&v, static_cast<const char*>(t.data) + 4 * i, 4);
    out[i] = t.datatype == NEREID_TYPE_INT32 ? static_cast<int32_t>(v) : v;
  }
  return out;
}

// Triton's repeat backend: one response per element of IN, each after its DELAY.
nb::Status RepeatAsTriton(NereidRequest* request) {
  ASSIGN_OR_RETURN(const std::vector<int64_t> in, Values(request, "IN"));
  ASSIGN_OR_RETURN(const std::vector<int64_t> delay, Values(request, "DELAY"));
  ASSIGN_OR_RETURN(const std::vector<int64_t> wait, Values(request, "WAIT"));
  if (delay.size() != in.size())
    return nb::InvalidArgument("expected IN and DELAY size to match, got " +
                               std::to_string(in.size()) + " and " + std::to_string(delay.size()));
  int64_t total_ms = wait.empty() ? 0 : wait[0];
  for (int64_t d : delay) total_ms += d;
  if (total_ms > 60'000)  // the instance's one worker thread sleeps for it
    return nb::InvalidArgument("DELAY and WAIT may add up to 60000 ms, got " +
                               std::to_string(total_ms));
  const std::vector<std::string> wanted = nb::RequestedOutputs(request);
  auto want = [&](const char* name) {
    return wanted.empty() || std::find(wanted.begin(), wanted.end(), name) != wanted.end();
  };
  for (size_t i = 0; i < in.size(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay[i]));
    if (NereidRequestIsCancelled(request)) return nb::Cancelled("request cancelled");
    const int32_t values[2] = {static_cast<int32_t>(in[i]), static_cast<int32_t>(i)};
    const char* names[2] = {"OUT", "IDX"};
    const nb::DataType types[2] = {nb::DataType::kInt32, nb::DataType::kUint32};
    for (int o = 0; o < 2; ++o) {
      if (!want(names[o])) continue;
      ASSIGN_OR_RETURN(NereidBuffer b, nb::AllocateOutput(request, names[o], types[o], {1}, 4));
      std::memcpy(b.data, &values[o], 4);
    }
    RETURN_IF_ERROR(nb::FromError(NereidRequestSend(request, 0)));
  }
  if (!wait.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(wait[0]));
  return nb::Status::Ok();
}

void Serve(Instance& inst, NereidRequest* request, bool after_execute) {
  if (NereidRequestIsCancelled(request))
    return nb::Complete(request, nb::Cancelled("cancelled before it ran"));
  if (inst.triton_repeat) return nb::Complete(request, RepeatAsTriton(request));
  if (!inst.decoupled) return nb::Complete(request, Respond(inst, request, 1, after_execute));
  const int64_t n = RepeatCount(request);
  if (n < 0 || n > 1000)
    return nb::Complete(request, nb::InvalidArgument("repeat must be 0..1000"));
  for (int64_t k = 1; k <= n; ++k) {
    nb::Status s = Respond(inst, request, static_cast<int32_t>(k), after_execute);
    if (s.ok()) s = nb::FromError(NereidRequestSend(request, 0));
    if (!s.ok()) return nb::Complete(request, s);
  }
  nb::Complete(request, nb::Status::Ok());  // nothing pending: only the final flag
}

void Work(Instance* inst) {
  for (;;) {
    Job job;
    bool after_execute;
    {
      std::unique_lock<std::mutex> lock(inst->mu);
      inst->cv.wait(lock, [&] { return inst->stop || !inst->queue.empty(); });
      if (inst->queue.empty()) return;  // stopping, and nothing left
      job = inst->queue.front();
      inst->queue.pop_front();
      // Wait for the Execute call that handed the request over to be done with it.
      inst->cv.wait(lock, [&] { return inst->executes_finished >= job.execute; });
      after_execute = inst->executes_finished >= job.execute;
    }
    Serve(*inst, job.request, after_execute);
  }
}

// The config is JSON; this example reads its two settings with plain string searches (a real
// backend uses a JSON parser).
NereidMemoryType OutputMemory(const std::string& config) {
  return config.find("\"CPU_PINNED\"") != std::string::npos ? NEREID_MEMORY_CPU_PINNED
                                                            : NEREID_MEMORY_CPU;
}
bool Batching(const std::string& config) {
  return config.find("\"max_batch_size\":0") == std::string::npos &&
         config.find("\"max_batch_size\"") != std::string::npos;
}

}  // namespace

extern "C" {

NEREID_EXPORT uint32_t NereidBackendApiVersion(void) { return NEREID_BACKEND_API_VERSION; }

NEREID_EXPORT NereidError* NereidBackendInitialize(void) {
  return nb::Guard([] { return nb::CheckServerVersion(); });
}

NEREID_EXPORT NereidError* NereidModelInitialize(NereidModel*) { return nullptr; }
NEREID_EXPORT NereidError* NereidModelFinalize(NereidModel*) { return nullptr; }

NEREID_EXPORT NereidError* NereidInstanceInitialize(NereidInstance* instance) {
  return nb::Guard([&]() -> nb::Status {
    auto* inst = new Instance();
    NereidModel* model = NereidInstanceModel(instance);
    inst->decoupled = NereidModelIsDecoupled(model) != 0;
    const std::string config = NereidModelConfigJson(model);
    inst->output_memory = OutputMemory(config);
    inst->batching = Batching(config);
    inst->triton_repeat = inst->decoupled && config.find("\"DELAY\"") != std::string::npos;
    inst->worker = std::thread(Work, inst);
    NereidInstanceSetState(instance, inst);
    return nb::Status::Ok();
  });
}

// The server finalizes an instance only after every request it handed over was completed.
NEREID_EXPORT NereidError* NereidInstanceFinalize(NereidInstance* instance) {
  auto* inst = static_cast<Instance*>(NereidInstanceState(instance));
  {
    std::lock_guard<std::mutex> lock(inst->mu);
    inst->stop = true;
  }
  inst->cv.notify_all();
  inst->worker.join();
  delete inst;
  return nullptr;
}

// Takes the batch and returns at once; the worker completes each request later, once this call is
// done with it.
NEREID_EXPORT NereidError* NereidInstanceExecute(NereidInstance* instance, NereidRequest** requests,
                                                 uint32_t count) {
  auto* inst = static_cast<Instance*>(NereidInstanceState(instance));
  std::unique_lock<std::mutex> lock(inst->mu);
  const uint64_t call = ++inst->executes_started;
  for (uint32_t i = 0; i < count; ++i) inst->queue.push_back(Job{requests[i], call});
  inst->cv.notify_all();
  lock.unlock();
  // ... a real backend would launch its work here (a GPU stream, a stub process) ...
  lock.lock();
  inst->executes_finished = call;
  inst->cv.notify_all();
  return nullptr;
}

}  // extern "C"
