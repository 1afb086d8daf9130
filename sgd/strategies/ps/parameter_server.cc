#include "sgd/strategies/ps/parameter_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstring>

#include "proto/ipc.h"
#include "sgd/registry.h"

namespace gossip::sgd {
namespace {

using Mode = ParameterServerOptions::Mode;

// Pulls travel raw unless the codec re-encodes values safely (fp16, bf16, int8):
// a sparse or sign code of parameters would lose the parameters themselves.
bool dense(const compression::Codec* c) {
  if (!c) return false;
  const auto id = c->id();
  return id == proto::CodecId::kFp16 || id == proto::CodecId::kBf16 || id == proto::CodecId::kInt8;
}

bool compressing(const compression::Codec* c) { return c && c->id() != proto::CodecId::kNone; }

}  // namespace

Result<ParameterServerOptions::Mode> parse_ps_mode(const std::string& spec, uint64_t* staleness) {
  *staleness = 0;
  if (spec == "bsp") return Mode::kBsp;
  if (spec == "async") return Mode::kAsync;
  if (spec.starts_with("ssp:")) {
    const std::string_view s = std::string_view(spec).substr(4);
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && end == s.data() + s.size() && !s.empty() && v <= 1000000) {
      *staleness = v;
      return Mode::kSsp;
    }
  }
  return Status::invalid(fmt::format(
      "parameter-server mode '{}' is not bsp, async or ssp:S (S a number of clocks, e.g. ssp:4)",
      spec));
}

Shard shard_of(uint64_t numel, uint32_t shards, uint32_t s) {
  const uint64_t base = numel / shards, extra = numel % shards;
  return {s * base + std::min<uint64_t>(s, extra), base + (s < extra ? 1 : 0)};
}

ParameterServer::ParameterServer(peers::Router& router, ParameterServerOptions options)
    : router_(router),
      control_(router.transport()),
      options_(options),
      subscription_(
          router.subscribe({proto::Kind::kPsPush, proto::Kind::kPsPull, proto::Kind::kPsParams,
                            proto::Kind::kPsReplica, proto::Kind::kBye},
                           [this](peers::Incoming& in) { absorb(in); })) {
  nodes_.push_back(self());
  for (const auto& p : control_.peers())
    if (p.id != self()) nodes_.push_back(p.id);
  std::sort(nodes_.begin(), nodes_.end());
  // A chain that wraps (shard s's link j on node s + j - n) would move to another node
  // when n grows: such a cluster takes no new member.
  chains_fixed_ = options_.servers + options_.replicas <= nodes_.size();
  highest_listed_ = nodes_.back();
  options_.servers = std::min<uint32_t>(options_.servers, static_cast<uint32_t>(nodes_.size()));
  options_.replicas =
      std::min<uint32_t>(options_.replicas, static_cast<uint32_t>(nodes_.size()) - 1);
  active_.assign(options_.servers, 0);
  sent_.resize(options_.servers);
  for (uint32_t s = 0; s < options_.servers; ++s)
    for (uint32_t j = 0; j <= options_.replicas; ++j)
      if (holder(s, j) == self()) {
        served_.emplace_back();
        served_.back().index = s;
        served_.back().link = j;
      }
  // The servers' momentum filters updates that carry the trainers' momentum already
  // (docs/strategies.md, "Parameter servers"): in the long run it multiplies each by
  // lr / (1 - m), and the two filters in a row ring where one would not. Measured on
  // the reference MLP, 5 nodes, trainers at momentum 0.9: lr 1 and lr 0.1 with m 0.9
  // train to chance; m 0.5 with lr 0.1 reaches 0.82, --ps-optimizer sgd 0.857.
  if (!served_.empty() && options_.optimizer.kind == ServerOptimizerConfig::Kind::kMomentum)
    spdlog::warn(
        "ps: --ps-optimizer momentum (m = {}, lr = {}) steps each update lr / (1 - m) = {:.3g} "
        "times in the long run; if the trainers use momentum too, the two compound and the "
        "model can diverge (--ps-optimizer sgd adds the updates as they are)",
        options_.optimizer.momentum, options_.optimizer.lr,
        options_.optimizer.lr / (1 - options_.optimizer.momentum));
}

