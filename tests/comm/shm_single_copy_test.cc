// The shared-memory broadcast and allgather that read straight out of the
// senders' buffers (comm/shm/shm_single_copy.h): when a rank offers its buffer
// (one that waits for CPUs does), what happens when the kernel refuses a reader,
// and sizes that differ. Its results and failures on every collective are the
// communicator suites' (the shm_single_copy entry of communicator_factories.cc).
#include "comm/shm/shm_single_copy.h"

#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/shm/shm_collectives.h"
#include "comm/shm/shm_communicator.h"
#include "harness/multiprocess.h"
#include "kolo/error.h"

namespace kolo::comm::shm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

ShmChannel join_alone() {
  return ShmChannel(join_segment(segment_name(std::getenv("KOLO_JOB_ID")), 0, 1,
                                 SegmentConfig{.slot_bytes = 4096, .small_bytes = 1024}, 10s),
                    0, CommunicatorOptions{});
}

testing::SpawnOptions without_store() {
  testing::SpawnOptions options;
  options.use_store = false;
  options.timeout = 60s;
  return options;
}

void keep_cpu_busy_for(std::chrono::milliseconds how_long) {
  volatile std::uint64_t x = 0;
  for (const auto end = Clock::now() + how_long; Clock::now() < end;) x = x + 1;
}

TEST(ShmSingleCopy, ForcedChoicesHold) {
  testing::run_ranks(
      1,
      [](int) {
        ShmChannel channel = join_alone();
        SingleCopy never(SingleCopyMode::Never), always(SingleCopyMode::Always);
        EXPECT_FALSE(never.offer(channel));
        EXPECT_TRUE(always.offer(channel));
        always.refused("a test refuses");
        EXPECT_FALSE(always.offer(channel)) << "a refused root offers again";
      },
      without_store());
}

// Rank 0's KOLO_SHM_SINGLE_COPY is the job's (recorded in the segment): under
// `never` no rank offers its buffer, and the calls take no step for the offers.
TEST(ShmSingleCopy, TheJobTakesRankZerosModeAndNeverSkipsTheOffers) {
  testing::run_ranks(
      2,
      [](int rank) {
        const SegmentConfig config{.slot_bytes = 4096,
                                   .small_bytes = 1024,
                                   .single_copy = rank == 0 ? SingleCopyMode::Never : SingleCopyMode::Always};
        ShmChannel channel(join_segment(segment_name(std::getenv("KOLO_JOB_ID")), rank, 2, config, 10s), rank,
                           CommunicatorOptions{});
        EXPECT_EQ(channel.single_copy_mode(), SingleCopyMode::Never);
        SingleCopy policy(channel.single_copy_mode());
        std::vector<std::byte> block(64 << 10, std::byte{1}), both(2 * block.size());
        const std::vector<std::size_t> sizes(2, block.size());
        const std::uint32_t step = channel.step();
        EXPECT_FALSE(broadcast_single_copy(channel, policy, block.data(), block.size(), 1));
        EXPECT_FALSE(allgatherv_single_copy(channel, policy, block.data(), both.data(), sizes));
        EXPECT_EQ(channel.step(), step);
      },
      without_store());
}

// Three busy processes on the rank's one CPU: the rank waits for it about 3/4
// of the time, and offers its buffer.
TEST(ShmSingleCopy, RootThatWaitsForItsCpuOffersItsBuffer) {
  testing::run_ranks(
      1,
      [](int) {
        cpu_set_t one;
        CPU_ZERO(&one);
        ASSERT_EQ(::sched_getaffinity(0, sizeof one, &one), 0);
        int cpu = 0;
        while (!CPU_ISSET(cpu, &one)) ++cpu;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
        ShmChannel channel = join_alone();
        SingleCopy policy(SingleCopyMode::Auto);
        policy.offer(channel);  // the judgement's starting point
        std::vector<pid_t> busy;
        for (int i = 0; i < 3; ++i) {
          const pid_t pid = ::fork();
          if (pid == 0) {
            keep_cpu_busy_for(20s);
            ::_exit(0);
          }
          busy.push_back(pid);
        }
        keep_cpu_busy_for(300ms);
        const bool offered = policy.offer(channel);
        for (pid_t pid : busy) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, nullptr, 0);
        }
        EXPECT_TRUE(offered);
      },
      without_store());
}

