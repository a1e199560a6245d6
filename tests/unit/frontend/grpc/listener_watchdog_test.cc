// The listener watchdog: it reads a listening socket's accept backlog from /proc/net/tcp and calls
// for a restart once connections have waited unaccepted for 3 s; a drained backlog calls nothing.
#include "frontend/grpc/listener_watchdog.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace nereid::grpc_frontend {
namespace {

// A socket listening on a free loopback port that never accepts.
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(fd, 16);
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  ~Listener() { close(fd); }
  int Connect() const {
    const int c = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    EXPECT_EQ(connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    return c;
  }
};

TEST(ListenerWatchdogTest, ReadsTheAcceptBacklog) {
  Listener l;
  EXPECT_EQ(ListenBacklog(l.port), 0);
  const int a = l.Connect(), b = l.Connect();
  EXPECT_EQ(ListenBacklog(l.port), 2);
  close(a);
  close(b);
  EXPECT_EQ(ListenBacklog(0), -1);  // nothing listens there
}

TEST(ListenerWatchdogTest, RestartsAListenerThatStoppedAccepting) {
  Listener l;
  std::vector<int> waiting = {l.Connect(), l.Connect()};
  std::atomic<int> restarts{0};
  {
    ListenerWatchdog watchdog(l.port, [&] {
      ++restarts;
      return true;
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(8);
    while (restarts == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(restarts.load(), 1);
  for (int c : waiting) close(c);
}

TEST(ListenerWatchdogTest, LeavesAListenerWithNothingWaitingAlone) {
  Listener l;
  std::atomic<int> restarts{0};
  {
    ListenerWatchdog watchdog(l.port, [&] {
      ++restarts;
      return true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  }  // stops promptly: the destructor wakes the watchdog
  EXPECT_EQ(restarts.load(), 0);
}

}  // namespace
}  // namespace nereid::grpc_frontend
