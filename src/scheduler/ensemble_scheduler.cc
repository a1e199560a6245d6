#include "scheduler/ensemble_scheduler.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <optional>
#include <set>

#include "common/logging.h"
#include "config/ensemble_config.h"
#include "nereid/backend.h"
#include "scheduler/scheduler_factory.h"
#include "trace/trace.h"

namespace nereid {

// An ensemble tensor of one request at one iteration: a view of a client's input or of a step's
// output buffer, kept alive by 'keep' (the client's payload, or the step's response). A step that
// left an output out writes a placeholder (data null), so that what reads it still runs.
struct EnsembleScheduler::Tensor {
  DataType datatype = DataType::kInvalid;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t byte_size = 0;
  MemoryLocation location;
  std::shared_ptr<const void> keep;
  bool present = false;
  bool from_batching = false;  // its writer batches: the client of a batching ensemble, or a step
};

// One client request on its way through the steps. A decoupled step writes its outputs once per
// response: each write is the tensor's next iteration, and a step runs once per iteration for
// which every tensor it reads exists (Triton's rule).
class EnsembleScheduler::Context {
 public:
  std::unique_ptr<InferenceRequest> request;
  ResponseCallback respond;  // the client's callback (decoupled ensembles call it more than once)
  uint64_t start_ns = 0;
  std::mutex mu;
  // By tensor: its values by iteration, each kept until everything that reads it has (the steps
  // that use it and, for a requested output, the response), and the iteration its next write gets.
  struct Entry {
    uint32_t iteration;
    Tensor tensor;
    int uses;
  };
  std::vector<std::vector<Entry>> tensors;
  std::vector<uint32_t> next_iteration;
  std::vector<char> needed;  // by tensor: feeds an output the client asked for
  std::vector<char> used;    // by step: its outputs feed one
  int running = 0;           // step requests sent and not finally answered
  bool final_sent = false;   // decoupled: the last response went out with the final flag
  Status error;
  std::mutex send_mu;  // decoupled: the client's responses leave in the order they were made

  const Tensor* Find(int t, uint32_t iteration) const {
    for (const Entry& e : tensors[t])
      if (e.iteration == iteration) return &e.tensor;
    return nullptr;
  }
  // One of the value's readers is done with it.
  void Use(int t, uint32_t iteration) {
    auto& values = tensors[t];
    for (auto it = values.begin(); it != values.end(); ++it)
      if (it->iteration == iteration) {
        if (--it->uses <= 0) values.erase(it);
        return;
      }
  }
};

// Triton's max_inflight_requests: step requests of one step in flight across all of the
// ensemble's requests. A step without room waits in line, costing a queue entry and no thread:
// the thread that made it ready (an HTTP or gRPC I/O thread, an upstream model's instance or
// response thread) goes on serving others. A step that finishes hands its slot to the first in
// line, which its finishing thread then sends.
class EnsembleScheduler::StepLimiter {
 public:
  explicit StepLimiter(uint32_t limit) : limit_(limit) {}
  // Takes a slot for 'ready' (true), or puts it in line (false; 'ready' is moved from).
  bool Admit(Ready& ready) {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_flight_ < limit_ && waiting_.empty()) {
      ++in_flight_;
      return true;
    }
    waiting_.push_back(std::move(ready));
    return false;
  }
  // Gives a slot back: the first in line, if any, takes it and is returned to be sent.
  std::optional<Ready> Release() {
    std::lock_guard<std::mutex> lock(mu_);
    if (waiting_.empty()) {
      if (in_flight_ > 0) --in_flight_;
      return std::nullopt;
    }
    Ready next = std::move(waiting_.front());
    waiting_.pop_front();
    next.waited = true;
    return next;
  }

 private:
  const uint32_t limit_;
  std::mutex mu_;
  uint32_t in_flight_ = 0;
  std::deque<Ready> waiting_;
};

