// A shared-memory segment the job did not create is never mapped: another local
// user may put a file under a name the job would use (/dev/shm is open to
// everyone), open to all and with a plausible header. The job's names follow
// from its secret, not its id, and every rank refuses, saying why, a segment
// that is another user's, open to other users, or without the job's nonce.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/shm/segment_checks.h"
#include "comm/shm/shm_communicator.h"
#include "comm/shm/shm_layout.h"
#include "comm/shm/shm_segment.h"
#include "common/job_names.h"
#include "harness/multiprocess.h"
#include "kolo/kolo.h"
#include "store/store.h"

namespace kolo::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr uid_t kNobody = 65534;

// What a rank would take for its job's segment of `size` ranks: the ready magic
// and a consistent layout. Owned by `owner` when this process may give it away
// (root), with `mode` whatever the umask.
void plant_segment(const std::string& name, int size, mode_t mode, uid_t owner) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, mode);
  ASSERT_GE(fd, 0) << name;
  ASSERT_EQ(::fchmod(fd, mode), 0);
  const shm::Layout layout = shm::Layout::compute(size, 4096);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(layout.total_bytes)), 0);
  void* base = ::mmap(nullptr, layout.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(base, MAP_FAILED);
  auto& header = *static_cast<shm::SegmentHeader*>(base);
  header.size = static_cast<std::uint32_t>(size);
  header.slot_bytes = 4096;
  header.small_bytes = 1024;
  header.total_bytes = layout.total_bytes;
  header.magic.store(shm::kReadyMagic);
  ::munmap(base, layout.total_bytes);
  if (owner != ::geteuid()) ASSERT_EQ(::fchown(fd, owner, owner), 0);
  ::close(fd);
}

// The words of the segment `name`'s header that tell whether it is ready and
// whether any rank registered in it; none while it has no header.
struct HeaderWords {
  std::uint32_t magic = 0;
  std::uint32_t attached = 0;
};

std::optional<HeaderWords> header_of(const std::string& name) {
  const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  void* base = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) >= sizeof(shm::SegmentHeader))
    base = ::mmap(nullptr, sizeof(shm::SegmentHeader), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) return std::nullopt;
  const auto& header = *static_cast<const shm::SegmentHeader*>(base);
  const HeaderWords words{header.magic.load(), header.attached.load()};
  ::munmap(base, sizeof(shm::SegmentHeader));
  return words;
}

// Ranks that registered in the segment `name` (0: none ever did).
std::uint32_t attached_to(const std::string& name) {
  const auto header = header_of(name);
  return header ? header->attached : 0;
}

// Both ranks of a job of two join it at once; each must fail with an error
// whose text holds every one of `expected`, long before the connect timeout.
void expect_refused_on_both_ranks(const std::string& job, const std::vector<std::string>& expected) {
  CommunicatorOptions options;
  options.connect_timeout = 10s;
  auto join = [&](int rank) {
    try {
      make_shm_communicator(rank, 2, job, options);
      ADD_FAILURE() << "rank " << rank << " joined over a segment the job did not create";
    } catch (const Error& e) {
      for (const std::string& part : expected)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "rank " << rank << ": " << e.what();
    }
  };
  const auto start = Clock::now();
  std::thread rank0(join, 0);
  join(1);
  rank0.join();
  EXPECT_LT(Clock::now() - start, 5s) << "a rank waited for a segment it should have refused";
}

// The job id's own name, as without a secret: an attacker can predict it. A
// file there of another user, open to everyone, is refused by both ranks,
// which leave it as it is and never register in it.
TEST(ShmForeignSegment, AnotherUsersSegmentIsRefusedOnEveryRank) {
  const std::string job = testing::make_job_id();
  const std::string name = "/kolo-" + job + "-shm";
  const bool root = ::geteuid() == 0;
  plant_segment(name, 2, 0666, root ? kNobody : ::geteuid());
  std::vector<std::string> expected{"refused shared memory segment /dev/shm" + name, "mode 0666"};
  if (root) expected.push_back("belongs to uid 65534");
  expect_refused_on_both_ranks(job, expected);
  EXPECT_TRUE(std::filesystem::exists("/dev/shm" + name)) << "must not delete a file it did not create";
  EXPECT_EQ(attached_to(name), 0u) << "a rank registered in another user's segment";
  ::shm_unlink(name.c_str());
}

