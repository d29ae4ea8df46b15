#include "comm/shm/segment_checks.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <span>

#include "common/hmac.h"

namespace kolo::comm::shm {
namespace {

std::span<const std::uint8_t> bytes_of(const std::string& text) {
  return {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()};
}

std::string octal(unsigned mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", mode);
  return text;
}

// What is wrong with the segment behind `fd` (`st`, its fstat): its owner and
// mode, then its nonce.
std::string problem_of_file(int fd, const struct stat& st, const Nonce& nonce) {
  if (auto why = ownership_problem(st); !why.empty()) return why;
  const auto bytes = static_cast<std::size_t>(st.st_size);
  if (bytes < sizeof(SegmentHeader)) return nonce_problem(nullptr, bytes, nonce);
  void* base = ::mmap(nullptr, sizeof(SegmentHeader), PROT_READ, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return std::string("its header cannot be read: ") + std::strerror(errno);
  std::string why = nonce_problem(static_cast<const std::byte*>(base), bytes, nonce);
  ::munmap(base, sizeof(SegmentHeader));
  return why;
}

}  // namespace

Nonce segment_nonce(const std::string& secret, const std::string& name) {
  return crypto::hmac_sha256(bytes_of(secret), bytes_of("kolo shm nonce\n" + name));
}

std::string ownership_problem(const struct stat& st) {
  std::string why;
  auto add = [&why](const std::string& problem) { why += (why.empty() ? "" : "; ") + problem; };
  if (!S_ISREG(st.st_mode)) add("it is not a plain file");
  if (st.st_uid != ::geteuid())
    add("it belongs to uid " + std::to_string(st.st_uid) + ", not to uid " + std::to_string(::geteuid()) +
        " that this job runs as");
  if ((st.st_mode & 077) != 0) add("its mode " + octal(st.st_mode & 07777) + " lets other users open it");
  return why;
}

std::string nonce_problem(const std::byte* base, std::size_t bytes, const Nonce& nonce) {
  if (base == nullptr || bytes < sizeof(SegmentHeader))
    return "it holds no header of this job (" + std::to_string(bytes) + " bytes)";
  const auto& header = *reinterpret_cast<const SegmentHeader*>(base);
  if (!crypto::constant_time_equal(std::span(header.nonce), nonce))
    return "its header does not carry this job's nonce (it was made with another job secret, or not by kolo)";
  return "";
}

Error refusal(const std::string& name, const std::string& why) {
  return Error("refused shared memory segment /dev/shm" + name + ": " + why +
               ". This job did not create it, so no rank maps it; it was left as it is: remove it (rm /dev/shm" +
               name + ") once you know where it came from");
}

Error existing_segment_error(const std::string& name, const Nonce& nonce) {
  const std::string path = "/dev/shm" + name;
  // lstat first: a private file of another user cannot be opened to say whose it is.
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0)
    return Error("shared memory segment " + path + " already exists and cannot be examined: " + std::strerror(errno));
  if (auto why = ownership_problem(st); !why.empty()) return refusal(name, why);
  const int fd = ::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0)
    return Error("shared memory segment " + path + " already exists and cannot be opened: " + std::strerror(errno));
  std::string why = ::fstat(fd, &st) == 0 ? problem_of_file(fd, st, nonce) : "it cannot be examined";
  ::close(fd);
  if (!why.empty()) return refusal(name, why);
  return Error("shared memory segment " + path +
               " already exists: it is a stale segment left by an earlier job with the same job id and secret (it "
               "is this user's and carries the job's nonce). Remove it (rm " + path +
               ") or start the job with a fresh KOLO_JOB_ID");
}

}  // namespace kolo::comm::shm
