// Status and StatusOr: how errors travel, in the server and in backends alike (no exceptions on the
// request path). Header-only and free of the ABI, so the core includes it without depending on
// nereid/backend.h; backend_util.h converts it to and from NereidError. Each frontend maps every
// code to exactly one status of its protocol (HttpStatusFor, GrpcCodeFor).
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace nereid {

class [[nodiscard]] Status {
 public:
  // Kept small on purpose: each code is a distinct client-visible outcome.
  enum class Code {
    kOk,
    kInvalidArgument,
    kNotFound,
    kUnavailable,
    kUnsupported,
    kInternal,
    kAlreadyExists,
    kCancelled,
    kResourceExhausted  // a limit on outstanding work: retry later (HTTP 429)
  };

  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string msg) {
  return Status(Status::Code::kInvalidArgument, std::move(msg));
}
inline Status NotFound(std::string msg) { return Status(Status::Code::kNotFound, std::move(msg)); }
inline Status Unavailable(std::string msg) {
  return Status(Status::Code::kUnavailable, std::move(msg));
}
inline Status Unsupported(std::string msg) {
  return Status(Status::Code::kUnsupported, std::move(msg));
}
inline Status Cancelled(std::string msg) {
  return Status(Status::Code::kCancelled, std::move(msg));
}
inline Status ResourceExhausted(std::string msg) {
  return Status(Status::Code::kResourceExhausted, std::move(msg));
}
inline Status Internal(std::string msg) { return Status(Status::Code::kInternal, std::move(msg)); }

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) { assert(!status_.ok()); }  // NOLINT
  StatusOr(T value) : value_(std::move(value)) {}                                  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

#define NEREID_CONCAT_INNER(a, b) a##b
#define NEREID_CONCAT(a, b) NEREID_CONCAT_INNER(a, b)

// Spelled exactly as in nereid/backend_util.h, so a file may include both.
#define RETURN_IF_ERROR(expr)  \
  do {                         \
    auto _st = (expr);         \
    if (!_st.ok()) return _st; \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(NEREID_CONCAT(_status_or_, __LINE__), lhs, expr)

}  // namespace nereid
