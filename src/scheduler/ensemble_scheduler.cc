#include "scheduler/ensemble_scheduler.h"

#include <algorithm>
#include <optional>

#include "common/logging.h"
#include "nereid/backend.h"
#include "scheduler/scheduler_factory.h"

namespace nereid {

// An ensemble tensor of one request: a view of a client's input or of a step's output buffer,
// kept alive by 'keep' (the client's payload, or the step's response).
struct EnsembleScheduler::Tensor {
  DataType datatype = DataType::kInvalid;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t byte_size = 0;
  MemoryLocation location;
  std::shared_ptr<const void> keep;
};

// One client request on its way through the steps.
class EnsembleScheduler::Context {
 public:
  std::unique_ptr<InferenceRequest> request;
  uint64_t start_ns = 0;
  std::mutex mu;
  std::vector<std::optional<Tensor>> tensors;  // by tensor index
  std::vector<char> needed;                    // by tensor: feeds an output the client asked for
  // By step: tensors it still waits for; -1 once sent, or when it feeds nothing asked for.
  std::vector<int> waiting;
  int running = 0;  // steps sent and not answered
  Status error;
};

EnsembleScheduler::EnsembleScheduler(const inference::ModelConfig& config, ModelStats* stats,
                                     InferApiLink* link)
    : name_(config.name()), max_batch_size_(config.max_batch_size()), stats_(stats), link_(link) {
  std::map<std::string, int> index;  // tensor name -> its index in tensors_
  auto tensor_index = [&](const std::string& name) {
    auto [it, fresh] = index.emplace(name, static_cast<int>(tensors_.size()));
    if (fresh) tensors_.push_back(name);
    return it->second;
  };
  for (const auto& in : config.input()) inputs_.emplace_back(in.name(), tensor_index(in.name()));
  for (const auto& out : config.output()) outputs_[out.name()] = tensor_index(out.name());
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
    steps_.push_back(std::move(step));
  }
  producer_.assign(tensors_.size(), -1);
  readers_.assign(tensors_.size(), {});
  for (int i = 0; i < static_cast<int>(steps_.size()); ++i) {
    for (const auto& [name, t] : steps_[i].outputs) producer_[t] = i;
    for (const auto& [name, t] : steps_[i].inputs)
      if (std::find(readers_[t].begin(), readers_[t].end(), i) == readers_[t].end()) {
        readers_[t].push_back(i);
        ++steps_[i].tensors_read;
      }
  }
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
  c.tensors.resize(tensors_.size());
  c.needed.assign(tensors_.size(), 0);
  c.waiting.assign(steps_.size(), -1);
  // The steps that lead to what the client asked for (Model::Validate has filled in every
  // output when it named none), walking back from those outputs.
  std::vector<int> todo;
  for (const auto& wanted : request->outputs)
    if (auto it = outputs_.find(wanted.name); it != outputs_.end() && !c.needed[it->second]) {
      c.needed[it->second] = 1;
      todo.push_back(it->second);
    }
  while (!todo.empty()) {
    const int p = producer_[todo.back()];
    todo.pop_back();
    if (p < 0 || c.waiting[p] >= 0) continue;
    for (const auto& [name, t] : steps_[p].inputs)
      if (!c.needed[t]) {
        c.needed[t] = 1;
        todo.push_back(t);
      }
    c.waiting[p] = steps_[p].tensors_read;
  }
  std::vector<int> ready;
  for (const InferInput& in : request->inputs) {
    auto it = std::find_if(inputs_.begin(), inputs_.end(),
                           [&](const auto& i) { return i.first == in.name; });
    if (it == inputs_.end()) continue;  // Model::Validate refused unknown inputs
    const int t = it->second;
    c.tensors[t] = Tensor{in.datatype,  in.shape,    in.data,
                          in.byte_size, in.location, in.owned ? in.owned : request->payload};
    for (int step : readers_[t])
      if (c.waiting[step] > 0 && --c.waiting[step] == 0) ready.push_back(step);
  }
  c.request = std::move(request);
  for (int step : ready) c.waiting[step] = -1;
  c.running = static_cast<int>(ready.size());
  for (int step : ready) Launch(context, step);
  if (ready.empty()) Finish(context);
  return Status::Ok();
}

void EnsembleScheduler::Launch(const std::shared_ptr<Context>& context, int index) {
  const Step& step = steps_[index];
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
  {
    std::lock_guard<std::mutex> lock(context->mu);
    for (const auto& [name, t] : step.inputs) {
      const Tensor& tensor = *context->tensors[t];
      InferInput in;
      in.name = name;
      in.datatype = tensor.datatype;
      in.shape = tensor.shape;
      in.Borrow(tensor.data, tensor.byte_size, tensor.location, tensor.keep);
      r->inputs.push_back(std::move(in));
    }
    for (const auto& [name, t] : step.outputs)
      if (context->needed[t]) r->outputs.emplace_back().name = name;
  }
  r->times.received_ns = SteadyNowNs();
  r->on_complete = [this, context, index](std::unique_ptr<InferenceResponse> response) {
    StepDone(context, index, std::move(response));
  };
  Status s = link_->Submit(r);
  if (!s.ok()) {  // not taken: answered here, as if the step had failed
    auto response = std::make_unique<InferenceResponse>();
    response->status = std::move(s);
    StepDone(context, index, std::move(response));
  }
}

