// The Python backend: runs Triton Python models (`backend: "python"`, a model.py defining
// TritonPythonModel) unchanged. Each instance is a stub process (stub/nereid_python_stub.py) in the
// interpreter the config or the environment names; tensors travel through two memfd regions shared
// with it, messages over a Unix socket (the framing is in the stub's docstring). For an ordinary
// model the thread waiting for a reply reads the socket itself; a decoupled model's instance has a
// reader thread, since its responses come from any thread at any time. A stub that dies fails its
// in-flight requests with the reason and is started again for the next batch; no other instance or
// model is affected.
// The stub runs the model's own code, which can write anything to its socket: a message that is not
// what the protocol says must not stop the server. rapidjson's checks throw instead of asserting,
// and every reader of the stub's messages catches (the stub is then treated as broken).
#include "python/protocol.h"
// (protocol.h first: it makes rapidjson throw on malformed stub messages instead of asserting)

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/config_json.h"
#include "nereid/backend_util.h"
#include "python/bls_proxy.h"
#include "python/metrics_proxy.h"
#include "python/outputs.h"

extern char** environ;

namespace nereid::python {
namespace {

// ---- Shared regions -----------------------------------------------------------------------------

// A memfd mapped here; the input region is written by the backend, the output region by the stub.
struct Region {
  int fd = -1;
  uint8_t* data = nullptr;
  size_t size = 0;
  ~Region() {
    if (data) munmap(data, size);
    if (fd >= 0) close(fd);
  }
  // A region grown past this for one large batch gives its memory back afterwards (both sides
  // map it again at the size the next batch needs).
  static constexpr size_t kKeepBytes = size_t{64} << 20;
  void ShrinkIfLarge() {
    if (size <= kKeepBytes || fd < 0) return;
    if (data) munmap(data, size);
    data = nullptr, size = 0;
    if (ftruncate(fd, 0) != 0) Log(NEREID_LOG_WARNING, "shrinking a shared region failed");
  }
  Status Map(size_t bytes, bool grow) {
    if (bytes <= size && data) return Status::Ok();
    if (grow && ftruncate(fd, static_cast<off_t>(bytes)) != 0)
      return backend::Internal(std::string("growing a shared region: ") + strerror(errno));
    if (data) munmap(data, size);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      data = nullptr, size = 0;
      return backend::Internal(std::string("mapping a shared region: ") + strerror(errno));
    }
    data = static_cast<uint8_t*>(p), size = bytes;
    return Status::Ok();
  }
};

// ---- Model --------------------------------------------------------------------------------------

// Each stub starts a process group of its own (its pid is the group's id), so that what its model
// starts (multiprocessing workers, subprocesses) ends with it: the group gets SIGTERM once the stub
// has been reaped and SIGKILL after kGroupGrace; an abort kills the whole group at once.
constexpr std::chrono::milliseconds kGroupGrace{500};

void EndGroup(pid_t group) {
  if (group <= 0 || kill(-group, SIGTERM) != 0) return;  // ESRCH: nothing left of it
  const auto deadline = std::chrono::steady_clock::now() + kGroupGrace;
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (kill(-group, 0) != 0) return;
  }
  kill(-group, SIGKILL);
}

// Every stub process of one model, so that NereidModelAbort can kill them all (a load stuck in
// model.py's import, an execute() that never returns) and no new one starts after it.
struct Stubs {
  std::mutex mu;
  std::set<pid_t> pids;
  bool aborted = false;
  void Abort() {
    std::lock_guard lock(mu);
    aborted = true;
    for (pid_t pid : pids) kill(-pid, SIGKILL);  // the stub's whole group
  }
};

// The stub registries of the models being loaded or loaded, by handle (NereidModelAbort may come
// while NereidModelInitialize still runs, before the model's state is set).
std::mutex g_stubs_mu;
std::map<NereidModel*, std::shared_ptr<Stubs>> g_stubs;

