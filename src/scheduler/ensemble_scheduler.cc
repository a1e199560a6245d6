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
    EnsembleTensor tensor;
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

  const EnsembleTensor* Find(int t, uint32_t iteration) const {
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
              EnsembleTensor{in.datatype, in.shape, in.data, in.byte_size, in.location,
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

EnsembleScheduler::Update EnsembleScheduler::Write(Context& c, int t, EnsembleTensor tensor) const {
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
  auto r = MakeStepRequest(
      wiring_, index, *context->request, [&](int t) { return context->Find(t, iteration); },
      context->needed);
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
      EnsembleTensor tensor;  // a placeholder unless the step wrote it
      if (o != kept->outputs.end())
        tensor = EnsembleTensor{o->datatype,
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
    if (Status s = FillEnsembleResponse(
            wiring_, max_batch_size_ > 0, *c.request, [&](int t) { return c.Find(t, iteration); },
            *response);
        !s.ok()) {
      c.error = s;
      return nullptr;
    }
    for (const auto& w : wanted) c.Use(wiring_.outputs.at(w.name), iteration);
    return response;
  }
  return nullptr;
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
      if (response)
        error = FillEnsembleResponse(
            wiring_, max_batch_size_ > 0, *c.request, [&](int t) { return c.Find(t, 0); },
            *response);
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

StatusOr<std::unique_ptr<Scheduler>> MakeEnsembleScheduler(SchedulerContext& context) {
  if (context.infer == nullptr)
    return Unavailable("ensemble '" + context.config.name() + "': no server to send its steps to");
  return std::unique_ptr<Scheduler>(std::make_unique<EnsembleScheduler>(
      context.config, context.requests, context.executions, context.infer));
}

}  // namespace nereid
