// Model repository: loading through the real native backend, failures isolated per model, version
// policies, explicit load/unload, auto-complete and request validation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "memory/memory_pool.h"
#include "repository/model_repository.h"
#include "repository/repository_poller.h"
#include "scheduler/default_scheduler.h"
#include "scheduler/scheduler_factory.h"
#include "test_repository.h"

namespace nereid {
namespace {

using testing::AddConfig;
using testing::TempRepository;

struct Fixture {
  TempRepository repo;
  BackendManager backends{NEREID_BACKEND_DIR};
  std::unique_ptr<ModelRepository> repository;

  void Start(ModelControlMode mode = ModelControlMode::kNone,
             std::vector<std::string> startup = {}) {
    RepositoryOptions options;
    options.paths = {repo.root().string()};
    options.control_mode = mode;
    options.startup_models = std::move(startup);
    repository = std::make_unique<ModelRepository>(options, &backends);
    ASSERT_TRUE(repository->LoadStartupModels().ok());
  }
};

std::unique_ptr<InferenceResponse> Infer(Model& model, std::vector<int32_t> a,
                                         std::vector<int32_t> b, Status* enqueue_status = nullptr) {
  auto request = std::make_unique<InferenceRequest>();
  request->model_name = model.name();
  const int64_t batch = static_cast<int64_t>(a.size() / 4);
  auto add_input = [&](const char* name, std::vector<int32_t>& data) {
    InferInput in;
    in.name = name;
    in.datatype = DataType::kInt32;
    in.shape = {batch, 4};
    std::vector<uint8_t> bytes(data.size() * 4);
    std::memcpy(bytes.data(), data.data(), bytes.size());
    in.Own(std::move(bytes));
    request->inputs.push_back(std::move(in));
  };
  add_input("A", a);
  add_input("B", b);
  std::promise<std::unique_ptr<InferenceResponse>> done;
  auto future = done.get_future();
  request->on_complete = [&done](std::unique_ptr<InferenceResponse> r) {
    done.set_value(std::move(r));
  };
  Status s = model.Enqueue(request);
  if (enqueue_status) *enqueue_status = s;
  if (!s.ok()) return nullptr;
  return future.get();
}

TEST(RepositoryTest, LoadsAndServesAModel) {
  Fixture f;
  f.repo.AddModel("add", AddConfig("add"));
  f.Start();
  auto model = f.repository->GetModel("add", -1);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto response = Infer(**model, {1, 2, 3, 4}, {10, 20, 30, 40});
  ASSERT_TRUE(response && response->status.ok()) << response->status.message();
  ASSERT_EQ(response->outputs.size(), 1u);
  const auto* out = reinterpret_cast<const int32_t*>(response->outputs[0].bytes());
  EXPECT_EQ(std::vector<int32_t>(out, out + 4), (std::vector<int32_t>{11, 22, 33, 44}));
  EXPECT_EQ(response->outputs[0].shape, (std::vector<int64_t>{1, 4}));
  EXPECT_TRUE(f.repository->Ready());
}

TEST(RepositoryTest, BadModelIsReportedAndDoesNotStopOthers) {
  Fixture f;
  f.repo.AddModel("good", AddConfig("good"));
  f.repo.AddModel("broken", "name: \"broken\"\nmax_batch_size: oops\n");
  f.Start();
  EXPECT_TRUE(f.repository->GetModel("good", -1).ok());
  EXPECT_FALSE(f.repository->GetModel("broken", -1).ok());
  bool found = false;
  for (const auto& e : f.repository->Index(false)) {
    if (e.name != "broken") continue;
    found = true;
    EXPECT_EQ(e.state, "UNAVAILABLE");
    EXPECT_NE(e.reason.find("broken/config.pbtxt:2"), std::string::npos) << e.reason;
  }
  EXPECT_TRUE(found);
  EXPECT_FALSE(f.repository->Ready());  // strict readiness
}

// Loads model 'm' (the Add graph) with inputs A and 'second' of 'input_dims' and output OUT of
// 'output_dims', max_batch_size 8; returns why it failed ("" if it loaded).
std::string LoadError(const std::string& second, const std::string& input_dims,
                      const std::string& output_dims) {
  Fixture f;
  f.repo.AddModel(
      "m",
      "name: \"m\"\nbackend: \"native\"\nmax_batch_size: 8\n"
      "input [ { name: \"A\" data_type: TYPE_INT32 dims: " +
          input_dims + " }, { name: \"" + second + "\" data_type: TYPE_INT32 dims: " + input_dims +
          " } ]\noutput [ { name: \"OUT\" data_type: TYPE_INT32 dims: " + output_dims + " } ]\n");
  f.Start();
  auto index = f.repository->Index(false);
  EXPECT_EQ(index.size(), 1u);
  return index.at(0).state == "READY" ? "" : index.at(0).reason;
}

TEST(RepositoryTest, DimsThatRepeatTheBatchDimensionAreExplained) {
  const std::string reason = LoadError("B", "[ -1, 4 ]", "[ -1, 4 ]");
  EXPECT_NE(reason.find("the graph's first dimension is the batch: dims should be [4]"),
            std::string::npos)
      << reason;
}

TEST(RepositoryTest, OutputDimsThatContradictTheGraphAreRefused) {
  EXPECT_EQ(LoadError("B", "[ 4 ]", "[ 4 ]"), "");
  const std::string reason = LoadError("B", "[ 4 ]", "[ 1 ]");
  EXPECT_NE(reason.find("output 'OUT' has dims [1]"), std::string::npos) << reason;
  EXPECT_NE(reason.find("dims should be [4]"), std::string::npos) << reason;
}

TEST(RepositoryTest, AMisspelledInputIsTheErrorNotTheInputItLeavesOut) {
  const std::string reason = LoadError("BB", "[ 4 ]", "[ 4 ]");
  EXPECT_NE(reason.find("config input 'BB' is not an input of the ONNX graph (graph inputs: A, B)"),
            std::string::npos)
      << reason;
}

TEST(RepositoryTest, AnInitializerThatIsAlsoAGraphInputIsAnOptionalInput) {
  Fixture f;
  const std::string config =
      "name: \"m\"\nbackend: \"native\"\n"
      "input [ { name: \"A\" data_type: TYPE_INT32 dims: [ -1, 4 ] }, { name: \"B\" "
      "data_type: TYPE_INT32 dims: [ 4 ] optional: true } ]\n"
      "output [ { name: \"OUT\" data_type: TYPE_INT32 dims: [ -1, 4 ] } ]\n";
  f.repo.AddModel("m", config, {});
  testing::WriteAddModel(f.repo.root() / "m" / "1" / "model.onnx", /*b_default=*/true);
  f.Start();
  auto model = f.repository->GetModel("m", -1);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto run = [&](bool send_b) {
    auto request = std::make_unique<InferenceRequest>();
    request->model_name = "m";
    auto add = [&](const char* name, std::vector<int32_t> data, std::vector<int64_t> shape) {
      InferInput in;
      in.name = name;
      in.datatype = DataType::kInt32;
      in.shape = std::move(shape);
      std::vector<uint8_t> bytes(data.size() * 4);
      std::memcpy(bytes.data(), data.data(), bytes.size());
      in.Own(std::move(bytes));
      request->inputs.push_back(std::move(in));
    };
    add("A", {1, 2, 3, 4}, {1, 4});
    if (send_b) add("B", {10, 20, 30, 40}, {4});
    std::promise<std::unique_ptr<InferenceResponse>> done;
    auto future = done.get_future();
    request->on_complete = [&done](std::unique_ptr<InferenceResponse> r) {
      done.set_value(std::move(r));
    };
    EXPECT_TRUE((*model)->Enqueue(request).ok());
    auto response = future.get();
    EXPECT_TRUE(response->status.ok()) << response->status.message();
    const auto* out = reinterpret_cast<const int32_t*>(response->outputs.at(0).bytes());
    return std::vector<int32_t>(out, out + 4);
  };
  EXPECT_EQ(run(true), (std::vector<int32_t>{11, 22, 33, 44}));       // the request's B
  EXPECT_EQ(run(false), (std::vector<int32_t>{101, 202, 303, 404}));  // the initializer
}

TEST(RepositoryTest, AutoCompletesConfigFromTheOnnxGraph) {
  Fixture f;
  f.repo.AddModel("auto", "");  // no config.pbtxt at all
  f.Start();
  auto model = f.repository->GetModel("auto", -1);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const auto& c = (*model)->config();
  EXPECT_EQ(c.max_batch_size(), 4);
  ASSERT_EQ(c.input_size(), 2);
  EXPECT_EQ(c.input(0).dims_size(), 1);
  EXPECT_EQ(c.input(0).dims(0), 4);
  EXPECT_EQ(c.backend(), "onnxruntime");
  EXPECT_EQ(c.platform(), "onnxruntime_onnx");
}

TEST(RepositoryTest, VersionPolicyPicksVersions) {
  Fixture f;
  f.repo.AddModel("v", AddConfig("v") + "version_policy { latest { num_versions: 2 } }\n",
                  {1, 2, 3});
  f.Start();
  EXPECT_EQ(f.repository->ReadyVersions("v"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ((*f.repository->GetModel("v", -1))->version(), 3);
  EXPECT_EQ(f.repository->GetModel("v", 1).status().code(), Status::Code::kNotFound);
}

TEST(RepositoryTest, ExplicitModeLoadsOnlyWhatIsAskedAndUnloads) {
  Fixture f;
  f.repo.AddModel("a", AddConfig("a"));
  f.repo.AddModel("b", AddConfig("b"));
  f.Start(ModelControlMode::kExplicit, {"a"});
  EXPECT_TRUE(f.repository->GetModel("a", -1).ok());
  EXPECT_FALSE(f.repository->GetModel("b", -1).ok());
  ASSERT_TRUE(f.repository->Load("b", "").ok());
  EXPECT_TRUE(f.repository->GetModel("b", -1).ok());
  ASSERT_TRUE(f.repository->Unload("a").ok());
  EXPECT_FALSE(f.repository->GetModel("a", -1).ok());
  EXPECT_EQ(f.repository->Load("nope", "").code(), Status::Code::kNotFound);
  EXPECT_TRUE(f.repository->Ready());
}

// Clients infer from four threads while the model is reloaded and another unloaded and loaded:
// every request gets its answer, a reload never fails a request (the serving version serves until
// the swap). Run under TSan by scripts/sanitize.sh.
TEST(RepositoryTest, ReloadsUnderTrafficLoseNothing) {
  Fixture f;
  f.repo.AddModel("add", AddConfig("add"));
  f.repo.AddModel("other", AddConfig("other"));
  f.Start(ModelControlMode::kExplicit, {"add", "other"});
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0}, wrong{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t)
    clients.emplace_back([&] {
      while (!stop) {
        auto model = f.repository->GetModel("add", -1);
        if (!model.ok()) {
          ++wrong;
          continue;
        }
        auto response = Infer(**model, {1, 2, 3, 4}, {10, 20, 30, 40});
        const bool ok = response && response->status.ok() &&
                        reinterpret_cast<const int32_t*>(response->outputs[0].bytes())[3] == 44;
        ok ? ++answered : ++wrong;
      }
    });
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(f.repository->Load("add", "").ok());
    EXPECT_TRUE(f.repository->Unload("other").ok());
    EXPECT_TRUE(f.repository->Load("other", "").ok());
  }
  stop = true;
  for (auto& c : clients) c.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(answered.load(), 0);
}

// A scheduler registered for a scheduling choice serves the models that make it, with no edit of
// Model::Create: here one that counts the requests it hands to the default scheduler.
class CountingScheduler : public Scheduler {
 public:
  CountingScheduler(std::unique_ptr<Scheduler> inner, std::atomic<int>* count)
      : inner_(std::move(inner)), count_(count) {}
  Status Enqueue(std::unique_ptr<InferenceRequest>& request) override {
    ++*count_;
    return inner_->Enqueue(request);
  }
  void Stop() override { inner_->Stop(); }
  bool StopUntil(std::chrono::steady_clock::time_point deadline) override {
    return inner_->StopUntil(deadline);
  }
  void Abandon() override { inner_->Abandon(); }
  size_t Pending() const override { return inner_->Pending(); }

