#include "comm/shm/shm_single_copy.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "comm/shm/shm_collectives.h"
#include "common/logging.h"
#include "common/settings.h"
#include "kolo/error.h"

namespace kolo::comm::shm {
namespace {

KOLO_SETTING(kSingleCopy, {.name = "KOLO_SHM_SINGLE_COPY", .kind = settings::Kind::Choice, .fallback = "auto",
                           .choices = {"auto", "always", "never"}, .scope = settings::Scope::RankZero,
                           .doc = "whether large broadcasts and allgathers copy straight from a peer's buffer"});

// A receiver reads this much per system call, checking for abort in between.
constexpr std::size_t kReadPiece = std::size_t{16} << 20;

// What the root tells its receivers in the first step (fixed layout: it crosses
// process boundaries).
struct Offer {
  std::uint64_t address;
  std::uint64_t bytes;
  std::int32_t pid;
  std::uint32_t offered;  // 0: the slot path
};

// What each rank answers in the second step.
enum Answer : std::uint8_t { kRead = 0, kRefused = 1, kSizeDiffers = 2 };

// An allgatherv rank's offer flags: it lets its block be read; it waits for a CPU.
constexpr std::uint32_t kWilling = 1, kLoaded = 2;

// An allgatherv rank's answer, with the block whose size it expected otherwise.
struct BlockAnswer {
  std::uint64_t expected;
  std::int32_t block;
  std::uint8_t answer;
  std::uint8_t padding[3];
};

// The calling thread's time on a CPU and waiting for one, in nanoseconds, as the
// scheduler counts them (/proc/thread-self/schedstat); false when unknown.
bool cpu_times(std::uint64_t& running, std::uint64_t& waiting) {
  const int fd = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[96];
  const ssize_t got = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (got <= 0) return false;
  text[got] = '\0';
  unsigned long long run = 0, wait = 0;
  if (std::sscanf(text, "%llu %llu", &run, &wait) != 2) return false;
  running = run;
  waiting = wait;
  return true;
}

// Copies `bytes` at `remote` in process `pid` into `local`: 0, or the errno of
// the refusal (ESRCH: the process is gone; EPERM: not allowed to ptrace it).
int read_process_memory(ShmChannel& channel, int pid, std::uint64_t remote, std::byte* local, std::size_t bytes) {
  for (std::size_t done = 0; done < bytes;) {
    channel.throw_if_aborted();
    const std::size_t want = std::min(kReadPiece, bytes - done);
    iovec mine{local + done, want};
    iovec theirs{reinterpret_cast<void*>(static_cast<std::uintptr_t>(remote + done)), want};
    const ssize_t got = ::process_vm_readv(pid, &mine, 1, &theirs, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return got < 0 ? errno : EFAULT;
    done += static_cast<std::size_t>(got);
  }
  return 0;
}

// Every rank's `mine`, in rank order, through one flagged gather.
template <typename Record>
std::vector<Record> gather_records(ShmChannel& channel, const Record& mine) {
  const auto n = static_cast<std::size_t>(channel.size());
  std::vector<Record> all(n);
  const std::vector<std::size_t> sizes(n, sizeof(Record));
  gather(channel, reinterpret_cast<const std::byte*>(&mine), reinterpret_cast<std::byte*>(all.data()), sizes, -1);
  return all;
}

}  // namespace

SingleCopyMode single_copy_mode_from_env() {
  const std::string mode = kSingleCopy.choice();
  return mode == "always" ? SingleCopyMode::Always : mode == "never" ? SingleCopyMode::Never : SingleCopyMode::Auto;
}

bool SingleCopy::loaded(const ShmChannel& channel) {
  if (mode_ == SingleCopyMode::Always || channel.ranks_share_cpus()) return true;
  std::uint64_t running, waiting;
  if (!cpu_times(running, waiting)) return false;
  if (running < running_ || waiting < waiting_) {  // another thread than the last caller: start over
    running_ = waiting_ = 0;
  }
  const std::uint64_t wanted = (running - running_) + (waiting - waiting_);
  if (wanted >= kLoadWindowNs) {  // else too short a time to judge: the last judgement stands
    loaded_ = (waiting - waiting_) * kLoadedShare > wanted;
    running_ = running;
    waiting_ = waiting;
  }
  return loaded_;
}

void SingleCopy::refused(const std::string& why) {
  if (refused_) return;
  refused_ = true;
  KOLO_LOG(Warning, "shm: " << why << "; broadcasts and allgathers go through the shared slots from now on");
}

bool broadcast_single_copy(ShmChannel& channel, SingleCopy& policy, std::byte* buffer, std::size_t bytes, int root) {
  if (!policy.enabled()) return false;
  const int n = channel.size(), me = channel.rank();
  // 1. The root offers its buffer, or not.
  Offer offer{};
  if (me == root) {
    offer = Offer{reinterpret_cast<std::uintptr_t>(buffer), bytes, static_cast<std::int32_t>(::getpid()),
                  policy.offer(channel) ? 1u : 0u};
    channel.acquire_slot();
    channel.write_flagged(reinterpret_cast<const std::byte*>(&offer), sizeof offer);
  } else {
    channel.read_flagged(root, reinterpret_cast<std::byte*>(&offer), sizeof offer);
  }
  if (offer.offered == 0) {
    channel.finish_step();
    return false;
  }
  std::uint8_t answer = kRead;
  int error = 0;
  if (me != root) {
    if (offer.bytes != bytes) {
      answer = kSizeDiffers;
    } else if ((error = read_process_memory(channel, offer.pid, offer.address, buffer, bytes)) != 0) {
      answer = kRefused;
    }
  }
  channel.finish_step();

  // 2. Every rank's answer, which also tells the root that no one reads its
  // buffer any more.
  const std::vector<std::uint8_t> answers = gather_records(channel, answer);
  for (int r = 0; r < n; ++r) {
    if (answers[r] == kSizeDiffers) {
      throw InvalidArgumentError("broadcast: rank " + std::to_string(channel.job_rank(r)) +
                                 " expects another size than the " + std::to_string(offer.bytes) +
                                 " bytes root rank " + std::to_string(channel.job_rank(root)) + " sends");
    }
  }
  const auto refuser = std::find(answers.begin(), answers.end(), std::uint8_t{kRefused});
  if (refuser == answers.end()) return true;
  if (me == root) {
    policy.refused("rank " + std::to_string(channel.job_rank(static_cast<int>(refuser - answers.begin()))) +
                   " may not read this process's memory (process_vm_readv)");
  } else if (error != 0) {
    KOLO_LOG(Debug, "shm: process_vm_readv from rank " << channel.job_rank(root) << " failed: "
                                                       << std::strerror(error));
  }
  return false;
}

bool allgatherv_single_copy(ShmChannel& channel, SingleCopy& policy, const std::byte* send, std::byte* recv,
                            std::span<const std::size_t> sizes) {
  if (!policy.enabled()) return false;
  const int n = channel.size(), me = channel.rank();
  const std::vector<std::size_t> offsets = prefix_offsets(sizes);
  const std::size_t mine = sizes[me];
  // A `send` inside `recv` elsewhere than this rank's block would be overwritten
  // by its peers' blocks while they still read it.
  const bool usable = send == recv + offsets[me] || !overlaps(send, mine, recv, offsets[n]);
  // 1. Every rank's offer. A rank that will not be read need not judge its load
  // (a read of /proc): the call takes the slots whatever the others say.
  const bool willing = usable && policy.willing();
  const Offer offer{reinterpret_cast<std::uintptr_t>(send), mine, static_cast<std::int32_t>(::getpid()),
                    willing ? kWilling | (policy.loaded(channel) ? kLoaded : 0u) : 0u};
  const std::vector<Offer> offers = gather_records(channel, offer);
  const auto has = [](std::uint32_t flag) { return [flag](const Offer& o) { return (o.offered & flag) != 0; }; };
  if (!std::all_of(offers.begin(), offers.end(), has(kWilling)) ||
      !std::any_of(offers.begin(), offers.end(), has(kLoaded))) {
    return false;
  }

  BlockAnswer answer{0, -1, kRead, {}};
  int error = 0;
  for (int d = 1; d < n && answer.answer == kRead; ++d) {
    const int peer = (me + d) % n;
    const Offer& theirs = offers[static_cast<std::size_t>(peer)];
    if (theirs.bytes != sizes[peer]) {
      answer = BlockAnswer{sizes[peer], peer, kSizeDiffers, {}};
    } else if ((error = read_process_memory(channel, theirs.pid, theirs.address, recv + offsets[peer], sizes[peer])) !=
               0) {
      answer = BlockAnswer{0, peer, kRefused, {}};
    }
  }
  if (answer.answer == kRead && mine > 0 && send != recv + offsets[me]) std::memcpy(recv + offsets[me], send, mine);

  // 2. Every rank's answer, which also tells each rank that no one reads its
  // `send` any more.
  const std::vector<BlockAnswer> answers = gather_records(channel, answer);
  for (int r = 0; r < n; ++r) {
    const BlockAnswer& a = answers[static_cast<std::size_t>(r)];
    if (a.answer == kSizeDiffers) {
      throw InvalidArgumentError("allgatherv: rank " + std::to_string(channel.job_rank(r)) + " expects " +
                                 std::to_string(a.expected) + " bytes from rank " +
                                 std::to_string(channel.job_rank(a.block)) + ", which sends " +
                                 std::to_string(offers[static_cast<std::size_t>(a.block)].bytes));
    }
  }
  for (int r = 0; r < n; ++r) {
    const BlockAnswer& a = answers[static_cast<std::size_t>(r)];
    if (a.answer != kRefused) continue;
    if (r == me) {
      KOLO_LOG(Debug, "shm: process_vm_readv from rank " << channel.job_rank(a.block) << " failed: "
                                                         << std::strerror(error));
    }
    policy.refused("rank " + std::to_string(channel.job_rank(r)) + " may not read the memory of rank " +
                   std::to_string(channel.job_rank(a.block)) + " (process_vm_readv)");
    return false;
  }
  return true;
}

}  // namespace kolo::comm::shm
