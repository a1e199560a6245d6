#include "common/logging.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

namespace nereid {

LogSettings& GlobalLogSettings() {
  static LogSettings settings;
  return settings;
}

void LogLine(LogLevel level, const char* file, int line, const std::string& message) {
  static std::mutex mu;
  const char tag = level == LogLevel::kInfo      ? 'I'
                   : level == LogLevel::kWarning ? 'W'
                   : level == LogLevel::kError   ? 'E'
                                                 : 'V';
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
            1000000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "%c%02d%02d %02d:%02d:%02d.%06ld %s:%d] %s\n", tag, tm.tm_mon + 1,
               tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long>(us), base, line,
               message.c_str());
}

}  // namespace nereid