ParameterServer::~ParameterServer() {
  if (!served_.empty() && started_)
    spdlog::info(
        "ps: the largest lead a pull was answered with: {} clocks over the slowest live "
        "worker{}",
        max_lead(),
        options_.mode == Mode::kSsp ? fmt::format(" (bound {})", options_.staleness) : "");
}

uint32_t ParameterServer::self() const { return control_.self(); }

bool ParameterServer::live(uint32_t worker) const {
  if (worker == self()) return true;
  const uint64_t silent = control_.traffic().silent_ms(worker);
  // Never heard: waited for (it may start later), as every strategy waits at start.
  return silent == proto::ipc::kNeverHeard ||
         !options_.dead_after.dead(control_.traffic(), worker, silent);
}

void ParameterServer::heartbeats() {
  const auto now = router_.clock().now();
  if (now - last_heartbeat_ < options_.heartbeat) return;
  last_heartbeat_ = now;
  // Workers tell the servers they are alive while they compute; servers tell the
  // workers while they wait for the others.
  std::vector<uint32_t> to;
  if (!served_.empty())
    to = nodes();
  else
    for (uint32_t s = 0; s < options_.servers; ++s)
      for (uint32_t j = 0; j <= options_.replicas; ++j) to.push_back(holder(s, j));
  std::sort(to.begin(), to.end());
  to.erase(std::unique(to.begin(), to.end()), to.end());
  for (uint32_t id : to)
    if (id != self()) (void)control_.send(id, 0, proto::Heartbeat{});
}

bool ParameterServer::pending(const Served& s, uint32_t worker) const {
  return std::find(joined_.begin(), joined_.end(), worker) != joined_.end() &&
         s.clock.count(worker) == 0;
}

bool ParameterServer::counted(const Served& s, uint32_t worker) const {
  return live(worker) && !pending(s, worker);
}

Status ParameterServer::add_member(uint32_t id, const std::string&) {
  if (!chains_fixed_)
    return Status::invalid(fmt::format(
        "ps: {} servers and {} replicas wrap around the {} nodes: node {} would move the "
        "shards' chains",
        options_.servers, options_.replicas, nodes_.size(), id));
  if (std::find(nodes_.begin(), nodes_.end(), id) != nodes_.end()) return Status::ok();
  // Above every listed node, so in id order it comes after every chain's holders
  // (links s + j below the listed count), whatever order the joins are heard in.
  if (id <= highest_listed_)
    return Status::invalid(fmt::format(
        "ps: a new member's id ({}) must be above every listed node's ({})", id, highest_listed_));
  nodes_.insert(std::upper_bound(nodes_.begin(), nodes_.end(), id), id);
  joined_.push_back(id);
  spdlog::info("ps: node {} joined as a worker; the shards count it from its first push", id);
  return Status::ok();
}

ParameterServer::Served* ParameterServer::served(uint32_t shard) {
  for (Served& s : served_)
    if (s.index == shard) return &s;
  return nullptr;
}

// --- server side ---------------------------------------------------------------------

