#include "energy/carbon.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include "common/logging.h"

namespace nereid::energy {

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

// "2026-12-01T18:00:00Z" -> Unix seconds (UTC only: the trailing Z is required).
std::optional<double> ParseIsoUtc(const std::string& text) {
  std::tm tm{};
  char z = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &z) != 7 ||
      z != 'Z')
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const time_t t = timegm(&tm);
  if (t == static_cast<time_t>(-1)) return std::nullopt;
  return static_cast<double>(t);
}

}  // namespace

CarbonIntensity::CarbonIntensity(double fixed_g_per_kwh, std::string file, double pue)
    : fixed_(fixed_g_per_kwh), file_(std::move(file)), pue_(pue) {
  Refresh();
}

bool CarbonIntensity::known() const {
  std::lock_guard lock(mu_);
  return fixed_ >= 0 || !table_.empty();
}

double CarbonIntensity::At(double at) const {
  std::lock_guard lock(mu_);
  if (!table_.empty()) {
    // The last entry at or before 'at'; before the first, the first.
    auto it = std::upper_bound(table_.begin(), table_.end(), at,
                               [](double t, const auto& e) { return t < e.first; });
    return it == table_.begin() ? table_.front().second : std::prev(it)->second;
  }
  return fixed_;
}

double CarbonIntensity::GramsPerJoule(double at) const {
  const double intensity = At(at);
  return intensity < 0 ? -1 : intensity * pue_ / 3.6e6;
}

double CarbonIntensity::Grams(double joules, double at) const {
  const double per_joule = GramsPerJoule(at);
  return per_joule < 0 ? 0 : joules * per_joule;
}

StatusOr<std::vector<std::pair<double, double>>> CarbonIntensity::Parse(const std::string& text) {
  std::vector<std::pair<double, double>> table;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    line.erase(0, line.find_first_not_of(" \t\r"));
    if (line.empty() || line[0] == '#') continue;
    const size_t comma = line.find(',');
    if (comma == std::string::npos)
      return InvalidArgument("line " + std::to_string(number) + ": expected 'time,g_per_kwh'");
    const std::string when = line.substr(0, comma), value = line.substr(comma + 1);
    std::optional<double> at = ParseIsoUtc(when);
    char* end = nullptr;
    if (!at) {
      const double seconds = std::strtod(when.c_str(), &end);
      if (end == when.c_str() || *end != '\0' || !std::isfinite(seconds))
        return InvalidArgument("line " + std::to_string(number) + ": '" + when +
                               "' is neither Unix seconds nor YYYY-MM-DDTHH:MM:SSZ");
      at = seconds;
    }
    const double g = std::strtod(value.c_str(), &end);
    while (end != nullptr && (*end == ' ' || *end == '\r' || *end == '\t')) ++end;
    if (end == value.c_str() || (end != nullptr && *end != '\0') || !std::isfinite(g) || g < 0 ||
        g > 10000)
      return InvalidArgument("line " + std::to_string(number) + ": '" + value +
                             "' is not an intensity in g/kWh (0 to 10000)");
    table.emplace_back(*at, g);
    if (table.size() > 1000000) return InvalidArgument("more than 1,000,000 intensities");
  }
  std::sort(table.begin(), table.end());
  return table;
}

void CarbonIntensity::Refresh() {
  if (file_.empty()) return;
  struct stat st {};
  if (stat(file_.c_str(), &st) != 0) {
    std::lock_guard lock(mu_);
    if (last_error_.empty()) LOG_WARNING << "carbon intensity file " << file_ << " is not readable";
    last_error_ = "unreadable";
    return;
  }
  const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  {
    std::lock_guard lock(mu_);
    if (mtime_ && *mtime_ == mtime) return;
  }
  std::ifstream in(file_);
  std::stringstream text;
  text << in.rdbuf();
  auto table = Parse(text.str());
  std::lock_guard lock(mu_);
  mtime_ = mtime;
  if (!table.ok()) {
    if (last_error_ != table.status().message())
      LOG_WARNING << "carbon intensity file " << file_ << ": " << table.status().message()
                  << " (keeping the previous intensities)";
    last_error_ = table.status().message();
    return;
  }
  last_error_.clear();
  table_ = std::move(table).value();
  LOG_INFO << "carbon intensity: " << table_.size() << " entries from " << file_;
}

}  // namespace nereid::energy
