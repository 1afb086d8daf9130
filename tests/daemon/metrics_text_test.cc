#include "daemon/metrics_text.h"

#include <gtest/gtest.h>

#include "base/version.h"

namespace gossip::daemon {
namespace {

MetricsSnapshot sample() {
  MetricsSnapshot s;
  s.node = 3;
  s.strategy = "gossip";
  s.codec = "topk:0.01+ef";
  s.transport = "auto";
  s.topology = "ring";
  s.rounds = 12;
  s.step = 48;
  s.trainers = 2;
  s.ipc_dropped = 1;
  proto::ipc::Traffic t;
  t.payload_sent = 1000;
  t.wire_sent = 1100;
  t.payload_recv = 900;
  t.wire_recv = 990;
  t.msgs_sent = 5;
  t.msgs_recv = 4;
  t.dropped = 2;
  s.peers = {{"4", t, 0.25, true},
             {"5", {}, std::nullopt, false},
             {"unknown", {}, std::nullopt, std::nullopt}};
  s.configured_peers = 2;
  s.failures = {{"round-timeout", 3}, {"peer-absent", 1}};
  s.unhandled = {{"ring-probe", 7}, {"hello", 0}};
  return s;
}

TEST(MetricsText, EveryFamilyIsTypedAndEveryPeerHasItsSamples) {
  const std::string text = render_metrics(sample());
  for (const char* line :
       {"# TYPE gossipd_rounds_total counter\ngossipd_rounds_total 12\n", "gossipd_step 48\n",
        "gossipd_trainers 2\n", "gossipd_ipc_messages_dropped_total 1\n",
        "gossipd_info{node=\"3\",strategy=\"gossip\",codec=\"topk:0.01+ef\",transport=\"auto\","
        "topology=\"ring\"} 1\n",
        "gossipd_bytes_sent_total{peer=\"4\"} 1100\n",
        "gossipd_bytes_received_total{peer=\"4\"} 990\n",
        "gossipd_payload_bytes_sent_total{peer=\"4\"} 1000\n",
        "gossipd_payload_bytes_received_total{peer=\"4\"} 900\n",
        "gossipd_messages_sent_total{peer=\"4\"} 5\n",
        "gossipd_messages_received_total{peer=\"4\"} 4\n",
        "gossipd_messages_dropped_total{peer=\"4\"} 2\n",
        "gossipd_messages_dropped_total{peer=\"unknown\"} 0\n",
        "gossipd_peer_silent_seconds{peer=\"4\"} 0.250\n",
        "# TYPE gossipd_messages_unhandled_total counter\n",
        "gossipd_messages_unhandled_total{kind=\"ring-probe\"} 7\n",
        "gossipd_messages_unhandled_total{kind=\"hello\"} 0\n"})
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "\nin:\n" << text;
  EXPECT_EQ(text.find("gossipd_peer_silent_seconds{peer=\"unknown\"}"), std::string::npos)
      << "a peer never heard has no silence to report";
  EXPECT_NE(
      text.find(std::string("# TYPE gossipd_build_info gauge\ngossipd_build_info{version=\"") +
                kVersion + "\""),
      std::string::npos)
      << text;
  EXPECT_EQ(text.back(), '\n');
}

// Issue 24's families: failures by cause, the peers' links, a renamed gauge beside its
// old name for one release.
TEST(MetricsText, FailuresByCauseLinksAndRenamedGaugesWithTheirAliases) {
  MetricsSnapshot s = sample();
  s.strategy_gauges = {
      {"gossipd_tune_changes_total", "plans that changed", 4, "counter", "gossipd_tune_changes"},
      {"gossipd_ring_members", "nodes in the view", 3}};
  const std::string text = render_metrics(s);
  for (const char* line :
       {"# TYPE gossipd_failures_total counter\n",
        "gossipd_failures_total{cause=\"round-timeout\"} 3\n",
        "gossipd_failures_total{cause=\"peer-absent\"} 1\n",
        "gossipd_failures_total{cause=\"refused-message\"} 2\n", "gossipd_peers 2\n",
        "gossipd_peer_connected{peer=\"4\"} 1\n", "gossipd_peer_connected{peer=\"5\"} 0\n",
        "gossipd_peers_connected 1\n",
        "# TYPE gossipd_tune_changes_total counter\ngossipd_tune_changes_total 4\n",
        "# TYPE gossipd_tune_changes gauge\ngossipd_tune_changes 4\n",
        "Deprecated: the old name of gossipd_tune_changes_total",
        "# TYPE gossipd_ring_members gauge\ngossipd_ring_members 3\n"})
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "\nin:\n" << text;
  EXPECT_EQ(text.find("gossipd_peer_connected{peer=\"unknown\"}"), std::string::npos);
}

TEST(MetricsText, LabelValuesAreEscaped) {
  MetricsSnapshot s = sample();
  s.strategy = "a\"b\\c\nd";
  const std::string text = render_metrics(s);
  EXPECT_NE(text.find("strategy=\"a\\\"b\\\\c\\nd\""), std::string::npos) << text;
}

}  // namespace
}  // namespace gossip::daemon