EnsembleWiring EnsembleWiring::Of(const inference::ModelConfig& config) {
  EnsembleWiring w;
  std::map<std::string, int> index;  // tensor name -> its index in tensors
  auto tensor_index = [&](const std::string& name) {
    auto [it, fresh] = index.emplace(name, static_cast<int>(w.tensors.size()));
    if (fresh) w.tensors.push_back(name);
    return it->second;
  };
  for (const auto& in : config.input()) w.inputs.emplace_back(in.name(), tensor_index(in.name()));
  for (const auto& out : config.output()) {
    w.outputs[out.name()] = tensor_index(out.name());
    w.output_dims[out.name()].assign(out.dims().begin(), out.dims().end());
  }
  for (const auto& s : config.ensemble_scheduling().step()) {
    Step step;
    step.model = s.model_name();
    step.version = s.model_version();
    // Sorted by the model's tensor names: a step's request lists them in a fixed order.
    std::map<std::string, std::string> in(s.input_map().begin(), s.input_map().end());
    std::map<std::string, std::string> out(s.output_map().begin(), s.output_map().end());
    for (const auto& [model_input, tensor] : in)
      step.inputs.emplace_back(model_input, tensor_index(tensor));
    for (const auto& [model_output, tensor] : out)
      step.outputs.emplace_back(model_output, tensor_index(tensor));
    w.steps.push_back(std::move(step));
  }
  w.producer.assign(w.tensors.size(), -1);
  w.readers.assign(w.tensors.size(), {});
  for (int i = 0; i < static_cast<int>(w.steps.size()); ++i) {
    for (const auto& [name, t] : w.steps[i].outputs) w.producer[t] = i;
    for (const auto& [name, t] : w.steps[i].inputs)
      if (std::find(w.readers[t].begin(), w.readers[t].end(), i) == w.readers[t].end()) {
        w.readers[t].push_back(i);
        w.steps[i].reads.push_back(t);
      }
  }
  w.is_output.assign(w.tensors.size(), 0);
  for (const auto& [name, t] : w.outputs) w.is_output[t] = 1;
  return w;
}

EnsembleScheduler::EnsembleScheduler(const inference::ModelConfig& config,
                                     RequestObserver* requests, ExecutionObserver* executions,
                                     InferApiLink* link)
    : name_(config.name()),
      max_batch_size_(config.max_batch_size()),
      decoupled_(config.model_transaction_policy().decoupled()),
      requests_(requests),
      executions_(executions),
      link_(link),
      wiring_(EnsembleWiring::Of(config)) {
  if (const uint32_t limit = config.ensemble_scheduling().max_inflight_requests(); limit > 0)
    for (size_t i = 0; i < wiring_.steps.size(); ++i)
      limiters_.push_back(std::make_unique<StepLimiter>(limit));
}

EnsembleScheduler::~EnsembleScheduler() { Stop(); }