struct ModelState {
  std::shared_ptr<Stubs> stubs = std::make_shared<Stubs>();
  std::string name;
  std::string version;
  std::string repository;  // the model's directory
  std::string model_py;
  std::string python;  // the interpreter
  std::string stub_path;
  bool decoupled = false;
  std::map<std::string, DataType> output_types;  // from the config
  // How long each side polls the socket before sleeping on it (config parameter stub_spin_us):
  // the reply, or under steady load the next request, usually comes within a few hundred
  // microseconds, and waking a sleeping process costs up to ~100 us on a virtual machine. The
  // price is CPU: a stub busy-waits up to this long after each message.
  int spin_us = 300;
};

std::string StubPath() {
  Dl_info self{};
  dladdr(reinterpret_cast<void*>(&StubPath), &self);
  return (std::filesystem::path(self.dli_fname ? self.dli_fname : ".").parent_path() / "python" /
          "nereid_python_stub.py")
      .string();
}

// One stub process with its socket and regions.
struct Process {
  std::atomic<pid_t> pid{-1};
  int pidfd = -1;  // readable once the process has exited (-1 where the kernel has no pidfd)
  std::shared_ptr<Stubs> stubs;
  std::shared_ptr<Channel> channel;
  Region input, output;
  ~Process() {
    if (const pid_t child = pid.load(); child > 0) kill(child, SIGKILL);
    Reap();
  }
  std::optional<Message> Read(Deadline deadline = kNever) {
    return ReadFrame(channel->fd, pidfd, deadline);
  }
  // Waits for the process to end; how it ended, for messages ("exit status 1", "signal 9").
  std::string Reap() {
    const pid_t child = pid.exchange(-1);
    if (child <= 0) return "not running";
    {
      std::lock_guard lock(stubs->mu);
      stubs->pids.erase(child);
    }
    int status = 0;
    const pid_t reaped = waitpid(child, &status, 0);
    if (pidfd >= 0) close(pidfd), pidfd = -1;
    EndGroup(child);  // what the stub left running
    if (reaped != child) return "unknown status";
    if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
    return "exit status " + std::to_string(WEXITSTATUS(status));
  }
};

StatusOr<std::unique_ptr<Process>> Spawn(const ModelState& m) {
  auto p = std::make_unique<Process>();
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    return backend::Internal(std::string("socketpair: ") + strerror(errno));
  p->channel = std::make_shared<Channel>(pair[0]);
  p->input.fd = memfd_create("nereid-python-in", MFD_CLOEXEC);
  p->output.fd = memfd_create("nereid-python-out", MFD_CLOEXEC);
  if (p->input.fd < 0 || p->output.fd < 0) {
    close(pair[1]);
    return backend::Internal(std::string("memfd_create: ") + strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pair[1], 3);
  posix_spawn_file_actions_adddup2(&actions, p->input.fd, 4);
  posix_spawn_file_actions_adddup2(&actions, p->output.fd, 5);
  posix_spawn_file_actions_addclosefrom_np(&actions, 6);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);  // a group of its own, led by the stub
  std::vector<char*> argv = {const_cast<char*>(m.python.c_str()),
                             const_cast<char*>(m.stub_path.c_str()), nullptr};
  pid_t child = -1;
  int rc = 0;
  p->stubs = m.stubs;
  {
    std::lock_guard lock(m.stubs->mu);
    if (m.stubs->aborted) {
      rc = -1;
    } else {
      rc = posix_spawnp(&child, m.python.c_str(), &actions, &attributes, argv.data(), environ);
      if (rc == 0) m.stubs->pids.insert(child);
    }
  }
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  close(pair[1]);
  p->pid = rc == 0 ? child : -1;
  if (rc == 0) p->pidfd = static_cast<int>(syscall(SYS_pidfd_open, child, 0));
  if (rc < 0)
    return backend::Unavailable("model '" + m.name +
                                "' was aborted (a load past its timeout, or an unload whose "
                                "requests did not finish): no new Python stub starts");
  if (rc != 0) {
    return backend::Unavailable("model '" + m.name + "': cannot start the Python interpreter '" +
                                m.python + "': " + strerror(rc) +
                                " (set NEREID_PYTHON in the server's environment)");
  }
  return p;
}

// A stub's reply to a request of ours: its error, when it has one.
Status ReplyStatus(const ModelState& m, const Message& reply, const std::string& what) {
  if (reply.header.HasMember("error") && reply.header["error"].IsString())
    return backend::Internal("model '" + m.name + "': " + what +
                             " failed: " + reply.header["error"].GetString());
  return Status::Ok();
}

