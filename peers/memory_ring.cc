#include "peers/memory_ring.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <span>
#include <string>

namespace gossip::peers {

struct MemoryRingHub::Connection {
  Connection(Clock& clock, uint32_t from, uint32_t to) : arrived(clock), from(from), to(to) {}
  struct Message {
    uint64_t tag = 0;
    std::vector<std::byte> data;
  };
  std::mutex mu;
  Signal arrived;  // a message came, or the connection closed
  const uint32_t from, to;
  std::deque<Message> messages;
  bool closed = false;       // the sender's end is gone: nothing more comes
  bool reader_gone = false;  // the receiver's end is gone: what comes is dropped
};

namespace {

// Waits on `signal` until `ready`, the deadline or the cancel flag, looking at the flag
// (and the interrupt, which may answer a control channel) every kCancelPoll as the TCP
// channel does. False at the deadline or when cancelled (`*cancelled` says which).
template <class Ready>
bool wait_for(Clock& clock, Signal& signal, const WaitOptions& wait, Ready ready, bool* cancelled) {
  *cancelled = false;
  const bool polls = wait.cancel || wait.interrupt;
  for (;;) {
    const TimePoint now = clock.now();
    if (now >= wait.deadline) return ready();
    const TimePoint until = polls ? std::min(wait.deadline, now + kCancelPoll) : wait.deadline;
    if (clock.wait_until(signal, until, ready)) return true;
    if (wait.cancelled()) {
      *cancelled = true;
      return false;
    }
  }
}

}  // namespace

class MemoryRingChannel final : public RingChannel {
 public:
  MemoryRingChannel(MemoryRingHub& hub, uint32_t self, uint32_t left, uint32_t right,
                    std::shared_ptr<MemoryRingHub::Connection> out,
                    std::shared_ptr<MemoryRingHub::Connection> in, TrafficCounters* traffic)
      : RingChannel(left, right),
        hub_(hub),
        self_(self),
        out_(std::move(out)),
        in_(std::move(in)),
        traffic_(traffic) {}

  ~MemoryRingChannel() override {
    hub_.close(out_, self_, right());
    std::lock_guard lock(in_->mu);
    in_->reader_gone = true;
    in_->messages.clear();
  }

  Status post_send(uint64_t tag, std::span<const std::byte> data) override {
    if (!failure_.is_ok()) return failure_;
    hub_.transmit(out_, self_, right(), tag, data);
    if (traffic_)
      traffic_->count_sent(right(), data.size(), data.size() + MemoryRingHub::kFrameBytes);
    return Status::ok();
  }

  Status post_recv(uint64_t tag, std::span<std::byte> buffer) override {
    if (!failure_.is_ok()) return failure_;
    recvs_.push_back({tag, buffer});
    return Status::ok();
  }

  Result<size_t> wait_recv(const WaitOptions& wait) override {
    if (!failure_.is_ok()) return failure_;
    if (recvs_.empty()) return Status::invalid("ring: wait_recv with no receive posted");
    const Recv r = recvs_.front();
    MemoryRingHub::Connection& in = *in_;
    bool cancelled = false;
    const bool ready = wait_for(
        hub_.hub_.clock(), in.arrived, wait,
        [&] {
          std::lock_guard lock(in.mu);
          return !in.messages.empty() || in.closed;
        },
        &cancelled);
    if (!ready) {
      const std::string what =
          fmt::format("ring: message {:#x} from peer {} (left)", r.tag, left());
      return fail(cancelled ? Status::closed(what + ": cancelled")
                            : Status::timeout(what + ": not in time"));
    }
    MemoryRingHub::Connection::Message m;
    {
      std::lock_guard lock(in.mu);
      if (in.messages.empty())
        return fail(
            Status::io_error(fmt::format("ring: peer {} (left) closed the connection", left())));
      m = std::move(in.messages.front());
      in.messages.pop_front();
    }
    // The TCP channel's checks (peers/tcp/tcp_ring_channel.cc), in its words.
    if (m.tag != r.tag)
      return fail(Status::protocol(
          fmt::format("ring: peer {} (left) sent message {:#x} where {:#x} was expected", left(),
                      m.tag, r.tag)));
    if (m.data.size() > r.buffer.size())
      return fail(Status::protocol(
          fmt::format("ring: peer {} (left) sent {} bytes for message {:#x}, more than the {} "
                      "expected",
                      left(), m.data.size(), r.tag, r.buffer.size())));
    if (!m.data.empty()) std::memcpy(r.buffer.data(), m.data.data(), m.data.size());
    if (traffic_)
      traffic_->count_recv(left(), m.data.size(), m.data.size() + MemoryRingHub::kFrameBytes);
    recvs_.pop_front();
    return m.data.size();
  }

