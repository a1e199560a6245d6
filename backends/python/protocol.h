// The Python backend's side of the stub protocol: framed messages over the stub's Unix socket (a
// JSON header and a payload; the framing is in the stub's docstring), the waits that notice the
// stub's death through its pidfd, and the helpers every part of the backend writes messages with.
// The stub runs the model's own code, which can write anything to its socket: rapidjson's checks
// throw instead of asserting (this header is included before any other rapidjson use), and every
// reader of the stub's messages catches.
#pragma once

#include <stdexcept>
#define RAPIDJSON_ASSERT(x)                                                                \
  do {                                                                                     \
    if (!(x)) throw std::runtime_error("malformed message from the Python stub (" #x ")"); \
  } while (0)

#include <poll.h>
#include <rapidjson/document.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "common/config_json.h"
#include "nereid/backend_util.h"

namespace nereid::python {

using backend::DataType;
using backend::FromError;
using backend::Status;
using backend::StatusOr;
using backend::StringField;
constexpr auto Json = backend::ToJson;

inline void Log(NereidLogLevel level, const std::string& message) { backend::Log(level, message); }

// A tensor's description in a message: name, datatype, shape, and where its bytes are.
inline rapidjson::Value TensorJson(const NereidTensor& t, size_t offset,
                                   rapidjson::Document::AllocatorType& a) {
  rapidjson::Value v(rapidjson::kObjectType);
  v.AddMember("name", rapidjson::Value(t.name, a), a);
  const std::string datatype(backend::DataTypeName(static_cast<DataType>(t.datatype)));
  v.AddMember("datatype", rapidjson::Value(datatype.c_str(), a), a);
  rapidjson::Value shape(rapidjson::kArrayType);
  for (uint32_t d = 0; d < t.dims_count; ++d) shape.PushBack(t.shape[d], a);
  v.AddMember("shape", shape, a);
  v.AddMember("offset", static_cast<uint64_t>(offset), a);
  v.AddMember("size", t.byte_size, a);
  return v;
}

// ---- Framed messages over the socket ------------------------------------------------------------

struct Message {
  rapidjson::Document header;
  std::string payload;
  std::string op() const { return StringField(header, "op"); }
};

using Deadline = std::chrono::steady_clock::time_point;
constexpr Deadline kNever = Deadline::max();

// Waits until 'fd' is readable: false when the process behind 'pidfd' has exited with nothing
// left to read (a process it forked may still hold the socket open, so its end never comes), or
// when 'deadline' passes.
inline bool WaitReadable(int fd, int pidfd, Deadline deadline) {
  for (;;) {
    int timeout_ms = -1;
    if (deadline != kNever) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      timeout_ms = static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30));
    }
    pollfd p[2] = {{fd, POLLIN, 0}, {pidfd, POLLIN, 0}};
    const int n = poll(p, pidfd >= 0 ? 2 : 1, timeout_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (p[0].revents) return true;  // data, or the socket's end
    if (n > 0) return false;        // only the process ended
  }
}