void LogFromStub(const ModelState& m, const Message& message) {
  const int level = message.header.HasMember("level") && message.header["level"].IsInt()
                        ? message.header["level"].GetInt()
                        : 0;
  NereidLog(level == 1   ? NEREID_LOG_WARNING
            : level == 2 ? NEREID_LOG_ERROR
            : level == 3 ? NEREID_LOG_VERBOSE
                         : NEREID_LOG_INFO,
            m.model_py.c_str(), 0, StringField(message.header, "message").c_str());
}

// ---- Instances ----------------------------------------------------------------------------------

class Instance {
 public:
  Instance(const ModelState* model, NereidInstance* handle)
      : m_(model), handle_(handle), outputs_(model->name, model->output_types) {}
  ~Instance() { Stop(); }

  // Starts the stub and runs the model's initialize().
  Status Start() {
    ASSIGN_OR_RETURN(process_, Spawn(*m_));
    {
      std::lock_guard lock(mu_);
      dead_ = false;
      reply_.reset();
    }
    // A decoupled model's responses (and its BLS calls) may come at any time: a reader thread
    // takes them. Otherwise the thread waiting for a reply reads the socket itself (no hop).
    if (m_->decoupled)
      reader_ = std::thread([this, channel = process_->channel] { ReadLoop(channel); });
    rapidjson::Document h(rapidjson::kObjectType);
    auto& a = h.GetAllocator();
    h.AddMember("op", "initialize", a);
    h.AddMember("model_py", rapidjson::Value(m_->model_py.c_str(), a), a);
    h.AddMember("spin_us", m_->spin_us, a);
    rapidjson::Value args(rapidjson::kObjectType);
    auto put = [&](const char* k, const std::string& v) {
      args.AddMember(rapidjson::Value(k, a), rapidjson::Value(v.c_str(), a), a);
    };
    put("model_config", NereidModelConfigJson(NereidInstanceModel(handle_)));
    put("model_instance_kind",
        NereidInstanceGetKind(handle_) == NEREID_INSTANCE_GPU ? "GPU" : "CPU");
    put("model_instance_name", NereidInstanceName(handle_));
    put("model_instance_device_id", std::to_string(NereidInstanceDeviceId(handle_)));
    put("model_repository", m_->repository);
    put("model_version", m_->version);
    put("model_name", m_->name);
    h.AddMember("args", args, a);
    const uint64_t id = ++call_id_;
    h.AddMember("id", id, a);
    ASSIGN_OR_RETURN(Message reply, Call(Json(h), id, "initialize()"));
    RETURN_IF_ERROR(ReplyStatus(*m_, reply, "initialize()"));
    Log(NEREID_LOG_INFO, "model '" + m_->name + "' instance '" + NereidInstanceName(handle_) +
                             "': Python stub started (pid " + std::to_string(process_->pid) + ", " +
                             m_->python + ")");
    return Status::Ok();
  }

  // finalize() (30 s at most), then the process ends; decoupled requests still open fail.
  void Stop() {
    if (process_ && !Dead()) {
      const uint64_t id = ++call_id_;
      auto reply = Call("{\"op\":\"finalize\",\"id\":" + std::to_string(id) + "}", id, "finalize()",
                        std::chrono::seconds(30));
      if (!reply.ok()) Log(NEREID_LOG_WARNING, reply.status().message());
    }
    if (process_) {
      shutdown(process_->channel->fd, SHUT_RDWR);
      if (const pid_t child = process_->pid.load(); child > 0) kill(child, SIGKILL);
    }
    if (reader_.joinable()) reader_.join();
    FailOpen("the instance was unloaded");
    process_.reset();
    metrics_.ReleaseAll();
  }

  bool Dead() {
    std::lock_guard lock(mu_);
    return dead_;
  }