  // A message leaves this process's hands when it is posted (it is copied).
  Status wait_sends(const WaitOptions&) override { return failure_; }

 private:
  struct Recv {
    uint64_t tag = 0;
    std::span<std::byte> buffer;
  };
  Status fail(Status st) {
    if (failure_.is_ok()) failure_ = std::move(st);
    return failure_;
  }

  MemoryRingHub& hub_;
  const uint32_t self_;
  std::shared_ptr<MemoryRingHub::Connection> out_, in_;
  TrafficCounters* traffic_;
  std::deque<Recv> recvs_;
  Status failure_ = Status::ok();
};

class MemoryRingTransport final : public RingTransport {
 public:
  MemoryRingTransport(MemoryRingHub& hub, uint32_t self, TrafficCounters* traffic)
      : hub_(hub), self_(self), traffic_(traffic) {}
  const char* name() const override { return "memory"; }
  // Nothing listens: a connection is found by the nodes' ids. One port, which never
  // changes (a change says the peer restarted).
  uint16_t port() const override { return 1; }

  Result<std::unique_ptr<RingChannel>> connect(const RingEnds& ends,
                                               const WaitOptions& wait) override {
    const uint64_t presented = ends.right_session ? ends.right_session : ends.session;
    auto out = hub_.offer(self_, ends.right, MemoryRingHub::Kind::kRing, presented);
    auto in = hub_.take(ends.left, self_, MemoryRingHub::Kind::kRing, ends.session, wait);
    if (!in) return in.status();
    return std::unique_ptr<RingChannel>(std::make_unique<MemoryRingChannel>(
        hub_, self_, ends.left, ends.right, std::move(out), std::move(in).value(), traffic_));
  }

  Result<std::vector<std::unique_ptr<RingChannel>>> connect_mesh(uint32_t self,
                                                                 const std::vector<MeshEnd>& ends,
                                                                 const WaitOptions& wait) override {
    std::vector<std::shared_ptr<MemoryRingHub::Connection>> outs;
    for (const MeshEnd& e : ends)
      outs.push_back(hub_.offer(self, e.peer, MemoryRingHub::Kind::kMesh, e.peer_session));
    std::vector<std::unique_ptr<RingChannel>> channels;
    for (size_t i = 0; i < ends.size(); ++i) {
      auto in = hub_.take(ends[i].peer, self, MemoryRingHub::Kind::kMesh, ends[i].session, wait);
      if (!in) return in.status();
      channels.push_back(std::make_unique<MemoryRingChannel>(
          hub_, self, ends[i].peer, ends[i].peer, outs[i], std::move(in).value(), traffic_));
    }
    return channels;
  }

