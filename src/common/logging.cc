#include "common/logging.h"

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

namespace nereid {

LogSettings& GlobalLogSettings() {
  static LogSettings settings;
  return settings;
}

Status ApplyLogSetting(const std::string& key, const LogSettingValue& value) {
  LogSettings& settings = GlobalLogSettings();
  const bool* flag = std::get_if<bool>(&value);
  const uint64_t* number = std::get_if<uint64_t>(&value);
  const std::string* text = std::get_if<std::string>(&value);
  if (key == "log_info" && flag) {
    settings.info = *flag;
  } else if (key == "log_warning" && flag) {
    settings.warning = *flag;
  } else if (key == "log_error" && flag) {
    settings.error = *flag;
  } else if (key == "log_verbose_level" && number && *number <= INT32_MAX) {
    settings.verbose = static_cast<int>(*number);
  } else if ((key == "log_file" || key == "log_format") && text) {
    if (*text != (key == "log_file" ? "" : "default"))
      return InvalidArgument("'" + key +
                             "' can not be changed (log_file: \"\", log_format: \"default\")");
  } else {
    return InvalidArgument("unknown or mistyped logging setting '" + key + "'");
  }
  return Status::Ok();
}

std::vector<std::pair<std::string, LogSettingValue>> CurrentLogSettings() {
  const LogSettings& s = GlobalLogSettings();
  return {{"log_file", std::string()},
          {"log_info", s.info.load()},
          {"log_warning", s.warning.load()},
          {"log_error", s.error.load()},
          {"log_verbose_level", static_cast<uint64_t>(s.verbose.load())},
          {"log_format", std::string("default")}};
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
