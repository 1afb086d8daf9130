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

}  // namespace
}  // namespace gossip::cli
