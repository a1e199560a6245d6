#include "frontend/grpc/listener_watchdog.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "common/logging.h"

namespace nereid::grpc_frontend {
namespace {

bool DescriptorsFree() {
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

}  // namespace

// For a socket in LISTEN state (st 0A), /proc/net/tcp's rx_queue is the number of connections
// waiting to be accepted.
int64_t ListenBacklog(int port) {
  auto hex = [](std::string_view text, int64_t* out) {
    return std::from_chars(text.data(), text.data() + text.size(), *out, 16).ec == std::errc();
  };
  int64_t backlog = -1;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues;
      if (!(fields >> slot >> local >> remote >> state >> queues) || state != "0A") continue;
      const size_t colon = local.rfind(':');
      const size_t sep = queues.find(':');
      int64_t local_port = -1, queued = -1;
      if (colon == std::string::npos || sep == std::string::npos ||
          !hex(std::string_view(local).substr(colon + 1), &local_port) || local_port != port ||
          !hex(std::string_view(queues).substr(sep + 1), &queued))
        continue;
      backlog = std::max(backlog, queued);
    }
  }
  return backlog;
}

ListenerWatchdog::ListenerWatchdog(int port, std::function<bool()> restart)
    : port_(port), restart_(std::move(restart)), thread_([this] { Run(); }) {}

ListenerWatchdog::~ListenerWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ListenerWatchdog::Run() {
  try {
    Loop();
  } catch (const std::exception& e) {  // no exception may end the process from this thread
    LOG_ERROR << "listener watchdog of port " << port_ << " stopped: " << e.what();
  }
}

void ListenerWatchdog::Loop() {
  int stuck_secs = 0;
  bool down = false;  // a restart failed to listen: try again every second
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; })) {
    lock.unlock();
    if (down) {
      down = !restart_();
    } else {
      const int64_t backlog = ListenBacklog(port_);
      stuck_secs = backlog > 0 ? stuck_secs + 1 : 0;
      if (stuck_secs >= 3 && DescriptorsFree()) {
        LOG_WARNING << "gRPC has stopped accepting connections on port " << port_ << " (" << backlog
                    << " waiting; gRPC's listener does not recover after running out "
                    << "of file descriptors): restarting the gRPC server";
        down = !restart_();
        stuck_secs = 0;
      }
    }
    lock.lock();
  }
}

}  // namespace nereid::grpc_frontend
