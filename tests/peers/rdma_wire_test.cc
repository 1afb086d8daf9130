// The RDMA ring's wire format and credit windows (peers/rdma/rdma_wire.h): pure
// logic, so these run on every machine, with or without an RDMA device.

#include "peers/rdma/rdma_wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <random>
#include <vector>

namespace gossip::peers::rdma {
namespace {

template <class T>
std::vector<std::byte> bytes_of(const T& v, size_t padded_to = 0) {
  std::vector<std::byte> out(std::max(sizeof v, padded_to));
  std::memcpy(out.data(), &v, sizeof v);
  return out;
}

TEST(RdmaWire, PrivateDataDecodesFromPaddedBuffersAndNotFromShortOnes) {
  const Hello h{.from = 3, .to = 4, .session = 0xabc};
  const auto in = decode_hello(bytes_of(h, 56));  // the CM pads a request to 56 bytes
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ(in->from, 3u);
  EXPECT_EQ(in->session, 0xabcu);
  const auto whole = bytes_of(h);
  EXPECT_FALSE(decode_hello(std::span(whole).first(sizeof h - 1)).has_value());
  const Accept a{.slots = 16, .slot_bytes = 1 << 18, .addr = 0x1000, .rkey = 7};
  ASSERT_TRUE(decode_accept(bytes_of(a, 196)).has_value());
  EXPECT_EQ(decode_accept(bytes_of(a))->rkey, 7u);
}

TEST(RdmaWire, RefusalSaysWhyForEveryMismatch) {
  const Hello good{.from = 11, .to = 12, .session = 5};
  EXPECT_EQ(ring_hello_refusal(good, 12, 11, 5), "");
  Hello foreign = good;
  foreign.magic = 0;
  EXPECT_NE(ring_hello_refusal(foreign, 12, 11, 5).find("magic"), std::string::npos);
  EXPECT_EQ(ring_hello_refusal(good, 12, 13, 5),
            "it is node 11 asking for node 12, we wait for node 13");
  EXPECT_EQ(ring_hello_refusal(good, 14, 11, 5),
            "it is node 11 asking for node 12, we wait for node 11");
  EXPECT_EQ(ring_hello_refusal(good, 12, 11, 6),
            "session 0x5 is not ours (another layout, or no token)");
}

TEST(RdmaWire, AcceptIsCheckedAgainstWhatTheSenderCanDrive) {
  const Accept good{.slots = 16, .slot_bytes = 4096};
  EXPECT_TRUE(check_accept(good, 16, 3).is_ok());
  Accept a = good;
  a.slots = 17;
  EXPECT_EQ(check_accept(a, 16, 3).code(), Status::Code::kProtocol);
  a = good;
  a.slots = 0;
  EXPECT_FALSE(check_accept(a, 16, 3).is_ok());
  a = good;
  a.slot_bytes = sizeof(FragmentHeader);  // no room for payload
  EXPECT_FALSE(check_accept(a, 16, 3).is_ok());
  a = good;
  a.version = kVersion + 1;
  const Status st = check_accept(a, 16, 3);
  EXPECT_NE(st.message().find("peer 3 (right)"), std::string::npos) << st.message();
}

TEST(RdmaWire, FragmentCountCoversEmptyAndExactMessages) {
  const uint32_t slot = 32 + 100;  // 100 payload bytes a fragment
  EXPECT_EQ(fragment_count(0, slot), 1u);
  EXPECT_EQ(fragment_count(1, slot), 1u);
  EXPECT_EQ(fragment_count(100, slot), 1u);
  EXPECT_EQ(fragment_count(101, slot), 2u);
  EXPECT_EQ(fragment_count(1000, slot), 10u);
}

TEST(RdmaWire, FragmentsAreCheckedAgainstTheirReceive) {
  const uint32_t slot = 32 + 100;
  const Assembly fresh{.tag = 0x700000001, .capacity = 250};
  const FragmentHeader first{.tag = 0x700000001, .bytes = 250, .offset = 0};
  auto got = check_fragment(first, 32 + 100, slot, fresh, 12);
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  EXPECT_EQ(*got, 100u);

  FragmentHeader h = first;
  h.tag = 0x800000001;
  Status st = check_fragment(h, 132, slot, fresh, 12).status();
  EXPECT_EQ(st.code(), Status::Code::kProtocol);
  EXPECT_EQ(st.message(),
            "ring: peer 12 (left) sent message 0x800000001 where 0x700000001 was expected");

  h = first;
  h.bytes = 251;
  st = check_fragment(h, 132, slot, fresh, 12).status();
  EXPECT_EQ(
      st.message(),
      "ring: peer 12 (left) sent 251 bytes for message 0x700000001, more than the 250 expected");

  EXPECT_FALSE(check_fragment(first, 131, slot, fresh, 12).is_ok());  // a short write
  h = first;
  h.magic = 0;
  EXPECT_NE(check_fragment(h, 132, slot, fresh, 12).status().message().find("malformed"),
            std::string::npos);

  // The last fragment carries the rest; continuations must follow on exactly.
  const Assembly after_two{
      .tag = 0x700000001, .capacity = 250, .bytes = 250, .filled = 200, .started = true};
  h = first;
  h.offset = 200;
  got = check_fragment(h, 32 + 50, slot, after_two, 12);
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  EXPECT_EQ(*got, 50u);
  h.offset = 100;
  EXPECT_FALSE(check_fragment(h, 32 + 100, slot, after_two, 12).is_ok());
  h.offset = 200;
  h.bytes = 240;
  EXPECT_FALSE(check_fragment(h, 32 + 40, slot, after_two, 12).is_ok());

  // An empty message is one header-only fragment.
  const Assembly empty{.tag = 9, .capacity = 0};
  got = check_fragment(FragmentHeader{.tag = 9}, 32, slot, empty, 12);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(*got, 0u);
}

TEST(RdmaWire, ASendSlotIsFreeOnlyOnceCreditedAndWritten) {
  SendWindow w(2);
  EXPECT_TRUE(w.idle());
  EXPECT_EQ(w.post(), 0u);
  EXPECT_EQ(w.post(), 1u);
  EXPECT_FALSE(w.can_post());
  EXPECT_EQ(w.slot_of(2), 0u);
  EXPECT_TRUE(w.on_credit(1));  // the receiver consumed fragment 0 ...
  EXPECT_FALSE(w.can_post());   // ... but our NIC may still read its staging copy
  EXPECT_TRUE(w.on_written());
  EXPECT_TRUE(w.can_post());
  EXPECT_FALSE(w.idle());
  EXPECT_TRUE(w.on_written());
  EXPECT_TRUE(w.idle());
  EXPECT_FALSE(w.on_written());  // nothing outstanding
  EXPECT_FALSE(w.on_credit(3));  // credits for fragments never posted
  EXPECT_TRUE(w.on_credit(2));
  EXPECT_TRUE(w.on_credit(2));   // a repeated credit changes nothing
  EXPECT_FALSE(w.on_credit(1));  // going backwards reads as 2^32 - 1 ahead
}

TEST(RdmaWire, ReceiveSlotsArriveInOrderAndAreOwedBack) {
  RecvWindow w(2);
  EXPECT_FALSE(w.credit_owed());
  EXPECT_EQ(w.on_arrival(0), 0u);
  EXPECT_FALSE(w.on_arrival(2).has_value());  // out of order
  EXPECT_EQ(w.on_arrival(1), 1u);
  EXPECT_FALSE(w.on_arrival(2).has_value());  // no free slot: the sender overran its credits
  ASSERT_TRUE(w.has_arrived());
  EXPECT_EQ(w.next_slot(), 0u);
  w.consume();
  EXPECT_EQ(w.credit_owed(), 1u);
  EXPECT_EQ(w.on_arrival(2), 0u);
  w.consume();
  w.consume();
  EXPECT_FALSE(w.has_arrived());
  EXPECT_EQ(w.credit_owed(), 3u);
  w.credit_sent();
  EXPECT_FALSE(w.credit_owed());
}

// Both windows and the fragment checks together, with completions and credits
// delivered late and in random batches: every message arrives whole and the
// sender never overruns the receiver.
TEST(RdmaWire, MessagesSurviveRandomlyDelayedCompletionsAndCredits) {
  constexpr uint32_t kSlots = 4, kSlotBytes = 32 + 64;
  std::mt19937 rng(1);
  std::vector<std::vector<std::byte>> messages(300);
  for (size_t i = 0; i < messages.size(); ++i) {
    messages[i].resize(rng() % 300);
    for (auto& b : messages[i]) b = static_cast<std::byte>(rng());
  }
  std::vector<std::byte> remote(kSlots * kSlotBytes);
  SendWindow send(kSlots);
  RecvWindow recv(kSlots);
  std::deque<std::pair<uint32_t, size_t>> in_flight;  // (immediate, bytes written)
  std::deque<uint32_t> credits;
  uint64_t unwritten = 0;
  size_t next_send = 0, send_offset = 0, next_recv = 0;
  std::vector<std::byte> got;
  Assembly a{.tag = 0, .capacity = messages[0].size()};
  std::vector<size_t> arrived_bytes(kSlots);
  for (int tick = 0; next_recv < messages.size(); ++tick) {
    ASSERT_LT(tick, 100000) << "stuck at message " << next_recv;
    // Sender: post whatever the window allows.
    while (next_send < messages.size() && send.can_post()) {
      const auto& m = messages[next_send];
      const uint64_t n = send.post();
      const size_t payload = std::min<size_t>(kSlotBytes - 32, m.size() - send_offset);
      const FragmentHeader h{.tag = next_send, .bytes = m.size(), .offset = send_offset};
      std::byte* at = remote.data() + send.slot_of(n) * kSlotBytes;
      std::memcpy(at, &h, sizeof h);
      if (payload > 0)
        std::memcpy(at + 32, m.data() + send_offset, payload);  // an empty message has no data()
      in_flight.push_back({static_cast<uint32_t>(n), 32 + payload});
      ++unwritten;
      send_offset += payload;
      if (send_offset == m.size()) {
        ++next_send;
        send_offset = 0;
      }
    }
    // The network: some writes land and complete, some credits come back.
    for (int k = rng() % 3; k > 0 && !in_flight.empty(); --k) {
      const auto [imm, bytes] = in_flight.front();
      in_flight.pop_front();
      const auto slot = recv.on_arrival(imm);
      ASSERT_TRUE(slot.has_value());
      arrived_bytes[*slot] = bytes;
    }
    if (unwritten > 0 && rng() % 2) {
      ASSERT_TRUE(send.on_written());
      --unwritten;
    }
    if (!credits.empty() && rng() % 2) {
      ASSERT_TRUE(send.on_credit(credits.front()));
      credits.pop_front();
    }
    // Receiver: consume into the posted receive, owe credits back.
    while (recv.has_arrived() && next_recv < messages.size()) {
      const std::byte* at = remote.data() + recv.next_slot() * kSlotBytes;
      FragmentHeader h;
      std::memcpy(&h, at, sizeof h);
      auto payload = check_fragment(h, arrived_bytes[recv.next_slot()], kSlotBytes, a, 1);
      ASSERT_TRUE(payload.is_ok()) << payload.status().message();
      got.insert(got.end(), at + 32, at + 32 + *payload);
      a.started = true;
      a.bytes = h.bytes;
      a.filled += *payload;
      recv.consume();
      if (a.filled == a.bytes) {
        ASSERT_EQ(got, messages[next_recv]) << "message " << next_recv;
        got.clear();
        if (++next_recv < messages.size())
          a = Assembly{.tag = next_recv, .capacity = messages[next_recv].size()};
      }
    }
    if (auto c = recv.credit_owed(); c && rng() % 2) {
      credits.push_back(*c);
      recv.credit_sent();
    }
  }
}

}  // namespace
}  // namespace gossip::peers::rdma
