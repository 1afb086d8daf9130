// Replica servers: chain replication after aggregation (Li et al., OSDI 2014, 4.3).
// Each holder of a shard hands the next live holder of its chain every update it
// applies, and a snapshot when that holder asks for one (at its start, after a gap,
// or when its own feeder fell silent). Updates are raw fp32 and are applied with the
// same optimizer in the same order, so a replica holds the server's bits.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>

#include "sgd/strategies/ps/parameter_server.h"

namespace gossip::sgd {

using proto::PsReplica;

std::optional<uint32_t> ParameterServer::next_holder(const Served& s) const {
  for (uint32_t j = s.link + 1; j <= options_.replicas; ++j) {
    const uint32_t id = holder(s.index, j);
    const uint64_t silent = control_.traffic().silent_ms(id);
    // Unlike a worker, a replica never heard from is not waited for: it asks.
    if (silent != proto::ipc::kNeverHeard &&
        !options_.dead_after.dead(control_.traffic(), id, silent))
      return id;
  }
  return std::nullopt;
}

void ParameterServer::replicate(Served& s, bool snapshot, uint32_t worker, uint32_t divisor,
                                uint64_t round, std::span<const float> values) {
  if (!s.feeds) return;
  if (next_holder(s) != s.feeds) {
    // The holder fed fell silent (or one before it came back): the next one asks for a snapshot.
    s.feeds.reset();
    return;
  }
  for (uint64_t off = 0; off < values.size(); off += options_.chunk_elems) {
    const auto x =
        values.subspan(off, std::min<uint64_t>(options_.chunk_elems, values.size() - off));
    const auto raw = std::as_bytes(x);
    auto payload = std::make_shared<std::vector<std::byte>>(raw.begin(), raw.end());
    const PsReplica m{
        s.index, off,     x.size(), snapshot ? PsReplica::kSnapshot : PsReplica::kUpdate,
        worker,  divisor, layout_};
    if (Status st = control_.send_shared(*s.feeds, round, m, payload); !st) {
      spdlog::warn("ps: shard {} to its replica on node {}: {}", s.index, *s.feeds, st.message());
      s.feeds.reset();
      return;
    }
  }
}

void ParameterServer::tend_chain(Served& s) {
  if (!s.ready || s.link == 0 || s.took_over) return;
  if (s.synced && s.fed_by && !live(*s.fed_by)) {
    spdlog::warn(
        "ps: shard {}: node {}, which fed this replica, has been silent for over {} ms; "
        "asking the chain for a snapshot",
        s.index, *s.fed_by, options_.dead_after.for_peer(control_.traffic(), *s.fed_by).count());
    s.synced = false;
  }
  if (s.synced) return;
  const auto now = router_.clock().now();
  if (now - s.requested < options_.heartbeat) return;
  s.requested = now;
  // Every earlier holder hears it; the one whose next live holder is this node answers.
  for (uint32_t j = 0; j < s.link; ++j)
    (void)control_.send(holder(s.index, j), s.version,
                        PsReplica{s.index, 0, 0, PsReplica::kRequest, 0, 1, layout_});
}

void ParameterServer::on_replica(peers::Incoming& in) {
  const auto& m = in.as<PsReplica>();
  const auto drop = [&](const std::string& why) { control_.note_dropped(in.peer, why); };
  Served* s = served(m.shard);
  if (!s)
    return drop(fmt::format("ps-replica for shard {}, which this node does not hold", m.shard));
  if (m.what == PsReplica::kRequest) {
    // Only the holder the requester follows in the chain answers, and feeds it from
    // now on; at most once a heartbeat, since a snapshot is the whole shard.
    if (!s->ready || m.layout != layout_ || next_holder(*s) != in.peer) return;
    const auto now = router_.clock().now();
    if (s->feeds == in.peer && now - s->snapshot_sent < options_.heartbeat) return;
    s->snapshot_sent = now;
    s->feeds = in.peer;
    replicate(*s, true, 0, 1, s->version, s->params);
    spdlog::info("ps: shard {}: node {} replicates it from clock {}", s->index, in.peer,
                 s->version);
    return;
  }
  if (m.layout != layout_ || !s->ready)
    return drop(fmt::format("ps-replica of shard {} before this node has the model", m.shard));
  uint32_t from_link = s->link;
  for (uint32_t j = 0; j < s->link; ++j)
    if (holder(m.shard, j) == in.peer) from_link = j;
  if (from_link == s->link)
    return drop(
        fmt::format("ps-replica of shard {} from a node after this one in its chain", m.shard));
  if (s->took_over) return;  // this holder serves the workers itself now
  Replicated& r = s->incoming;
  if (m.offset == 0) {
    r = Replicated{in.round(), 0,         m.what == PsReplica::kSnapshot,
                   m.worker,   m.divisor, std::move(r.values)};
    r.values.resize(s->shard.numel);
  } else if (m.offset != r.got || in.round() != r.round ||
             r.snapshot != (m.what == PsReplica::kSnapshot)) {
    return drop(fmt::format("ps-replica slice at {} of shard {} out of order", m.offset, m.shard));
  }
  if (m.numel > s->shard.numel - r.got)
    return drop(fmt::format("ps-replica slice [{}, +{}) outside shard {} of {} elements", m.offset,
                            m.numel, m.shard, s->shard.numel));
  std::memcpy(r.values.data() + r.got, in.payload.data(), in.payload.size());
  r.got += m.numel;
  if (r.got == s->shard.numel) apply_replica(*s, in.peer);
}

void ParameterServer::apply_replica(Served& s, uint32_t from) {
  Replicated& r = s.incoming;
  if (!std::all_of(r.values.begin(), r.values.end(), [](float x) { return std::isfinite(x); })) {
    s.synced = false;
    return control_.note_dropped(from,
                                 fmt::format("ps-replica of shard {} with NaN or Inf", s.index));
  }
  if (r.snapshot) {
    s.params.swap(r.values);
    s.version = r.round;
    s.synced = true;
    s.fed_by = from;
    replicate(s, true, 0, 1, s.version, s.params);
    return;
  }
  if (!s.synced || s.fed_by != from) return;  // it asked for a snapshot; this came before
  const bool bsp = options_.mode == ParameterServerOptions::Mode::kBsp;
  if (bsp && r.round != s.version + 1) {
    spdlog::warn("ps: shard {}: replica at clock {} got clock {}; asking for a snapshot", s.index,
                 s.version, r.round);
    s.synced = false;
    return;
  }
  s.optimizer->step(s.params, r.values, 1.0f / static_cast<float>(r.divisor));
  if (bsp)
    s.version = r.round;
  else
    s.clock[r.worker] = std::max(s.clock[r.worker], r.round);
  replicate(s, false, r.worker, r.divisor, r.round, r.values);
}

void ParameterServer::take_over(Served& s, uint32_t worker) {
  s.took_over = true;
  s.feeds.reset();  // the next holder asks again, and gets this holder's snapshot
  spdlog::warn(
      "ps: shard {}: worker {} talks to this replica (link {} of its chain), so its "
      "server is gone; this node serves the shard from clock {}{}",
      s.index, worker, s.link, s.version,
      s.fed_by ? "" : " (it never had a snapshot: these are its own node's parameters)");
}

bool ParameterServer::fail_over(uint32_t shard, uint64_t clock, const std::string& why) {
  if (active_[shard] >= options_.replicas) return false;
  ++active_[shard];
  const uint32_t next = server_of(shard);
  spdlog::warn("ps: {}: shard {} goes on from its replica on node {}", why, shard, next);
  pulling_->got[shard] = 0;
  pulling_->gone[shard].reset();
  if (next == self() && !served(shard)->took_over) take_over(*served(shard), self());
  // The replica never saw the push the dead holder had: it gets it again.
  if (sent_[shard].clock == clock) {
    for (const auto& [m, payload] : sent_[shard].slices) {
      if (next == self()) {
        Served& own = *served(shard);
        const std::span<float> dst = slice_of_push(own, self(), clock, m.offset, m.numel);
        if (dst.empty()) continue;
        if (m.codec == proto::CodecId::kNone)
          std::memcpy(dst.data(), payload->data(), payload->size());
        else if (!options_.compression.codec
                      ->decode(*payload,
                               {chunk_seed(clock, self(), own.shard.offset + m.offset), nullptr},
                               dst)
                      .is_ok())
          continue;
        landed(own, self(), m.numel);
      } else {
        (void)control_.send_shared(next, clock, m, payload);
      }
    }
  }
  if (next == self())
    on_pull(self(), shard, clock);
  else
    (void)control_.send(next, clock, proto::PsPull{shard, layout_});
  return true;
}

}  // namespace gossip::sgd
