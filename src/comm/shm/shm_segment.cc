#include "comm/shm/shm_segment.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "comm/shm/process_liveness.h"
#include "comm/shm/segment_checks.h"
#include "common/job_names.h"
#include "kolo/error.h"

namespace kolo::comm::shm {
namespace {

using Clock = std::chrono::steady_clock;

std::string system_error_text(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string seconds_text(std::chrono::milliseconds d) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << static_cast<double>(d.count()) / 1000.0 << " s";
  return out.str();
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Rank 0 removes the name again when setup fails, so that a failed start leaves
// nothing behind; after success the last rank to attach has already removed it.
class UnlinkOnFailure {
 public:
  explicit UnlinkOnFailure(std::string name) : name_(std::move(name)) {}
  ~UnlinkOnFailure() {
    if (!name_.empty()) ::shm_unlink(name_.c_str());
  }
  UnlinkOnFailure(const UnlinkOnFailure&) = delete;
  UnlinkOnFailure& operator=(const UnlinkOnFailure&) = delete;
  void release() { name_.clear(); }

 private:
  std::string name_;
};

Mapping map_shared(int fd, std::size_t bytes, bool populate) {
  int flags = MAP_SHARED | (populate ? MAP_POPULATE : 0);
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, fd, 0);
  if (base == MAP_FAILED) {
    throw Error(system_error_text("mmap of " + std::to_string(bytes) + " bytes of shared memory"));
  }
  return Mapping(base, bytes);
}

SegmentHeader& header_of(const Mapping& m) { return *reinterpret_cast<SegmentHeader*>(m.base()); }

RankControl& control_of(const Mapping& m, const Layout& layout, int rank) {
  return reinterpret_cast<RankControl*>(m.base() + layout.control_offset)[rank];
}

JoinedSegment create_segment(const std::string& name, int size, const SegmentConfig& config, const Nonce& nonce) {
  // O_EXCL: never a file someone else made; 0600: no other user may open ours.
  int raw = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (raw < 0 && errno == EEXIST) throw existing_segment_error(name, nonce);
  if (raw < 0) throw Error(system_error_text("cannot create shared memory segment /dev/shm" + name));
  FileDescriptor fd(raw);
  Layout layout = Layout::compute(size, config.slot_bytes);
  // fallocate reserves the memory now, so that a full /dev/shm is a clear error
  // here instead of a SIGBUS in the middle of a collective.
  int rc = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(layout.total_bytes));
  if (rc == EOPNOTSUPP || rc == EINVAL) {
    rc = ::ftruncate(fd.get(), static_cast<off_t>(layout.total_bytes)) == 0 ? 0 : errno;
  }
  if (rc != 0) {
    ::shm_unlink(name.c_str());
    errno = rc;
    throw Error(system_error_text("cannot allocate " + std::to_string(layout.total_bytes) +
                                  " bytes of shared memory in /dev/shm" + name + " (is /dev/shm full?)"));
  }
  JoinedSegment joined{map_shared(fd.get(), layout.total_bytes, true), layout, config.small_bytes, config.mapped_bytes,
                       config.first_step, config.single_copy};
  SegmentHeader& header = header_of(joined.mapping);
  header.size = static_cast<std::uint32_t>(size);
  header.slot_bytes = config.slot_bytes;
  header.small_bytes = config.small_bytes;
  header.total_bytes = layout.total_bytes;
  header.first_step = config.first_step;
  header.mapped_bytes = config.mapped_bytes;
  header.single_copy = static_cast<std::uint32_t>(config.single_copy);
  std::memcpy(header.nonce, nonce.data(), nonce.size());
  for (int r = 0; r < size; ++r) {
    RankControl& c = control_of(joined.mapping, layout, r);
    for (Counter* counter : {&c.posted, &c.reduced, &c.consumed}) counter->value.store(config.first_step);
  }
  header.magic.store(kReadyMagic, std::memory_order_release);
  return joined;
}

// One attempt to map a segment that rank 0 has finished initializing. Throws
// the refusal of a segment the job did not create (segment_checks.h).
std::optional<JoinedSegment> try_attach(const std::string& name, int size, const Nonce& nonce, bool& seen) {
  int raw = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (raw < 0 && errno == ENOENT) return std::nullopt;
  seen = true;
  if (raw < 0 && errno == EACCES) throw existing_segment_error(name, nonce);  // another user's, which says whose
  if (raw < 0) throw Error(system_error_text("cannot open shared memory segment /dev/shm" + name));
  FileDescriptor fd(raw);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw Error(system_error_text("fstat of /dev/shm" + name));
  if (auto why = ownership_problem(st); !why.empty()) throw refusal(name, why);
  auto bytes = static_cast<std::size_t>(st.st_size);
  if (bytes < kPageSize) return std::nullopt;  // rank 0 has not sized it yet
  Mapping mapping = map_shared(fd.get(), bytes, false);
  SegmentHeader& header = header_of(mapping);
  if (header.magic.load(std::memory_order_acquire) != kReadyMagic) return std::nullopt;
  if (auto why = nonce_problem(mapping.base(), bytes, nonce); !why.empty()) throw refusal(name, why);
  if (header.size != static_cast<std::uint32_t>(size)) {
    throw MismatchError("shared memory segment /dev/shm" + name + " was made for a job of " +
                        std::to_string(header.size) + " ranks, but this rank was started with size " +
                        std::to_string(size));
  }
  Layout layout = Layout::compute(size, header.slot_bytes);
  if (layout.total_bytes != header.total_bytes || layout.total_bytes != bytes) {
    throw Error("shared memory segment /dev/shm" + name + " has an inconsistent layout (" + std::to_string(bytes) +
                " bytes, expected " + std::to_string(layout.total_bytes) + "): it was not made by this kolo version");
  }
  ::madvise(mapping.base(), bytes, MADV_WILLNEED);
  if (header.single_copy > static_cast<std::uint32_t>(SingleCopyMode::Never))
    throw Error("shared memory segment /dev/shm" + name + " names an unknown single-copy mode (" +
                std::to_string(header.single_copy) + "): it was not made by this kolo version");
  return JoinedSegment{std::move(mapping), layout, static_cast<std::size_t>(header.small_bytes),
                       static_cast<std::size_t>(header.mapped_bytes), header.first_step,
                       static_cast<SingleCopyMode>(header.single_copy)};
}

JoinedSegment attach_segment(const std::string& name, const Nonce& nonce, int rank, int size,
                             Clock::time_point deadline, std::chrono::milliseconds timeout) {
  auto pause = std::chrono::microseconds(200);
  bool seen = false;
  while (true) {
    if (auto joined = try_attach(name, size, nonce, seen)) return std::move(*joined);
    if (Clock::now() >= deadline) {
      throw TimeoutError("rank " + std::to_string(rank) + ": timed out after " + seconds_text(timeout) +
                         " waiting for rank 0 to " + (seen ? "finish" : "create") + " shared memory segment /dev/shm" +
                         name +
                         (seen ? " (it exists but was never marked ready: rank 0 failed, see its error, or it is a "
                                 "stale segment)"
                               : " (did rank 0 start, with the same KOLO_JOB_ID and KOLO_SECRET?)"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
}

// This process's affinity mask into `mask` (all CPUs when it cannot be read).
void write_cpu_mask(std::uint64_t (&mask)[kCpuMaskWords]) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const bool known = ::sched_getaffinity(0, sizeof set, &set) == 0;
  for (std::size_t word = 0; word < kCpuMaskWords; ++word) {
    std::uint64_t bits = 0;
    for (std::size_t bit = 0; bit < 64; ++bit) {
      const std::size_t cpu = word * 64 + bit;
      if (!known || (cpu < CPU_SETSIZE && CPU_ISSET(cpu, &set))) bits |= std::uint64_t{1} << bit;
    }
    mask[word] = bits;
  }
}

void register_rank(JoinedSegment& joined, const std::string& name, int rank) {
  RankControl& me = control_of(joined.mapping, joined.layout, rank);
  // Before the pid: a peer that sees this rank registered (through `attached`,
  // acquire/release) sees its mask too.
  write_cpu_mask(me.cpus);
  std::int32_t expected = 0;
  if (!me.pid.compare_exchange_strong(expected, static_cast<std::int32_t>(::getpid()))) {
    throw Error("rank " + std::to_string(rank) + " is already attached to /dev/shm" + name + " by pid " +
                std::to_string(expected) + ": two processes were started as the same rank");
  }
  std::uint32_t attached = header_of(joined.mapping).attached.fetch_add(1, std::memory_order_acq_rel) + 1;
  // The last rank to attach removes the name: everyone has it mapped by now.
  if (attached == static_cast<std::uint32_t>(joined.layout.size)) ::shm_unlink(name.c_str());
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

void wait_for_all_ranks(const JoinedSegment& joined, const std::string& name, int rank,
                        Clock::time_point deadline, std::chrono::milliseconds timeout) {
  const int size = joined.layout.size;
  auto pause = std::chrono::microseconds(50);
  auto next_liveness_check = Clock::now();
  while (header_of(joined.mapping).attached.load(std::memory_order_acquire) < static_cast<std::uint32_t>(size)) {
    auto now = Clock::now();
    if (now >= next_liveness_check) {
      for (int r = 0; r < size; ++r) {
        pid_t pid = control_of(joined.mapping, joined.layout, r).pid.load(std::memory_order_acquire);
        if (r != rank && process_is_dead(pid)) {
          throw PeerFailureError(r, "rank " + std::to_string(r) + " (pid " + std::to_string(pid) +
                                        ") died while the job was attaching to shared memory /dev/shm" + name);
        }
      }
      next_liveness_check = now + std::chrono::milliseconds(10);
    }
    if (now >= deadline) {
      std::vector<int> missing;
      for (int r = 0; r < size; ++r) {
        if (control_of(joined.mapping, joined.layout, r).pid.load(std::memory_order_acquire) == 0) missing.push_back(r);
      }
      throw TimeoutError("rank " + std::to_string(rank) + ": timed out after " + seconds_text(timeout) +
                         " waiting for rank" + (missing.size() > 1 ? "s " : " ") + rank_list(missing) +
                         " of " + std::to_string(size) + " to attach to shared memory /dev/shm" + name);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

}  // namespace

Mapping::~Mapping() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

Mapping::Mapping(Mapping&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

std::string segment_name(const std::string& job_id, const std::string& secret) {
  if (job_id.empty() || job_id.size() > 200) {
    throw InvalidArgumentError("job id must have 1 to 200 characters, got " + std::to_string(job_id.size()));
  }
  for (char c : job_id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-';
    if (!ok) throw InvalidArgumentError("job id '" + job_id + "' may only contain letters, digits, '.', '_' and '-'");
  }
  if (secret.empty()) return "/kolo-" + job_id + "-shm";
  return "/kolo-" + job_tag(secret) + "-" + keyed_hex(secret, "kolo shm segment", job_id) + "-shm";
}

JoinedSegment join_segment(const std::string& name, int rank, int size, const SegmentConfig& config,
                           std::chrono::milliseconds timeout, const std::string& secret) {
  const auto deadline = Clock::now() + timeout;
  const Nonce nonce = segment_nonce(secret, name);
  if (rank == 0) {
    JoinedSegment joined = create_segment(name, size, config, nonce);
    UnlinkOnFailure cleanup(name);
    register_rank(joined, name, rank);
    wait_for_all_ranks(joined, name, rank, deadline, timeout);
    cleanup.release();
    return joined;
  }
  JoinedSegment joined = attach_segment(name, nonce, rank, size, deadline, timeout);
  register_rank(joined, name, rank);
  wait_for_all_ranks(joined, name, rank, deadline, timeout);
  return joined;
}

}  // namespace kolo::comm::shm