void ParameterServer::absorb(peers::Incoming& in) {
  const auto drop = [&](const std::string& why) { control_.note_dropped(in.peer, why); };
  switch (in.kind()) {
    case proto::Kind::kPsPush: {
      const auto& m = in.as<proto::PsPush>();
      Served* s = served(m.shard);
      if (!s)
        return drop(fmt::format("ps-push for shard {}, which this node does not serve", m.shard));
      if (m.layout != layout_ || numel_ == 0)
        return drop(
            fmt::format("ps-push of another model layout ({:#x}, ours {:#x})", m.layout, layout_));
      if (m.offset > s->shard.numel || m.numel > s->shard.numel - m.offset)
        return drop(fmt::format("ps-push slice [{}, +{}) outside shard {} of {} elements", m.offset,
                                m.numel, m.shard, s->shard.numel));
      const compression::Codec* codec =
          compressing(options_.compression.codec) ? options_.compression.codec : nullptr;
      if (m.codec != (codec ? codec->id() : proto::CodecId::kNone))
        return drop(fmt::format("ps-push in codec {}, this node runs {}",
                                proto::codec_name(m.codec),
                                codec ? proto::codec_name(codec->id()) : "none"));
      if (s->link > 0 && !s->took_over) take_over(*s, in.peer);
      // Decoded straight into the worker's push buffer.
      const std::span<float> dst = slice_of_push(*s, in.peer, in.round(), m.offset, m.numel);
      if (dst.empty()) return;
      const auto bytes =
          std::span(static_cast<const std::byte*>(in.payload.data()), in.payload.size());
      Status st;
      if (codec)
        st = codec->decode(
            bytes, {chunk_seed(in.round(), in.peer, s->shard.offset + m.offset), nullptr}, dst);
      else
        std::memcpy(dst.data(), bytes.data(), bytes.size());
      const bool finite = st.is_ok() && std::all_of(dst.begin(), dst.end(),
                                                    [](float x) { return std::isfinite(x); });
      if (!finite) {
        // The whole push is left out of its clock, which goes on without it.
        reject(*s, in.peer, in.round());
        return drop(st.is_ok() ? "ps-push with NaN or Inf: this worker's update is left out of "
                                 "its clock"
                               : "ps-push: " + st.message() + " (left out of its clock)");
      }
      landed(*s, in.peer, m.numel);
      return;
    }
    case proto::Kind::kPsPull: {
      const auto& m = in.as<proto::PsPull>();
      Served* s = served(m.shard);
      if (!s)
        return drop(fmt::format("ps-pull for shard {}, which this node does not serve", m.shard));
      if (m.layout != layout_)
        return drop(
            fmt::format("ps-pull of another model layout ({:#x}, ours {:#x})", m.layout, layout_));
      if (s->link > 0 && !s->took_over) take_over(*s, in.peer);
      on_pull(in.peer, m.shard, in.round());
      return;
    }
    case proto::Kind::kPsParams: {
      const auto& m = in.as<proto::PsParams>();
      if (!pulling_ || in.round() != pulling_->clock || m.shard >= options_.servers ||
          in.peer != server_of(m.shard))
        return;  // late: a pull that failed, was answered already, or went to a replica since
      const Shard sh = shard_of(numel_, options_.servers, m.shard);
      if (m.layout != layout_ || m.offset != pulling_->got[m.shard] ||
          m.numel > sh.numel - m.offset)
        return drop(fmt::format("ps-params slice [{}, +{}) of shard {} out of order", m.offset,
                                m.numel, m.shard));
      // A clock no run reaches (2^48: 9,000 years at a million clocks a second) is not
      // gone on from (the parameters are taken: they are the server's anyway).
      if (m.clock > (uint64_t{1} << 48))
        control_.note_dropped(in.peer, fmt::format("ps-params of shard {} at clock {}: the "
                                                   "clock is not gone on from",
                                                   m.shard, m.clock));
      else
        pulling_->at[m.shard] = std::max(pulling_->at[m.shard], m.clock);
      const auto bytes =
          std::span(static_cast<const std::byte*>(in.payload.data()), in.payload.size());
      auto dst = std::span(pulled_).subspan(sh.offset + m.offset, m.numel);
      if (m.codec == proto::CodecId::kNone) {
        std::memcpy(dst.data(), bytes.data(), bytes.size());
      } else if (dense(options_.compression.codec) && m.codec == options_.compression.codec->id()) {
        if (Status st = options_.compression.codec->decode(bytes, {0, nullptr}, dst); !st)
          return drop("ps-params: " + st.message());
      } else {
        return drop(fmt::format("ps-params in codec {}", proto::codec_name(m.codec)));
      }
      pulling_->got[m.shard] += m.numel;
      return;
    }
    case proto::Kind::kPsReplica:
      return on_replica(in);
    case proto::Kind::kBye:
      if (pulling_)
        for (uint32_t s = 0; s < options_.servers; ++s)
          if (server_of(s) == in.peer &&
              pulling_->got[s] < shard_of(numel_, options_.servers, s).numel)
            pulling_->gone[s] =
                fmt::format("parameter server node {} (shard {}) said bye", in.peer, s);
      return;
    default:
      return;
  }
}

