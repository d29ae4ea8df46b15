// kolorun: starts a kolo job. See options.cc (help_text) for usage.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "launch_error.h"
#include "launcher.h"
#include "mpi/mpi_launch.h"
#include "remote/remote_exec.h"
#include "remote/remote_protocol.h"

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

// kolorun's internal roles, started by kolorun itself on the ranks' hosts: the
// far end of a remote rank, and a rank under mpirun.
int run_role(const std::vector<std::string>& args) {
  if (args.front() == kolorun::kRemoteExecFlag) {
    if (args.size() != 1) throw kolorun::UsageError(std::string(kolorun::kRemoteExecFlag) + " takes no arguments");
    return kolorun::run_remote_exec();
  }
  std::vector<std::string> command(args.begin() + 1, args.end());
  if (!command.empty() && command.front() == "--") command.erase(command.begin());
  return kolorun::run_mpi_rank(command);
}

}  // namespace

int main(int argc, char** argv) {
  ensure_standard_fds_open();
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (!args.empty() && (args.front() == kolorun::kRemoteExecFlag || args.front() == kolorun::kMpiRankFlag))
      return run_role(args);
    return kolorun::run_launcher(args);
  } catch (const kolorun::LaunchError& e) {
    std::fprintf(stderr, "kolorun: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kolorun: %s\n", e.what());
    return 1;
  }
}
