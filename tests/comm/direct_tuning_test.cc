// How the direct collectives cut a reduce-scatter into rounds: the TCP
// transport's automatic round per peer shrinks with the rank count so that a
// whole round stays near Tuning::kAutoRoundBytes, never below its floor; a
// <prefix>_ROUND_BYTES setting, or a transport's fixed default, wins.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "comm/direct/direct_collectives.h"
#include "kolo/error.h"

namespace kolo::comm::direct {
namespace {

TEST(DirectTuning, TheAutomaticRoundPerPeerShrinksWithTheRankCountDownToItsFloor) {
  Tuning automatic;
  automatic.round_bytes = 0;
  EXPECT_EQ(automatic.round_bytes_for(1), Tuning::kAutoRoundBytes);
  EXPECT_EQ(automatic.round_bytes_for(2), Tuning::kAutoRoundBytes);
  EXPECT_EQ(automatic.round_bytes_for(3), Tuning::kAutoRoundBytes / 2);
  EXPECT_EQ(automatic.round_bytes_for(5), Tuning::kAutoRoundBytes / 4);
  EXPECT_EQ(automatic.round_bytes_for(64), Tuning::kMinAutoRoundBytes);
  Tuning fixed;
  EXPECT_EQ(fixed.round_bytes_for(2), std::size_t{1} << 20);
  EXPECT_EQ(fixed.round_bytes_for(64), std::size_t{1} << 20);
}

TEST(DirectTuning, ASettingOverridesTheTransportsDefaultAndItsAbsenceKeepsIt) {
  Tuning automatic;
  automatic.round_bytes = 0;
  unsetenv("KOLO_TESTX_ROUND_BYTES");
  EXPECT_EQ(Tuning::from_env("KOLO_TESTX", automatic).round_bytes, 0u);
  EXPECT_EQ(Tuning::from_env("KOLO_TESTX").round_bytes, std::size_t{1} << 20);
  setenv("KOLO_TESTX_ROUND_BYTES", "8192", 1);
  EXPECT_EQ(Tuning::from_env("KOLO_TESTX", automatic).round_bytes_for(4), 8192u);
  setenv("KOLO_TESTX_ROUND_BYTES", "12", 1);
  EXPECT_THROW(Tuning::from_env("KOLO_TESTX", automatic), InvalidArgumentError);
  unsetenv("KOLO_TESTX_ROUND_BYTES");
}

}  // namespace
}  // namespace kolo::comm::direct
