// The gossip family's overlay as nodes join (sgd/overlay/overlay.h): which graph a round
// gets, and which joins a spec cannot take.
#include "sgd/overlay/overlay.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace gossip::sgd {
namespace {

Overlay overlay_of(const std::string& spec, uint32_t n) {
  return Overlay(spec, 3, peers::make_topology(spec, n, 3).value());
}

TEST(Overlay, ARoundGetsTheGraphOfTheMembersItsJoinsLeftItWith) {
  Overlay o = overlay_of("ring", 4);
  ASSERT_TRUE(o.grow(5, 10).is_ok());
  ASSERT_TRUE(o.grow(6, 20).is_ok());
  EXPECT_EQ(o.at(0).size(), 4u);
  EXPECT_EQ(o.at(9).size(), 4u);
  EXPECT_EQ(o.at(10).size(), 5u);
  EXPECT_EQ(o.at(19).size(), 5u);
  EXPECT_EQ(o.at(20).size(), 6u);
  EXPECT_EQ(o.at(UINT64_MAX).size(), 6u);
  // Node 3's ring neighbors: 0 before the join, the joiner 4 from its first round.
  EXPECT_EQ(o.at(9).out_neighbors(3, 9), (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(o.at(10).out_neighbors(3, 10), (std::vector<uint32_t>{2, 4}));
}

// What a node's heartbeats must cover (NeighborExchange::watchers): every graph from a
// round on, the middle ones of two joins scheduled ahead included.
TEST(Overlay, FromARoundGivesEveryGraphThatHoldsFromItOn) {
  Overlay o = overlay_of("ring", 4);
  ASSERT_TRUE(o.grow(5, 10).is_ok());
  ASSERT_TRUE(o.grow(6, 11).is_ok());
  const auto sizes = [&](uint64_t round) {
    std::vector<std::pair<uint64_t, uint32_t>> out;
    for (const auto& [first, t] : o.from(round)) out.emplace_back(first, t->size());
    return out;
  };
  using V = std::vector<std::pair<uint64_t, uint32_t>>;
  EXPECT_EQ(sizes(3), (V{{3, 4}, {10, 5}, {11, 6}}));
  EXPECT_EQ(sizes(10), (V{{10, 5}, {11, 6}}));
  EXPECT_EQ(sizes(40), (V{{40, 6}}));
}

TEST(Overlay, AnAddHeardAgainOrLateChangesNoRoundAlreadyGiven) {
  Overlay o = overlay_of("ring", 4);
  ASSERT_TRUE(o.grow(5, 10).is_ok());
  const peers::Topology* five = &o.at(10);
  ASSERT_TRUE(o.grow(5, 3).is_ok());  // the same member again, told by another node
  EXPECT_EQ(o.at(9).size(), 4u);
  EXPECT_EQ(&o.at(10), five) << "a graph a round holds stays where it is";
  ASSERT_TRUE(o.grow(6, 7).is_ok());  // a later member for an earlier round: from round 10
  EXPECT_EQ(o.at(9).size(), 4u);
  EXPECT_EQ(o.at(10).size(), 6u);
  EXPECT_EQ(five->size(), 5u) << "kept for a round that took it before the add came";
}

TEST(Overlay, ASpecWithNoGraphOnOneMoreNodeRefusesSayingWhy) {
  Overlay torus = overlay_of("torus", 4);  // 2x2; 5 is prime
  const Status st = torus.check_grow(5);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("the overlay 'torus' cannot take a member 4"), std::string::npos)
      << st.message();
  EXPECT_FALSE(torus.grow(5, 1).is_ok());
  EXPECT_EQ(torus.at(1).size(), 4u) << "nothing changed";
  EXPECT_TRUE(torus.check_grow(6).is_ok()) << "2x3";

  Overlay fixed = overlay_of("torus:2x2", 4);
  EXPECT_FALSE(fixed.check_grow(5).is_ok());
  const Status far = overlay_of("ring", 4).check_grow(4'000'000'000u);
  EXPECT_NE(far.message().find("node 3999999999 is more than 256 ids past the overlay's 4 nodes"),
            std::string::npos)
      << far.message();
  Overlay regular = overlay_of("random-regular:3", 4);
  EXPECT_FALSE(regular.check_grow(5).is_ok()) << "5 x 3 is odd";
  EXPECT_TRUE(regular.check_grow(6).is_ok());
}

}  // namespace
}  // namespace gossip::sgd
