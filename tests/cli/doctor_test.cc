// gossipctl doctor's diagnosis on link matrices made by hand: each problem gets its
// sentence, the most fundamental first, and a healthy matrix gets none. (The same
// problems made for real, with real daemons: tests/integration/doctor_test.cc.)
#include "cli/doctor.h"

#include <gtest/gtest.h>

#include "cli/status.h"

namespace gossip::cli {
namespace {

using proto::inspect::Connect;
using proto::inspect::Handshake;
using proto::inspect::Link;
using proto::inspect::LinkRow;

Link healthy(uint32_t to) {
  Link l;
  l.to = to;
  l.endpoint = "tcp://10.0.0." + std::to_string(to) + ":7000";
  l.connect = Connect::kOk;
  l.connect_ms = 0.1;
  l.handshake = Handshake::kOk;
  l.connects = 1;
  l.pings = 5, l.pongs = 5, l.rtt_ms = 0.3;
  l.clock_offset_ms = 0.2, l.clock_error_ms = 0.15;
  l.segments_sent = 1000;
  l.version = "0.9.0", l.strategy = "gossip";
  l.silent_ms = 40;
  return l;
}

ClusterLinks healthy_cluster(uint32_t n) {
  ClusterLinks c;
  c.summary.asked = 0;
  for (uint32_t i = 0; i < n; ++i) {
    c.summary.members.push_back(i);
    LinkRow r;
    r.node = i;
    r.facts = {"0.9.0", "gossip", false};
    for (uint32_t j = 0; j < n; ++j)
      if (j != i) r.links.push_back(healthy(j));
    c.rows.push_back(r);
  }
  return c;
}

std::string all_text(const std::vector<Finding>& f) {
  std::string s;
  for (const auto& x : f) s += (x.problem ? "! " : "- ") + x.text + "\n";
  return s;
}

TEST(Doctor, AHealthyMatrixHasNoFinding) {
  const auto c = healthy_cluster(4);
  EXPECT_TRUE(diagnose(c).empty()) << all_text(diagnose(c));
  EXPECT_NE(format_doctor_table(c, {}).find("no problems found"), std::string::npos);
}

TEST(Doctor, ABlockedLinkBetweenTwoLiveNodesNamesItsPort) {
  auto c = healthy_cluster(3);
  Link& l = c.rows[1].links[1];  // 1 -> 2
  l.connect = Connect::kTimedOut;
  l.connect_error = "no answer in 2.0 s";
  l.pongs = 0;
  const auto f = diagnose(c);
  ASSERT_EQ(f.size(), 1u) << all_text(f);
  EXPECT_TRUE(f[0].problem);
  EXPECT_EQ(f[0].text,
            "node 1 cannot reach node 2 on port 7000 (tcp://10.0.0.2:7000): no answer in 2.0 s; "
            "is a firewall dropping the port, or is the host down?");
}

TEST(Doctor, ANodeNobodyReachesIsDownOrUnreachableAndNotRepeatedPerLink) {
  auto c = healthy_cluster(3);
  c.rows.pop_back();  // node 2 sent no row
  c.summary.silent = {2};
  for (auto& r : c.rows)
    for (auto& l : r.links)
      if (l.to == 2) l.connect = Connect::kRefused, l.pongs = 0, l.silent_ms = 30000;
  auto f = diagnose(c);
  ASSERT_EQ(f.size(), 1u) << all_text(f);
  EXPECT_NE(f[0].text.find("node 2 is down, or its gossipd is not running: nodes 0 and 1"),
            std::string::npos)
      << f[0].text;
  // Never connected, and heard a moment ago: alive behind a port nobody reaches.
  for (auto& r : c.rows)
    for (auto& l : r.links)
      if (l.to == 2) l.connects = 0, l.silent_ms = 800, l.handshake = Handshake::kNone;
  f = diagnose(c);
  ASSERT_EQ(f.size(), 1u) << all_text(f);
  EXPECT_NE(f[0].text.find("node 2 is up (it sent a message 800 ms ago) but nodes 0 and 1 cannot "
                           "connect to its port 7000"),
            std::string::npos)
      << f[0].text;
  // Never connected, never heard: nothing listens there.
  for (auto& r : c.rows)
    for (auto& l : r.links)
      if (l.to == 2) l.silent_ms = proto::inspect::kNone;
  f = diagnose(c);
  ASSERT_EQ(f.size(), 1u) << all_text(f);
  EXPECT_NE(f[0].text.find("nothing listens at tcp://10.0.0.2:7000"), std::string::npos)
      << f[0].text;
}

TEST(Doctor, KeysVersionsStrategiesAndClocks) {
  auto c = healthy_cluster(3);
  for (auto& r : c.rows) r.facts.curve = true;
  c.rows[0].refused_keys = {"public key abc from 10.0.0.9, 3 times"};
  Link& to2 = c.rows[1].links[1];  // 1 -> 2: connects, never completes a handshake
  to2.handshake = Handshake::kFailed;
  to2.connects = 7, to2.disconnects = 7, to2.handshake_failures = 7, to2.pongs = 0;
  Link& to0 = c.rows[2].links[0];  // 2 -> 0: node 0 refuses node 2's key
  to0.handshake = Handshake::kRefused, to0.pongs = 0;
  c.rows[0].links[0].version = "0.8.0";        // node 1, as node 0 hears it
  c.rows[0].links[1].strategy = "local-sgd";   // node 2
  c.rows[1].links[0].clock_offset_ms = -4000;  // node 0, seen from node 1
  c.rows[1].links[0].segments_retransmitted = 50;
  const std::string all = all_text(diagnose(c));
  for (const char* want :
       {"! node 0 refused a CURVE handshake: public key abc from 10.0.0.9, 3 times",
        "! node 1 connects to node 2 on port 7000 but the CURVE handshake fails (7 connections, 7 "
        "lost)",
        "! node 0 refuses node 2's key",
        "! node 1 runs gossipd 0.8.0 and node 0 runs 0.9.0: run one version on every node",
        "! node 2 runs strategy local-sgd and node 0 runs gossip",
        "- node 0's clock is 4.0 s behind node 1's",
        "- the link from node 1 to node 0 retransmitted 5.0 % of its segments"})
    EXPECT_NE(all.find(want), std::string::npos) << want << "\n" << all;
  // Problems before notes.
  EXPECT_LT(all.find("! node 2 runs strategy"), all.find("- node 0's clock"));
}

TEST(Doctor, JsonHasTheRowsAndTheFindings) {
  auto c = healthy_cluster(2);
  c.rows[0].links[0].refused = 12;
  c.rows[0].links[0].last_refusal = "wire version 2";
  const auto f = diagnose(c);
  const std::string json = format_doctor_json(c, f);
  EXPECT_NE(json.find("\"problems\":[\"node 0 refused 12 messages from node 1; the last: wire "
                      "version 2\"]"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"rtt_ms\":0.3"), std::string::npos) << json;
}

TEST(StatusCluster, LagAndDistanceFromTheMembersSamples) {
  ClusterStatus c;
  c.summary.members = {0, 1, 2};
  c.summary.silent = {2};
  proto::inspect::MemberStatus a, b;
  a.node = 0, a.step = 100, a.state = "training", a.samples = {1, 1, 1, 1};
  b.node = 1, b.step = 96, b.state = "training", b.samples = {1, 1, 1, 1.4f};
  b.last_error = "round 7: peer 2 silent", b.last_error_age_s = 12;
  c.members = {a, b};
  const auto views = member_views(c);
  ASSERT_EQ(views.size(), 2u);
  EXPECT_EQ(views[0].lag, 0u);
  EXPECT_EQ(views[1].lag, 4u);
  // The mean is (1, 1, 1, 1.2): each is 0.2 from it, of a norm sqrt(4.44).
  ASSERT_TRUE(views[0].distance && views[1].distance);
  EXPECT_NEAR(*views[0].distance, 0.2 / std::sqrt(4.44), 1e-6);
  EXPECT_NEAR(*views[1].distance, 0.2 / std::sqrt(4.44), 1e-6);
  const std::string table = format_cluster_table(c);
  EXPECT_NE(table.find("round 7: peer 2 silent (12 s ago)"), std::string::npos) << table;
  EXPECT_NE(table.find("silent: 2"), std::string::npos) << table;
  // A member without samples (no round yet): no distance for anyone.
  c.members[1].samples.clear();
  EXPECT_FALSE(member_views(c)[0].distance);
}

}  // namespace
}  // namespace gossip::cli