// Reads exactly 'n' bytes; blocks only when nothing is there yet (the usual case reads at once).
inline bool ReadAll(int fd, void* data, size_t n, int pidfd, Deadline deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!WaitReadable(fd, pidfd, deadline)) return false;
      continue;
    }
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// The backend's end of a stub's socket. Shared with the callbacks of the stub's BLS requests,
// which may answer after the instance is gone (their writes then fail quietly).
struct Channel {
  int fd = -1;
  std::mutex write_mu;
  explicit Channel(int socket) : fd(socket) {}
  ~Channel() { close(fd); }
  // One frame in one system call where the socket takes it whole (the stub wakes once per frame).
  bool Write(const std::string& header, const std::string& payload = "") {
    uint32_t sizes[2] = {static_cast<uint32_t>(header.size()),
                         static_cast<uint32_t>(payload.size())};
    iovec parts[3] = {{sizes, sizeof(sizes)},
                      {const_cast<char*>(header.data()), header.size()},
                      {const_cast<char*>(payload.data()), payload.size()}};
    std::lock_guard lock(write_mu);
    size_t first = 0;
    while (first < 3) {
      msghdr msg{};
      msg.msg_iov = parts + first;
      msg.msg_iovlen = 3 - first;
      const ssize_t w = sendmsg(fd, &msg, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      // Skip what went out: whole parts, then the start of the next.
      size_t left = static_cast<size_t>(w);
      while (first < 3 && left >= parts[first].iov_len) left -= parts[first++].iov_len;
      if (first < 3) {
        parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + left;
        parts[first].iov_len -= left;
      }
    }
    return true;
  }
};

// The stub's frames are bounded: a header of at most 64 MiB, a payload of at most 4 GiB. Nothing
// when the stub (the process behind 'pidfd') ended, broke the framing, or let 'deadline' pass.
inline std::optional<Message> ReadFrame(int fd, int pidfd, Deadline deadline = kNever) {
  uint32_t sizes[2];
  if (!ReadAll(fd, sizes, sizeof(sizes), pidfd, deadline) || sizes[0] > (64u << 20))
    return std::nullopt;
  std::string header(sizes[0], '\0');
  Message m;
  m.payload.resize(sizes[1]);
  if (!ReadAll(fd, header.data(), header.size(), pidfd, deadline) ||
      (sizes[1] && !ReadAll(fd, m.payload.data(), m.payload.size(), pidfd, deadline)))
    return std::nullopt;
  m.header.Parse(header.c_str());
  if (m.header.HasParseError() || !m.header.IsObject()) return std::nullopt;
  return m;
}

// Polls 'fd' for up to 'spin_us' microseconds; returns when it is readable or the time is up.
inline void SpinUntilReadable(int fd, int spin_us) {
  if (spin_us <= 0) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, 0) == 0 && std::chrono::steady_clock::now() < deadline) {
  }
}

// The header of an answer to a question the stub asked with a call id (a BLS response, an
// is_cancelled() answer): 'final' ends the call.
inline rapidjson::Document AnswerHeader(uint64_t call, bool final) {
  rapidjson::Document h(rapidjson::kObjectType);
  auto& a = h.GetAllocator();
  h.AddMember("op", "infer_response", a);
  h.AddMember("call", call, a);
  h.AddMember("final", final, a);
  return h;
}

// pb_utils.TritonError's codes (Triton's numbering) and the ABI's, one table for both directions;
// anything else is INTERNAL (Triton's 1).
struct TritonCode {
  int triton;
  NereidErrorCode nereid;
};
inline constexpr TritonCode kTritonCodes[] = {{2, NEREID_ERROR_NOT_FOUND},
                                              {3, NEREID_ERROR_INVALID_ARG},
                                              {4, NEREID_ERROR_UNAVAILABLE},
                                              {5, NEREID_ERROR_UNSUPPORTED},
                                              {7, NEREID_ERROR_CANCELLED}};
inline NereidErrorCode ErrorCode(int triton_code) {
  for (const TritonCode& c : kTritonCodes)
    if (c.triton == triton_code) return c.nereid;
  return NEREID_ERROR_INTERNAL;
}
inline int TritonErrorCode(NereidErrorCode code) {
  for (const TritonCode& c : kTritonCodes)
    if (c.nereid == code) return c.triton;
  return 1;
}

// A request's parameters (those for the backend) as the JSON object pb_utils reads.
inline rapidjson::Value RequestParametersJson(NereidRequest* request,
                                              rapidjson::Document::AllocatorType& a) {
  rapidjson::Value params(rapidjson::kObjectType);
  for (uint32_t i = 0; i < NereidRequestParameterCount(request); ++i) {
    NereidParameter p;
    if (NereidError* e = NereidRequestParameter(request, i, &p)) {
      NereidErrorDelete(e);
      continue;
    }
    rapidjson::Value key(p.name, a);
    if (p.type == NEREID_PARAMETER_BOOL)
      params.AddMember(key, p.bool_value != 0, a);
    else if (p.type == NEREID_PARAMETER_INT64)
      params.AddMember(key, p.int_value, a);
    else if (p.type == NEREID_PARAMETER_DOUBLE)
      params.AddMember(key, p.double_value, a);
    else
      params.AddMember(key, rapidjson::Value(p.string_value, a), a);
  }
  return params;
}

}  // namespace nereid::python