std::span<float> ParameterServer::slice_of_push(Served& s, uint32_t worker, uint64_t clock,
                                                uint64_t offset, uint64_t numel) {
  if (!s.ready) {
    control_.note_dropped(worker,
                          fmt::format("ps-push for shard {} before it has parameters", s.index));
    return {};
  }
  Push& p = s.pushes[worker];
  if (offset == 0) {
    const auto last = s.clock.find(worker);
    if (last != s.clock.end() && clock <= last->second) {
      control_.note_dropped(
          worker, fmt::format("ps-push of clock {}, not after its last ({})", clock, last->second));
      return {};
    }
    // The buffer is the worker's from push to push: every slice overwrites its part.
    p.clock = clock;
    p.got = 0;
    p.complete = p.rejected = false;
    p.update.resize(s.shard.numel);
  } else if (p.complete || p.clock != clock || offset != p.got) {
    control_.note_dropped(
        worker, fmt::format("ps-push slice at {} of clock {} out of order", offset, clock));
    return {};
  }
  return std::span(p.update).subspan(offset, numel);
}

void ParameterServer::landed(Served& s, uint32_t worker, uint64_t numel) {
  Push& p = s.pushes[worker];
  p.got += numel;
  if (p.got < s.shard.numel) return;
  p.complete = true;
  s.clock[worker] = p.clock;
  if (options_.mode != Mode::kBsp) {
    // Downpour: every push moves the shard at once, by 1/n of the worker's change.
    const auto n = static_cast<uint32_t>(nodes().size());
    s.optimizer->step(s.params, p.update, 1.0f / static_cast<float>(n));
    replicate(s, false, worker, n, p.clock, p.update);
  }
  serve(s);
}

void ParameterServer::reject(Served& s, uint32_t worker, uint64_t clock) {
  Push& p = s.pushes[worker];
  p.clock = clock;
  p.complete = p.rejected = true;
  s.clock[worker] = clock;
  serve(s);
}

void ParameterServer::on_pull(uint32_t worker, uint32_t shard, uint64_t clock) {
  Served& s = *served(shard);
  s.pulls[worker] = clock;
  serve(s);
}

bool ParameterServer::may_answer(const Served& s, uint64_t clock) const {
  if (!s.ready) return false;
  switch (options_.mode) {
    case Mode::kBsp:
      return s.version >= clock;
    case Mode::kAsync:
      return true;
    case Mode::kSsp:
      for (uint32_t w : nodes()) {
        if (!counted(s, w)) continue;
        const auto it = s.clock.find(w);
        const uint64_t c = it == s.clock.end() ? s.version : it->second;
        if (clock > c && clock - c > options_.staleness) return false;
      }
      return true;
  }
  return false;
}

void ParameterServer::serve(Served& s) {
  if (!s.ready) return;
  tend_chain(s);
  if (options_.mode == Mode::kBsp) {
    // The next clock is applied once every live worker's push of it is complete.
    uint64_t next = s.version + 1;
    if (s.took_over) {
      // A replica that took over may have missed the last clocks its server applied
      // (they die with it): it goes on from the clock the workers push.
      uint64_t ahead = UINT64_MAX;
      for (const auto& [w, p] : s.pushes)
        if (p.complete && p.clock >= next) ahead = std::min(ahead, p.clock);
      bool any_next = false;
      for (const auto& [w, p] : s.pushes) any_next |= p.complete && p.clock == next;
      if (!any_next && ahead != UINT64_MAX && ahead > next) {
        spdlog::warn(
            "ps: shard {}: clocks {}..{} died with its server; this replica goes on "
            "from clock {}",
            s.index, next, ahead - 1, ahead);
        next = ahead;
      }
    }
    std::vector<const Push*> in;
    bool all = true;
    size_t workers = 0;  // those the clock counts: a joined one after its first push
    for (uint32_t w : nodes()) {
      const auto it = s.pushes.find(w);
      const bool has = it != s.pushes.end() && it->second.complete && it->second.clock == next;
      workers += pending(s, w) ? 0 : 1;
      if (has && !it->second.rejected)
        in.push_back(&it->second);
      else if (!has && counted(s, w))
        all = false;
    }
    if (all && !in.empty()) {
      // In worker order, so that the sum does not depend on arrival order.
      std::vector<float> mean(s.shard.numel, 0.0f);
      for (const Push* p : in)
        for (size_t i = 0; i < mean.size(); ++i) mean[i] += p->update[i];
      s.optimizer->step(s.params, mean, 1.0f / static_cast<float>(in.size()));
      s.version = next;
      replicate(s, false, 0, static_cast<uint32_t>(in.size()), next, mean);
      if (in.size() < workers)
        spdlog::warn(
            "ps: shard {} clock {}: averaged {} of {} workers (the others were silent past "
            "their dead-after bound, --dead-after or what --dead-after-factor learnt, and at "
            "least two heartbeats)",
            s.index, next, in.size(), workers);
    }
  }
  for (auto it = s.pulls.begin(); it != s.pulls.end();) {
    if (!may_answer(s, it->second)) {
      ++it;
      continue;
    }
    answer(s, it->first, it->second);
    it = s.pulls.erase(it);
  }
}

