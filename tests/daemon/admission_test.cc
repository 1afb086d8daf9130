// The member list a seed answers a joiner with (daemon/admission.h): whatever a seed
// sends, the joiner takes only a well-formed list.
#include "daemon/admission.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

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

// Under CURVE every line carries the member's public key after its endpoint, and a
// peer the seed bans is marked.
TEST(MemberList, CarriesTheMembersKeysUnderCurve) {
  const std::string key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";  // CURVE's test vector
  const std::vector<peers::Peer> members{{0, "tcp://10.0.0.1:7000", key},
                                         {1, "tcp://10.0.0.2:7000", key, /*banned=*/true}};
  auto back = parse_members(format_members(members));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ((*back)[0].public_key, key);
  EXPECT_EQ((*back)[0].endpoint, "tcp://10.0.0.1:7000");
  EXPECT_FALSE((*back)[0].banned);
  EXPECT_TRUE((*back)[1].banned) << "a banned peer stays banned on the joiner";
  EXPECT_EQ((*back)[1].endpoint, "tcp://10.0.0.2:7000");
  auto bad = parse_members("0 tcp://10.0.0.1:7000 not-a-key\n");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("40 Z85 characters"), std::string::npos)
      << bad.status().message();
}

// '#' is a Z85 character, though no key starts with it: a line that starts with it, or
// what follows a key after a space, is a comment.
TEST(AdmitKeys, ReadsOneKeyALineAndNamesTheLineOfAnError) {
  const std::string path = ::testing::TempDir() + "admit-keys-test";
  const std::string with_hash = "rq:rM>}U?@Lns47E1%kR.o@n%Fc#msL/@{H8]yf#";
  ASSERT_EQ(with_hash.size(), 40u);
  const std::string other = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
  std::ofstream(path) << "# nodes that may join\n\n  " << with_hash << "\n"
                      << other << "   # node-7\n#" << other << "\n";
  auto keys = read_admit_keys(path);
  ASSERT_TRUE(keys.is_ok()) << keys.status().message();
  EXPECT_EQ(*keys, (std::vector<std::string>{with_hash, other}));

  std::ofstream(path) << other << "\n" << other << " trailing\n";
  EXPECT_NE(read_admit_keys(path).status().message().find("line 2: more than a key"),
            std::string::npos);
  std::ofstream(path) << "short\n";
  EXPECT_NE(read_admit_keys(path).status().message().find("line 1: the key: a CURVE key is 40"),
            std::string::npos)
      << read_admit_keys(path).status().message();
  EXPECT_NE(read_admit_keys(path + "-missing").status().message().find("cannot read"),
            std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gossip::daemon
