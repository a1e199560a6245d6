#include "runtime/warmup.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>

#include "common/logging.h"
#include "config/model_files.h"
#include "nereid/backend_util.h"
#include "runtime/model.h"
#include "runtime/model_instance.h"

namespace nereid {
namespace {

// A warmup input may not exceed this (a config, which a client may send, chooses its size).
constexpr int64_t kMaxWarmupInputBytes = int64_t{1} << 30;
// Requests one model's warmup may make on each instance (count x batch_size, summed over its
// samples): a bound on its time that no config can lift. A load past its timeout stops sooner.
constexpr uint64_t kMaxWarmupRequests = uint64_t{1} << 20;
// The batch size of a sample of a model that does not batch (its requests still run together).
constexpr uint32_t kMaxUnbatchedWarmupRequests = 64;

StatusOr<WarmupInput> ReadInput(const std::string& name, const inference::ModelWarmup::Input& in,
                                bool batching, const std::filesystem::path& model_dir) {
  WarmupInput w;
  w.name = name;
  w.datatype = FromConfigType(in.data_type());
  for (int64_t d : in.dims())
    if (d < 0)
      return InvalidArgument(
          "warmup setting expects all variable-size dimensions are specified for input '" + name +
          "'");
  w.shape.assign(in.dims().begin(), in.dims().end());
  if (batching) w.shape.insert(w.shape.begin(), 1);
  const bool bytes_type = w.datatype == DataType::kBytes;
  // BYTES: a zero-length element each for zero and random data.
  const int64_t size = ZeroFilledByteSize(w.datatype, w.shape);
  if (size < 0 || size > kMaxWarmupInputBytes)
    return InvalidArgument("warmup input '" + name + "' of shape " + ShapeString(w.shape) +
                           " exceeds " + std::to_string(kMaxWarmupInputBytes >> 20) + " MiB");
  w.bytes = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(size), 0);
  switch (in.input_data_type_case()) {
    case inference::ModelWarmup::Input::kZeroData:
      break;
    case inference::ModelWarmup::Input::kRandomData:
      if (!bytes_type) {
        std::mt19937 rng(0x5eed);
        for (auto& b : *w.bytes) b = static_cast<uint8_t>(rng() % 128);  // finite floats too
      }
      break;
    case inference::ModelWarmup::Input::kInputDataFile: {
      const std::string& file = in.input_data_file();
      ASSIGN_OR_RETURN(std::vector<uint8_t> bytes,
                       ReadModelFileBytes(model_dir, model_dir / "warmup", file,
                                          "model_warmup.inputs.input_data_file",
                                          kMaxWarmupInputBytes, "warmup files"));
      if (!bytes_type && bytes.size() != w.bytes->size())
        return InvalidArgument("warmup setting expects " + std::to_string(w.bytes->size()) +
                               " bytes, but the data provided from " + file + "only has " +
                               std::to_string(bytes.size()) + " bytes");
      *w.bytes = std::move(bytes);
      if (bytes_type &&
          backend::CountBytesElements(w.bytes->data(), w.bytes->size()) != ElementCount(w.shape))
        return InvalidArgument("warmup file '" + file + "' does not hold " +
                               std::to_string(ElementCount(w.shape)) +
                               " length-prefixed STRING elements");
      break;
    }
    default:
      return InvalidArgument("warmup setting expects input '" + name +
                             "' to have input_data_type set");
  }
  return w;
}

}  // namespace