Status EnsembleScheduler::Enqueue(std::unique_ptr<InferenceRequest>& request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Unavailable("in ensemble '" + name_ + "', the model is stopping");
    ++in_flight_;
  }
  auto context = std::make_shared<Context>();
  Context& c = *context;
  c.start_ns = request->times.received_ns ? request->times.received_ns : SteadyNowNs();
  c.tensors.resize(wiring_.tensors.size());
  c.next_iteration.assign(wiring_.tensors.size(), 0);
  c.needed.assign(wiring_.tensors.size(), 0);
  c.used.assign(wiring_.steps.size(), 0);
  // The steps that lead to what the client asked for (Model::Validate has filled in every
  // output when it named none), walking back from those outputs.
  std::vector<int> todo;
  for (const auto& wanted : request->outputs)
    if (auto it = wiring_.outputs.find(wanted.name);
        it != wiring_.outputs.end() && !c.needed[it->second]) {
      c.needed[it->second] = 1;
      todo.push_back(it->second);
    }
  while (!todo.empty()) {
    const int p = wiring_.producer[todo.back()];
    todo.pop_back();
    if (p < 0 || c.used[p]) continue;
    c.used[p] = 1;
    for (const auto& [name, t] : wiring_.steps[p].inputs)
      if (!c.needed[t]) {
        c.needed[t] = 1;
        todo.push_back(t);
      }
  }
  std::vector<Update> updates;
  for (const InferInput& in : request->inputs) {
    auto it = std::find_if(wiring_.inputs.begin(), wiring_.inputs.end(),
                           [&](const auto& i) { return i.first == in.name; });
    if (it == wiring_.inputs.end()) continue;  // Model::Validate refused unknown inputs
    updates.push_back(
        Write(c, it->second,
              Tensor{in.datatype, in.shape, in.data, in.byte_size, in.location,
                     in.owned ? in.owned : request->payload, true, max_batch_size_ > 0}));
  }
  c.respond = std::move(request->on_complete);
  c.request = std::move(request);
  std::vector<Ready> ready;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    ReadyLocked(context, updates, &ready);
    c.running = static_cast<int>(ready.size());
  }
  if (ready.empty()) {
    Finish(context);
    return Status::Ok();
  }
  Launch(ready);
  return Status::Ok();
}

EnsembleScheduler::Update EnsembleScheduler::Write(Context& c, int t, Tensor tensor) const {
  const uint32_t iteration = c.next_iteration[t]++;
  int uses = wiring_.is_output[t] && c.needed[t] ? 1 : 0;  // the response
  for (int s : wiring_.readers[t]) uses += c.used[s];
  c.tensors[t].push_back({iteration, std::move(tensor), uses});
  return {t, iteration};
}

void EnsembleScheduler::ReadyLocked(const std::shared_ptr<Context>& context,
                                    const std::vector<Update>& updates, std::vector<Ready>* ready) {
  Context& c = *context;
  std::set<std::pair<int, uint32_t>> steps;  // (step, iteration), each once
  for (const Update& update : updates)
    for (int s : wiring_.readers[update.first])
      if (c.used[s] && std::all_of(wiring_.steps[s].reads.begin(), wiring_.steps[s].reads.end(),
                                   [&](int in) { return c.Find(in, update.second) != nullptr; }))
        steps.emplace(s, update.second);
  for (const auto& [s, iteration] : steps) {
    ready->push_back({s, StepRequest(context, s, iteration)});
    for (int t : wiring_.steps[s].reads) c.Use(t, iteration);
  }
}

std::unique_ptr<InferenceRequest> EnsembleScheduler::StepRequest(
    const std::shared_ptr<Context>& context, int index, uint32_t iteration) {
  const Step& step = wiring_.steps[index];
  const InferenceRequest& top = *context->request;
  auto r = std::make_unique<InferenceRequest>();
  r->model_name = step.model;
  r->model_version = step.version;
  // Each step carries the client's id, sequence, priority, timeout and parameters (Triton's).
  r->id = top.id;
  r->priority = top.priority;
  r->timeout_us = top.timeout_us;
  r->deadline_ns = top.deadline_ns;
  r->parameters = top.parameters;
  r->flags = top.flags;
  r->correlation_id = top.correlation_id;
  r->cancel = top.cancel;
  r->ensemble_step = true;
  // A traced ensemble's steps are traced as its children (their parent_id, their model spans
  // under its own).
  if (top.trace) r->trace = top.trace->Child(step.model, step.version);
  for (const auto& [name, t] : step.inputs) {
    const Tensor& tensor = *context->Find(t, iteration);
    if (!tensor.present) continue;  // left out upstream: the model may take it as optional
    if (wiring_.producer[t] >= 0)
      CountHandoff(HandoffKind::kEnsemble, tensor.location.type == MemoryType::kGpu,
                   tensor.byte_size);
    InferInput in;
    in.name = name;
    in.datatype = tensor.datatype;
    in.shape = tensor.shape;
    in.from_batching = tensor.from_batching;
    in.Borrow(tensor.data, tensor.byte_size, tensor.location, tensor.keep);
    r->inputs.push_back(std::move(in));
  }
  for (const auto& [name, t] : step.outputs)
    if (context->needed[t]) {
      RequestedOutput& out = r->outputs.emplace_back();
      out.name = name;
      out.device_ok = !wiring_.is_output[t];  // read by steps only: it may stay on a GPU
    }
  r->times.received_ns = SteadyNowNs();
  r->on_complete = [this, context, index](std::unique_ptr<InferenceResponse> response) {
    StepDone(context, index, std::move(response));
  };
  return r;
}

