// The call site of an operation the user did not name: kolo/internal/naming.h names it
// "<op>@<file>:<line>:<column>#<n>", n counting that site's submissions on this
// rank. Threads that submit from one site at the same time take their numbers in
// the order they arrive, which differs between ranks, so the same name would pair
// different tensors across ranks; the engine refuses such operations instead
// (Engine::submit, validate.cc).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace kolo::engine {

// "<op>@<file>:<line>:<column>" of a generated name; empty for a name the user gave.
inline std::string_view call_site_of(const std::string& name) {
  const auto at = name.find('@');
  const auto hash = name.rfind('#');
  if (at == std::string::npos || hash == std::string::npos || hash < at || hash + 1 == name.size()) return {};
  for (std::size_t i = hash + 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return {};
  }
  return std::string_view(name).substr(0, hash);
}

// A number for the calling thread that no other thread of the process ever has
// (a std::thread::id is reused once its thread is joined).
inline std::uint64_t this_thread_serial() {
  static std::atomic<std::uint64_t> next{1};
  thread_local const std::uint64_t serial = next.fetch_add(1, std::memory_order_relaxed);
  return serial;
}

}  // namespace kolo::engine