  Status Execute(NereidRequest** requests, uint32_t count) {
    if (!process_ || Dead()) {
      if (process_) {
        if (reader_.joinable()) reader_.join();
        process_.reset();
        metrics_.ReleaseAll();
        Log(NEREID_LOG_WARNING, "model '" + m_->name + "' instance '" +
                                    NereidInstanceName(handle_) +
                                    "': starting its Python stub again");
      }
      RETURN_IF_ERROR(Start());
    }
    // Inputs into the input region, 64-byte aligned. The header (docs/python-backend.md) is binary
    // for what changes with every call (call id, request handles and ids) followed by a JSON
    // description of the requests' tensors, outputs, flags and parameters, which repeats from
    // call to call and which the stub parses once per distinct text.
    const uint64_t id = ++call_id_;
    rapidjson::Document h(rapidjson::kArrayType);
    auto& a = h.GetAllocator();
    size_t offset = 0;
    std::vector<NereidTensor> tensors;
    std::vector<std::pair<size_t, size_t>> places;  // where each tensor goes
    std::vector<uint64_t> handles(count);
    std::string header = "E";
    auto put = [&header](const auto& v) {
      header.append(reinterpret_cast<const char*>(&v), sizeof(v));
    };
    put(count), put(id);
    for (uint32_t r = 0; r < count; ++r) {
      handles[r] = ++next_handle_;
      const char* request_id = NereidRequestId(requests[r]);
      const uint32_t id_size = static_cast<uint32_t>(std::strlen(request_id));
      put(handles[r]), put(id_size);
      header.append(request_id, id_size);
      rapidjson::Value req(rapidjson::kObjectType);
      req.AddMember("flags", NereidRequestFlags(requests[r]), a);
      uint64_t correlation_number = 0;
      const char* correlation_text = nullptr;
      switch (NereidRequestCorrelationId(requests[r], &correlation_number, &correlation_text)) {
        case 1:
          req.AddMember("correlation_id", correlation_number, a);
          break;
        case 2:
          req.AddMember("correlation_id", rapidjson::Value(correlation_text, a), a);
          break;
        default:
          break;
      }
      rapidjson::Value inputs(rapidjson::kArrayType);
      for (uint32_t i = 0; i < NereidRequestInputCount(requests[r]); ++i) {
        NereidTensor t;
        RETURN_IF_ERROR(FromError(NereidRequestInput(requests[r], i, &t)));
        offset = (offset + 63) & ~size_t{63};
        inputs.PushBack(TensorJson(t, offset, a), a);
        tensors.push_back(t);
        places.emplace_back(offset, t.byte_size);
        offset += t.byte_size;
      }
      req.AddMember("inputs", inputs, a);
      rapidjson::Value outputs(rapidjson::kArrayType);
      for (const std::string& name : backend::RequestedOutputs(requests[r]))
        outputs.PushBack(rapidjson::Value(name.c_str(), a), a);
      req.AddMember("outputs", outputs, a);
      req.AddMember("parameters", RequestParametersJson(requests[r], a), a);
      h.PushBack(req, a);
    }
    put(static_cast<uint64_t>(offset));
    header += Json(h);
    RETURN_IF_ERROR(process_->input.Map(std::max<size_t>(offset, 4096), true));
    for (size_t t = 0; t < tensors.size(); ++t)
      if (places[t].second)
        std::memcpy(process_->input.data + places[t].first, tensors[t].data, places[t].second);
    if (m_->decoupled) {
      std::lock_guard lock(mu_);
      for (uint32_t r = 0; r < count; ++r) open_[handles[r]] = requests[r];
    }
    if (!m_->decoupled)
      for (uint32_t r = 0; r < count; ++r) executing_.emplace_back(handles[r], requests[r]);
    const uint64_t start = NereidNowNs();
    auto reply = Call(header, id, "execute()");
    const uint64_t end = NereidNowNs();
    executing_.clear();
    if (m_->decoupled) {
      // A decoupled request may already be complete (its final response sent from a thread): the
      // handles of 'requests' are not touched again here, and the execution's time stands for
      // the compute time.
      // Responses went (or go) through the sender; an execute() that raised ends the requests it
      // left open with its error.
      Status failed = reply.ok() ? ReplyStatus(*m_, *reply, "execute()") : reply.status();
      std::vector<NereidRequest*> left;
      {
        std::lock_guard lock(mu_);
        if (!failed.ok())
          for (uint64_t handle : handles)
            if (auto it = open_.find(handle); it != open_.end()) {
              left.push_back(it->second);
              open_.erase(it);
            }
      }
      for (NereidRequest* req : left) backend::Complete(req, failed);
      return Status::Ok();
    }
    for (uint32_t r = 0; r < count; ++r) NereidRequestSetComputeTimes(requests[r], start, end);
    if (!reply.ok()) return reply.status();  // the server fails the whole batch
    RETURN_IF_ERROR(ReplyStatus(*m_, *reply, "execute()"));
    const auto& responses = reply->header["responses"];
    if (!responses.IsArray() || responses.Size() != count)
      return backend::Internal("model '" + m_->name +
                               "': the stub's reply holds no response per "
                               "request");
    const uint64_t output_size = reply->header["output_size"].GetUint64();
    if (output_size > 0) RETURN_IF_ERROR(process_->output.Map(output_size, false));
    for (uint32_t r = 0; r < count; ++r)
      backend::Complete(requests[r], outputs_.Fill(requests[r], responses[r], process_->output.data,
                                                   process_->output.size));
    process_->input.ShrinkIfLarge();
    process_->output.ShrinkIfLarge();  // the stub notices (fstat) before it writes again
    return Status::Ok();
  }

