// --peers-from's sources: Slurm's host lists and task counts, hostfiles, DNS patterns.

#include "daemon/peers_from.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace gossip::daemon {
namespace {

using Names = std::vector<std::string>;

PeerSourceEnvironment environment(std::map<std::string, std::string> vars,
                                  std::map<std::string, std::string> files = {}) {
  return {[vars](const std::string& name) -> std::optional<std::string> {
            auto it = vars.find(name);
            if (it == vars.end()) return std::nullopt;
            return it->second;
          },
          [files](const std::string& path) -> Result<std::string> {
            auto it = files.find(path);
            if (it == files.end()) return Status::io_error("cannot read '" + path + "'");
            return it->second;
          }};
}

Names endpoints(const PeerListing& l) {
  Names out;
  for (const auto& n : l.nodes) out.push_back(n.endpoint());
  return out;
}

Names names(const PeerListing& l) {
  Names out;
  for (const auto& n : l.nodes) out.push_back(n.name);
  return out;
}

TEST(Hostlist, ExpandsAsScontrolShowHostnamesDoes) {
  EXPECT_EQ(*expand_hostlist("n[01-03,7],gpu"), (Names{"n01", "n02", "n03", "n7", "gpu"}));
  EXPECT_EQ(*expand_hostlist("r[1-2]n[1-2]"), (Names{"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(*expand_hostlist("node[8-11]"), (Names{"node8", "node9", "node10", "node11"}));
  EXPECT_EQ(*expand_hostlist("a,b[0-1].cluster"), (Names{"a", "b0.cluster", "b1.cluster"}));
  EXPECT_EQ(*expand_hostlist("single"), (Names{"single"}));
}

TEST(Hostlist, RefusesWhatIsNotAHostList) {
  for (const char* bad : {"n[1-", "n]1[", "n[3-1]", "n[a-b]", "n[[1]]", "", "n[]", "bad host"})
    EXPECT_FALSE(expand_hostlist(bad).is_ok()) << bad;
  auto huge = expand_hostlist("n[0-99999999]");
  ASSERT_FALSE(huge.is_ok());
  EXPECT_NE(huge.status().message().find("more than 4096"), std::string::npos);
  EXPECT_FALSE(expand_hostlist("a[0-99]b[0-99]").is_ok()) << "10,000 hosts by multiplication";
}

TEST(TasksPerNode, ExpandsRepeats) {
  EXPECT_EQ(*expand_tasks_per_node("2(x3),1"), (std::vector<uint32_t>{2, 2, 2, 1}));
  EXPECT_EQ(*expand_tasks_per_node("4"), (std::vector<uint32_t>{4}));
  for (const char* bad : {"", "0", "2(x0)", "2(x3", "x", "1,,2", "2(x99999)"})
    EXPECT_FALSE(expand_tasks_per_node(bad).is_ok()) << bad;
}

TEST(PeersFrom, SlurmListsEveryTaskWithPortsByLocalTask) {
  auto l = list_peers("slurm:7300", environment({{"SLURM_STEP_NODELIST", "c[1-2]"},
                                                 {"SLURM_JOB_NODELIST", "c[1-9]"},
                                                 {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                                                 {"SLURM_PROCID", "3"}}));
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  EXPECT_EQ(endpoints(*l),
            (Names{"tcp://c1:7300", "tcp://c1:7301", "tcp://c2:7300", "tcp://c2:7301"}));
  EXPECT_EQ(names(*l), (Names{"c1:7300", "c1:7301", "c2:7300", "c2:7301"}));
  EXPECT_EQ(l->self, 3u);
}

TEST(PeersFrom, SlurmNamesNodesByHostWhenOneTaskEach) {
  auto l = list_peers("slurm", environment({{"SLURM_JOB_NODELIST", "gpu[07-08]"},
                                            {"SLURM_TASKS_PER_NODE", "1(x2)"},
                                            {"SLURM_PROCID", "0"}}));
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  EXPECT_EQ(names(*l), (Names{"gpu07", "gpu08"}));
  EXPECT_EQ(endpoints(*l), (Names{"tcp://gpu07:7100", "tcp://gpu08:7100"}));
}

TEST(PeersFrom, SlurmErrorsNameTheVariable) {
  auto none = list_peers("slurm", environment({}));
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("SLURM_STEP_NODELIST or SLURM_JOB_NODELIST"),
            std::string::npos)
      << none.status().message();
  auto mismatch = list_peers("slurm", environment({{"SLURM_STEP_NODELIST", "a,b"},
                                                   {"SLURM_STEP_TASKS_PER_NODE", "1"},
                                                   {"SLURM_PROCID", "0"}}));
  ASSERT_FALSE(mismatch.is_ok());
  EXPECT_NE(mismatch.status().message().find("2 nodes in the node list but tasks for 1"),
            std::string::npos)
      << mismatch.status().message();
  auto cyclic = list_peers("slurm", environment({{"SLURM_STEP_NODELIST", "a"},
                                                 {"SLURM_STEP_TASKS_PER_NODE", "2"},
                                                 {"SLURM_PROCID", "0"},
                                                 {"SLURM_DISTRIBUTION", "cyclic"}}));
  ASSERT_FALSE(cyclic.is_ok());
  EXPECT_NE(cyclic.status().message().find("--distribution=block"), std::string::npos);
  auto outside = list_peers("slurm", environment({{"SLURM_STEP_NODELIST", "a"},
                                                  {"SLURM_STEP_TASKS_PER_NODE", "2"},
                                                  {"SLURM_PROCID", "2"}}));
  ASSERT_FALSE(outside.is_ok());
  EXPECT_NE(outside.status().message().find("SLURM_PROCID '2'"), std::string::npos);
}

TEST(PeersFrom, HostfileReadsMpiLines) {
  auto l = list_peers("hostfile:/h", environment({}, {{"/h",
                                                       "# the cluster\n"
                                                       "node-a slots=8\n"
                                                       "\n"
                                                       "  node-b:7200   # a comment\n"
                                                       "node-c:7201\r\n"
                                                       "node-c:7202\n"}}));
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  EXPECT_EQ(endpoints(*l), (Names{"tcp://node-a:7100", "tcp://node-b:7200", "tcp://node-c:7201",
                                  "tcp://node-c:7202"}));
  EXPECT_EQ(names(*l), (Names{"node-a", "node-b", "node-c:7201", "node-c:7202"}));
  EXPECT_FALSE(l->self.has_value()) << "a hostfile does not say which line is this node";
}

TEST(PeersFrom, HostfileErrorsNameTheLine) {
  auto bad = list_peers("hostfile:/h", environment({}, {{"/h", "a\nb:99999\n"}}));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("/h:2: port '99999'"), std::string::npos)
      << bad.status().message();
  auto twice = list_peers("hostfile:/h", environment({}, {{"/h", "a:1\na:1\n"}}));
  ASSERT_FALSE(twice.is_ok());
  EXPECT_NE(twice.status().message().find("node 0 and node 1 are both a:1"), std::string::npos)
      << twice.status().message();
  auto empty = list_peers("hostfile:/h", environment({}, {{"/h", "# nobody\n"}}));
  ASSERT_FALSE(empty.is_ok());
  EXPECT_NE(empty.status().message().find("lists no node"), std::string::npos);
  auto missing = list_peers("hostfile:/nope", environment({}));
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("cannot read '/nope'"), std::string::npos);
}

TEST(PeersFrom, DnsExpandsAStatefulSetsPods) {
  auto l = list_peers("dns:gossip-{0..2}.gossip.default.svc:7400", environment({}));
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  EXPECT_EQ(endpoints(*l), (Names{"tcp://gossip-0.gossip.default.svc:7400",
                                  "tcp://gossip-1.gossip.default.svc:7400",
                                  "tcp://gossip-2.gossip.default.svc:7400"}));
  EXPECT_EQ(find_node(l->nodes, "gossip-1"), 1u) << "a pod's host name is its first label";
  EXPECT_EQ(find_node(l->nodes, "gossip-2.gossip.default.svc"), 2u);
  EXPECT_FALSE(find_node(l->nodes, "gossip-3").has_value());
  for (const char* bad : {"dns:gossip.svc", "dns:g-{2..1}.s", "dns:g-{0..1}.s:0",
                          "dns:g-{0..1}-{0..1}.s", "dns:g-{0..99999}.s", "dns:g {0..1}"})
    EXPECT_FALSE(list_peers(bad, environment({})).is_ok()) << bad;
}

TEST(PeersFrom, UnknownSourcesNameTheForms) {
  auto problem = peers_from_problem("consul:x");
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("hostfile:PATH, slurm[:PORT] and dns:"), std::string::npos) << *problem;
  EXPECT_TRUE(peers_from_problem("hostfile:").has_value());
  EXPECT_TRUE(peers_from_problem("slurm:abc").has_value());
  EXPECT_FALSE(peers_from_problem("slurm:7000").has_value());
}

TEST(PeersFrom, FindNodeRefusesAnAmbiguousHost) {
  std::vector<ListedNode> nodes{{"h:1", "h", 1}, {"h:2", "h", 2}, {"k", "k", 1}};
  EXPECT_FALSE(find_node(nodes, "h").has_value()) << "two nodes on host h";
  EXPECT_EQ(find_node(nodes, "h:2"), 1u);
  EXPECT_EQ(find_node(nodes, "k.example.org"), 2u) << "a fully qualified host name";
}

}  // namespace
}  // namespace gossip::daemon
