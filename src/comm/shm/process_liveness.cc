#include "comm/shm/process_liveness.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kolo::comm::shm {

bool process_is_dead(pid_t pid) {
  if (pid <= 0) return false;  // not registered yet: nothing to say
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  // kill() succeeds on zombies, so look at the state letter in /proc/<pid>/stat:
  // "pid (comm) S ...", where comm may itself contain spaces and parentheses.
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  char buf[512];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* close_paren = std::strrchr(buf, ')');
  if (close_paren == nullptr || close_paren[1] != ' ') return false;
  char state = close_paren[2];
  return state == 'Z' || state == 'X' || state == 'x';
}

}  // namespace kolo::comm::shm
