// What kolorun tells `kolorun --remote-exec` on another host, over the remote
// process's stdin (ssh's channel, or a pipe through a launcher command). Nothing
// secret ever goes on a command line: the environment, KOLO_SECRET included,
// travels here.
//
// The stream: one RemoteSpec, encoded below, then single control bytes until the
// end of the job:
//   0          heartbeat: kolorun is alive and can reach this host;
//   1..64      deliver this signal to the rank's process group;
//   end of stream (kolorun died, ssh dropped, or kolorun wants the rank gone):
//              SIGKILL the rank's process group at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kolorun {

inline constexpr char kHeartbeatByte = 0;
inline constexpr char kRemoteExecFlag[] = "--remote-exec";

struct RemoteSpec {
  int rank = 0;
  std::string label;                 // "rank 3 on host h1", for messages
  std::string working_directory;     // chdir here before exec
  std::chrono::milliseconds host_timeout{20000};  // silence after which kolorun counts as gone
  std::vector<std::string> argv;     // argv[0] is PROGRAM as the user wrote it
  std::vector<std::string> env;      // "NAME=value", laid over the remote environment
};

// "KOLO-REMOTE 1\n" then length-prefixed fields ("<decimal length>:<bytes>").
std::string encode_remote_spec(const RemoteSpec& spec);

// Incremental decoding of a spec from a byte stream that may arrive in pieces.
class RemoteSpecDecoder {
 public:
  // Feeds bytes; returns how many of them belong to the spec (the rest are
  // control bytes). Throws kolo::Error on malformed input.
  std::size_t feed(std::string_view bytes);
  bool done() const { return spec_.has_value(); }
  const RemoteSpec& spec() const { return *spec_; }

 private:
  std::string buffer_;
  std::optional<RemoteSpec> spec_;
};

}  // namespace kolorun
