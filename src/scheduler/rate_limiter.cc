#include "scheduler/rate_limiter.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace nereid {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

template <typename T>
bool ParseInt(const std::string& text, T* out) {
  const char* end = text.data() + text.size();
  auto [ptr, error] = std::from_chars(text.data(), end, *out);
  return !text.empty() && error == std::errc() && ptr == end;
}

}  // namespace

StatusOr<RateLimiter::Available> RateLimiter::ParseResourceFlag(const std::string& value) {
  const Status bad = InvalidArgument(
      "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or "
      "'<resource_name>:<count>'. Got " +
      value);
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    const size_t colon = value.find(':', at);
    parts.push_back(value.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  if (parts.size() < 2 || parts.size() > 3 || parts[0].empty()) return bad;
  Available a;
  a.name = Lower(parts[0]);
  if (!ParseInt(parts[1], &a.count)) return bad;
  if (parts.size() == 3) {
    int32_t device = 0;
    if (!ParseInt(parts[2], &device) || device < 0) return bad;
    a.device = device;
  }
  return a;
}

RateLimiter::RateLimiter(std::vector<Available> available)
    : explicit_(!available.empty()), available_(std::move(available)) {}

std::string RateLimiter::Key(const std::string& name, bool global, int32_t device) {
  return (global ? std::string("g:") : "d" + std::to_string(device) + ":") + Lower(name);
}

uint32_t RateLimiter::AvailableLocked(const std::string& name, bool global, int32_t device) const {
  const std::string lower = Lower(name);
  if (explicit_) {
    // A count for this device wins over one for every device; the global pool takes the latter.
    std::optional<uint32_t> any, here;
    for (const Available& a : available_) {
      if (a.name != lower) continue;
      if (!a.device) any = a.count;
      if (!global && a.device && *a.device == device) here = a.count;
    }
    return here ? *here : any.value_or(0);
  }
  uint32_t most = 0;
  for (const Client* c : clients_)
    for (const Resource& r : c->resources_)
      if (Lower(r.name) == lower && r.global == global && (global || c->device_ == device))
        most = std::max(most, r.count);
  return most;
}

StatusOr<std::shared_ptr<RateLimiter::Client>> RateLimiter::Register(
    std::vector<Resource> resources, int32_t device, uint32_t priority) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < resources.size(); ++i) {
    const Resource& r = resources[i];
    bool conflict = false;
    for (size_t j = 0; j < i; ++j)
      conflict |= Lower(resources[j].name) == Lower(r.name) && resources[j].global != r.global;
    for (const Client* c : clients_)
      for (const Resource& other : c->resources_)
        conflict |= Lower(other.name) == Lower(r.name) && other.global != r.global;
    if (conflict)
      return InvalidArgument("Resource \"" + r.name +
                             "\" is present as both global and device-specific resource in the "
                             "model configuration.");
    if (explicit_) {
      const uint32_t available = AvailableLocked(r.name, r.global, device);
      if (r.count > available)
        return InvalidArgument("Resource count for \"" + r.name + "\" is limited to " +
                               std::to_string(available) +
                               " which will prevent scheduling of one or more model instances, "
                               "the minimum required count is " +
                               std::to_string(r.count));
    }
  }
  std::shared_ptr<Client> client(new Client());
  client->limiter_ = this;
  client->resources_ = std::move(resources);
  client->device_ = device;
  client->priority_ = std::max<uint32_t>(priority, 1);
  clients_.push_back(client.get());
  return client;
}

bool RateLimiter::FreeLocked(const Client& c) const {
  for (const Resource& r : c.resources_) {
    const std::string key = Key(r.name, r.global, c.device_);
    auto held = used_.find(key);
    const uint64_t in_use = held == used_.end() ? 0 : held->second;
    if (in_use + r.count > AvailableLocked(r.name, r.global, c.device_)) return false;
  }
  return true;
}

const RateLimiter::Client* RateLimiter::NextLocked(
    std::chrono::steady_clock::time_point now) const {
  const Client* best = nullptr;
  for (const Client* c : clients_) {
    const bool returning = c->waiting_since_ == 0 && c->returning_until_ > now;
    if ((c->waiting_since_ == 0 && !returning) || !FreeLocked(*c)) continue;
    const uint64_t scaled = c->executions_ * c->priority_;
    const uint64_t best_scaled = best ? best->executions_ * best->priority_ : 0;
    // Ties: the more important instance (smaller priority), then the one waiting longest.
    if (best == nullptr || scaled < best_scaled ||
        (scaled == best_scaled &&
         (c->priority_ < best->priority_ ||
          (c->priority_ == best->priority_ && c->waiting_since_ < best->waiting_since_))))
      best = c;
  }
  return best;
}

void RateLimiter::Client::Acquire() {
  RateLimiter& l = *limiter_;
  std::unique_lock<std::mutex> lock(l.mu_);
  waiting_since_ = l.next_ticket_++;
  returning_until_ = {};
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    const Client* next = l.NextLocked(now);
    if (next == this) break;
    if (next != nullptr && next->waiting_since_ == 0)  // a released one's turn: wait for it
      l.cv_.wait_until(lock, next->returning_until_);
    else
      l.cv_.wait(lock);
  }
  waiting_since_ = 0;
  for (const Resource& r : resources_) l.used_[Key(r.name, r.global, device_)] += r.count;
  l.cv_.notify_all();  // another may be free as well
}

void RateLimiter::Client::Release() { GiveBack(/*executed=*/true); }

void RateLimiter::Client::Return() { GiveBack(/*executed=*/false); }

void RateLimiter::Client::GiveBack(bool executed) {
  RateLimiter& l = *limiter_;
  {
    std::lock_guard<std::mutex> lock(l.mu_);
    for (const Resource& r : resources_) l.used_[Key(r.name, r.global, device_)] -= r.count;
    if (executed) {
      ++executions_;  // counted when it ends, as Triton counts
      returning_until_ = std::chrono::steady_clock::now() + kReturnGrace;
    }
  }
  l.cv_.notify_all();
}

RateLimiter::Client::~Client() {
  RateLimiter& l = *limiter_;
  {
    std::lock_guard<std::mutex> lock(l.mu_);
    std::erase(l.clients_, this);
  }
  l.cv_.notify_all();  // the default counts may have changed
}

}  // namespace nereid