void ParameterServer::answer(Served& s, uint32_t worker, uint64_t clock) {
  // The lead this answer allows: the worker's clock over the slowest live worker's.
  // And where the shard is: bsp's last applied clock, else the slowest counted
  // worker's (a worker names its own clocks: the highest would be a liar's). A listed
  // worker that has not pushed yet is at the shard's clock, as may_answer counts it:
  // one that starts late then runs every clock rather than jump to where the fast ones
  // are (a joiner counts from its first push: it goes on from the servers' clock).
  uint64_t slowest = clock, slowest_counted = UINT64_MAX;
  for (uint32_t w : nodes())
    if (counted(s, w)) {
      const auto it = s.clock.find(w);
      const uint64_t c = it == s.clock.end() ? s.version : it->second;
      slowest = std::min(slowest, c);
      slowest_counted = std::min(slowest_counted, c);
    }
  if (clock - slowest > max_lead_.load(std::memory_order_relaxed))
    max_lead_.store(clock - slowest, std::memory_order_relaxed);
  uint64_t at = s.version;
  if (options_.mode != Mode::kBsp && slowest_counted != UINT64_MAX)
    at = std::max(at, slowest_counted);
  const compression::Codec* codec =
      dense(options_.compression.codec) ? options_.compression.codec : nullptr;
  if (worker == self()) {
    if (!pulling_ || pulling_->clock != clock) return;  // a pull that already failed
    auto dst = std::span(pulled_).subspan(s.shard.offset, s.shard.numel);
    std::copy(s.params.begin(), s.params.end(), dst.begin());
    // What the other workers decode, so that every replica holds the same values.
    std::vector<std::byte> payload;
    for (uint64_t off = 0; codec && off < s.shard.numel; off += options_.chunk_elems) {
      auto x = dst.subspan(off, std::min(options_.chunk_elems, s.shard.numel - off));
      if (codec->encode(x, {0, options_.compression.pool}, payload).is_ok())
        (void)codec->decode(payload, {0, nullptr}, x);
    }
    pulling_->got[s.index] = s.shard.numel;
    pulling_->at[s.index] = at;
    return;
  }
  for (uint64_t off = 0; off < s.shard.numel; off += options_.chunk_elems) {
    const auto x = std::span<const float>(s.params).subspan(
        off, std::min(options_.chunk_elems, s.shard.numel - off));
    auto payload = std::make_shared<std::vector<std::byte>>();
    if (codec) {
      if (Status st = codec->encode(x, {0, options_.compression.pool}, *payload); !st) {
        spdlog::warn("ps: shard {}: {}", s.index, st.message());
        return;
      }
    } else {
      const auto raw = std::as_bytes(x);
      payload->assign(raw.begin(), raw.end());
    }
    const proto::PsParams m{s.index, off, x.size(), codec ? codec->id() : proto::CodecId::kNone,
                            layout_, at};
    if (Status st = control_.send_shared(worker, clock, m, payload); !st) {
      spdlog::warn("ps: shard {} to worker {}: {}", s.index, worker, st.message());
      return;
    }
  }
}

// --- worker side ---------------------------------------------------------------------

