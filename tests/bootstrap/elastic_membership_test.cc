// The membership record kolorun writes for an elastic job and the workers read
// (src/bootstrap/elastic_membership.h).
#include <gtest/gtest.h>

#include "bootstrap/elastic_membership.h"
#include "kolo/error.h"

namespace kolo::elastic {
namespace {

TEST(ElasticMembership, RoundTripsAndKeepsRankOrder) {
  Membership m{3, {{5, "b"}, {0, "a"}, {2, "a"}}};
  const Membership back = decode_membership(encode_membership(m), 3);
  ASSERT_EQ(back.members.size(), 3u);
  EXPECT_EQ(back.rank_of(0), 1);
  EXPECT_EQ(back.rank_of(7), -1);
  EXPECT_EQ(back.host_indices(), (std::vector<int>{0, 1, 1}));
}

TEST(ElasticMembership, RankOrderIsOldestFirstWithEachHostsWorkersTogether) {
  const auto ordered = in_rank_order({{7, "c"}, {4, "b"}, {1, "a"}, {6, "b"}, {3, "a"}});
  std::vector<int> ids;
  for (const auto& m : ordered) ids.push_back(m.worker);
  EXPECT_EQ(ids, (std::vector<int>{1, 3, 4, 6, 7}));
}

TEST(ElasticMembership, MalformedRecordsAreRefused) {
  for (const char* bad : {"", "1 a", "x a\n", "1 a\n1 b\n", "-1 a\n", "1 \n", "1 a b\n", "1\n", "01 a\n"})
    EXPECT_THROW(decode_membership(bad, 1), InvalidArgumentError) << bad;
}

TEST(ElasticMembership, ResetRequestsRoundTripAndRejectGarbage) {
  const auto r = decode_reset_request(encode_reset_request({4, 2}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->generation, 4);
  EXPECT_EQ(r->blamed_rank, 2);
  EXPECT_EQ(decode_reset_request("3 -1")->blamed_rank, -1);
  for (const char* bad : {"", "3", "3 x", "-2 1", "3 -2", "3 1 2", "03 1", "3 -0"})
    EXPECT_FALSE(decode_reset_request(bad)) << bad;
}

}  // namespace
}  // namespace kolo::elastic
