// Joins by seeds in the simulation (sim/joins.h): gossipd's admission and join client
// over simulated links, on virtual time.
#include "sim/joins.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>

namespace gossip::sim {
namespace {

using namespace std::chrono_literals;

JoinOptions with_links(uint32_t members, uint32_t joins) {
  JoinOptions o;
  o.members = members;
  o.joins = joins;
  o.links.all.latency = 1ms;
  o.links.all.bytes_per_s = 125e6;  // 1 Gbit/s
  return o;
}

Duration seconds(double s) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

// Each join is answered within a few round trips, every node that was a member before
// it lists it as soon as the adds land, and its cost is a handful of messages per
// member (the seed's ping round, the coordinator's, the majority's promise, the adds),
// the same for the tenth join as for the first: no member asks for what it was just
// sent (before the router's fix, every add made every member ask its sender for all of
// its adds, and the tenth join cost 2.2 times the first).
TEST(SimulatedJoins, EachJoinIsKnownToEveryMemberInRoundTripsAtALinearCost) {
  const JoinOptions o = with_links(64, 10);
  auto r = simulate_joins(o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->duplicates.empty());
  std::set<uint32_t> ids;
  for (const JoinRow& row : r->rows) {
    SCOPED_TRACE(testing::Message() << "joiner " << row.joiner);
    ASSERT_EQ(row.failure, "");
    ASSERT_GE(row.answered_s, row.asked_s);
    EXPECT_LT(row.answered_s - row.asked_s, 0.05) << "more than a few 2 ms round trips";
    EXPECT_EQ(row.knew, row.should_know);
    EXPECT_GE(row.should_know, o.members);
    EXPECT_LT(row.all_knew_s - row.asked_s, 0.05);
    EXPECT_TRUE(ids.insert(row.id).second);
    EXPECT_GE(row.id, o.members);
    // 7 a member: the ping rounds of the seed and of the coordinator (4), the
    // proposal and its votes (2), the adds (1); and the requests and answers.
    EXPECT_LE(row.messages, 8u * row.should_know) << "members: " << row.should_know;
    EXPECT_GE(row.messages, 5u * o.members);
  }
  EXPECT_LT(static_cast<double>(r->rows.back().messages),
            1.2 * static_cast<double>(r->rows.front().messages));
}

// Two partitions while joiners keep coming, each from its first seed's side. With the
// majority's promise (gossipd's default) the minority's side gives no id, its joiners
// wait for the partition to heal, and no id goes to two nodes. With --join-quorum any
// both sides' coordinators give the same ids: the same run shows what the promise
// prevents.
TEST(SimulatedJoins, NoIdIsGivenTwiceThroughPartitionsUnlessTheQuorumIsAny) {
  JoinOptions o = with_links(40, 30);
  o.every = 1s;
  peers::Outage first, second;
  first.from = seconds(5);
  first.until = seconds(15);
  for (uint32_t n = 0; n < 16; ++n) first.side.insert(n);
  second.from = seconds(18);
  second.until = seconds(28);
  for (uint32_t n = 24; n < 40; ++n) second.side.insert(n);
  o.links.outages = {first, second};

  auto majority = simulate_joins(o);
  ASSERT_TRUE(majority.is_ok()) << majority.status().message();
  EXPECT_TRUE(majority->duplicates.empty()) << majority->duplicates.front();
  double longest = 0;
  for (const JoinRow& row : majority->rows) {
    SCOPED_TRACE(testing::Message() << "joiner " << row.joiner);
    ASSERT_EQ(row.failure, "");
    EXPECT_EQ(row.knew, row.should_know);
    longest = std::max(longest, row.answered_s - row.asked_s);
    // Those held by a partition come in a rush when it heals, and each that the
    // coordinator cannot take yet (it settles one proposal at a time) asks again a
    // second later: 17 s for one that came as the first healed, then waited out the
    // second on the minority's side.
    EXPECT_LT(row.answered_s, 28.0 + 10.0) << "long after the last partition healed";
  }
  EXPECT_GT(longest, 5.0) << "no joiner waited out a partition: the test shows nothing";

  o.majority = false;
  auto any = simulate_joins(o);
  ASSERT_TRUE(any.is_ok()) << any.status().message();
  EXPECT_FALSE(any->duplicates.empty()) << "both sides gave ids, yet none twice?";
}

// The same seed gives the same run, join for join.
TEST(SimulatedJoins, TheSameSeedGivesTheSameJoins) {
  JoinOptions o = with_links(24, 6);
  o.links.all.jitter = 500us;
  auto a = simulate_joins(o), b = simulate_joins(o);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  ASSERT_EQ(a->rows.size(), b->rows.size());
  for (size_t j = 0; j < a->rows.size(); ++j) {
    EXPECT_EQ(a->rows[j].answered_s, b->rows[j].answered_s);
    EXPECT_EQ(a->rows[j].all_knew_s, b->rows[j].all_knew_s);
    EXPECT_EQ(a->rows[j].messages, b->rows[j].messages);
    EXPECT_EQ(a->rows[j].id, b->rows[j].id);
  }
  EXPECT_EQ(a->messages, b->messages);
}

TEST(SimulatedJoins, BadOptionsAreRefusedNamingThem) {
  JoinOptions o = with_links(8, 0);
  EXPECT_NE(simulate_joins(o).status().message().find("--joins 0"), std::string::npos);
  o.joins = 1;
  o.members = 1;
  EXPECT_NE(simulate_joins(o).status().message().find("1 members"), std::string::npos);
  o.members = 8;
  peers::Outage bad;
  bad.until = seconds(1);
  bad.side = {9};
  o.links.outages = {bad};
  EXPECT_NE(simulate_joins(o).status().message().find("node 9"), std::string::npos);
}

}  // namespace
}  // namespace gossip::sim
