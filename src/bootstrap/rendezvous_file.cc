#include "bootstrap/rendezvous_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "comm/mesh/mesh_communicator.h"
#include "common/logging.h"
#include "kolo/error.h"
#include "net/host_name.h"
#include "store/store.h"

namespace kolo {
namespace {

constexpr const char* kMagic = "kolo-rendezvous 1";

// Rank 0's store, kept for the life of the process (a later init() reuses it).
struct ServedStore {
  std::string path;
  std::string job_id;
  std::string address;
  std::string secret;
  std::unique_ptr<store::StoreServer> server;
  ~ServedStore() {
    if (!path.empty()) ::unlink(path.c_str());
  }
};

std::mutex g_mutex;
ServedStore g_served;

void write_file_atomically(const std::string& path, const std::string& content) {
  const std::string temp = path + ".tmp-" + std::to_string(getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw InvalidArgumentError("cannot write the rendezvous file " + temp + ": " + std::strerror(errno));
  ssize_t written = ::write(fd, content.data(), content.size());
  bool ok = written == static_cast<ssize_t>(content.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(temp.c_str(), path.c_str()) != 0) {
    ::unlink(temp.c_str());
    throw InvalidArgumentError("cannot write the rendezvous file " + path + ": " + std::strerror(errno));
  }
}

void serve(Topology& t, const std::string& path) {
  std::lock_guard lock(g_mutex);
  if (!g_served.server || g_served.path != path || g_served.job_id != t.job_id) {
    const std::string host_addr = comm::kHostAddr.text();
    auto secret = store::make_secret();
    auto server = std::make_unique<store::StoreServer>(secret, host_addr.empty() ? "0.0.0.0" : host_addr, 0);
    const std::string address = (host_addr.empty() ? net::host_name() : host_addr) + ":" + std::to_string(server->port());
    write_file_atomically(path, std::string(kMagic) + "\n" + t.job_id + "\n" + address + "\n" + secret + "\n");
    g_served.server.reset();
    g_served.path = path;
    g_served.job_id = t.job_id;
    g_served.address = address;
    g_served.secret = secret;
    g_served.server = std::move(server);
    KOLO_LOG(Info, "serving the rendezvous store at " << address << " (published in " << path << ")");
  }
  t.store_addr = g_served.address;
  t.secret = g_served.secret;
}

// True (and fills t) when `path` holds this job's entry; false while it is absent
// or left over from another job.
bool try_read(Topology& t, const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  struct stat st {};
  bool safe = ::fstat(fd, &st) == 0 && st.st_uid == ::geteuid() && (st.st_mode & 077) == 0 && S_ISREG(st.st_mode);
  std::string content;
  if (safe && st.st_size < 4096) {
    content.resize(static_cast<std::size_t>(st.st_size));
    if (::read(fd, content.data(), content.size()) != static_cast<ssize_t>(content.size())) content.clear();
  }
  ::close(fd);
  if (!safe)
    throw InvalidArgumentError("the rendezvous file " + path +
                               " is not a private file of this user (it must be owned by uid " +
                               std::to_string(::geteuid()) + " with mode 0600); remove it");
  std::istringstream in(content);
  std::string magic, job, address, secret;
  std::getline(in, magic);
  std::getline(in, job);
  std::getline(in, address);
  std::getline(in, secret);
  if (magic != kMagic || job != t.job_id) return false;
  if (address.empty() || secret.empty()) throw InvalidArgumentError("the rendezvous file " + path + " is malformed");
  t.store_addr = address;
  t.secret = secret;
  return true;
}

}  // namespace

void rendezvous_through_file(Topology& t, const std::string& path, std::chrono::milliseconds timeout) {
  if (t.rank == 0) return serve(t, path);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!try_read(t, path)) {
    if (std::chrono::steady_clock::now() >= deadline)
      throw TimeoutError("rank 0 did not publish the rendezvous store in " + path + " within " +
                         std::to_string(timeout.count() / 1000) +
                         " s (KOLO_START_TIMEOUT); the file must be on a filesystem every host shares "
                         "(KOLO_RENDEZVOUS_FILE), or set KOLO_STORE_ADDR and KOLO_SECRET");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace kolo
