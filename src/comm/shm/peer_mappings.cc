#include "comm/shm/peer_mappings.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>

namespace kolo::comm::shm {

PeerMappings::~PeerMappings() {
  for (const Entry& e : entries_) ::munmap(e.base, e.bytes);
}

void PeerMappings::drop(std::size_t index) noexcept {
  ::munmap(entries_[index].base, entries_[index].bytes);
  mapped_bytes_ -= entries_[index].bytes;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(index));
}

void PeerMappings::trim(std::uint64_t keep_bytes) {
  // A caller that holds one output while the next call makes another (an
  // allgather's outputs through the API) alternates two sets of files: keep
  // room for two calls' worth, or every call would map and fault its files
  // afresh.
  std::uint64_t in_use = 0;
  for (const Entry& e : entries_)
    if (e.last_call == calls_) in_use += e.bytes;
  keep_bytes = std::max(keep_bytes, 2 * in_use);
  while (mapped_bytes_ > keep_bytes || entries_.size() > kMaxEntries) {
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->last_call != calls_ && (oldest == entries_.end() || it->last_call < oldest->last_call)) oldest = it;
    }
    if (oldest == entries_.end()) return;  // all in use by this call
    drop(static_cast<std::size_t>(oldest - entries_.begin()));
  }
}

std::byte* PeerMappings::map(int peer, int pid, int fd, std::uint64_t inode, std::uint64_t file_bytes) {
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (e.peer != peer || e.fd != fd) continue;
    if (e.pid == pid && e.inode == inode && e.bytes == file_bytes) {
      e.last_call = calls_;
      return e.base;
    }
    drop(i);  // the peer closed that file and the number now names another
    break;
  }
  if (pid <= 0 || fd < 0 || file_bytes == 0) return nullptr;
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int opened = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (opened < 0) return nullptr;
  struct stat st {};
  void* base = MAP_FAILED;
  if (::fstat(opened, &st) == 0 && static_cast<std::uint64_t>(st.st_ino) == inode &&
      static_cast<std::uint64_t>(st.st_size) >= file_bytes) {
    base = ::mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, opened, 0);
  }
  ::close(opened);  // the mapping keeps the file
  if (base == MAP_FAILED) return nullptr;
  try {
    entries_.push_back({peer, pid, fd, inode, file_bytes, static_cast<std::byte*>(base), calls_});
  } catch (...) {
    ::munmap(base, file_bytes);
    throw;
  }
  mapped_bytes_ += file_bytes;
  return static_cast<std::byte*>(base);
}

}  // namespace kolo::comm::shm