std::vector<std::uint8_t> pattern(std::size_t bytes, int seed) {
  std::vector<std::uint8_t> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::uint8_t>(i * 131 + seed);
  return v;
}

// The patterns of `sizes.size()` blocks, block r seeded `first_seed + r`, one after another.
std::vector<std::uint8_t> patterns(const std::vector<std::size_t>& sizes, int first_seed) {
  std::vector<std::uint8_t> all;
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    const auto block = pattern(sizes[r], first_seed + static_cast<int>(r));
    all.insert(all.end(), block.begin(), block.end());
  }
  return all;
}

std::unique_ptr<Communicator> join(int rank) {
  return make_shm_communicator(rank, 2, std::getenv("KOLO_JOB_ID"), CommunicatorOptions{});
}

testing::SpawnOptions forced(testing::SpawnOptions options = without_store()) {
  options.env = {{"KOLO_SHM_SLOT_BYTES", "65536"}, {"KOLO_SHM_SINGLE_COPY", "always"}};
  return options;
}

// The kernel lets no one without CAP_SYS_PTRACE read a process that is not
// dumpable.
void forbid_rank_1_to_read_rank_0(int rank) {
  if (rank == 0) {
    ASSERT_EQ(::prctl(PR_SET_DUMPABLE, 0), 0);
  } else {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct caps[2]{};
    ASSERT_EQ(::syscall(SYS_capget, &header, caps), 0);
    caps[0].effective &= ~(1u << CAP_SYS_PTRACE);
    caps[0].permitted &= ~(1u << CAP_SYS_PTRACE);
    ASSERT_EQ(::syscall(SYS_capset, &header, caps), 0);
  }
}

// The receiver is refused, says so, and both ranks take the slot
// path, in this call and the next.
TEST(ShmSingleCopy, RefusedReceiverGetsTheDataThroughTheSlots) {
  testing::run_ranks(
      2,
      [](int rank) {
        forbid_rank_1_to_read_rank_0(rank);
        auto comm = join(rank);
        for (int call = 0; call < 2; ++call) {
          const std::size_t bytes = (std::size_t{1} << 20) + 77;
          std::vector<std::uint8_t> data = rank == 0 ? pattern(bytes, call) : std::vector<std::uint8_t>(bytes, 0);
          if (rank == 1 && call == 0) {  // the premise: the kernel refuses this rank
            int root_pid = 0;
            comm->broadcast(&root_pid, sizeof root_pid, 0);
            iovec mine{data.data(), 1}, theirs{data.data(), 1};
            EXPECT_EQ(::process_vm_readv(root_pid, &mine, 1, &theirs, 1, 0), -1);
            EXPECT_EQ(errno, EPERM);
          } else if (call == 0) {
            int pid = ::getpid();
            comm->broadcast(&pid, sizeof pid, 0);
          }
          comm->broadcast(data.data(), bytes, 0);
          EXPECT_TRUE(data == pattern(bytes, call)) << "rank " << rank << " call " << call;
        }
      },
      forced());
}

// Rank 0 reads rank 1's block, rank 1 is refused rank 0's: both ranks take the
// slot path, in this call and the next, and stop offering.
TEST(ShmSingleCopy, AllgatherWithARefusedReaderGetsTheDataThroughTheSlots) {
  testing::run_ranks(
      2,
      [](int rank) {
        forbid_rank_1_to_read_rank_0(rank);
        auto comm = join(rank);
        const std::size_t block = 300000;
        const std::vector<std::size_t> sizes{block, block};
        ::testing::internal::CaptureStderr();
        for (int call = 0; call < 2; ++call) {
          const std::vector<std::uint8_t> mine = pattern(block, rank + call);
          std::vector<std::uint8_t> all(2 * block);
          comm->allgatherv(mine.data(), block, all.data(), sizes);
          EXPECT_TRUE(all == patterns(sizes, call)) << "rank " << rank << " call " << call;
        }
        const std::string err = ::testing::internal::GetCapturedStderr();
        const std::string warning = "rank 1 may not read the memory of rank 0 (process_vm_readv); broadcasts and "
                                    "allgathers go through the shared slots from now on";
        const auto first = err.find(warning);
        EXPECT_NE(first, std::string::npos) << "rank " << rank << ": " << err;
        EXPECT_EQ(err.find(warning, first + 1), std::string::npos) << "rank " << rank << " warned twice: " << err;
      },
      forced());
}

