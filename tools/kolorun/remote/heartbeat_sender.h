// Sends remote ranks their heartbeats from a thread of its own, so that nothing
// the supervisor's loop may block on (a full stdout when kolorun's output goes to
// a pager, a slow terminal) makes remote hosts think kolorun is gone.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "remote/remote_control.h"

namespace kolorun {

class HeartbeatSender {
 public:
  explicit HeartbeatSender(std::chrono::milliseconds interval);
  // Stops the thread (joins it).
  ~HeartbeatSender();
  HeartbeatSender(const HeartbeatSender&) = delete;
  HeartbeatSender& operator=(const HeartbeatSender&) = delete;

  // Heartbeats go to `control` until it is dropped or closed.
  void add(std::weak_ptr<RemoteControl> control);

 private:
  void run();

  std::chrono::milliseconds interval_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<std::weak_ptr<RemoteControl>> controls_;
  std::thread thread_;
};

}  // namespace kolorun