void EnsembleScheduler::StepDone(const std::shared_ptr<Context>& context, int index,
                                 std::unique_ptr<InferenceResponse> response) {
  const Step& step = steps_[index];
  // A decoupled model answers more than once; only its final answer ends the step.
  const bool final = response->final;
  std::vector<int> ready;
  bool finished = false;
  {
    std::lock_guard<std::mutex> lock(context->mu);
    Context& c = *context;
    if (!response->status.ok()) {
      if (c.error.ok())
        c.error = Status(response->status.code(),
                         "in ensemble '" + name_ + "', " + response->status.message());
    } else if (c.error.ok()) {
      std::shared_ptr<InferenceResponse> kept(std::move(response));
      for (const auto& output : step.outputs) {
        const std::string& name = output.first;
        const int t = output.second;
        if (!c.needed[t]) continue;
        auto o = std::find_if(kept->outputs.begin(), kept->outputs.end(),
                              [&](const InferOutput& out) { return out.name == name; });
        if (o == kept->outputs.end()) {
          LOG_VERBOSE(1) << "in ensemble '" << name_ << "': Composing models did not output tensor "
                         << tensors_[t];
          continue;
        }
        c.tensors[t] = Tensor{o->datatype,          o->shape,
                              o->buffer.data(),     o->buffer.size(),
                              o->buffer.location(), std::shared_ptr<const void>(kept, o->bytes())};
        for (int reader : readers_[t])
          if (c.waiting[reader] > 0 && --c.waiting[reader] == 0) ready.push_back(reader);
      }
    }
    if (final) --c.running;
    if (!c.error.ok()) ready.clear();
    for (int step_index : ready) c.waiting[step_index] = -1;
    c.running += static_cast<int>(ready.size());
    finished = c.running == 0 && final;
  }
  for (int step_index : ready) Launch(context, step_index);
  if (finished) Finish(context);
}

void EnsembleScheduler::Finish(const std::shared_ptr<Context>& context) {
  Context& c = *context;
  std::unique_ptr<InferenceRequest> request = std::move(c.request);
  Status error = c.error;
  if (error.ok() && std::any_of(c.waiting.begin(), c.waiting.end(), [](int w) { return w > 0; }))
    error = InvalidArgument("in ensemble '" + name_ +
                            "', unexpected deadlock, at least one output is not set while no "
                            "more ensemble steps can be made");
  auto response = std::make_unique<InferenceResponse>();
  for (const RequestedOutput& wanted : request->outputs) {
    if (!error.ok()) break;
    const int t = outputs_.at(wanted.name);
    if (!c.tensors[t]) continue;  // a step left it out: the response lacks it (Triton's)
    const Tensor& tensor = *c.tensors[t];
    InferOutput out;
    out.name = wanted.name;
    out.datatype = tensor.datatype;
    out.shape = tensor.shape;
    out.binary = wanted.binary;
    out.buffer =
        Buffer(const_cast<uint8_t*>(tensor.data), tensor.byte_size, tensor.location, tensor.keep);
    if (wanted.has_destination) {
      if (error = CheckOutputRegion(wanted, wanted.name, tensor.byte_size); !error.ok()) break;
      Buffer region(wanted.destination.data(), tensor.byte_size, wanted.destination.location(),
                    wanted.destination.owner());
      error = CopyIntoRegion(region, tensor.data, tensor.byte_size);
      out.buffer = region;
      out.in_shared_memory = true;
    }
    response->outputs.push_back(std::move(out));
  }
  const uint64_t now = SteadyNowNs();
  const uint64_t elapsed = now > c.start_ns ? now - c.start_ns : 0;
  if (!error.ok()) {
    stats_->RecordFailure(FailureReason::kBackend, elapsed);
    CompleteWithError(std::move(request), std::move(error));
  } else {
    // Every ensemble response carries the request's sequence id and flags (Triton's).
    auto parameter = [&](const char* name, RequestParameter::Type type) -> RequestParameter& {
      RequestParameter& p = response->parameters.emplace_back();
      p.name = name;
      p.type = type;
      return p;
    };
    if (request->correlation_id.is_text)
      parameter("sequence_id", RequestParameter::Type::kString).string_value =
          request->correlation_id.text;
    else
      parameter("sequence_id", RequestParameter::Type::kInt64).int_value =
          static_cast<int64_t>(request->correlation_id.number);
    parameter("sequence_start", RequestParameter::Type::kBool).bool_value =
        (request->flags & NEREID_REQUEST_FLAG_SEQUENCE_START) != 0;
    parameter("sequence_end", RequestParameter::Type::kBool).bool_value =
        (request->flags & NEREID_REQUEST_FLAG_SEQUENCE_END) != 0;
    response->model_name = request->model_name;
    response->model_version = request->model_version;
    response->id = request->id;
    // An ensemble request is one execution of its batch size (Triton does not batch them).
    const int64_t rows = max_batch_size_ > 0 ? request->batch_size : 1;
    stats_->RecordExecution(rows, 0, elapsed, 0);
    stats_->RecordSuccess(rows, elapsed, 0, 0, elapsed, 0, UnixNowMs());
    ResponseCallback callback = std::move(request->on_complete);
    request.reset();
    if (callback) callback(std::move(response));
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
  return std::unique_ptr<Scheduler>(
      std::make_unique<EnsembleScheduler>(context.config, context.stats, context.infer));
}

}  // namespace nereid