void EnsembleScheduler::Launch(std::vector<Ready>& ready) {
  // One thread at a time sends: a step that fails at once (or a request whose client left while
  // in line) finishes inside the loop and may release a slot, whose next holder joins the outbox
  // instead of deepening the stack.
  {
    std::lock_guard<std::mutex> lock(launch_mu_);
    for (Ready& r : ready) outbox_.push_back(std::move(r));
    ready.clear();
    if (launching_) return;
    launching_ = true;
  }
  for (;;) {
    Ready next;
    {
      std::lock_guard<std::mutex> lock(launch_mu_);
      if (outbox_.empty()) {
        launching_ = false;
        return;
      }
      next = std::move(outbox_.front());
      outbox_.pop_front();
    }
    if (!next.waited && !limiters_.empty() && !limiters_[next.step]->Admit(next)) continue;
    // A request that waited in line may have lost its client meanwhile: nothing is computed.
    Status s = next.waited && next.request->cancelled() ? Cancelled("request cancelled")
                                                        : link_->Submit(next.request);
    if (!s.ok()) {  // not taken: answered here, as if the step had failed
      auto response = std::make_unique<InferenceResponse>();
      response->status = std::move(s);
      ResponseCallback done = std::move(next.request->on_complete);
      next.request.reset();
      done(std::move(response));
    }
  }
}

void EnsembleScheduler::StepDone(const std::shared_ptr<Context>& context, int index,
                                 std::unique_ptr<InferenceResponse> response) {
  const Step& step = wiring_.steps[index];
  // A decoupled model answers more than once; only its final answer ends the step.
  const bool final = response->final;
  std::vector<Ready> ready;
  std::unique_ptr<InferenceResponse> out;  // decoupled: a response for the client
  bool finished = false;
  std::unique_lock<std::mutex> lock(context->mu);
  Context& c = *context;
  if (!response->status.ok()) {
    if (c.error.ok())
      c.error = Status(response->status.code(),
                       "in ensemble '" + name_ + "', " + response->status.message());
  } else if (c.error.ok() && !response->empty_final) {
    std::shared_ptr<InferenceResponse> kept(std::move(response));
    std::vector<Update> updates;
    for (const auto& output : step.outputs) {
      const int t = output.second;
      if (!c.needed[t]) continue;
      auto o = std::find_if(kept->outputs.begin(), kept->outputs.end(),
                            [&](const InferOutput& x) { return x.name == output.first; });
      Tensor tensor;  // a placeholder unless the step wrote it
      if (o != kept->outputs.end())
        tensor = Tensor{o->datatype,
                        o->shape,
                        o->buffer.data(),
                        o->buffer.size(),
                        o->buffer.location(),
                        std::shared_ptr<const void>(kept, o->bytes()),
                        true,
                        kept->model_batches};
      updates.push_back(Write(c, t, std::move(tensor)));
    }
    ReadyLocked(context, updates, &ready);
    if (decoupled_) out = DecoupledResponseLocked(c, updates);
  }
  if (final) --c.running;
  if (!c.error.ok()) ready.clear();
  c.running += static_cast<int>(ready.size());
  finished = c.running == 0;
  if (decoupled_ && (out || finished)) {
    // Sent in order: the lock on sending is taken before the context's is let go.
    std::unique_lock<std::mutex> sending(c.send_mu);
    lock.unlock();
    if (out) {
      out->final = c.final_sent = finished && c.error.ok();
      c.respond(std::move(out));
    }
    sending.unlock();
  } else {
    lock.unlock();
  }
  // The slot goes to the next request in line, whichever client's it is (counted as running by
  // its own context when it was made ready).
  if (final && !limiters_.empty())
    if (std::optional<Ready> next = limiters_[index]->Release()) ready.push_back(std::move(*next));
  Launch(ready);
  if (finished) Finish(context);
}

