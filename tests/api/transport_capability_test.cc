// What callers ask of the transport instead of its name: whether it works in
// place of shareable Buffers (kolo::torch's and kolo.torch's gradient buckets
// are made where it does).
#include <gtest/gtest.h>

#include "harness/multiprocess.h"
#include "kolo/kolo.h"

namespace kolo::testing {
namespace {

void expect_shared_buffers(bool expected, const SpawnOptions& options = {}) {
  run_ranks(2, [expected](int) {
    kolo::init();
    EXPECT_EQ(kolo::works_in_shared_buffers(), expected) << kolo::backend();
    kolo::shutdown();
  }, options);
}

TEST(TransportCapability, SharedMemoryWorksInSharedBuffers) { expect_shared_buffers(true); }

TEST(TransportCapability, TcpDoesNot) { expect_shared_buffers(false, {.env = {{"KOLO_BACKEND", "tcp"}}}); }

}  // namespace
}  // namespace kolo::testing
