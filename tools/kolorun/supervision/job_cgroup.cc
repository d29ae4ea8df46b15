#include "supervision/job_cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace kolorun {
namespace {

namespace fs = std::filesystem;

// Where the cgroup2 hierarchy is mounted ("/sys/fs/cgroup", or
// "/sys/fs/cgroup/unified" beside v1 controllers), or empty.
std::string cgroup2_mount() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream after(line.substr(dash + 3));
    std::string fstype;
    after >> fstype;
    if (fstype != "cgroup2") continue;
    std::istringstream fields(line.substr(0, dash));
    std::string id, parent, device, root, mount_point;
    fields >> id >> parent >> device >> root >> mount_point;
    return mount_point;
  }
  return {};
}

// The pids in cgroup.procs of `dir` and of every cgroup below it.
std::vector<pid_t> pids_in(const std::string& dir) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename() != "cgroup.procs") continue;
    std::ifstream in(it->path());
    for (pid_t pid; in >> pid;) pids.push_back(pid);
  }
  return pids;
}

// Removes `dir` and the cgroups below it, deepest first (each must be empty).
void remove_tree(const std::string& dir) {
  std::vector<fs::path> dirs;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec)) dirs.push_back(it->path());
  for (auto d = dirs.rbegin(); d != dirs.rend(); ++d) ::rmdir(d->c_str());
  ::rmdir(dir.c_str());
}

}  // namespace

std::string own_cgroup_dir() {
  const std::string mount = cgroup2_mount();
  if (mount.empty()) return {};
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return mount + (line.size() > 3 && line[3] == '/' ? line.substr(3) : "/");
  }
  return {};
}

JobCgroup::JobCgroup(const std::string& name) {
  const std::string own = own_cgroup_dir();
  if (own.empty()) return;
  std::string dir = own;
  if (dir.back() != '/') dir += '/';
  dir += name;
  if (::mkdir(dir.c_str(), 0755) != 0) return;
  UniqueFd join(::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
  if (!join.valid()) {
    ::rmdir(dir.c_str());
    return;
  }
  path_ = std::move(dir);
  join_ = std::move(join);
}

JobCgroup::~JobCgroup() {
  join_.reset();
  if (!path_.empty()) remove_tree(path_);
}

void kill_cgroup(const std::string& path, std::chrono::milliseconds limit) {
  if (path.empty()) return;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  // One write kills the whole subtree (Linux 5.14 and later); else each pid, until none is left.
  if (std::ofstream kill_file(path + "/cgroup.kill"); kill_file) kill_file << "1" << std::flush;
  for (;;) {
    const std::vector<pid_t> pids = pids_in(path);
    if (pids.empty() || std::chrono::steady_clock::now() >= deadline) break;
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  remove_tree(path);
}

}  // namespace kolorun