Status ParameterServer::push(std::span<const float> model, uint64_t clock) {
  update_.resize(model.size());
  for (size_t i = 0; i < model.size(); ++i) update_[i] = model[i] - baseline_[i];
  const compression::Codec* codec =
      compressing(options_.compression.codec) ? options_.compression.codec : nullptr;
  if (codec && options_.error_feedback && !residual_)
    residual_ = std::make_unique<compression::ErrorFeedback>(*codec, model.size());
  std::vector<float> sent;
  for (uint32_t s = 0; s < options_.servers; ++s) {
    const Shard sh = shard_of(model.size(), options_.servers, s);
    const uint32_t server = server_of(s);
    sent_[s].clock = clock;
    sent_[s].slices.clear();
    for (uint64_t off = 0; off < sh.numel; off += options_.chunk_elems) {
      const uint64_t n = std::min(options_.chunk_elems, sh.numel - off);
      auto x = std::span<float>(update_).subspan(sh.offset + off, n);
      auto payload = std::make_shared<std::vector<std::byte>>();
      if (codec) {
        const compression::CodecContext ctx{chunk_seed(clock, self(), sh.offset + off),
                                            options_.compression.pool};
        sent.resize(n);
        if (residual_)
          GOSSIP_RETURN_IF_ERROR(residual_->encode(x, sh.offset + off, ctx, *payload, sent));
        else
          GOSSIP_RETURN_IF_ERROR(codec->encode(x, ctx, *payload));
        if (server == self()) {  // what the server would decode
          if (!residual_) GOSSIP_RETURN_IF_ERROR(codec->decode(*payload, ctx, sent));
          std::copy(sent.begin(), sent.end(), x.begin());
        }
      } else {
        const auto raw = std::as_bytes(std::span<const float>(x));
        payload->assign(raw.begin(), raw.end());
      }
      const proto::PsPush m{s, off, n, codec ? codec->id() : proto::CodecId::kNone, layout_};
      if (server == self()) {
        Served& own = *served(s);
        const std::span<float> dst = slice_of_push(own, self(), clock, off, n);
        if (dst.empty()) continue;
        std::copy(x.begin(), x.end(), dst.begin());
        landed(own, self(), n);
        continue;
      }
      if (options_.replicas > 0) sent_[s].slices.emplace_back(m, payload);
      if (Status st = control_.send_shared(server, clock, m, payload); !st) {
        // With replicas, the pull that follows finds the server gone and moves on.
        if (options_.replicas == 0) return st;
        spdlog::warn("ps: push to node {} (shard {}): {}", server, s, st.message());
      }
    }
  }
  return Status::ok();
}

Status ParameterServer::pull(std::span<float> model, uint64_t clock, const RoundOptions& options) {
  pulled_.resize(model.size());
  pulling_ = Pulling{clock, std::vector<uint64_t>(options_.servers, 0),
                     std::vector<uint64_t>(options_.servers, 0),
                     std::vector<std::optional<std::string>>(options_.servers)};
  for (uint32_t s = 0; s < options_.servers; ++s) {
    if (server_of(s) == self())
      on_pull(self(), s, clock);
    else if (Status st = control_.send(server_of(s), clock, proto::PsPull{s, layout_});
             !st && options_.replicas == 0)
      return st;
  }
  const auto numel_of = [&](uint32_t s) {
    return shard_of(model.size(), options_.servers, s).numel;
  };
  const auto done = [&] {
    for (uint32_t s = 0; s < options_.servers; ++s)
      if (pulling_->got[s] < numel_of(s)) return false;
    return true;
  };
  while (!done()) {
    if (options.cancel && options.cancel->load(std::memory_order_relaxed))
      return Status::closed("parameter server: cancelled");
    for (uint32_t s = 0; s < options_.servers; ++s) {
      const uint32_t server = server_of(s);
      if (server == self() || pulling_->got[s] == numel_of(s)) continue;
      std::string why;
      if (pulling_->gone[s]) {
        why = *pulling_->gone[s];
      } else {
        const uint64_t silent = control_.traffic().silent_ms(server);
        if (options_.dead_after.dead(control_.traffic(), server, silent))
          why = fmt::format(
              "parameter server node {} (shard {}) has been silent for {} ms (over "
              "--dead-after)",
              server, s, silent);
      }
      if (why.empty() || fail_over(s, clock, why)) continue;
      if (pulling_->gone[s]) return Status::closed("parameter server: " + why);
      return Status::timeout(fmt::format(
          "{}: is it down? {}", why,
          options_.replicas == 0
              ? "Its shard comes back when it restarts from its checkpoint (or run --ps-replicas)"
              : "Every replica of its shard is gone too"));
    }
    if (router_.clock().now() >= options.deadline) {
      std::string missing;
      for (uint32_t s = 0; s < options_.servers; ++s)
        if (pulling_->got[s] < numel_of(s))
          missing +=
              fmt::format("{}shard {} (node {})", missing.empty() ? "" : ", ", s, server_of(s));
      return Status::timeout(
          fmt::format("parameter server: clock {}: no parameters of {} in time", clock, missing));
    }
    heartbeats();
    router_.poll(std::chrono::milliseconds(20));
    // This node's shards go on serving while it waits (a worker that fell silent no
    // longer holds a bsp clock back, and that changes with time alone).
    for (Served& s : served_) serve(s);
  }
  std::copy(pulled_.begin(), pulled_.end(), model.begin());
  at_last_pull_ = pulling_->at;
  pulling_.reset();
  return Status::ok();
}

