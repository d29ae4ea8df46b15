#include "remote/remote_spawner.h"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <cerrno>

#include "options/program_path.h"
#include "options/host_list.h"
#include "plan/ip_address.h"
#include "plan/rank_environment.h"
#include "remote/remote_protocol.h"

extern char** environ;

namespace kolorun {
namespace {

// ssh runs the remote command through the user's shell: one word, quoted.
std::string shell_quote(const std::string& word) {
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (auto pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos + to.size()))
    text.replace(pos, from.size(), to);
  return text;
}

// The command as a shell would take it back, for messages.
std::string command_text(const std::vector<std::string>& words) {
  std::string text;
  for (const auto& word : words) {
    const bool plain = !word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                               "0123456789_-./=:@%+,{}") == std::string::npos;
    text += (text.empty() ? "" : " ") + (plain ? word : shell_quote(word));
  }
  return text;
}

long whole_seconds(std::chrono::milliseconds duration) {
  return std::max<long>(1, static_cast<long>((duration.count() + 999) / 1000));
}

// ssh takes an IPv6 address bare ("user@fd00::2"), not in the brackets a host
// list needs to tell it from a slot count.
std::string ssh_destination(const std::string& host) {
  const auto at = host.find('@');
  const std::string user = at == std::string::npos ? "" : host.substr(0, at + 1);
  return user + without_brackets(host_part(host));
}

std::vector<std::string> ssh_command_line(const RemoteAccess& access, const std::string& host) {
  std::vector<std::string> words = {"ssh", "-T"};
  // ssh keeps the first value it sees for an option: the user's come first.
  for (const auto& option : access.ssh_options) words.insert(words.end(), {"-o", option});
  const long timeout = whole_seconds(access.host_timeout);
  for (const std::string& option :
       {std::string("BatchMode=yes"), std::string("StrictHostKeyChecking=accept-new"), std::string("LogLevel=ERROR"),
        "ConnectTimeout=" + std::to_string(timeout),
        "ServerAliveInterval=" + std::to_string(std::max(1L, timeout / 3)), std::string("ServerAliveCountMax=3")})
    words.insert(words.end(), {"-o", option});
  if (access.ssh_port) words.insert(words.end(), {"-p", std::to_string(*access.ssh_port)});
  if (!access.ssh_identity_file.empty()) words.insert(words.end(), {"-i", access.ssh_identity_file});
  words.push_back(ssh_destination(host));
  words.push_back("exec " + shell_quote(access.kolorun_path) + " " + kRemoteExecFlag);
  return words;
}

std::string working_directory() {
  char buffer[PATH_MAX];
  if (::getcwd(buffer, sizeof(buffer)) == nullptr)
    throw LaunchError(system_error_text("cannot tell the working directory to send to other hosts", errno), 1);
  return buffer;
}

class RemoteSpawner {
 public:
  explicit RemoteSpawner(RemoteAccess access)
      : access_(std::move(access)),
        launcher_path_(resolve_program(access_.launcher_command.empty() ? "ssh" : access_.launcher_command.front())),
        working_directory_(working_directory()),
        local_environment_(environment_entries(environ)) {}

  RankProcess spawn(const LaunchSpec& spec) {
    RemoteSpec remote;
    remote.rank = spec.rank;
    remote.label = spec.label;
    remote.working_directory = working_directory_;
    remote.host_timeout = access_.host_timeout;
    remote.argv = spec.argv;
    remote.env = spec.env;

    LaunchSpec local;
    local.rank = spec.rank;
    local.program_path = launcher_path_;
    local.argv = remote_command_line(access_, spec.host);
    local.env = local_environment_;

    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw LaunchError(system_error_text("cannot make a control pipe", errno), 1);
    UniqueFd read_end(fds[0]), write_end(fds[1]);
    RankProcess process = start_process(local, ProcessStdio{read_end.get(), true});
    process.control = std::make_shared<RemoteControl>(std::move(write_end), encode_remote_spec(remote));
    // ssh's own ConnectTimeout is the host timeout and names the failure better;
    // logging in comes after connecting, hence twice as long for ssh.
    process.start_timeout = access_.launcher_command.empty() ? 2 * access_.host_timeout : access_.host_timeout;
    process.launcher_command = command_text(local.argv);
    if (access_.launcher_command.empty()) {
      process.explain_exit = [host = spec.host](int code) -> std::string {
        return code == 255 ? "ssh's status for a failed or lost connection: is " + host + " reachable?" : "";
      };
    }
    return process;
  }

 private:
  RemoteAccess access_;
  std::string launcher_path_;
  std::string working_directory_;
  std::vector<std::string> local_environment_;
};

class JobSpawner : public ProcessSpawner {
 public:
  explicit JobSpawner(const std::optional<RemoteAccess>& access) : local_(make_local_spawner()) {
    if (access) remote_ = std::make_unique<RemoteSpawner>(*access);
  }

  RankProcess spawn(const LaunchSpec& spec) override {
    if (!spec.remote) return local_->spawn(spec);
    if (!remote_) throw LaunchError("internal error: a remote rank without remote access settings", 1);
    return remote_->spawn(spec);
  }

 private:
  std::unique_ptr<ProcessSpawner> local_;
  std::unique_ptr<RemoteSpawner> remote_;
};

}  // namespace

std::vector<std::string> remote_command_line(const RemoteAccess& access, const std::string& host) {
  if (access.launcher_command.empty()) return ssh_command_line(access, host);
  std::vector<std::string> words;
  for (const auto& word : access.launcher_command) words.push_back(replace_all(word, "{host}", host));
  words.push_back(access.kolorun_path);
  words.push_back(kRemoteExecFlag);
  return words;
}

std::unique_ptr<ProcessSpawner> make_job_spawner(const std::optional<RemoteAccess>& access) {
  return std::make_unique<JobSpawner>(access);
}

std::string own_executable_path() {
  char buffer[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0) throw LaunchError(system_error_text("cannot find kolorun's own path", errno), 1);
  return std::string(buffer, static_cast<std::size_t>(n));
}

}  // namespace kolorun
