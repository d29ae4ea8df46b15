// kolorun: starts a kolo job. See options.cc (help_text) for usage.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "launch_error.h"
#include "launcher.h"

namespace {

// Pipes and files kolorun opens later must not land on 0, 1 or 2 if kolorun was
// started with one of them closed: a rank would then write into the wrong place.
void ensure_standard_fds_open() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) >= 0) continue;
    int opened = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (opened >= 0 && opened != fd) ::close(opened);
  }
}

}  // namespace

int main(int argc, char** argv) {
  ensure_standard_fds_open();
  try {
    return kolorun::run_launcher(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const kolorun::LaunchError& e) {
    std::fprintf(stderr, "kolorun: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kolorun: %s\n", e.what());
    return 1;
  }
}