Status ParameterServer::synchronize(std::span<float> model, uint64_t round,
                                    const RoundOptions& options) {
  if (numel_ != model.size()) {
    if (numel_ != 0)
      return Status::mismatch(fmt::format("parameter server: the model has {} elements, it had {}",
                                          model.size(), numel_));
    numel_ = model.size();
  }
  if (!started_) {
    // The first round: each server takes its shard from its own node's model; every
    // worker starts from the servers' parameters (no push: there is no change yet).
    for (Served& s : served_) {
      s.shard = shard_of(numel_, options_.servers, s.index);
      if (s.ready && s.params.size() != s.shard.numel)
        return Status::mismatch(fmt::format(
            "parameter server: the checkpoint's shard {} has {} elements, this model's {}", s.index,
            s.params.size(), s.shard.numel));
      if (!s.ready) {
        s.params.assign(model.begin() + static_cast<ptrdiff_t>(s.shard.offset),
                        model.begin() + static_cast<ptrdiff_t>(s.shard.offset + s.shard.numel));
        s.optimizer = std::make_unique<ServerOptimizer>(options_.optimizer, s.shard.numel);
        s.version = round;
        s.ready = true;
      }
      serve(s);
    }
    GOSSIP_RETURN_IF_ERROR(pull(model, round, options));
    baseline_.assign(model.begin(), model.end());
    started_ = true;
    spdlog::info("ps: took the servers' model at clock {}", round);
    catch_up(round);
    return Status::ok();
  }
  GOSSIP_RETURN_IF_ERROR(push(model, round));
  const bool fetch = options_.mode == Mode::kBsp || ++pushes_ >= options_.fetch;
  if (fetch) {
    pushes_ = 0;
    GOSSIP_RETURN_IF_ERROR(pull(model, round, options));
    catch_up(round);
  }
  baseline_.assign(model.begin(), model.end());
  return Status::ok();
}

void ParameterServer::catch_up(uint64_t clock) {
  // Under async nobody waits for anybody: a worker goes on at its own clock and runs
  // its own step budget (one that starts late, or joins, skipped it before:
  // Training.TheTextbookArchitecturesTrainWithinAPointOfTheRing lost 2 points).
  if (options_.mode == Mode::kAsync) return;
  // The lowest of the shards' clocks: a worker ahead of a shard would push clocks it
  // is not at (a bsp shard waits for the one it is at), while a shard ahead waits for
  // this worker's next push, one clock at a time. A server's word moves only the
  // rounds of its own workers, and not below their own.
  const uint64_t at = *std::min_element(at_last_pull_.begin(), at_last_pull_.end());
  if (at <= clock || at + 1 <= jump_to_) return;
  jump_to_ = at + 1;
  spdlog::info("ps: the servers are at clock {}: this worker goes on from clock {}", at, jump_to_);
}

void ParameterServer::progress(uint64_t, size_t numel, std::chrono::milliseconds wait) {
  if (numel_ == 0 && numel > 0) numel_ = numel;
  heartbeats();
  router_.poll(wait);
  // A worker that fell silent no longer holds a bsp clock back.
  for (Served& s : served_) serve(s);
}

void ParameterServer::took_model(std::span<const float> model, std::span<const float>) {
  baseline_.assign(model.begin(), model.end());
  residual_.reset();
}