 private:
  // Sends one request to the stub and waits for its reply (or the stub's end).
  // Whether 'm' is the reply to call 'id'. Anything else (the model's code can write to the
  // stub's socket) is logged and dropped, so a stray frame never answers the wrong call.
  bool IsReply(const Message& m, uint64_t id) {
    if (m.header.HasMember("id") && m.header["id"].IsUint64() && m.header["id"].GetUint64() == id &&
        m.op().size() > 5 && m.op().compare(m.op().size() - 5, 5, "_done") == 0)
      return true;
    Log(NEREID_LOG_WARNING, "model '" + m_->name +
                                "': an unexpected message from its Python stub ('" + m.op() +
                                "') was ignored");
    return false;
  }

  StatusOr<Message> Call(const std::string& header, uint64_t id, const std::string& what,
                         std::chrono::seconds timeout = std::chrono::hours(24 * 365)) {
    if (!m_->decoupled) return CallInline(header, id, what, timeout);
    std::unique_lock lock(mu_);
    reply_.reset();
    if (dead_ || !process_) return Died(what);
    lock.unlock();
    if (!process_->channel->Write(header)) {
      lock.lock();
      cv_.wait(lock, [&] { return dead_; });
      return Died(what);
    }
    lock.lock();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (!cv_.wait_until(lock, deadline, [&] { return reply_.has_value() || dead_; }))
        return backend::Unavailable("model '" + m_->name + "': " + what + " did not answer in " +
                                    std::to_string(timeout.count()) + " s");
      if (!reply_) return Died(what);
      Message m = std::move(*reply_);
      reply_.reset();
      if (IsReply(m, id)) return m;
    }
  }

  // Call() for models whose stub speaks only when asked: writes the request and reads frames on
  // this thread until the reply (log lines and BLS requests on the way are handled here too).
  StatusOr<Message> CallInline(const std::string& header, uint64_t id, const std::string& what,
                               std::chrono::seconds timeout) {
    if (Dead() || !process_) return Died(what);
    const std::shared_ptr<Channel>& channel = process_->channel;
    const Deadline deadline =
        timeout < std::chrono::hours(24) ? std::chrono::steady_clock::now() + timeout : kNever;
    if (channel->Write(header)) {
      for (;;) {
        SpinUntilReadable(channel->fd, m_->spin_us);
        std::optional<Message> m = process_->Read(deadline);
        if (!m) break;
        try {
          if (!HandleUnasked(channel, *m) && IsReply(*m, id)) return std::move(*m);
        } catch (const std::exception& e) {
          // A message the protocol does not allow: the stub cannot be trusted to go on.
          Log(NEREID_LOG_ERROR, "model '" + m_->name + "': " + e.what() + "; stopping its stub");
          break;
        }
      }
    }
    // The stub is gone (or silent past the timeout: then it is killed).
    if (const pid_t child = process_->pid.load(); child > 0) kill(child, SIGKILL);
    const std::string how = process_->Reap();
    {
      std::lock_guard lock(mu_);
      death_ = how;
      dead_ = true;
    }
    return Died(what);
  }

  // What a stub sends unasked, whoever reads it: log lines and BLS requests. False for the rest.
  bool HandleUnasked(const std::shared_ptr<Channel>& channel, const Message& m) {
    const std::string op = m.op();
    if (op == "log") {
      LogFromStub(*m_, m);
    } else if (op == "infer") {
      ServeBls(NereidInstanceModel(handle_), channel, m);
    } else if (op == "is_cancelled") {
      AnswerCancelled(channel, m);
    } else if (op.rfind("metric", 0) == 0) {
      metrics_.Handle(channel, m);
    } else {
      return false;
    }
    return true;
  }

  // request.is_cancelled() / sender.is_cancelled(): whether the client cancelled (or went away
  // from) the request with this handle, answered like a BLS call. A decoupled request is looked
  // up among the open ones under the lock that completing it takes; an ordinary one among the
  // batch this thread is executing (its stub asks only while execute() runs). Unknown or finished:
  // not cancelled.
  void AnswerCancelled(const std::shared_ptr<Channel>& channel, const Message& m) {
    const auto& h = m.header;
    if (!h.HasMember("call") || !h["call"].IsUint64() || !h.HasMember("handle") ||
        !h["handle"].IsUint64())
      return;
    const uint64_t handle = h["handle"].GetUint64();
    bool cancelled = false;
    if (m_->decoupled) {
      std::lock_guard lock(mu_);
      auto it = open_.find(handle);
      cancelled = it != open_.end() && NereidRequestIsCancelled(it->second) != 0;
    } else {
      for (const auto& [running, request] : executing_)
        if (running == handle) cancelled = NereidRequestIsCancelled(request) != 0;
    }
    rapidjson::Document reply = AnswerHeader(h["call"].GetUint64(), true);
    reply.AddMember("cancelled", cancelled, reply.GetAllocator());
    channel->Write(Json(reply));
  }

  Status Died(const std::string& what) {
    return backend::Unavailable("model '" + m_->name + "' instance '" +
                                NereidInstanceName(handle_) + "': its Python stub ended during " +
                                what + " (" + death_ + "); it is started again for the next batch");
  }

  void ReadLoop(const std::shared_ptr<Channel>& channel) {
    for (;;) {
      std::optional<Message> m = process_->Read();
      if (!m) break;
      try {
        if (HandleUnasked(channel, *m)) continue;
        if (m->op() == "response") {
          OnResponse(*m);
          continue;
        }
      } catch (const std::exception& e) {
        Log(NEREID_LOG_ERROR, "model '" + m_->name + "': " + e.what() + "; stopping its stub");
        if (const pid_t child = process_->pid.load(); child > 0) kill(child, SIGKILL);
        break;
      }
      {
        std::lock_guard lock(mu_);
        reply_ = std::move(*m);
        cv_.notify_all();
      }
    }
    std::string how = process_->Reap();
    {
      std::lock_guard lock(mu_);
      death_ = how;
      dead_ = true;
      cv_.notify_all();
    }
    FailOpen("its Python stub ended (" + how + ")");
  }

  // A decoupled model's response (its tensors in the frame's payload).
  void OnResponse(const Message& m) {
    const uint64_t handle = m.header["handle"].GetUint64();
    const bool final = m.header["final"].GetBool();
    NereidRequest* request = nullptr;
    {
      std::lock_guard lock(mu_);
      auto it = open_.find(handle);
      if (it == open_.end()) return;  // already failed or completed
      request = it->second;
      const bool error = m.header["error"].IsObject();
      if (final || error) open_.erase(it);
    }
    // send(flags=FINAL) with no response (Triton's idiom for "no more") carries no outputs.
    const bool flag_only = final && !m.header["error"].IsObject() &&
                           m.header["outputs"].IsArray() && m.header["outputs"].Empty();
    Status s = flag_only ? Status::Ok()
                         : outputs_.Fill(request, m.header,
                                         reinterpret_cast<const uint8_t*>(m.payload.data()),
                                         m.payload.size());
    if (!s.ok() || final || m.header["error"].IsObject()) {
      backend::Complete(request, s);
      return;
    }
    if (NereidError* e = NereidRequestSend(request, 0)) NereidErrorDelete(e);
  }

  void FailOpen(const std::string& why) {
    std::map<uint64_t, NereidRequest*> open;
    {
      std::lock_guard lock(mu_);
      open.swap(open_);
    }
    for (auto& [handle, request] : open)
      backend::Complete(request, backend::Unavailable("model '" + m_->name + "': " + why));
  }

  const ModelState* m_;
  NereidInstance* handle_;
  std::unique_ptr<Process> process_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Message> reply_;
  bool dead_ = false;
  std::string death_;
  std::map<uint64_t, NereidRequest*> open_;  // decoupled requests not finished yet
  OutputWriter outputs_;                     // execute()'s outputs into the requests
  // The batch an ordinary model is executing (handle, request): touched only by the executing
  // thread, which also answers the stub's is_cancelled() queries (CallInline).
  std::vector<std::pair<uint64_t, NereidRequest*>> executing_;
  uint64_t next_handle_ = 0;
  uint64_t call_id_ = 0;  // each request to the stub has its own; its reply carries it
  MetricsProxy metrics_;  // the stub's custom metrics
};

