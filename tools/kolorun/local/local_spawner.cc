#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "local/process_spawner.h"
#include "supervision/signal_channel.h"

namespace kolorun {
namespace {

// Pipes big enough that a chatty rank rarely waits for kolorun to drain them.
constexpr int kOutputPipeBytes = 1 << 20;

struct Pipe {
  UniqueFd read_end;
  UniqueFd write_end;
};

Pipe make_pipe(const char* what) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw LaunchError(system_error_text(std::string("cannot make ") + what, errno), 1);
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// Everything execve needs, laid out before fork: between fork and exec the child
// of a multi-threaded process may only make async-signal-safe calls, so it must
// not allocate.
class ExecImage {
 public:
  explicit ExecImage(const LaunchSpec& spec) : path_(spec.program_path), storage_(spec.argv), env_storage_(spec.env) {
    for (auto& arg : storage_) argv_.push_back(arg.data());
    argv_.push_back(nullptr);
    for (auto& entry : env_storage_) envp_.push_back(entry.data());
    envp_.push_back(nullptr);
    // execvp's fallback for a script without "#!": run it with /bin/sh.
    shell_argv_.push_back(const_cast<char*>("/bin/sh"));
    shell_argv_.push_back(path_.data());
    for (std::size_t i = 1; i < storage_.size(); ++i) shell_argv_.push_back(storage_[i].data());
    shell_argv_.push_back(nullptr);
    CPU_ZERO(&cpus_);
    for (int cpu : spec.cpus) CPU_SET(cpu, &cpus_);
    bind_ = !spec.cpus.empty();
  }

  // Before exec, so that the program's thread pools see the share at startup.
  void bind_cpus() const {
    if (bind_) ::sched_setaffinity(0, sizeof(cpus_), &cpus_);  // best effort: unbound still runs
  }

  [[noreturn]] void exec(int status_fd) {
    ::execve(path_.c_str(), argv_.data(), envp_.data());
    if (errno == ENOEXEC) ::execve("/bin/sh", shell_argv_.data(), envp_.data());
    int error_number = errno;
    ssize_t ignored = ::write(status_fd, &error_number, sizeof(error_number));
    (void)ignored;
    ::_exit(kExitNotFound);
  }

 private:
  std::string path_;
  std::vector<std::string> storage_, env_storage_;
  std::vector<char*> argv_, envp_, shell_argv_;
  cpu_set_t cpus_;
  bool bind_ = false;
};

[[noreturn]] void run_child(ExecImage& image, pid_t kolorun_pid, int join_cgroup_fd, int stdin_fd, int stdout_fd,
                            int stderr_fd, int status_fd) {
  // stdout_fd / stderr_fd < 0: keep the inherited ones.
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // kolorun may have died before the line above armed the death signal.
  if (::getppid() != kolorun_pid) ::_exit(kExitNotFound);
  if (join_cgroup_fd >= 0) {
    [[maybe_unused]] ssize_t joined = ::write(join_cgroup_fd, "0", 1);  // best effort: the env sweep remains
  }
  SignalChannel::reset_for_child();
  image.bind_cpus();
  if (::dup2(stdin_fd, STDIN_FILENO) < 0 || (stdout_fd >= 0 && ::dup2(stdout_fd, STDOUT_FILENO) < 0) ||
      (stderr_fd >= 0 && ::dup2(stderr_fd, STDERR_FILENO) < 0)) {
    int error_number = errno;
    ssize_t ignored = ::write(status_fd, &error_number, sizeof(error_number));
    (void)ignored;
    ::_exit(kExitNotFound);
  }
  image.exec(status_fd);
}

std::string exec_failure_text(const LaunchSpec& spec, int error_number) {
  std::string text = system_error_text("rank " + std::to_string(spec.rank) + ": cannot execute '" +
                                           spec.program_path + "'",
                                       error_number);
  if (error_number == ENOENT) text += " (if it is a script, check its #! interpreter)";
  return text;
}

class LocalSpawner : public ProcessSpawner {
 public:
  RankProcess spawn(const LaunchSpec& spec) override {
    UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!dev_null.valid()) throw LaunchError(system_error_text("cannot open /dev/null", errno), 1);
    return start_process(spec, ProcessStdio{dev_null.get(), true});
  }
};

}  // namespace

RankProcess start_process(const LaunchSpec& spec, const ProcessStdio& stdio) {
  ExecImage image(spec);
  Pipe out, err;
  if (stdio.capture_output) {
    out = make_pipe("the stdout pipe");
    err = make_pipe("the stderr pipe");
    ::fcntl(out.write_end.get(), F_SETPIPE_SZ, kOutputPipeBytes);  // best effort
    ::fcntl(err.write_end.get(), F_SETPIPE_SZ, kOutputPipeBytes);
  }
  Pipe exec_status = make_pipe("the exec status pipe");

  const pid_t kolorun_pid = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw LaunchError(system_error_text("cannot start rank " + std::to_string(spec.rank), errno), 1);
  if (pid == 0)
    run_child(image, kolorun_pid, spec.join_cgroup_fd, stdio.stdin_fd, out.write_end.get(), err.write_end.get(),
              exec_status.write_end.get());

  // Also here, so the group exists before kolorun can signal it; fails harmlessly
  // once the child has exec'd.
  ::setpgid(pid, pid);
  exec_status.write_end.reset();
  int error_number = 0;
  ssize_t n;
  do n = ::read(exec_status.read_end.get(), &error_number, sizeof(error_number));
  while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(error_number))) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    throw SpawnError(exec_failure_text(spec, error_number), kExitNotFound);
  }

  RankProcess process;
  process.pid = pid;
  if (stdio.capture_output) {
    for (int fd : {out.read_end.get(), err.read_end.get()}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    process.stdout_pipe = std::move(out.read_end);
    process.stderr_pipe = std::move(err.read_end);
  }
  return process;
}

std::unique_ptr<ProcessSpawner> make_local_spawner() { return std::make_unique<LocalSpawner>(); }

}  // namespace kolorun