 private:
  MemoryRingHub& hub_;
  const uint32_t self_;
  TrafficCounters* traffic_;
};

std::unique_ptr<RingTransport> MemoryRingHub::transport(uint32_t self, TrafficCounters* traffic) {
  return std::make_unique<MemoryRingTransport>(*this, self, traffic);
}

Signal& MemoryRingHub::offered(uint32_t to) {
  auto& s = offered_[to];
  if (!s) s = std::make_unique<Signal>(hub_.clock());
  return *s;
}

bool MemoryRingHub::is_cut(uint32_t node) { return hub_.lost(node, node); }

std::shared_ptr<MemoryRingHub::Connection> MemoryRingHub::offer(uint32_t from, uint32_t to,
                                                                Kind kind, uint64_t token) {
  auto c = std::make_shared<Connection>(hub_.clock(), from, to);
  // A dead node's connections are closed from the start (its connect fails nowhere:
  // what it sends is lost, and its peers' waits end).
  if (is_cut(from) || is_cut(to)) c->closed = true;
  Signal* signal = nullptr;
  {
    std::lock_guard lock(mu_);
    offers_[{from, to, kind}] = Offer{token, c};
    std::erase_if(open_, [](const std::weak_ptr<Connection>& w) { return w.expired(); });
    open_.push_back(c);
    signal = &offered(to);
  }
  signal->notify();
  return c;
}

Result<std::shared_ptr<MemoryRingHub::Connection>> MemoryRingHub::take(uint32_t from, uint32_t to,
                                                                       Kind kind, uint64_t token,
                                                                       const WaitOptions& wait) {
  Signal* signal = nullptr;
  {
    std::lock_guard lock(mu_);
    signal = &offered(to);
  }
  std::shared_ptr<Connection> taken;
  const auto ready = [&] {
    std::lock_guard lock(mu_);
    auto it = offers_.find({from, to, kind});
    if (it == offers_.end() || it->second.token != token) return false;
    taken = std::move(it->second.connection);
    offers_.erase(it);
    return true;
  };
  bool cancelled = false;
  if (wait_for(hub_.clock(), *signal, wait, ready, &cancelled)) return taken;
  const char* side = kind == Kind::kRing ? "left" : "mesh partner";
  if (cancelled)
    return Status::closed(
        fmt::format("ring: waiting for peer {} ({}) to connect: cancelled", from, side));
  return Status::timeout(fmt::format("peer {} ({}) did not connect in time", from, side));
}

void MemoryRingHub::transmit(const std::shared_ptr<Connection>& c, uint32_t from, uint32_t to,
                             uint64_t tag, std::span<const std::byte> data) {
  if (hub_.lost(from, to)) return;  // with the node that died
  const TimePoint when = hub_.arrival(from, to, data.size() + kFrameBytes);
  Connection::Message m{tag, std::vector<std::byte>(data.begin(), data.end())};
  auto land = [c, m = std::move(m)]() mutable {
    {
      std::lock_guard lock(c->mu);
      if (c->closed || c->reader_gone) return;
      c->messages.push_back(std::move(m));
    }
    c->arrived.notify();
  };
  if (when <= hub_.clock().now())
    land();
  else
    hub_.clock().at(when, std::move(land));
}

void MemoryRingHub::close(const std::shared_ptr<Connection>& c, uint32_t from, uint32_t to) {
  {
    // Not taken yet: nobody will.
    std::lock_guard lock(mu_);
    std::erase_if(offers_, [&](const auto& kv) { return kv.second.connection == c; });
  }
  auto shut = [c] {
    {
      std::lock_guard lock(c->mu);
      c->closed = true;
    }
    c->arrived.notify();
  };
  // Behind what was sent: the link keeps its order.
  const TimePoint when = hub_.arrival(from, to, 0);
  if (when <= hub_.clock().now())
    shut();
  else
    hub_.clock().at(when, std::move(shut));
}

void MemoryRingHub::cut(uint32_t node) {
  std::vector<std::shared_ptr<Connection>> from, to;
  {
    std::lock_guard lock(mu_);
    for (const auto& w : open_)
      if (auto c = w.lock()) {
        if (c->from == node) from.push_back(c);
        if (c->to == node) to.push_back(std::move(c));
      }
  }
  // What it sent before arrives, and then the connection closes, as a killed process's
  // socket sends what its buffer held and then its FIN; what is sent to it is lost.
  for (const auto& c : from) close(c, c->from, c->to);
  for (const auto& c : to) {
    std::lock_guard lock(c->mu);
    c->reader_gone = true;
    c->messages.clear();
  }
}

}  // namespace gossip::peers