std::unique_ptr<InferenceResponse> EnsembleScheduler::DecoupledResponseLocked(
    Context& c, const std::vector<Update>& updates) {
  // A response goes out when the update completes an iteration of every requested output.
  for (const Update& update : updates) {
    const int t = update.first;
    const uint32_t iteration = update.second;
    if (!c.needed[t] || !wiring_.is_output[t]) continue;
    const auto& wanted = c.request->outputs;
    if (!std::all_of(wanted.begin(), wanted.end(),
                     [&](const auto& w) { return c.Find(wiring_.outputs.at(w.name), iteration); }))
      continue;
    auto response = std::make_unique<InferenceResponse>();
    if (Status s = FillOutputs(c, iteration, *response); !s.ok()) {
      c.error = s;
      return nullptr;
    }
    for (const auto& w : wanted) c.Use(wiring_.outputs.at(w.name), iteration);
    return response;
  }
  return nullptr;
}

Status EnsembleScheduler::FillOutputs(Context& c, uint32_t iteration,
                                      InferenceResponse& response) const {
  const InferenceRequest& request = *c.request;
  for (const RequestedOutput& wanted : request.outputs) {
    const int t = wiring_.outputs.at(wanted.name);
    const Tensor& tensor = *c.Find(t, iteration);
    if (!tensor.present) {  // a step left it out: the response lacks it (Triton's)
      LOG_VERBOSE(1) << "in ensemble '" << name_ << "': Composing models did not output tensor "
                     << wiring_.tensors[t];
      continue;
    }
    InferOutput out;
    out.name = wanted.name;
    out.datatype = tensor.datatype;
    out.shape = EnsembleReshape(tensor.shape, tensor.from_batching, max_batch_size_ > 0,
                                wiring_.output_dims.at(wanted.name));
    out.binary = wanted.binary;
    out.buffer =
        Buffer(const_cast<uint8_t*>(tensor.data), tensor.byte_size, tensor.location, tensor.keep);
    if (wanted.has_destination) {
      RETURN_IF_ERROR(CheckOutputRegion(wanted, wanted.name, tensor.byte_size));
      Buffer region(wanted.destination.data(), tensor.byte_size, wanted.destination.location(),
                    wanted.destination.owner());
      RETURN_IF_ERROR(CopyIntoRegion(region, tensor.data, tensor.byte_size));
      out.buffer = region;
      out.in_shared_memory = true;
    }
    response.outputs.push_back(std::move(out));
  }
  // Every ensemble response carries the request's sequence id and flags (Triton's).
  auto parameter = [&](const char* name, RequestParameter::Type type) -> RequestParameter& {
    RequestParameter& p = response.parameters.emplace_back();
    p.name = name;
    p.type = type;
    return p;
  };
  if (request.correlation_id.is_text)
    parameter("sequence_id", RequestParameter::Type::kString).string_value =
        request.correlation_id.text;
  else
    parameter("sequence_id", RequestParameter::Type::kInt64).int_value =
        static_cast<int64_t>(request.correlation_id.number);
  parameter("sequence_start", RequestParameter::Type::kBool).bool_value =
      (request.flags & NEREID_REQUEST_FLAG_SEQUENCE_START) != 0;
  parameter("sequence_end", RequestParameter::Type::kBool).bool_value =
      (request.flags & NEREID_REQUEST_FLAG_SEQUENCE_END) != 0;
  response.model_name = request.model_name;
  response.model_version = request.model_version;
  response.id = request.id;
  return Status::Ok();
}