// ---- Model load: auto_complete_config in a stub of its own --------------------------------------

Status AutoComplete(ModelState& m, NereidModel* model) {
  ASSIGN_OR_RETURN(auto process, Spawn(m));
  rapidjson::Document h(rapidjson::kObjectType);
  auto& a = h.GetAllocator();
  h.AddMember("op", "auto_complete", a);
  h.AddMember("model_py", rapidjson::Value(m.model_py.c_str(), a), a);
  h.AddMember("config", rapidjson::Value(NereidModelConfigJson(model), a), a);
  if (!process->channel->Write(Json(h)))
    return backend::Unavailable("model '" + m.name + "': the Python stub ended at start (" +
                                process->Reap() + ")");
  for (;;) {
    std::optional<Message> reply = process->Read();
    if (!reply)
      return backend::Unavailable("model '" + m.name + "': the Python stub ended while loading " +
                                  m.model_py + " (" + process->Reap() +
                                  "; its output is in the server log)");
    if (reply->op() == "log") {
      LogFromStub(m, *reply);
      continue;
    }
    RETURN_IF_ERROR(ReplyStatus(m, *reply, "loading model.py / auto_complete_config()"));
    const std::string config = StringField(reply->header, "config");
    if (config != NereidModelConfigJson(model))
      RETURN_IF_ERROR(FromError(NereidModelSetConfigJson(model, config.c_str())));
    process->Reap();
    return Status::Ok();
  }
}