StatusOr<std::vector<WarmupSample>> ReadWarmupSamples(const inference::ModelConfig& config,
                                                      const std::filesystem::path& model_dir) {
  std::vector<WarmupSample> samples;
  const uint32_t max_batch = config.max_batch_size() > 0
                                 ? static_cast<uint32_t>(config.max_batch_size())
                                 : kMaxUnbatchedWarmupRequests;
  uint64_t requests = 0;
  for (const auto& s : config.model_warmup()) {
    WarmupSample sample;
    sample.name = s.name();
    sample.batch_size = s.batch_size();
    sample.count = std::max<uint32_t>(1, s.count());
    const std::string where = "failed to run warmup sample '" + s.name() + "': ";
    if (sample.batch_size > max_batch) {
      const std::string bound = config.max_batch_size() > 0
                                    ? "the model's max_batch_size "
                                    : "the bound for a model that does not batch, ";
      return InvalidArgument(where + "batch_size " + std::to_string(sample.batch_size) +
                             " exceeds " + bound + std::to_string(max_batch) + "; ");
    }
    requests += uint64_t{sample.count} * sample.batch_size;
    if (requests > kMaxWarmupRequests)
      return InvalidArgument(where + "count x batch_size makes " + std::to_string(requests) +
                             " warmup requests per instance, more than " +
                             std::to_string(kMaxWarmupRequests) + "; ");
    // Sorted by name: the map's order is not stable, and a backend may care about input order.
    std::map<std::string, const inference::ModelWarmup::Input*> sorted;
    for (const auto& [name, in] : s.inputs()) sorted.emplace(name, &in);
    for (const auto& [name, in] : sorted) {
      auto input = ReadInput(name, *in, config.max_batch_size() > 0, model_dir);
      if (!input.ok())
        return InvalidArgument("failed to run warmup sample '" + s.name() +
                               "': " + input.status().message() + "; ");
      sample.inputs.push_back(std::move(input).value());
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

Status RunSampleOnce(const std::shared_ptr<Model>& model, const WarmupSample& sample,
                     ModelInstance* instance) {
  std::mutex mu;
  std::condition_variable cv;
  size_t open = sample.batch_size;
  Status failed;
  std::vector<std::unique_ptr<InferenceRequest>> batch;
  for (uint32_t r = 0; r < sample.batch_size; ++r) {
    auto request = std::make_unique<InferenceRequest>();
    request->model_name = model->name();
    request->model_version = model->version();
    request->id = "warmup_" + sample.name;
    request->model = model;
    for (const WarmupInput& w : sample.inputs) {
      InferInput& in = request->inputs.emplace_back();
      in.name = w.name;
      in.datatype = w.datatype;
      in.shape = w.shape;
      in.Borrow(w.bytes->data(), w.bytes->size(), MemoryLocation{}, w.bytes);
    }
    if (!sample.inputs.empty() && model->config().max_batch_size() > 0)
      request->batch_size = sample.inputs.front().shape.front();
    for (const auto& out : model->config().output())
      request->outputs.emplace_back().name = out.name();
    request->times.received_ns = request->times.queued_ns = SteadyNowNs();
    request->on_complete = [&](std::unique_ptr<InferenceResponse> response) {
      std::lock_guard<std::mutex> lock(mu);
      if (!response->status.ok() && failed.ok()) failed = response->status;
      if (response->final && open > 0 && --open == 0) cv.notify_all();
    };
    batch.push_back(std::move(request));
  }
  (void)instance->Execute(batch);
  std::unique_lock<std::mutex> lock(mu);
  // A backend that never completes hangs the load, which the repository's load timeout aborts;
  // the requests (and this frame's state they point at) are waited for here.
  cv.wait(lock, [&] { return open == 0; });
  return failed;
}

Status RunWarmup(const std::shared_ptr<Model>& model, const std::vector<WarmupSample>& samples,
                 const std::vector<ModelInstance*>& instances) {
  for (const WarmupSample& sample : samples) {
    if (sample.batch_size == 0) continue;
    for (ModelInstance* instance : instances) {
      for (uint32_t iteration = 0; iteration < sample.count; ++iteration) {
        // A load past its timeout (or the server's shutdown) aborts the model: warmup stops.
        if (model->aborted())
          return Unavailable("model '" + model->name() + "' was aborted during warmup sample '" +
                             sample.name + "'");
        LOG_VERBOSE(1) << "model '" << model->name() << "' instance " << instance->name()
                       << " is running warmup sample '" << sample.name << "' for iteration "
                       << iteration + 1;
        if (Status s = RunSampleOnce(model, sample, instance); !s.ok())
          return InvalidArgument("failed to run warmup sample '" + sample.name +
                                 "': " + s.message() + "; ");
      }
    }
  }
  return Status::Ok();
}

}  // namespace nereid