std::vector<Strategy::Gauge> ParameterServer::gauges() const {
  if (served_.empty()) return {};
  return {{"gossipd_ps_max_clock_lead",
           "The largest lead, in clocks, of a worker whose pull this node's shards answered over "
           "the slowest live worker (ssp:S keeps it at most S).",
           static_cast<double>(max_lead())}};
}

StrategyState ParameterServer::save_state() const {
  StrategyState st;
  for (const Served& s : served_) {
    if (!s.ready) continue;
    const std::string prefix = fmt::format("ps.shard{}", s.index);
    st.tensors[prefix + ".params"] = s.params;
    st.scalars[prefix + ".version"] = static_cast<double>(s.version);
    s.optimizer->save(st, prefix);
  }
  if (residual_) {
    const auto r = residual_->residual();
    st.tensors["ps.residual"] = std::vector<float>(r.begin(), r.end());
  }
  return st;
}

Status ParameterServer::load_state(const StrategyState& state) {
  for (Served& s : served_) {
    const std::string prefix = fmt::format("ps.shard{}", s.index);
    if (!state.tensors.count(prefix + ".params")) continue;
    auto params = state.tensor(prefix + ".params", 0);
    if (!params) return params.status();
    auto version = state.scalar(prefix + ".version");
    if (!version) return version.status();
    s.params = **params;
    s.optimizer = std::make_unique<ServerOptimizer>(options_.optimizer, s.params.size());
    GOSSIP_RETURN_IF_ERROR(s.optimizer->load(state, prefix));
    s.version = static_cast<uint64_t>(*version);
    s.ready = true;
    spdlog::info("ps: shard {} restored from the checkpoint at clock {}", s.index, s.version);
  }
  return Status::ok();
}

}  // namespace gossip::sgd

namespace gossip::sgd {

std::optional<OptionProblem> check_parameter_server_options(const StrategyParams& params,
                                                            uint64_t nodes);  // options.cc

StrategyDescriptor parameter_server_strategy() {
  StrategyDescriptor d;
  d.name = "ps";
  d.summary =
      "parameter servers: the K lowest-id nodes hold shards of the model (and, with replicas, "
      "the next R nodes copies of them); workers push their change every `period` steps and pull "
      "the shards (bsp, async or ssp:S)";
  d.fabric = Fabric::kServers;
  d.options = {"servers", "ps_mode", "ps_fetch", "ps_optimizer"};
  d.check = check_parameter_server_options;
  d.make = [](const StrategyResources& r,
              std::string* detail) -> Result<std::unique_ptr<Strategy>> {
    ParameterServerOptions o = r.params.ps;
    o.compression = {r.codec, nullptr, r.pool};
    o.error_feedback = r.error_feedback;
    o.chunk_elems = r.gossip.chunk_elems;
    o.heartbeat = r.heartbeat;
    o.dead_after = r.dead_after;
    o.dead_after.heartbeat = r.heartbeat;  // a silence under two heartbeats says nothing
    const uint32_t nodes = static_cast<uint32_t>(r.router->peers().size() + 1);
    if (o.servers == 0 || o.servers > nodes)
      return Status::invalid(
          fmt::format("--servers {}: between 1 and the {} nodes", o.servers, nodes));
    if (o.replicas >= nodes)
      return Status::invalid(
          fmt::format("--ps-replicas {}: fewer than the {} nodes", o.replicas, nodes));
    const char* mode = o.mode == ParameterServerOptions::Mode::kBsp     ? "bsp"
                       : o.mode == ParameterServerOptions::Mode::kAsync ? "async"
                                                                        : "ssp";
    *detail = fmt::format(
        " ({} server{}, {}{}{}{})", o.servers, o.servers == 1 ? "" : "s", mode,
        o.mode == ParameterServerOptions::Mode::kSsp ? fmt::format(":{}", o.staleness)
                                                     : std::string(),
        o.fetch > 1 ? fmt::format(", pull every {} pushes", o.fetch) : std::string(),
        o.replicas > 0
            ? fmt::format(", {} replica{} of each shard", o.replicas, o.replicas == 1 ? "" : "s")
            : std::string());
    return std::unique_ptr<Strategy>(std::make_unique<ParameterServer>(*r.router, o));
  };
  return d;
}

}  // namespace gossip::sgd