 private:
  std::unique_ptr<Scheduler> inner_;
  std::atomic<int>* count_;
};

TEST(RepositoryTest, ASchedulerRegisteredForAChoiceServesItsModels) {
  static std::atomic<int> enqueued{0};
  enqueued = 0;  // (the test may repeat: --gtest_repeat)
  SchedulerFactory& factory = SchedulerFactory::Get();
  factory.Register("sequence", [](SchedulerContext& c) -> StatusOr<std::unique_ptr<Scheduler>> {
    return std::unique_ptr<Scheduler>(std::make_unique<CountingScheduler>(
        std::make_unique<DefaultScheduler>(std::move(c.instances)), &enqueued));
  });
  Fixture f;
  f.repo.AddModel("seq", AddConfig("seq") + "sequence_batching { }\n");
  f.repo.AddModel("plain", AddConfig("plain"));
  f.Start();
  {  // (StopAll waits for the models' references to go)
    auto seq = f.repository->GetModel("seq", -1);
    auto plain = f.repository->GetModel("plain", -1);
    ASSERT_TRUE(seq.ok() && plain.ok()) << seq.status().message();
    EXPECT_EQ(SchedulingChoice((*seq)->config()), "sequence");
    auto response = Infer(**seq, {1, 2, 3, 4}, {10, 20, 30, 40});
    ASSERT_TRUE(response && response->status.ok());
    Infer(**plain, {1, 2, 3, 4}, {10, 20, 30, 40});
    EXPECT_EQ(enqueued.load(), 1);  // the "sequence" model's request only
  }
  f.repository->StopAll();
  // Back to the built-in choice for the other tests.
  factory.Register("sequence", [](SchedulerContext& c) -> StatusOr<std::unique_ptr<Scheduler>> {
    return std::unique_ptr<Scheduler>(std::make_unique<DefaultScheduler>(std::move(c.instances)));
  });
}

TEST(RepositoryTest, AnExecutionObserverSeesEveryBatch) {
  struct Recorder : ExecutionObserver {
    std::mutex mu;
    std::vector<ExecutionRecord> seen;
    std::vector<std::string> names;  // (the record's name pointer lives only during the call)
    void OnExecution(const ExecutionRecord& r) override {
      std::lock_guard<std::mutex> lock(mu);
      seen.push_back(r);
      names.push_back(*r.instance);
    }
  };
  auto recorder = std::make_shared<Recorder>();
  Fixture f;
  f.repo.AddModel("add", AddConfig("add"));
  f.Start();
  {
    auto model = f.repository->GetModel("add", -1);
    ASSERT_TRUE(model.ok());
    (*model)->AddExecutionObserver(recorder);
    ASSERT_TRUE(Infer(**model, {1, 2, 3, 4, 5, 6, 7, 8}, {1, 1, 1, 1, 1, 1, 1, 1}));
    ASSERT_TRUE(Infer(**model, {1, 2, 3, 4}, {1, 1, 1, 1}));
  }
  f.repository->StopAll();
  std::lock_guard<std::mutex> lock(recorder->mu);
  ASSERT_EQ(recorder->seen.size(), 2u);
  EXPECT_EQ(recorder->seen[0].rows, 2);
  EXPECT_EQ(recorder->seen[1].rows, 1);
  EXPECT_EQ(recorder->seen[0].requests, 1u);
  EXPECT_EQ(recorder->seen[0].kind, NEREID_INSTANCE_CPU);
  EXPECT_EQ(recorder->names[0], "add_0_0");
  EXPECT_GE(recorder->seen[0].end_ns, recorder->seen[0].start_ns);
}

TEST(RepositoryTest, RequestValidationErrors) {
  Fixture f;
  f.repo.AddModel("add", AddConfig("add", 2));
  f.Start();
  auto model = *f.repository->GetModel("add", -1);
  Status s;
  Infer(*model, {1, 2, 3}, {1, 2, 3}, &s);  // 3 elements for shape [0,4]
  EXPECT_FALSE(s.ok());
  Infer(*model, std::vector<int32_t>(12, 1), std::vector<int32_t>(12, 1), &s);  // batch 3 > 2
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("batch-size must be <= 2"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace nereid

namespace nereid {
namespace {

TEST(RegionPoolTest, BestFitAndCoalescing) {
  RegionPool pool(4096, 256);
  auto a = pool.Allocate(100), b = pool.Allocate(512), c = pool.Allocate(256);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 256u);
  EXPECT_EQ(*c, 768u);
  EXPECT_EQ(pool.used(), 1024u);
  EXPECT_FALSE(pool.Allocate(4096));  // does not fit beside what is used
  pool.Free(*b);
  auto d = pool.Allocate(200);  // best fit: the 512-byte hole, not the tail
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, 256u);
  pool.Free(*a), pool.Free(*c), pool.Free(*d);
  pool.Free(12345);  // unknown offsets are ignored
  EXPECT_EQ(pool.used(), 0u);
  auto all = pool.Allocate(4096);  // every hole coalesced back into one block
  ASSERT_TRUE(all);
  EXPECT_EQ(*all, 0u);
  EXPECT_FALSE(pool.Allocate(1));
}

// No table of backends or platforms in the server: each backend declares what it serves
// (NereidBackendPlatforms, NereidBackendModelFile) and the resolution follows the declarations.
TEST(ResolveBackendTest, FollowsWhatTheInstalledBackendsDeclare) {
  BackendManager backends{NEREID_BACKEND_DIR};
  auto resolve = [&](const std::string& platform, const std::string& dir = "/nonexistent") {
    inference::ModelConfig c;
    c.set_name("m");
    c.set_platform(platform);
    auto backend = ResolveBackend(&c, dir, {1}, backends);
    return std::make_pair(backend.ok() ? *backend : backend.status().message(), c);
  };
  auto [ort, ort_config] = resolve("onnxruntime_onnx");
  EXPECT_EQ(ort, "onnxruntime");
  EXPECT_EQ(ort_config.backend(), "onnxruntime");
  // The PyTorch backend is built only where libtorch is (not in the sanitizer builds).
  const bool pytorch = std::filesystem::exists(std::filesystem::path(NEREID_BACKEND_DIR) /
                                               "libnereid_backend_pytorch.so");
  if (pytorch) {
    EXPECT_EQ(resolve("pytorch_libtorch").first, "pytorch");
  }
  // A platform names its backend before the first '_'; that backend must be installed and must
  // declare the platform.
  EXPECT_NE(
      resolve("tensorrt_plan")
          .first.find("unknown platform 'tensorrt_plan': backend 'tensorrt' is not available"),
      std::string::npos)
      << resolve("tensorrt_plan").first;
  EXPECT_NE(resolve("onnxruntime_tf").first.find("backend 'onnxruntime' serves onnxruntime_onnx"),
            std::string::npos)
      << resolve("onnxruntime_tf").first;
  EXPECT_NE(resolve("../../etc_x").first.find("invalid backend name"), std::string::npos);

  // Neither field: the model file a version directory holds names the backend.
  TempRepository repo;
  auto infer = [&](const std::string& file) {
    const auto dir = repo.root() / file;
    std::filesystem::create_directories(dir / "1");
    std::ofstream(dir / "1" / file) << "x";
    return resolve("", dir.string());
  };
  if (pytorch) {
    auto [pt, pt_config] = infer("model.pt");
    EXPECT_EQ(pt, "pytorch");
    EXPECT_EQ(pt_config.platform(), "pytorch_libtorch");  // filled as Triton's auto-complete does
  }
  auto [py, py_config] = infer("model.py");
  EXPECT_EQ(py, "python");
  EXPECT_EQ(py_config.platform(), "");
  // The native engine claims model.onnx for the backend it stands in for.
  auto [onnx, onnx_config] = infer("model.onnx");
  EXPECT_EQ(onnx, "onnxruntime");
  EXPECT_EQ(onnx_config.platform(), "onnxruntime_onnx");
  EXPECT_NE(infer("model.bin").first.find("no version directory holds a model file"),
            std::string::npos);
}

TEST(ResolveBackendTest, APlatformMustGoWithItsBackend) {
  BackendManager backends{NEREID_BACKEND_DIR};
  auto parsed = ParseModelConfigText(
      "name: \"m\"\nbackend: \"onnxruntime\"\nplatform: \"pytorch_libtorch\"\n", "m/config.pbtxt");
  ASSERT_TRUE(parsed.ok());
  auto ort = backends.Get("onnxruntime");
  ASSERT_TRUE(ort.ok());
  Status s = CheckPlatform(parsed->config, parsed->locator, **ort);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("m/config.pbtxt:3: field 'platform': platform 'pytorch_libtorch' does "
                             "not go with backend 'onnxruntime' (it serves onnxruntime_onnx)"),
            std::string::npos)
      << s.message();
  parsed->config.set_platform("onnxruntime_onnx");
  EXPECT_TRUE(CheckPlatform(parsed->config, parsed->locator, **ort).ok());
  // A backend that declares no platform (python) takes any.
  auto py = backends.Get("python");
  ASSERT_TRUE(py.ok());
  parsed->config.set_platform("pytorch_libtorch");
  EXPECT_TRUE(CheckPlatform(parsed->config, parsed->locator, **py).ok());
}

// Poll mode's fingerprint of a model directory: every file's path, size and modification time.
TEST(RepositoryPollerTest, FingerprintChangesWithFilesNotWithReads) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("nereid_poll_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "1");
  auto write = [&](const fs::path& p, const std::string& text) {
    std::ofstream(p, std::ios::trunc) << text;
  };
  write(dir / "config.pbtxt", "name: \"m\"\n");
  write(dir / "1" / "model.onnx", "weights");
  const uint64_t first = ModelStore::Fingerprint(dir.string());
  EXPECT_EQ(ModelStore::Fingerprint(dir.string()), first);
  { std::ifstream(dir / "config.pbtxt").get(); }  // reading changes nothing
  EXPECT_EQ(ModelStore::Fingerprint(dir.string()), first);
  write(dir / "config.pbtxt", "name: \"m\"\nmax_batch_size: 8\n");  // an edit
  const uint64_t edited = ModelStore::Fingerprint(dir.string());
  EXPECT_NE(edited, first);
  fs::create_directories(dir / "2");  // a new version directory
  write(dir / "2" / "model.onnx", "weights");
  EXPECT_NE(ModelStore::Fingerprint(dir.string()), edited);
  fs::remove_all(dir / "2");
  EXPECT_EQ(ModelStore::Fingerprint(dir.string()), edited);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace nereid
