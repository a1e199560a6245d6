// Minimal leveled logging to stderr in Triton's line shape (I/W/E + time + file:line). Verbose
// logging is enabled by --log-verbose; hot paths guard with NEREID_VLOG_ON() so disabled logs cost
// one load.
#pragma once

#include <atomic>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"

namespace nereid {

enum class LogLevel { kInfo, kWarning, kError, kVerbose };

struct LogSettings {
  std::atomic<int> verbose{0};
  std::atomic<bool> info{true};
  std::atomic<bool> warning{true};
  std::atomic<bool> error{true};
};
LogSettings& GlobalLogSettings();

// Triton's logging extension (HTTP /v2/logging, gRPC LogSettings), for both frontends: a setting's
// value is a bool, an unsigned integer or a string, as the protocol carries it.
using LogSettingValue = std::variant<bool, uint64_t, std::string>;
// Validates and applies one setting: log_info/log_warning/log_error (bool), log_verbose_level
// (0..INT32_MAX), log_file ("" only: stderr) and log_format ("default" only). InvalidArgument
// otherwise, naming the key.
Status ApplyLogSetting(const std::string& key, const LogSettingValue& value);
// Every setting with its current value, in Triton's order.
std::vector<std::pair<std::string, LogSettingValue>> CurrentLogSettings();

void LogLine(LogLevel level, const char* file, int line, const std::string& message);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line)
      : level_(level), file_(file), line_(line) {}
  ~LogMessage() { LogLine(level_, file_, line_, stream_.str()); }
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

}  // namespace nereid

#define NEREID_LOG_ENABLED(flag) \
  (::nereid::GlobalLogSettings().flag.load(std::memory_order_relaxed))
#define LOG_INFO                \
  if (NEREID_LOG_ENABLED(info)) \
  ::nereid::LogMessage(::nereid::LogLevel::kInfo, __FILE__, __LINE__).stream()
#define LOG_WARNING                \
  if (NEREID_LOG_ENABLED(warning)) \
  ::nereid::LogMessage(::nereid::LogLevel::kWarning, __FILE__, __LINE__).stream()
#define LOG_ERROR                \
  if (NEREID_LOG_ENABLED(error)) \
  ::nereid::LogMessage(::nereid::LogLevel::kError, __FILE__, __LINE__).stream()
#define NEREID_VLOG_ON(n) \
  (::nereid::GlobalLogSettings().verbose.load(std::memory_order_relaxed) >= (n))
#define LOG_VERBOSE(n)   \
  if (NEREID_VLOG_ON(n)) \
  ::nereid::LogMessage(::nereid::LogLevel::kVerbose, __FILE__, __LINE__).stream()
