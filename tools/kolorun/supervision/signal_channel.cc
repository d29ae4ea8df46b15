#include "supervision/signal_channel.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>

#include "launch_error.h"

namespace kolorun {
namespace {

sigset_t handled_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR1);  // forwarded to the ranks: flight records
  sigaddset(&set, SIGTSTP);  // Ctrl-Z: the ranks stop with kolorun
  return set;
}

}  // namespace

SignalChannel::SignalChannel() {
  // An inherited SIG_IGN for SIGCHLD would make the kernel reap ranks behind our
  // back; a write to a closed stdout must be an error, not the end of kolorun.
  ::signal(SIGCHLD, SIG_DFL);
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t set = handled_signals();
  if (::pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) throw LaunchError("cannot block signals", 1);
  fd_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!fd_.valid()) throw LaunchError(system_error_text("cannot open a signalfd", errno), 1);
}

std::vector<int> SignalChannel::drain() {
  std::vector<int> signals;
  signalfd_siginfo info{};
  while (true) {
    ssize_t n = ::read(fd_.get(), &info, sizeof(info));
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof(info))) break;
    signals.push_back(static_cast<int>(info.ssi_signo));
  }
  return signals;
}

void SignalChannel::reset_for_child() {
  // Every disposition, not only those kolorun changed: one started in the
  // background by a script inherits SIGINT and SIGQUIT ignored, and its ranks
  // would ignore the Ctrl-C it forwards. (SIGKILL and SIGSTOP, and glibc's own
  // signals, refuse the call harmlessly.)
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &default_action, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

}  // namespace kolorun
