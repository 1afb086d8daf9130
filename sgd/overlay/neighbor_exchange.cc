#include "sgd/overlay/neighbor_exchange.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/failures.h"
#include "base/finite.h"
#include "base/refusals.h"

namespace gossip::sgd {

struct NeighborExchange::Live {
  uint64_t round = 0;
  size_t numel = 0;
  std::span<const uint32_t> sources;
  std::vector<uint64_t> received;  // elements per source
  std::vector<uint64_t> next_seq;  // expected chunk sequence per source
  std::vector<bool> left;          // said bye during the round
  std::vector<bool> refused;       // sent NaN or Inf: the rest of its round is ignored
  const ChunkFn* on_chunk = nullptr;
  Status failure;  // a source's message that is malformed for this model ends the round

  size_t source_of(uint32_t peer) const {
    for (size_t s = 0; s < sources.size(); ++s)
      if (sources[s] == peer) return s;
    return sources.size();
  }
};

NeighborExchange::NeighborExchange(peers::Router& router, const compression::Codec* codec,
                                   compression::ThreadPool* pool, ExchangeLimits limits)
    : router_(router),
      transport_(router.transport()),
      codec_(codec),
      pool_(pool),
      limits_(limits),
      ask_after_(std::chrono::hours(24), limits.patience_factor, limits.patience_floor,
                 ExchangeLimits::kPatienceQuantile),
      absent_(transport_.peers().size(), false),
      send_failing_(transport_.peers().size(), false),
      left_(transport_.peers().size(), false),
      ever_delivered_(transport_.peers().size(), false),
      newest_(transport_.peers().size(), 0),
      greeted_(transport_.peers().size(), 0),
      answered_(transport_.peers().size(), TimePoint{}),
      beat_round_(transport_.peers().size(), 0),
      copy_requested_(transport_.peers().size(), false),
      first_round_(transport_.peers().size(), UINT64_MAX),
      streaks_(transport_.peers().size()),
      // The state is offered to a peer that took part (this node mixed with it or
      // gave up on it), and to any peer once this node is past the start-up: one
      // that is merely slow to start must begin from the common initial model, but
      // while a node is missing at the start its neighbors wait for it, and no node
      // gets further ahead than the graph's diameter. Past that, a peer that asks is
      // a restarted one, which may have no neighbor to ask (all down, or cut off by
      // a partition): experiments/soak.py saw one start again from round 0.
      state_(router,
             [this](uint32_t peer) {
               const size_t pi = peer_index(peer);
               return pi < absent_.size() &&
                      (ever_delivered_[pi] || absent_[pi] ||
                       next_round_ >= limits_.max_rounds_ahead + transport_.peers().size());
             }),
      subscription_(
          router.subscribe({proto::Kind::kHello, proto::Kind::kBye, proto::Kind::kHeartbeat,
                            proto::Kind::kCopyRequest, proto::Kind::kModelChunk},
                           [this](peers::Incoming& in) { dispatch(in); })) {
  limits_.dead_after.heartbeat = limits_.heartbeat;  // a silence under two says nothing
  started_ = router_.clock().now();
}

void NeighborExchange::joined(bool took_state) {
  if (!took_state) return assume_running(state_.running_peers());
  std::vector<uint32_t> all;
  for (const auto& p : transport_.peers()) all.push_back(p.id);
  assume_running(all);
}

void NeighborExchange::assume_running(std::span<const uint32_t> peers) {
  for (uint32_t p : peers)
    if (size_t pi = peer_index(p); pi < ever_delivered_.size()) ever_delivered_[pi] = true;
}

void NeighborExchange::beat(uint64_t next_round) {
  const auto now = router_.clock().now();
  if (now - last_beat_ < limits_.heartbeat) return;
  last_beat_ = now;
  // A full queue to a dead peer is expected; its silence is what we detect.
  std::vector<uint32_t> now_watched = watchers(next_round);
  for (uint32_t id : now_watched) {
    (void)transport_.send(id, next_round, proto::Heartbeat{});
    // A peer that watches this node from now on (a neighbor after a join, a new
    // coordinator) beats it from now on too: its silences so far were a non-neighbor's,
    // and learnt from, they would let it be silent up to the round timeout.
    if (!watched_.empty() && !std::binary_search(watched_.begin(), watched_.end(), id))
      transport_.traffic().forget_gaps(id);
  }
  watched_ = std::move(now_watched);
}

std::vector<uint32_t> NeighborExchange::watchers(uint64_t next_round) const {
  const auto& peers = transport_.peers();  // by id
  const uint32_t self = transport_.self();
  std::vector<uint32_t> out;
  // The coordinators: this node is one while fewer than kCoordinators ids below it live
  // (they beat every member, so every member counts them alike). One never heard is
  // taken to live for a dead-after from this node's start, as it may start later:
  // otherwise every node would beat every peer first, n^2 heartbeats at once.
  const bool starting = router_.clock().now() - started_ < limits_.dead_after.fixed;
  for (const auto& p : peers) {
    if (p.id > self || out.size() == kCoordinators) break;
    if (p.banned) continue;
    const uint64_t silent = transport_.traffic().silent_ms(p.id);
    if (silent == proto::ipc::kNeverHeard
            ? starting
            : !limits_.dead_after.dead(transport_.traffic(), p.id, silent))
      out.push_back(p.id);
  }
  const auto all = [&] { return peers::ids_of(peers); };
  if (out.size() < kCoordinators || !overlay_) return all();
  // The neighbors over a period of each graph of the rounds from next_round on: the
  // graph now, and those that joins scheduled for later rounds.
  const auto add_period = [&](const peers::Topology& t, uint64_t from) {
    const uint64_t period = t.period();
    if (self >= t.size() || period == 0 || period > kMaxWatchedPeriod) return false;
    for (uint64_t r = from; r < from + period; ++r) {
      for (uint32_t id : t.out_neighbors(self, r)) out.push_back(id);
      for (uint32_t id : t.in_neighbors(self, r)) out.push_back(id);
    }
    return true;
  };
  for (const auto& [from, topology] : overlay_->from(next_round))
    if (!add_period(*topology, from)) return all();
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void NeighborExchange::request_copy(uint32_t peer, uint64_t next_round) {
  // Lost with a dead peer's queue: the strategy asks again once the peer is heard.
  (void)transport_.send(peer, next_round, proto::CopyRequest{});
}

Status NeighborExchange::add_member(uint32_t id, const std::string& endpoint) {
  (void)endpoint;
  const size_t pi = peer_index(id);
  const size_t n = transport_.peers().size();
  if (pi == n) return Status::invalid(fmt::format("node {} is not a peer of the channel", id));
  // The channel keeps its peers in id order, and members may be heard of out of it
  // (an add lost, a later one heard): the new slot goes where the channel put the
  // peer, so that every other peer keeps its own.
  auto open_slot = [&](auto& v, auto fill) {
    if (v.size() + 1 == n)
      v.insert(v.begin() + static_cast<std::ptrdiff_t>(pi), fill);
    else
      v.resize(n, fill);
  };
  open_slot(absent_, false);
  open_slot(left_, false);
  open_slot(ever_delivered_, false);
  open_slot(newest_, uint64_t{0});
  open_slot(greeted_, uint64_t{0});
  open_slot(answered_, TimePoint{});
  open_slot(beat_round_, uint64_t{0});
  open_slot(copy_requested_, false);
  open_slot(send_failing_, false);
  open_slot(first_round_, UINT64_MAX);
  open_slot(streaks_, Streak{});
  ever_delivered_[pi] = true;  // it runs rounds once it is in the graph: patience, not start-up
  return Status::ok();
}

void NeighborExchange::schedule(uint32_t peer, uint64_t round) {
  if (const size_t pi = peer_index(peer); pi < first_round_.size()) first_round_[pi] = round;
}

std::vector<uint32_t> NeighborExchange::members() const {
  return peers::ids_of(transport_.peers());
}

std::vector<uint32_t> NeighborExchange::take_copy_requests() {
  std::vector<uint32_t> out;
  const auto& ps = transport_.peers();
  for (size_t i = 0; i < ps.size(); ++i)
    if (copy_requested_[i]) {
      out.push_back(ps[i].id);
      copy_requested_[i] = false;
    }
  return out;
}

uint64_t NeighborExchange::refusal_streak(size_t pi, uint64_t round) {
  if (pi >= streaks_.size()) return 1;
  Streak& st = streaks_[pi];
  if (st.rounds == 0 || round < st.last || round > st.last + 1)
    st.rounds = 1;  // a round without a refusal came between: a new streak
  else if (round == st.last + 1)
    ++st.rounds;
  st.last = round;
  return st.rounds;
}

size_t NeighborExchange::peer_index(uint32_t peer) const {
  const auto& ps = transport_.peers();
  for (size_t i = 0; i < ps.size(); ++i)
    if (ps[i].id == peer) return i;
  return ps.size();
}

bool NeighborExchange::absent(uint32_t peer) const { return absent_at(peer_index(peer)); }

bool NeighborExchange::gone(uint32_t peer) const {
  const size_t pi = peer_index(peer);
  return pi >= absent_.size() || (absent_[pi] && presumed_gone(pi));
}

void NeighborExchange::greet(uint32_t peer) {
  // A full queue to a dead peer is expected: it is why the peer is absent.
  (void)transport_.send(peer, next_round_, proto::Hello{layout_});
}

bool NeighborExchange::presumed_gone(size_t pi) const {
  if (left_[pi]) return true;
  const uint32_t peer = transport_.peers()[pi].id;
  const uint64_t silent = transport_.traffic().silent_ms(peer);
  return silent == proto::ipc::kNeverHeard ||
         limits_.dead_after.dead(transport_.traffic(), peer, silent);
}

void NeighborExchange::send(const OutgoingModel& model, std::span<const uint32_t> to,
                            double weight) {
  for (uint32_t peer : to) {
    const size_t pi = peer_index(peer);
    if (pi < absent_.size() && gone(peer)) {
      greet(peer);
    } else if (auto st = model.send(transport_, peer, layout_, weight); !st) {
      // Said once while it lasts: a peer whose send queue is full (down and not yet
      // presumed dead) fails every round's send, which was a line a round (2,851 over
      // the daemons of the hour's soak).
      if (pi >= send_failing_.size() || !send_failing_[pi])
        spdlog::warn("round {}: {} (said once until a send to it succeeds)", model.round,
                     st.message());
      if (pi < send_failing_.size()) send_failing_[pi] = true;
    } else if (pi < send_failing_.size() && send_failing_[pi]) {
      send_failing_[pi] = false;
      spdlog::info("round {}: sends to peer {} succeed again", model.round, peer);
    }
  }
}

void NeighborExchange::mark_absent(size_t pi, const std::string& why) {
  if (absent_[pi]) return;
  absent_[pi] = true;
  count_failure(Failure::kPeerAbsent);
  spdlog::warn("peer {} {}: not waiting for it until it is heard from again",
               transport_.peers()[pi].id, why);
}

void NeighborExchange::mark_present(size_t pi) {
  left_[pi] = false;
  if (!absent_[pi]) return;
  absent_[pi] = false;
  spdlog::info("peer {} is back", transport_.peers()[pi].id);
}

void NeighborExchange::dispatch(peers::Incoming& in) {
  const proto::Kind kind = in.kind();
  const uint64_t round = in.round();
  size_t pi = peer_index(in.peer);
  if (pi >= absent_.size()) return;  // the transport knows only peers
  const bool joining = state_.fetching();
  if (joining && kind == proto::Kind::kModelChunk) {
    newest_[pi] = std::max(newest_[pi], round + 1);
    // Early rounds of a cluster that starts: kept for when this node runs them. Later
    // ones belong to a cluster this node will take the state of, and skip past.
    if (round >= limits_.max_rounds_ahead) return;
  }
  const uint64_t next_round = joining ? 0 : next_round_;
  Live* live = joining ? nullptr : live_;
  if (kind == proto::Kind::kBye) {
    mark_absent(pi, "shut down");
    left_[pi] = true;
    if (live) {
      size_t s = live->source_of(in.peer);
      if (s < live->sources.size() && live->received[s] < live->numel) live->left[s] = true;
    }
    return;
  }
  // Heard (the transport notes when), but not a sign that the peer takes part in
  // rounds again.
  if (kind == proto::Kind::kHeartbeat) {
    beat_round_[pi] = std::max(beat_round_[pi], round);
    // A neighbor waits for this node's model and asks whether it is up: it is.
    // (TimePoint{}: never answered. Not TimePoint::min(), whose distance to now overflows.)
    if (const auto now = router_.clock().now();
        in.as<proto::Heartbeat>().ask &&
        (answered_[pi] == TimePoint{} || now - answered_[pi] >= kAnswerGap)) {
      answered_[pi] = now;
      (void)transport_.send(in.peer, next_round_, proto::Heartbeat{});
    }
    return;
  }
  mark_present(pi);
  if (kind == proto::Kind::kHello) {
    // A greet (greet()) in round R > 0: no model of round R comes from this peer.
    // Waiting out the patience for it made the peer absent here in turn, and after a
    // partition healed, push-sum stalled every few rounds for half a minute. (The
    // daemon's start-up hello is of round 0, before its first round's model: a new
    // process, whose rounds the last one's greets and heartbeats say nothing of.)
    if (round > 0) {
      greeted_[pi] = std::max(greeted_[pi], round + 1);
    } else {
      greeted_[pi] = 0;
      beat_round_[pi] = 0;
    }
    return;
  }
  if (kind == proto::Kind::kCopyRequest) {
    if (public_copies_)
      copy_requested_[pi] = true;
    else  // a peer configured for another strategy
      transport_.note_dropped(in.peer, "a copy-request, which only CHOCO uses");
    return;
  }
  newest_[pi] = std::max(newest_[pi], round + 1);
  if (round < next_round && !(live && round == live->round)) {
    // A round we are done with: we stopped waiting for this peer. Expected after
    // an absence, so not counted as an error.
    spdlog::debug("late chunk from peer {} for round {} (this node is at round {})", in.peer, round,
                  next_round);
    return;
  }
  if (live && round == live->round) {
    if (live->failure) live->failure = consume(in, *live);
    return;
  }
  const bool first_round = round == first_round_[pi];  // a joiner waits there for us
  if (round - next_round >= limits_.max_rounds_buffered &&
      round - next_round < limits_.max_rounds_ahead && !first_round) {
    spdlog::debug(
        "chunk from peer {} for round {}: this node is at round {}, and will skip to "
        "its peers' round",
        in.peer, round, next_round);
    return;
  }
  if ((round - next_round >= limits_.max_rounds_ahead && !first_round) ||
      ahead_bytes_ + in.payload.size() > limits_.max_buffered_bytes) {
    if (round - next_round >= limits_.max_rounds_ahead && !first_round)
      count_refusal(Refusal::kFarRound);
    transport_.note_dropped(
        in.peer, fmt::format("chunk for round {} is too far ahead of round {}", round, next_round));
    return;
  }
  ahead_bytes_ += in.payload.size();
  ahead_[round].push_back(std::move(in));
}

Status NeighborExchange::consume(peers::Incoming& in, Live& live) {
  const auto& h = in.as<proto::ModelChunk>();
  const uint64_t round = in.round();
  size_t s = live.source_of(in.peer);
  if (s == live.sources.size()) {
    // Every node derives the same graph; a chunk from a non-neighbor means the peers
    // disagree about the topology or its seed.
    transport_.note_dropped(in.peer, fmt::format("peer {} is not an in-neighbor in round {}; "
                                                 "do all nodes use the same topology and seed?",
                                                 in.peer, round));
    return Status::ok();
  }
  auto bad = [&](std::string why) {
    // A malformed chunk leaves its sender out of this round, so that one corrupted
    // message, or a hostile neighbor under robust mixing, cannot stop the node (the
    // trainer would see the round fail and stop). Without robust mixing, a neighbor
    // refused in kMismatchRounds rounds in a row is a misconfiguration (another codec,
    // model or strategy): the round fails with the reason, so that the user hears it.
    transport_.note_dropped(in.peer, why);
    count_refusal(Refusal::kMalformed);
    live.refused[s] = true;
    if (!limits_.robust && refusal_streak(peer_index(in.peer), round) >= kMismatchRounds)
      return Status::mismatch(fmt::format("{} (in {} rounds in a row)", why, kMismatchRounds));
    return Status::ok();
  };
  if (layout_ != 0 && h.layout != layout_)
    return bad(fmt::format(
        "peer {} trains a model with another layout (fingerprint {:016x}, ours {:016x}); "
        "every node must attach the same tensors",
        in.peer, h.layout, layout_));
  if (h.tensor != 0 &&
      !(public_copies_ && h.tensor == proto::kPublicCopyTensor && h.codec == proto::CodecId::kNone))
    return bad(
        fmt::format("peer {} sent a chunk of tensor {} ({}), which this node does not take; "
                    "do all nodes run the same strategy?",
                    in.peer, h.tensor, proto::codec_name(h.codec)));
  if (h.offset + h.numel > live.numel)
    return bad(fmt::format("peer {} sent elements [{}, {}) but the model has {} elements", in.peer,
                           h.offset, h.offset + h.numel, live.numel));
  if (h.seq != live.next_seq[s]) {
    transport_.note_dropped(in.peer, fmt::format("chunk seq {} in round {}, expected {}", h.seq,
                                                 round, live.next_seq[s]));
    return Status::ok();
  }
  if (live.received[s] + h.numel > live.numel)
    return bad(fmt::format("peer {} sent more than the model's {} elements in round {}", in.peer,
                           live.numel, round));
  live.next_seq[s]++;
  live.received[s] += h.numel;
  ever_delivered_[peer_index(in.peer)] = true;
  if (live.refused[s]) return Status::ok();

  const std::byte* bytes = static_cast<const std::byte*>(in.payload.data());
  std::span<const float> values;
  if (h.codec != proto::CodecId::kNone) {
    if (!codec_ || h.codec != codec_->id())
      return bad(fmt::format("peer {} sends {} payloads; this node decodes none and {}", in.peer,
                             proto::codec_name(h.codec),
                             codec_ ? codec_->spec() : std::string("nothing else")));
    scratch_.resize(h.numel);
    compression::CodecContext ctx{chunk_seed(round, in.peer, h.seq), pool_};
    if (auto st = codec_->decode({bytes, in.payload.size()}, ctx, scratch_); !st)
      return bad(st.with_context(fmt::format("payload from peer {}", in.peer)).message());
    values = scratch_;
  } else if (reinterpret_cast<uintptr_t>(bytes) % alignof(float) == 0) {
    values = {reinterpret_cast<const float*>(bytes), h.numel};
  } else {
    scratch_.resize(h.numel);
    std::memcpy(scratch_.data(), bytes, h.numel * sizeof(float));
    values = scratch_;
  }
  // A node's own guard (daemon/nonfinite.h) keeps NaN/Inf from leaving it; this one
  // keeps a peer without that guard from poisoning this node. Checked and handed on a
  // block at a time, so that the strategy reads each block from L1 right after the
  // check: a check of the whole chunk first read a chunk larger than the cache from
  // memory twice (a 1,000-node simulation's round, 100k parameters: 1.26 s, now 1.04 s).
  constexpr size_t kBlock = 4096;  // floats: 16 KB
  proto::ModelChunk part = h;
  for (size_t at = 0; at < values.size(); at += kBlock) {
    const std::span<const float> block = values.subspan(at, std::min(kBlock, values.size() - at));
    if (any_nonfinite(block)) {
      size_t e = 0;
      while (std::isfinite(block[e])) ++e;
      live.refused[s] = true;
      transport_.note_dropped(in.peer,
                              fmt::format("round {}: element {} is {}; the rest of this peer's "
                                          "round is ignored",
                                          round, h.offset + at + e, block[e]));
      return Status::ok();
    }
    part.offset = h.offset + at;
    part.numel = block.size();
    (*live.on_chunk)(s, part, block);
  }
  return Status::ok();
}

void NeighborExchange::progress(uint64_t next_round, std::chrono::milliseconds wait) {
  if (transport_.peers().empty()) return;
  beat(next_round);
  next_round_ = next_round;
  router_.poll(wait);
}

Result<NeighborExchange::Delivery> NeighborExchange::receive(uint64_t round,
                                                             std::span<const uint32_t> sources,
                                                             size_t numel, TimePoint patience,
                                                             const RoundOptions& options,
                                                             const ChunkFn& on_chunk) {
  const TimePoint begun = router_.clock().now();
  // Per source: when to ask it next whether it is up (ExchangeLimits::patience_factor),
  // and when it was asked, while its answer is due.
  const bool asks = limits_.patience_factor > 0;
  const auto ask_after = std::chrono::duration_cast<Duration>(ask_after_.next());
  // The answer may come behind a chunk that was on its way: as long as the rounds' waits
  // usually are (their 90th percentile), and at least the floor.
  const auto answer_within =
      asks ? std::max(std::chrono::duration_cast<Duration>(limits_.patience_floor),
                      std::chrono::duration_cast<Duration>(ask_after / limits_.patience_factor))
           : Duration::zero();
  std::vector<TimePoint> ask_at(sources.size(), begun + ask_after);
  std::vector<TimePoint> asked(sources.size(), TimePoint::max());
  Live live;
  live.round = round;
  live.numel = numel;
  live.sources = sources;
  live.received.assign(sources.size(), 0);
  live.next_seq.assign(sources.size(), 0);
  live.left.assign(sources.size(), false);
  live.refused.assign(sources.size(), false);
  live.on_chunk = &on_chunk;
  next_round_ = round + 1;
  live_ = &live;
  struct Unlive {
    Live*& live;
    ~Unlive() { live = nullptr; }
  } unlive{live_};

  // What arrived early, then everything older than this round goes.
  if (auto it = ahead_.find(round); it != ahead_.end()) {
    auto early = std::move(it->second);
    ahead_.erase(it);
    for (auto& in : early) {
      ahead_bytes_ -= in.payload.size();
      GOSSIP_RETURN_IF_ERROR(consume(in, live).with_context(fmt::format("round {}", round)));
    }
  }
  while (!ahead_.empty() && ahead_.begin()->first < round) {
    for (auto& in : ahead_.begin()->second) ahead_bytes_ -= in.payload.size();
    ahead_.erase(ahead_.begin());
  }

  auto describe = [&](size_t s, const char* why) {
    return fmt::format("peer {} ({} of {} elements, {})", sources[s], live.received[s], numel, why);
  };
  std::vector<bool> moved_on(sources.size(), false);
  while (true) {
    auto now = router_.clock().now();
    beat(round + 1);
    bool waiting = false;
    for (size_t s = 0; s < sources.size(); ++s) {
      if (live.received[s] >= numel || live.left[s] || live.refused[s]) continue;
      size_t pi = peer_index(sources[s]);
      // An absent peer that has started sending this round is waited for like any other.
      if (absent_at(pi) && live.received[s] == 0) continue;
      // Messages from a peer arrive in order: one that sent a later round and none of
      // this one will not send it.
      if (live.received[s] == 0 && newest_[pi] > round + 1) {
        moved_on[s] = true;
        continue;
      }
      // It sends nothing of this round (a greet), or what it sent was lost (after a
      // partition healed, push-sum's nodes waited out the patience for such a round
      // while its sender waited for them in a later one).
      if (live.received[s] == 0 && (greeted_[pi] > round || beat_round_[pi] > round)) continue;
      auto limit = ever_delivered_[pi] ? std::min(patience, options.deadline) : options.deadline;
      if (now >= limit) {
        mark_absent(pi, fmt::format("missed round {} ({} of {} elements in {:.2f} s)", round,
                                    live.received[s], numel,
                                    std::chrono::duration<double>(now - begun).count()));
        continue;
      }
      const uint64_t silent = transport_.traffic().silent_ms(sources[s]);
      // Its connection dropped: said first, where its silence is past the dead-after too.
      if (transport_.traffic().link_gone(sources[s]) &&
          silent >= static_cast<uint64_t>(kLinkDownSilence.count())) {
        mark_absent(pi, fmt::format("dropped its connection, refused a new one and sent nothing "
                                    "for {:.2f} s in round {}: presumed down",
                                    silent / 1000.0, round));
        continue;
      }
      if (limits_.dead_after.dead(transport_.traffic(), sources[s], silent)) {
        mark_absent(pi, fmt::format("silent for {:.1f} s in round {} (no heartbeat): presumed dead",
                                    silent / 1000.0, round));
        continue;
      }
      if (asks && ever_delivered_[pi] && now >= ask_at[s]) {
        if (asked[s] == TimePoint::max()) {
          (void)transport_.send(sources[s], round + 1, proto::Heartbeat{true});
          asked[s] = now;
        } else if (transport_.traffic().last_recv_ns(sources[s]) >=
                   std::chrono::duration_cast<std::chrono::nanoseconds>(asked[s].time_since_epoch())
                       .count()) {
          // Heard since the ask (on the channel's clock, the router's): up, and waited
          // for; asked again an answer's time later.
          asked[s] = TimePoint::max();
          ask_at[s] = now + answer_within;
        } else if (const auto since = now - asked[s]; since >= answer_within) {
          mark_absent(pi, fmt::format("sent {} of {} elements of round {} in {:.2f} s and did "
                                      "not answer within {:.2f} s whether it is up: presumed down",
                                      live.received[s], numel, round,
                                      std::chrono::duration<double>(now - begun).count(),
                                      std::chrono::duration<double>(since).count()));
          continue;
        }
      }
      waiting = true;
    }
    if (!waiting) {
      // A round every source delivered in full times the wait for the last of them.
      bool all = true;
      for (size_t s = 0; s < sources.size() && all; ++s)
        all = live.received[s] >= numel && !live.refused[s];
      if (all) ask_after_.completed(now - begun);
      break;
    }
    if (options.cancel && options.cancel->load()) return Status::closed("round cancelled");
    router_.poll(std::chrono::milliseconds(20));
    GOSSIP_RETURN_IF_ERROR(live.failure.with_context(fmt::format("round {}", round)));
  }

  // Every source has moved on: this node is behind (it restarted, or was dropped as
  // a straggler) and should run the oldest of their rounds next.
  // Absent sources that sent nothing do not count either way.
  catch_up_round_ = 0;
  uint64_t next = UINT64_MAX;
  bool behind = true;
  for (size_t s = 0; s < sources.size() && behind; ++s) {
    if (moved_on[s])
      next = std::min(next, newest_[peer_index(sources[s])] - 1);
    else if (live.received[s] > 0 || !absent_at(peer_index(sources[s])))
      behind = false;
  }
  if (behind && next != UINT64_MAX) {
    // No one peer moves this node: it catches up at most to the lower median of the
    // rounds its present peers are at, so a lone neighbor that claims a far-ahead
    // round (a hijack) is outvoted, while a node that is really behind, whose peers
    // are all ahead, still catches up.
    std::vector<uint64_t> at;
    for (size_t pi = 0; pi < newest_.size(); ++pi)
      if (!absent_[pi] && newest_[pi] > 0) at.push_back(newest_[pi] - 1);
    if (!at.empty()) {
      std::nth_element(at.begin(), at.begin() + static_cast<ptrdiff_t>((at.size() - 1) / 2),
                       at.end());
      const uint64_t median = at[(at.size() - 1) / 2];
      if (next > median) {
        count_refusal(Refusal::kFarRound);
        spdlog::warn(
            "round {}: a neighbor claims round {}, but the median peer is at {}: not "
            "skipping ahead for it",
            round, next, median);
        next = median;
      }
    }
    if (next > round) catch_up_round_ = next;
  }
  Delivery d;
  d.complete.resize(sources.size());
  for (size_t s = 0; s < sources.size(); ++s) {
    d.complete[s] = live.received[s] >= numel && !live.refused[s];
    if (d.complete[s]) continue;
    const size_t pi = peer_index(sources[s]);
    const char* why = live.left[s]      ? "shut down"
                      : live.refused[s] ? "sent NaN/Inf or a malformed chunk"
                      : moved_on[s]     ? "ahead of this node"
                      : absent_at(pi)   ? "absent"
                      : pi < greeted_.size() && greeted_[pi] > round
                          ? "greeted this node instead: it took this node for gone"
                      : pi < beat_round_.size() && beat_round_[pi] > round
                          ? "its heartbeat says it sent the round: lost"
                          : "?";
    d.missing += (d.missing.empty() ? "" : ", ") + describe(s, why);
  }
  return d;
}

}  // namespace gossip::sgd