constexpr const char* kModelFile = "model.py";

Status InitializeModel(NereidModel* model) {
  auto m = std::make_unique<ModelState>();
  {
    std::lock_guard lock(g_stubs_mu);
    m->stubs = g_stubs[model];  // NereidModelInitialize registered it
  }
  m->name = NereidModelName(model);
  m->version = std::to_string(NereidModelVersion(model));
  const std::filesystem::path version_dir = NereidModelVersionPath(model);
  m->repository = version_dir.parent_path().string();
  rapidjson::Document config;
  config.Parse(NereidModelConfigJson(model));
  if (config.HasParseError() || !config.IsObject())
    return backend::Internal("model config JSON is malformed");
  std::string file = StringField(config, "default_model_filename");
  if (file.empty()) file = kModelFile;
  m->model_py = (version_dir / file).string();
  if (!std::filesystem::exists(m->model_py))
    return backend::NotFound("model '" + m->name + "': no " + file + " in " + version_dir.string());
  m->stub_path = StubPath();
  if (!std::filesystem::exists(m->stub_path))
    return backend::Internal("the Python stub is missing: " + m->stub_path);
  // The interpreter is the server's choice (its environment), never a config's: a config can come
  // from any client allowed to load models, and naming a program there would let it run anything.
  m->python = "python3";
  if (const char* env = std::getenv("NEREID_PYTHON"); env && *env) m->python = env;
  const bool has_parameters = config.HasMember("parameters") && config["parameters"].IsObject();
  if (has_parameters && config["parameters"].HasMember("python_interpreter"))
    return backend::InvalidArgument(
        "model '" + m->name +
        "': parameter 'python_interpreter' is not accepted: the Python interpreter is the "
        "server's own (environment NEREID_PYTHON), never chosen by a model config");
  if (has_parameters && config["parameters"].HasMember("stub_spin_us")) {
    const std::string v = backend::Parameter(config, "stub_spin_us");
    char* end = nullptr;
    const long spin = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || spin < 0 || spin > 100000)
      return backend::InvalidArgument(
          "model '" + m->name + "': parameter 'stub_spin_us' must be 0..100000, got '" + v + "'");
    m->spin_us = static_cast<int>(spin);
  }
  RETURN_IF_ERROR(AutoComplete(*m, model));
  config.Parse(NereidModelConfigJson(model));  // as auto-completed
  m->decoupled = NereidModelIsDecoupled(model) != 0;
  for (const auto& [output, spec] : backend::ReadIo(config, "output"))
    m->output_types[output] = spec.type;
  Log(NEREID_LOG_INFO, "model '" + m->name + "' runs " + m->model_py + " in Python stubs (" +
                           m->python + (m->decoupled ? ", decoupled" : "") + ")");
  NereidModelSetState(model, m.release());
  return Status::Ok();
}

}  // namespace
}  // namespace nereid::python

