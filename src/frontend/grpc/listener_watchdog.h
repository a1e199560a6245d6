// A watchdog for a listening TCP port whose server may stop accepting for good. gRPC (Debian's
// 1.51; grpc/grpc#20418) does once accept4 fails with EMFILE. Once a second the watchdog reads the
// listening socket's accept backlog from /proc/net/tcp*: a backlog that does not drain for 3 s
// while file descriptors are free again means the listener is dead, and 'restart' is called (on
// the watchdog's thread) to replace the server; while a restart fails, it is retried every second.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace nereid::grpc_frontend {

// The accept backlog of the socket listening on 'port' (IPv4 or IPv6), or -1 if none is found.
int64_t ListenBacklog(int port);

class ListenerWatchdog {
 public:
  // 'restart' replaces the listener and says whether it listens again.
  ListenerWatchdog(int port, std::function<bool()> restart);
  ~ListenerWatchdog();  // stops the watchdog (a restart in progress completes first)
  ListenerWatchdog(const ListenerWatchdog&) = delete;
  ListenerWatchdog& operator=(const ListenerWatchdog&) = delete;

 private:
  void Run();
  void Loop();

  const int port_;
  std::function<bool()> restart_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace nereid::grpc_frontend
