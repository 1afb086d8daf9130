// gossipctl status's table: a peer whose messages are refused again and again is
// named, with how to ban it; one with a few drops (a restart, a stale round) is not.

#include "cli/status.h"

#include <gtest/gtest.h>

namespace gossip::cli {
namespace {

NodeStatus with_drops(uint64_t peer1, uint64_t peer2) {
  NodeStatus s;
  s.node = 0;
  s.strategy = "gossip";
  PeerStatus a, b;
  a.id = 1;
  a.endpoint = "tcp://127.0.0.1:7001";
  a.traffic.dropped = peer1;
  b.id = 2;
  b.endpoint = "tcp://127.0.0.1:7002";
  b.traffic.dropped = peer2;
  s.peers = {a, b};
  return s;
}

TEST(StatusTable, NamesAPeerWithManyRefusedMessagesAndHowToBanIt) {
  const std::string table = format_status_table(with_drops(3, 120));
  EXPECT_NE(table.find("peer 2: 120 messages refused; if it is hostile, ban its key"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("--ban-peer 2"), std::string::npos) << table;
  EXPECT_EQ(table.find("peer 1:"), std::string::npos) << "3 drops are no pattern\n" << table;
}

TEST(StatusTable, SaysWhereTheTimeGoes) {
  NodeStatus s = with_drops(0, 0);
  EXPECT_EQ(format_status_table(s).find("waited"), std::string::npos) << "nothing timed yet";
  s.trainer_wait_seconds = 3;
  s.trainer_attached_seconds = 12;
  s.rounds_timed = 4;
  s.round_seconds = 0.2;
  s.last_round_seconds = 0.045;
  s.last_round_payload_bytes = 2048;
  s.last_round_overlap = 0.25;
  const std::string table = format_status_table(s);
  EXPECT_NE(table.find("trainers waited 25.0 % of their time for the daemon (3.0 of 12.0 s)"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("rounds: 4 timed, mean 50.0 ms; the last 45.0 ms"), std::string::npos)
      << table;
  EXPECT_NE(table.find("25 % overlapped with training"), std::string::npos) << table;
  const std::string json = format_status_json(s, "ipc:///x");
  EXPECT_NE(json.find("\"trainer_wait_seconds\": 3"), std::string::npos) << json;
  EXPECT_NE(json.find("\"last_round_overlap\": 0.25"), std::string::npos) << json;
}

}  // namespace
}  // namespace gossip::cli