namespace py = nereid::python;
namespace backend = nereid::backend;

extern "C" {

NEREID_EXPORT uint32_t NereidBackendApiVersion(void) { return NEREID_BACKEND_API_VERSION; }

NEREID_EXPORT NereidError* NereidBackendInitialize(void) {
  return backend::Guard([] { return backend::CheckServerVersion(); });
}

// Takes any platform (Triton's python backend has none of its own).
NEREID_EXPORT const char* NereidBackendModelFile(void) { return py::kModelFile; }

NEREID_EXPORT NereidError* NereidModelInitialize(NereidModel* model) {
  {
    std::lock_guard lock(py::g_stubs_mu);
    py::g_stubs[model] = std::make_shared<py::Stubs>();
  }
  NereidError* error = backend::Guard([&] { return py::InitializeModel(model); });
  if (error != nullptr) {
    std::lock_guard lock(py::g_stubs_mu);
    py::g_stubs.erase(model);
  }
  return error;
}

NEREID_EXPORT NereidError* NereidModelFinalize(NereidModel* model) {
  delete static_cast<py::ModelState*>(NereidModelState(model));
  NereidModelSetState(model, nullptr);
  std::lock_guard lock(py::g_stubs_mu);
  py::g_stubs.erase(model);
  return nullptr;
}

// Kills every stub of the model (its loading one included): what waits on them returns at once
// with the stub's death as its error, and no new stub starts.
NEREID_EXPORT void NereidModelAbort(NereidModel* model) {
  std::shared_ptr<py::Stubs> stubs;
  {
    std::lock_guard lock(py::g_stubs_mu);
    if (auto it = py::g_stubs.find(model); it != py::g_stubs.end()) stubs = it->second;
  }
  if (stubs) stubs->Abort();
}

NEREID_EXPORT NereidError* NereidInstanceInitialize(NereidInstance* instance) {
  return backend::Guard([&]() -> backend::Status {
    auto* model =
        static_cast<const py::ModelState*>(NereidModelState(NereidInstanceModel(instance)));
    auto state = std::make_unique<py::Instance>(model, instance);
    RETURN_IF_ERROR(state->Start());
    NereidInstanceSetState(instance, state.release());
    return backend::Status::Ok();
  });
}

NEREID_EXPORT NereidError* NereidInstanceFinalize(NereidInstance* instance) {
  delete static_cast<py::Instance*>(NereidInstanceState(instance));
  NereidInstanceSetState(instance, nullptr);
  return nullptr;
}

// Non-decoupled models: every request is complete when Execute returns. Decoupled ones: requests
// complete when the model sends their final response (from any thread of the stub).
NEREID_EXPORT NereidError* NereidInstanceExecute(NereidInstance* instance, NereidRequest** requests,
                                                 uint32_t count) {
  auto* state = static_cast<py::Instance*>(NereidInstanceState(instance));
  return backend::Guard([&] { return state->Execute(requests, count); });
}

}  // extern "C"