// A segment of this user, closed to others, but without the job's nonce in its
// header (made with another secret, or not by kolo): refused, not called stale.
TEST(ShmForeignSegment, SegmentWithoutTheJobsNonceIsRefused) {
  const std::string job = testing::make_job_id();
  const std::string name = "/kolo-" + job + "-shm";
  plant_segment(name, 2, 0600, ::geteuid());
  expect_refused_on_both_ranks(job, {"refused shared memory segment /dev/shm" + name, "nonce"});
  EXPECT_EQ(attached_to(name), 0u) << "a rank registered in a segment without the job's nonce";
  ::shm_unlink(name.c_str());
}

// The segment rank 0 creates: mode 0600 and this user's whatever the umask,
// named without the job id, and with the job's nonce in its header.
TEST(ShmForeignSegment, SegmentKoloCreatesIsPrivateToItsUser) {
  const std::string job = testing::make_job_id();
  const std::string secret = store::make_secret();
  const std::string name = shm::segment_name(job, secret);
  EXPECT_EQ(name.find(job), std::string::npos) << name;
  CommunicatorOptions options;
  options.connect_timeout = 10s;
  auto join = [&](int rank) {
    try {
      make_shm_communicator(rank, 2, job, options, secret)->barrier();  // rank 1 checks the nonce
    } catch (const Error& e) {
      ADD_FAILURE() << "rank " << rank << ": " << e.what();
    }
  };
  const mode_t umask_before = ::umask(0);
  std::thread rank0(join, 0);
  struct stat st {};
  const auto deadline = Clock::now() + 5s;
  while (::stat(("/dev/shm" + name).c_str(), &st) != 0 && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ::umask(umask_before);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  join(1);
  rank0.join();
  EXPECT_EQ(shm::ownership_problem(st), "");
}

// Names another user could predict from the job id (the world's and a process
// set's, as they were named by it) hold planted segments; a job with a secret
// names its segments otherwise and runs past them.
TEST(ShmForeignSegment, JobAndProcessSetSegmentsAreNotNamedByTheJobId) {
  testing::run_ranks(3, [](int rank) {
    const std::string job = std::getenv("KOLO_JOB_ID");
    const std::string world = "/kolo-" + job + "-0-shm", set = "/kolo-" + job + "-0-set1-shm";
    const uid_t owner = ::geteuid() == 0 ? kNobody : ::geteuid();
    if (rank == 0) {
      plant_segment(world, 3, 0666, owner);
      plant_segment(set, 2, 0666, owner);
    }
    const auto deadline = Clock::now() + 10s;
    auto planted = [&] { return header_of(set).value_or(HeaderWords{}).magic == shm::kReadyMagic; };
    while (!planted() && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
    kolo::init();
    std::int64_t value = rank;
    kolo::allreduce(Tensor{&value, DataType::Int64, {1}}, {.op = ReduceOp::Sum, .name = "world"});
    EXPECT_EQ(value, 3);
    const ProcessSet pair = add_process_set({0, 1});
    if (rank < 2) {
      value = rank + 1;
      kolo::allreduce(Tensor{&value, DataType::Int64, {1}}, {.op = ReduceOp::Sum, .name = "pair", .process_set = pair});
      EXPECT_EQ(value, 3);
    }
    remove_process_set(pair);
    kolo::shutdown();
    EXPECT_EQ(attached_to(world), 0u);
    EXPECT_EQ(attached_to(set), 0u);
  });
}

TEST(ShmForeignSegment, NamesFollowFromTheSecretNotTheJobId) {
  const std::string job = testing::make_job_id();
  const std::string secret = store::make_secret(), other = store::make_secret();
  const std::string name = shm::segment_name(job + "-0", secret);
  EXPECT_EQ(name.rfind("/kolo-" + job_tag(secret) + "-", 0), 0u) << name;
  EXPECT_EQ(name.find(job), std::string::npos) << name;
  EXPECT_NE(name, shm::segment_name(job + "-0", other));
  EXPECT_NE(name, shm::segment_name(job + "-1", secret));
  EXPECT_EQ(job_flight_dir(secret, job), "/tmp/kolo-flight-" + job_tag(secret));
  EXPECT_EQ(job_flight_dir("", job), "/tmp/kolo-flight-" + job);
  EXPECT_NE(shm::segment_nonce(secret, name), shm::segment_nonce(other, name));
}

}  // namespace
}  // namespace kolo::comm