TEST(ShmSingleCopy, SizesThatDifferFailOnEveryRankAndKeepThemInStep) {
  testing::run_ranks(
      2,
      [](int rank) {
        auto comm = join(rank);
        std::vector<std::uint8_t> data(rank == 0 ? 300000 : 400000, 1);
        try {
          comm->broadcast(data.data(), data.size(), 0);
          ADD_FAILURE() << "rank " << rank << ": no error";
        } catch (const InvalidArgumentError& e) {
          EXPECT_NE(std::string(e.what()).find("300000 bytes root rank 0 sends"), std::string::npos) << e.what();
        }
        std::vector<std::uint8_t> same = rank == 0 ? pattern(300000, 3) : std::vector<std::uint8_t>(300000, 0);
        comm->broadcast(same.data(), same.size(), 0);
        EXPECT_TRUE(same == pattern(300000, 3)) << "rank " << rank;
      },
      forced());
}

// Three ranks, blocks of different sizes, each rank's `send` apart from
// `recv` or its own block of it: every rank gets every block, over calls.
TEST(ShmSingleCopy, AllgatherReadsEveryPeersBlock) {
  testing::run_ranks(
      3,
      [](int rank) {
        auto comm = make_shm_communicator(rank, 3, std::getenv("KOLO_JOB_ID"), CommunicatorOptions{});
        const std::vector<std::size_t> sizes{300001, 200000, 500003};
        const std::vector<std::size_t> offsets = prefix_offsets(sizes);
        const std::vector<std::uint8_t> expected = patterns(sizes, 0);
        for (int call = 0; call < 2; ++call) {
          std::vector<std::uint8_t> out(offsets[3], 0);
          const std::vector<std::uint8_t> mine = pattern(sizes[rank], rank);
          const bool in_place = call == 1;
          if (in_place) std::copy(mine.begin(), mine.end(), out.begin() + static_cast<std::ptrdiff_t>(offsets[rank]));
          comm->allgatherv(in_place ? out.data() + offsets[rank] : mine.data(), sizes[rank], out.data(), sizes);
          EXPECT_TRUE(out == expected) << "rank " << rank << (in_place ? " in place" : "");
        }
      },
      forced());
}

TEST(ShmSingleCopy, AllgatherSizesThatDifferFailOnEveryRankAlike) {
  testing::run_ranks(
      2,
      [](int rank) {
        auto comm = join(rank);
        // Rank 1 expects 400000 bytes from rank 0, which sends 300000.
        const std::vector<std::size_t> sizes{rank == 0 ? std::size_t{300000} : std::size_t{400000}, 300000};
        std::vector<std::uint8_t> mine(sizes[rank], 1), out(sizes[0] + sizes[1]);
        try {
          comm->allgatherv(mine.data(), mine.size(), out.data(), sizes);
          ADD_FAILURE() << "rank " << rank << ": no error";
        } catch (const InvalidArgumentError& e) {
          EXPECT_NE(std::string(e.what()).find("rank 1 expects 400000 bytes from rank 0, which sends 300000"),
                    std::string::npos)
              << e.what();
        }
        const std::vector<std::size_t> same{300000, 300000};
        std::vector<std::uint8_t> block = pattern(300000, rank), all(600000);
        comm->allgatherv(block.data(), block.size(), all.data(), same);
        EXPECT_TRUE(all == patterns(same, 0)) << "rank " << rank;
      },
      forced());
}

}  // namespace
}  // namespace kolo::comm::shm
