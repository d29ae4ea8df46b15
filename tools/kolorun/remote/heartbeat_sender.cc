#include "remote/heartbeat_sender.h"

#include <algorithm>

namespace kolorun {

HeartbeatSender::HeartbeatSender(std::chrono::milliseconds interval)
    : interval_(interval), thread_([this] { run(); }) {}

HeartbeatSender::~HeartbeatSender() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void HeartbeatSender::add(std::weak_ptr<RemoteControl> control) {
  std::lock_guard lock(mutex_);
  controls_.push_back(std::move(control));
}

void HeartbeatSender::run() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
    std::erase_if(controls_, [](const std::weak_ptr<RemoteControl>& weak) {
      auto control = weak.lock();
      if (!control || control->closed()) return true;
      control->heartbeat();
      return false;
    });
  }
}

}  // namespace kolorun
