// The member list a seed answers a joiner with (daemon/admission.h): whatever a seed
// sends, the joiner takes only a well-formed list.
#include "daemon/admission.h"

#include <gtest/gtest.h>

namespace gossip::daemon {
namespace {

TEST(MemberList, RoundTripsAndRefusesWhatIsNotAList) {
  const std::vector<peers::Peer> members{{0, "tcp://10.0.0.1:7000"}, {3, "tcp://[::1]:7003"}};
  auto back = parse_members(format_members(members));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].id, 3u);
  EXPECT_EQ((*back)[1].endpoint, "tcp://[::1]:7003");

  const std::pair<const char*, const char*> bad[] = {
      {"", "empty"},
      {"0 tcp://a:1", "a line without"},
      {"x tcp://a:1\n", "bad line"},
      {"4294967295 tcp://a:1\n", "bad line"},
      {"1 tcp://a:1\n1 tcp://b:2\n", "node 1 twice"},
      {"1 http://a:1\n", "invalid endpoint"},
      {"1 tcp://a:99999\n", "out of range"},
      {"1\n", "bad line"},
  };
  for (const auto& [text, why] : bad) {
    auto r = parse_members(text);
    ASSERT_FALSE(r.is_ok()) << text;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  }
  std::string many;
  for (int i = 0; i < 4097; ++i) many += std::to_string(i) + " tcp://a:1\n";
  EXPECT_NE(parse_members(many).status().message().find("more than 4096"), std::string::npos);
}

}  // namespace
}  // namespace gossip::daemon