void EnsembleScheduler::Finish(const std::shared_ptr<Context>& context) {
  Context& c = *context;
  std::unique_ptr<InferenceResponse> response;
  Status error;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    error = c.error;
    if (error.ok() && !decoupled_) {
      // Every requested output must exist by now; otherwise no step was left that could write it.
      const auto& wanted = c.request->outputs;
      if (!std::all_of(wanted.begin(), wanted.end(),
                       [&](const auto& w) { return c.Find(wiring_.outputs.at(w.name), 0); }))
        error = InvalidArgument("in ensemble '" + name_ +
                                "', unexpected deadlock, at least one output is not set while no "
                                "more ensemble steps can be made");
      else
        response = std::make_unique<InferenceResponse>();
      if (response) error = FillOutputs(c, 0, *response);
    }
  }
  std::unique_ptr<InferenceRequest> request = std::move(c.request);
  ResponseCallback respond = std::move(c.respond);
  const uint64_t now = SteadyNowNs();
  if (!error.ok()) {
    ReportEnd(requests_, RequestRecord::End::kFailure, FailureReason::kBackend, *request, now);
    response = ErrorResponse(*request, std::move(error));
  } else {
    // An ensemble request is one execution of its batch size (Triton does not batch them), on no
    // instance or device of its own (its steps' models account for theirs); the whole request
    // counts as its compute (it has no compute start of its own).
    ExecutionRecord execution;
    execution.start_ns = c.start_ns;
    execution.end_ns = now;
    execution.rows = max_batch_size_ > 0 ? request->batch_size : 1;
    execution.requests = 1;
    if (executions_ != nullptr) executions_->OnExecution(execution);
    ReportEnd(requests_, RequestRecord::End::kSuccess, FailureReason::kOther, *request, now,
              &execution);
    if (decoupled_ && !c.final_sent) {
      // The last step's answer carried no response of the ensemble's: the flag alone ends it.
      response = std::make_unique<InferenceResponse>();
      response->model_name = request->model_name;
      response->model_version = request->model_version;
      response->id = request->id;
      response->empty_final = true;
    }
  }
  request.reset();
  {
    std::lock_guard<std::mutex> sending(c.send_mu);
    if (respond && response) respond(std::move(response));
  }
  Release();
}

void EnsembleScheduler::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--in_flight_ == 0) idle_.notify_all();
}

void EnsembleScheduler::Stop() { StopUntil(std::chrono::steady_clock::time_point::max()); }

bool EnsembleScheduler::StopUntil(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  const auto idle = [&] { return in_flight_ == 0; };
  if (deadline == std::chrono::steady_clock::time_point::max()) {
    idle_.wait(lock, idle);
    return true;
  }
  return idle_.wait_until(lock, deadline, idle);
}

size_t EnsembleScheduler::Pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

std::vector<int64_t> EnsembleReshape(const std::vector<int64_t>& shape, bool from_batching,
                                     bool reader_batches, const std::vector<int64_t>& dims) {
  if (from_batching == reader_batches) return shape;
  if (reader_batches) {
    if (!DimsMatch(shape, dims)) return shape;  // taken as already batched
    std::vector<int64_t> batched{1};
    batched.insert(batched.end(), shape.begin(), shape.end());
    return batched;
  }
  if (DimsMatch(shape, dims) || shape.empty() || shape[0] != 1) return shape;
  return {shape.begin() + 1, shape.end()};
}

StatusOr<std::unique_ptr<Scheduler>> MakeEnsembleScheduler(SchedulerContext& context) {
  if (context.infer == nullptr)
    return Unavailable("ensemble '" + context.config.name() + "': no server to send its steps to");
  return std::unique_ptr<Scheduler>(std::make_unique<EnsembleScheduler>(
      context.config, context.requests, context.executions, context.infer));
}

}  // namespace nereid
