// How many of kolo's shareable memory files this process maps: its own
// shareable Buffers' and the peers' that the shared-memory communicator mapped
// to work in place of their buffers (kept across calls). A test takes it before
// and after a call to see which path the call took, from outside the library.
#pragma once

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace kolo::testing {

inline std::size_t mapped_shareable_files() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> inodes;  // a file mapped in several ranges counts once
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/memfd:kolo-buffer") == std::string::npos) continue;
    std::istringstream fields(line);
    std::string range, perms, offset, device, inode;
    fields >> range >> perms >> offset >> device >> inode;
    inodes.insert(inode);
  }
  return inodes.size();
}

}  // namespace kolo::testing
