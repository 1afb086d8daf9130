#include "peers/rdma/rdma_ring_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "peers/rdma/rdma_wire.h"

namespace gossip::peers {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using rdma::Accept;
using rdma::FragmentHeader;
using rdma::Hello;

// Receive slots per link, and the most slots a sender drives. 16 slots keep several
// pipeline chunks in flight while bounding the queues (and the CQs sized from them).
constexpr uint32_t kSlots = 16;
constexpr uint32_t kQueueDepth = kSlots + 4;
constexpr uint32_t kMinSlotBytes = 64 << 10;
constexpr uint32_t kMaxSlotBytes = 16 << 20;
constexpr auto kRefusedRetry = 500ms;  // the peer is there but refuses us: do not flood its log
constexpr int kResolveMs = 2000;
constexpr int kRejectReasonBytes = 140;  // fits the private data of an IB CM reject (148)

template <auto F>
struct Release {
  template <class T>
  void operator()(T* p) const {
    F(p);
  }
};
using EventChannel = std::unique_ptr<rdma_event_channel, Release<rdma_destroy_event_channel>>;
using CmId = std::unique_ptr<rdma_cm_id, Release<rdma_destroy_id>>;
using Pd = std::unique_ptr<ibv_pd, Release<ibv_dealloc_pd>>;
using CompChannel = std::unique_ptr<ibv_comp_channel, Release<ibv_destroy_comp_channel>>;
using Cq = std::unique_ptr<ibv_cq, Release<ibv_destroy_cq>>;
using Mr = std::unique_ptr<ibv_mr, Release<ibv_dereg_mr>>;

std::string os_error() { return std::strerror(errno); }

Status set_nonblocking(int fd, const std::string& what) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    return Status::io_error(fmt::format("ring: {}: fcntl: {}", what, os_error()));
  return Status::ok();
}

EventChannel make_event_channel(Status& st) {
  EventChannel ch(rdma_create_event_channel());
  if (!ch)
    st = Status::io_error(fmt::format("ring: rdma_create_event_channel: {}", os_error()));
  else
    st = set_nonblocking(ch->fd, "the CM event channel");
  return ch;
}

Result<sockaddr_storage> resolve(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0 || !found) return Status::invalid(rc != 0 ? gai_strerror(rc) : "no address");
  sockaddr_storage out{};
  std::memcpy(&out, found->ai_addr, std::min<size_t>(found->ai_addrlen, sizeof out));
  ::freeaddrinfo(found);
  return out;
}

// A CM event, copied out and acknowledged at once, so that its id may be destroyed.
struct CmEvent {
  rdma_cm_event_type type;
  rdma_cm_id* id;
  int status;
  std::vector<std::byte> private_data;
};

// The next event of a non-blocking channel, or nothing.
std::optional<CmEvent> next_event(rdma_event_channel* channel) {
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(channel, &ev) != 0) return std::nullopt;
  CmEvent out{ev->event, ev->id, ev->status, {}};
  if (const auto* p = static_cast<const std::byte*>(ev->param.conn.private_data))
    out.private_data.assign(p, p + ev->param.conn.private_data_len);
  rdma_ack_cm_event(ev);
  return out;
}

rdma_conn_param conn_param(const void* data, size_t bytes) {
  rdma_conn_param p{};
  p.private_data = data;
  p.private_data_len = static_cast<uint8_t>(bytes);
  p.responder_resources = 1;
  p.initiator_depth = 1;
  p.flow_control = 1;
  p.retry_count = 7;
  p.rnr_retry_count =
      7;  // receives are always posted ahead of credits, so RNR is only ever transient
  return p;
}

// Why a connect request was rejected: the reason the peer put in the reject, if any.
std::string rejection(const CmEvent& ev) {
  std::string said(reinterpret_cast<const char*>(ev.private_data.data()), ev.private_data.size());
  said.resize(std::strlen(said.c_str()));  // the CM pads with zeros
  if (!said.empty()) return "refused: " + said;
  if (ev.status == 8 || ev.status == -ECONNREFUSED)
    return "connection refused (nothing listens there)";
  return fmt::format("rejected (reason {})", ev.status);
}

// One RC connection: a QP on its own CQ and completion channel, the memory it
// registered, and its CM id on its own event channel (where a disconnect shows).
// Members go in reverse order: the QP (in ~Link), id, MR, CQ, PD, memory, events.
struct Link {
  EventChannel events;
  std::vector<std::byte> memory;
  Pd pd;
  CompChannel completions;
  Cq cq;
  Mr mr;
  CmId id;
  bool has_qp = false;
  RingNonce nonce{};  // a left link's: what this node answered its hello with

  ~Link() {
    if (has_qp) rdma_destroy_qp(id.get());
  }

  // PD, CQ and QP on the id's device, with `recvs` zero-length receives posted (a
  // write with immediate, or a credit, consumes one).
  Status open(uint32_t recvs) {
    ibv_context* ctx = id->verbs;
    pd.reset(ibv_alloc_pd(ctx));
    if (!pd) return Status::io_error(fmt::format("ibv_alloc_pd: {}", os_error()));
    completions.reset(ibv_create_comp_channel(ctx));
    if (!completions)
      return Status::io_error(fmt::format("ibv_create_comp_channel: {}", os_error()));
    GOSSIP_RETURN_IF_ERROR(set_nonblocking(completions->fd, "the completion channel"));
    // Room for every receive and every send the queues can hold: the CQ never overflows.
    cq.reset(ibv_create_cq(ctx, 2 * kQueueDepth, nullptr, completions.get(), 0));
    if (!cq) return Status::io_error(fmt::format("ibv_create_cq: {}", os_error()));
    ibv_qp_init_attr qa{};
    qa.send_cq = cq.get();
    qa.recv_cq = cq.get();
    qa.qp_type = IBV_QPT_RC;
    qa.sq_sig_all = 1;
    qa.cap.max_send_wr = kQueueDepth;
    qa.cap.max_recv_wr = kQueueDepth;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    if (rdma_create_qp(id.get(), pd.get(), &qa) != 0)
      return Status::io_error(fmt::format("rdma_create_qp: {}", os_error()));
    has_qp = true;
    for (uint32_t i = 0; i < recvs; ++i)
      if (!post_recv()) return Status::io_error(fmt::format("ibv_post_recv: {}", os_error()));
    return Status::ok();
  }

  Status register_memory(size_t bytes, int access) {
    memory.resize(bytes);
    mr.reset(ibv_reg_mr(pd.get(), memory.data(), bytes, access));
    if (!mr) return Status::io_error(fmt::format("ibv_reg_mr of {} bytes: {}", bytes, os_error()));
    return Status::ok();
  }

  bool post_recv() {
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(id->qp, &wr, &bad) == 0;
  }
};

// Acknowledges what a completion channel has signalled; the CQs are polled anyway.
void drain(ibv_comp_channel* channel) {
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  while (ibv_get_cq_event(channel, &cq, &context) == 0) ibv_ack_cq_events(cq, 1);
}

class RdmaRingChannel final : public RingChannel {
 public:
  RdmaRingChannel(uint32_t left, uint32_t right, std::unique_ptr<Link> left_link,
                  std::unique_ptr<Link> right_link, const Accept& remote, uint32_t slot_bytes,
                  TrafficCounters* traffic)
      : RingChannel(left, right),
        left_link_(std::move(left_link)),
        right_link_(std::move(right_link)),
        remote_(remote),
        slot_bytes_(slot_bytes),
        traffic_(traffic),
        send_window_(remote.slots),
        recv_window_(kSlots),
        arrived_bytes_(kSlots, 0) {}

  ~RdmaRingChannel() override {
    rdma_disconnect(left_link_->id.get());
    rdma_disconnect(right_link_->id.get());
  }

  Status post_send(uint64_t tag, std::span<const std::byte> data) override {
    std::lock_guard lock(mu_);
    if (!failure_.is_ok()) return failure_;
    sends_.push_back({tag, data});
    progress();
    return failure_;
  }

  Status post_recv(uint64_t tag, std::span<std::byte> buffer) override {
    std::lock_guard lock(mu_);
    if (!failure_.is_ok()) return failure_;
    recvs_.push_back({rdma::Assembly{.tag = tag, .capacity = buffer.size()}, buffer});
    progress();
    return failure_;
  }

  Result<size_t> wait_recv(const WaitOptions& wait) override {
    std::lock_guard lock(mu_);
    if (!failure_.is_ok()) return failure_;
    if (recvs_.empty()) return Status::invalid("ring: wait_recv with no receive posted");
    // A closed left link still yields what arrived before it closed.
    const auto starved = [&] { return !left_closed_.is_ok() && !recv_window_.has_arrived(); };
    GOSSIP_RETURN_IF_ERROR(wait_for(
        wait, [&] { return recvs_.front().done || starved(); },
        [&] { return fmt::format("ring: no message from peer {} (left) in time", left()); }));
    if (!recvs_.front().done) {
      fail(left_closed_);
      return failure_;
    }
    const size_t bytes = recvs_.front().assembly.bytes;
    recvs_.pop_front();
    --next_recv_;
    return bytes;
  }

  Status wait_sends(const WaitOptions& wait) override {
    std::lock_guard lock(mu_);
    if (!failure_.is_ok()) return failure_;
    return wait_for(
        wait, [&] { return sends_.empty() && send_window_.idle(); },
        [&] {
          return fmt::format("ring: peer {} (right) did not take our messages in time", right());
        });
  }

 private:
  struct Send {
    uint64_t tag = 0;
    std::span<const std::byte> data;
    size_t offset = 0;  // copied out so far
    uint64_t fragments = 0;
  };
  struct Recv {
    rdma::Assembly assembly;
    std::span<std::byte> buffer;
    bool done = false;
    uint64_t fragments = 0;
  };

  // Poisons the channel (the first failure wins) and disconnects both links, so the
  // neighbors learn of it at once, as a closed socket tells them over TCP.
  void fail(const Status& why) {
    if (!failure_.is_ok()) return;
    failure_ = why;
    rdma_disconnect(left_link_->id.get());
    rdma_disconnect(right_link_->id.get());
  }

  // Runs progress until done(), a failure, the deadline or the cancel flag.
  template <class Done, class What>
  Status wait_for(const WaitOptions& wait, Done done, What what) {
    while (true) {
      const bool moved = progress();
      if (!failure_.is_ok()) return failure_;
      if (done()) return Status::ok();
      if (wait.cancelled()) {
        fail(Status::closed(what() + ": cancelled"));
        return failure_;
      }
      const auto now = Clock::now();
      if (now >= wait.deadline) {
        fail(Status::timeout(what()));
        return failure_;
      }
      if (!moved) block(std::min(wait.deadline, now + kCancelPoll));
    }
  }

  // Sleeps until a completion or CM event may have come, or `until`.
  void block(Clock::time_point until) {
    ibv_req_notify_cq(left_link_->cq.get(), 0);
    ibv_req_notify_cq(right_link_->cq.get(), 0);
    if (progress()) return;  // it came between the last poll and arming the CQs
    pollfd fds[] = {{left_link_->completions->fd, POLLIN, 0},
                    {right_link_->completions->fd, POLLIN, 0},
                    {left_link_->events->fd, POLLIN, 0},
                    {right_link_->events->fd, POLLIN, 0}};
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
    ::poll(fds, std::size(fds), static_cast<int>(std::max<int64_t>(ms, 0)));
    drain(left_link_->completions.get());
    drain(right_link_->completions.get());
  }

  // Handles whatever happened on both links; true when anything did.
  bool progress() {
    if (!failure_.is_ok()) return false;
    // CM events first: data that arrived before a disconnect is on the CQs by then.
    bool moved = take_cm_events();
    moved |= poll_left();
    moved |= poll_right();
    moved |= consume();
    return_credit();
    moved |= push_sends();
    if (failure_.is_ok() && !right_closed_.is_ok() && !(sends_.empty() && send_window_.idle()))
      fail(right_closed_);
    return moved;
  }

  Status closed_by(bool left_side) const {
    return Status::io_error(fmt::format("ring: peer {} ({}) closed the connection",
                                        left_side ? left() : right(),
                                        left_side ? "left" : "right"));
  }

  bool take_cm_events() {
    bool moved = false;
    while (auto ev = next_event(left_link_->events.get())) {
      moved = true;
      if (ev->type == RDMA_CM_EVENT_DISCONNECTED && left_closed_.is_ok())
        left_closed_ = closed_by(true);
    }
    while (auto ev = next_event(right_link_->events.get())) {
      moved = true;
      if (ev->type == RDMA_CM_EVENT_DISCONNECTED && right_closed_.is_ok())
        right_closed_ = closed_by(false);
    }
    return moved;
  }

  // The left link: data arriving, and our credits leaving.
  bool poll_left() {
    ibv_wc wcs[16];
    bool moved = false;
    int n = 0;
    while (failure_.is_ok() && (n = ibv_poll_cq(left_link_->cq.get(), std::size(wcs), wcs)) > 0) {
      moved = true;
      for (const ibv_wc& wc : std::span(wcs, n)) {
        if (!failure_.is_ok()) break;
        if (wc.status == IBV_WC_WR_FLUSH_ERR) {
          if (left_closed_.is_ok()) left_closed_ = closed_by(true);
        } else if (wc.status != IBV_WC_SUCCESS) {
          fail(Status::io_error(fmt::format("ring: link to peer {} (left) failed: {}", left(),
                                            ibv_wc_status_str(wc.status))));
        } else if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
          const auto slot = recv_window_.on_arrival(ntohl(wc.imm_data));
          if (!slot)
            fail(Status::protocol(
                fmt::format("ring: peer {} (left) wrote out of turn (fragment {:#x})", left(),
                            ntohl(wc.imm_data))));
          else
            arrived_bytes_[*slot] = wc.byte_len;
        }
      }
    }
    if (n < 0)
      fail(
          Status::io_error(fmt::format("ring: polling the link to peer {} (left) failed", left())));
    return moved;
  }

  // The right link: our writes completing, and credits arriving.
  bool poll_right() {
    ibv_wc wcs[16];
    bool moved = false;
    int n = 0;
    while (failure_.is_ok() && (n = ibv_poll_cq(right_link_->cq.get(), std::size(wcs), wcs)) > 0) {
      moved = true;
      for (const ibv_wc& wc : std::span(wcs, n)) {
        if (!failure_.is_ok()) break;
        if (wc.status == IBV_WC_WR_FLUSH_ERR) {
          if (right_closed_.is_ok()) right_closed_ = closed_by(false);
        } else if (wc.status != IBV_WC_SUCCESS) {
          fail(Status::io_error(fmt::format("ring: sending to peer {} (right) failed: {}", right(),
                                            ibv_wc_status_str(wc.status))));
        } else if (wc.opcode == IBV_WC_RDMA_WRITE) {
          if (!send_window_.on_written())
            fail(Status::io_error(
                fmt::format("ring: a write to peer {} (right) completed twice", right())));
        } else if (wc.opcode == IBV_WC_RECV) {
          if (!(wc.wc_flags & IBV_WC_WITH_IMM) || !send_window_.on_credit(ntohl(wc.imm_data)))
            fail(Status::protocol(fmt::format(
                "ring: peer {} (right) returned credits for fragments never sent", right())));
          else if (!right_link_->post_recv())
            fail(Status::io_error(fmt::format("ring: link to peer {} (right): ibv_post_recv: {}",
                                              right(), os_error())));
        }
      }
    }
    if (n < 0)
      fail(Status::io_error(
          fmt::format("ring: polling the link to peer {} (right) failed", right())));
    return moved;
  }

  // Copies arrived fragments, in order, into the posted receives.
  bool consume() {
    bool moved = false;
    while (failure_.is_ok() && recv_window_.has_arrived() && next_recv_ < recvs_.size()) {
      Recv& r = recvs_[next_recv_];
      const uint32_t slot = recv_window_.next_slot();
      const std::byte* at = left_link_->memory.data() + size_t{slot} * slot_bytes_;
      FragmentHeader h;
      std::memcpy(&h, at, sizeof h);
      const auto payload =
          rdma::check_fragment(h, arrived_bytes_[slot], slot_bytes_, r.assembly, left());
      if (!payload.is_ok()) {
        fail(payload.status());
        break;
      }
      if (*payload > 0) std::memcpy(r.buffer.data() + h.offset, at + sizeof h, *payload);
      r.assembly.started = true;
      r.assembly.bytes = h.bytes;
      r.assembly.filled += *payload;
      ++r.fragments;
      recv_window_.consume();
      if (!left_link_->post_recv()) {
        fail(Status::io_error(
            fmt::format("ring: link to peer {} (left): ibv_post_recv: {}", left(), os_error())));
        break;
      }
      moved = true;
      if (r.assembly.filled == r.assembly.bytes) {
        r.done = true;
        ++next_recv_;
        if (traffic_)
          traffic_->count_recv(left(), r.assembly.bytes, r.assembly.bytes + r.fragments * sizeof h);
      }
    }
    return moved;
  }

  // One credit message per pass carries everything consumed so far.
  void return_credit() {
    const auto credit = recv_window_.credit_owed();
    if (!failure_.is_ok() || !left_closed_.is_ok() || !credit) return;
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = htonl(*credit);
    const int rc = ibv_post_send(left_link_->id->qp, &wr, &bad);
    if (rc == 0) {
      recv_window_.credit_sent();
    } else if (rc != ENOMEM) {  // ENOMEM: the send queue is full; the credit stays owed
      fail(Status::io_error(
          fmt::format("ring: returning credits to peer {} (left): {}", left(), std::strerror(rc))));
    }
  }

  // Copies queued messages, fragment by fragment, into free staging slots and writes
  // each into the matching slot of the right neighbor.
  bool push_sends() {
    bool moved = false;
    const size_t room = remote_.slot_bytes - sizeof(FragmentHeader);
    while (failure_.is_ok() && right_closed_.is_ok() && !sends_.empty() &&
           send_window_.can_post()) {
      Send& s = sends_.front();
      const uint64_t n = send_window_.post();
      const uint32_t slot = send_window_.slot_of(n);
      std::byte* at = right_link_->memory.data() + size_t{slot} * remote_.slot_bytes;
      const size_t payload = std::min(room, s.data.size() - s.offset);
      const FragmentHeader h{.tag = s.tag, .bytes = s.data.size(), .offset = s.offset};
      std::memcpy(at, &h, sizeof h);
      if (payload > 0) std::memcpy(at + sizeof h, s.data.data() + s.offset, payload);
      ibv_sge sge{reinterpret_cast<uintptr_t>(at), static_cast<uint32_t>(sizeof h + payload),
                  right_link_->mr->lkey};
      ibv_send_wr wr{};
      ibv_send_wr* bad = nullptr;
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.imm_data = htonl(static_cast<uint32_t>(n));
      wr.wr.rdma.remote_addr = remote_.addr + uint64_t{slot} * remote_.slot_bytes;
      wr.wr.rdma.rkey = remote_.rkey;
      if (const int rc = ibv_post_send(right_link_->id->qp, &wr, &bad); rc != 0) {
        fail(Status::io_error(fmt::format("ring: sending to peer {} (right) failed: {}", right(),
                                          std::strerror(rc))));
        break;
      }
      moved = true;
      s.offset += payload;
      ++s.fragments;
      if (s.offset == s.data.size()) {
        if (traffic_)
          traffic_->count_sent(right(), s.data.size(), s.data.size() + s.fragments * sizeof h);
        sends_.pop_front();
      }
    }
    return moved;
  }

  std::mutex mu_;                     // calls may come from more than one thread, one at a time
  std::unique_ptr<Link> left_link_;   // we receive
  std::unique_ptr<Link> right_link_;  // we send
  Accept remote_;                     // the right neighbor's slots
  uint32_t slot_bytes_;               // of our receive slots
  TrafficCounters* traffic_;
  rdma::SendWindow send_window_;
  rdma::RecvWindow recv_window_;
  std::vector<uint32_t> arrived_bytes_;  // per receive slot: what the last write put there
  std::deque<Send> sends_;               // not yet copied out in full
  std::deque<Recv> recvs_;               // done ones first, then pending
  size_t next_recv_ = 0;                 // the first receive not done yet
  Status failure_;
  // A neighbor's disconnect fails the channel only when it is needed: a receive it
  // can no longer fill, or a send it can no longer take.
  Status left_closed_;
  Status right_closed_;
};

class RdmaRingTransport final : public RingTransport {
 public:
  explicit RdmaRingTransport(const RingTransportOptions& options)
      : options_(options),
        slot_bytes_(std::clamp<uint32_t>(
            static_cast<uint32_t>(std::max(options.socket_buffer_bytes, 0)) / kSlots, kMinSlotBytes,
            kMaxSlotBytes)) {}

  Status start() {
    int devices = 0;
    ibv_device** list = ibv_get_device_list(&devices);
    const std::string why =
        list ? "ibv_get_device_list found none" : "ibv_get_device_list: " + os_error();
    if (list) ibv_free_device_list(list);
    if (!list || devices == 0)
      return Status::not_found(fmt::format("rdma: no RDMA device ({})", why));
    Status st;
    events_ = make_event_channel(st);
    GOSSIP_RETURN_IF_ERROR(st);
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(events_.get(), &id, nullptr, RDMA_PS_TCP) != 0)
      return Status::io_error(fmt::format("ring: rdma_create_id: {}", os_error()));
    listener_.reset(id);
    auto addr = resolve(options_.listen_host, options_.port);
    if (!addr.is_ok())
      return Status::invalid(fmt::format("ring: cannot resolve listen host '{}': {}",
                                         options_.listen_host, addr.status().message()));
    if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&*addr)) != 0 || rdma_listen(id, 16) != 0)
      return Status::io_error(fmt::format("ring: cannot listen on {}:{}: {}", options_.listen_host,
                                          options_.port, os_error()));
    port_ = ntohs(rdma_get_src_port(id));
    return Status::ok();
  }

  const char* name() const override { return "rdma"; }
  uint16_t port() const override { return port_; }

  Result<std::unique_ptr<RingChannel>> connect(const RingEnds& ends,
                                               const WaitOptions& wait) override;

 private:
  RingTransportOptions options_;
  uint32_t slot_bytes_;
  EventChannel events_;  // the listener's: connection requests and how they go on
  CmId listener_;
  uint16_t port_ = 0;
};

Result<std::unique_ptr<RingChannel>> RdmaRingTransport::connect(const RingEnds& ends,
                                                                const WaitOptions& wait) {
  auto right_addr = resolve(ends.right_host, ends.right_port);
  if (!right_addr.is_ok())
    return Status::invalid(fmt::format("ring: cannot resolve peer {}'s host '{}': {}", ends.right,
                                       ends.right_host, right_addr.status().message()));
  const Hello hello{.from = ends.self,
                    .to = ends.right,
                    .session = ends.right_session != 0 ? ends.right_session : ends.session};
  std::unique_ptr<Link> right;    // the attempt under way, then the connection
  std::unique_ptr<Link> pending;  // accepted, not yet established
  std::unique_ptr<Link> left;
  std::optional<Accept> accepted;
  bool right_done = false;
  std::string right_error = "no answer";
  auto retry_at = Clock::now();

  const auto give_up_attempt = [&](std::string why, std::chrono::milliseconds after) {
    right_error = std::move(why);
    right.reset();
    retry_at = Clock::now() + after;
  };
  // An attempt at the right neighbor: a fresh id on its own event channel; its events
  // then take it through address and route resolution to the connection.
  const auto start_attempt = [&] {
    Status st;
    auto link = std::make_unique<Link>();
    link->events = make_event_channel(st);
    if (!st.is_ok()) return give_up_attempt(st.message(), kConnectRetry);
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(link->events.get(), &id, nullptr, RDMA_PS_TCP) != 0)
      return give_up_attempt(fmt::format("rdma_create_id: {}", os_error()), kConnectRetry);
    link->id.reset(id);
    if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&*right_addr), kResolveMs) != 0)
      return give_up_attempt(fmt::format("rdma_resolve_addr: {}", os_error()), kConnectRetry);
    right = std::move(link);
  };
  const auto on_right_event = [&](const CmEvent& ev) {
    switch (ev.type) {
      case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(right->id.get(), kResolveMs) != 0)
          give_up_attempt(fmt::format("rdma_resolve_route: {}", os_error()), kConnectRetry);
        return;
      case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        Status st = right->open(kSlots);  // receives for credits
        rdma_conn_param p = conn_param(&hello, sizeof hello);
        if (st.is_ok() && rdma_connect(right->id.get(), &p) != 0)
          st = Status::io_error(fmt::format("rdma_connect: {}", os_error()));
        if (!st.is_ok()) give_up_attempt(st.message(), kConnectRetry);
        return;
      }
      case RDMA_CM_EVENT_ESTABLISHED: {
        const auto a = rdma::decode_accept(ev.private_data);
        Status st =
            a ? rdma::check_accept(*a, kSlots, ends.right)
              : Status::protocol(fmt::format(
                    "ring: peer {} (right) accepted without saying where to write", ends.right));
        if (st.is_ok())
          st = right->register_memory(size_t{a->slots} * a->slot_bytes, IBV_ACCESS_LOCAL_WRITE);
        if (!st.is_ok()) return give_up_attempt(st.message(), kRefusedRetry);
        accepted = *a;
        right_done = true;
        return;
      }
      case RDMA_CM_EVENT_REJECTED: {
        std::string why = rejection(ev);
        const auto after = why.starts_with("refused: ") ? kRefusedRetry : kConnectRetry;
        return give_up_attempt(std::move(why), after);
      }
      default:  // address, route or connect errors, unreachable, disconnected
        return give_up_attempt(fmt::format("{} (status {})", rdma_event_str(ev.type), ev.status),
                               kConnectRetry);
    }
  };
  // Accepts the left neighbor of this session; refuses anyone else, saying why.
  const auto on_listener_event = [&](const CmEvent& ev) {
    if (ev.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
      CmId id(ev.id);  // ours now; destroyed unless accepted
      const auto in = rdma::decode_hello(ev.private_data);
      std::string why = in ? ring_hello_refusal(*in, ends.self, ends.left, ends.session)
                           : "no hello in the request";
      if (why.empty() && left) why = "the left neighbor is connected already";
      auto link = std::make_unique<Link>();
      link->id = std::move(id);
      if (why.empty()) {
        Status st = link->open(kSlots);  // receives for the writes with immediate
        if (st.is_ok())
          st = link->register_memory(size_t{kSlots} * slot_bytes_,
                                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        if (st.is_ok()) {
          const Accept a{.slots = kSlots,
                         .slot_bytes = slot_bytes_,
                         .addr = reinterpret_cast<uintptr_t>(link->memory.data()),
                         .rkey = link->mr->rkey,
                         .nonce = fresh_ring_nonce()};
          link->nonce = a.nonce;
          rdma_conn_param p = conn_param(&a, sizeof a);
          if (rdma_accept(link->id.get(), &p) == 0) {
            pending = std::move(
                link);  // the newest wins: a repeated request means the peer gave up the older
            return;
          }
          st = Status::io_error(fmt::format("rdma_accept: {}", os_error()));
        }
        why = fmt::format("could not accept peer {} (left): {}", ends.left, st.message());
      }
      spdlog::warn("ring: refused a connection: {}", why);
      rdma_reject(link->id.get(), why.c_str(),
                  static_cast<uint8_t>(std::min<size_t>(why.size(), kRejectReasonBytes)));
      return;
    }
    if (left && ev.id == left->id.get()) {
      if (ev.type ==
          RDMA_CM_EVENT_DISCONNECTED) {  // it gave up on us before we were done: wait for it again
        spdlog::warn("ring: peer {} (left) disconnected while we waited for peer {} (right)",
                     ends.left, ends.right);
        left.reset();
      }
      return;
    }
    if (!pending || ev.id != pending->id.get()) return;  // a request we refused or replaced
    if (ev.type == RDMA_CM_EVENT_ESTABLISHED) {
      left = std::move(pending);
    } else if (ev.type != RDMA_CM_EVENT_CONNECT_RESPONSE) {
      spdlog::warn("ring: the connection from peer {} (left) failed: {}", ends.left,
                   rdma_event_str(ev.type));
      pending.reset();
    }
  };

  Status failure;
  while (true) {
    if (!right && !right_done && Clock::now() >= retry_at) start_attempt();
    while (right && !right_done) {
      auto ev = next_event(right->events.get());
      if (!ev) break;
      on_right_event(*ev);
    }
    while (auto ev = next_event(events_.get())) on_listener_event(*ev);
    if (right_done && left) break;
    if (wait.cancelled()) {
      failure = Status::closed("ring: connecting cancelled");
      break;
    }
    const auto now = Clock::now();
    if (now >= wait.deadline) {
      failure = Status::timeout(
          !right_done ? fmt::format("ring: could not connect to peer {} (right) at {}:{}: {}",
                                    ends.right, ends.right_host, ends.right_port, right_error)
                      : fmt::format("ring: peer {} (left) did not connect in time", ends.left));
      break;
    }
    auto until = std::min(wait.deadline, now + kCancelPoll);
    if (!right && !right_done) until = std::min(until, retry_at);
    pollfd fds[] = {{events_->fd, POLLIN, 0}, {right ? right->events->fd : -1, POLLIN, 0}};
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(until - now).count();
    ::poll(fds, std::size(fds), static_cast<int>(std::max<int64_t>(ms, 0)));
  }
  if (!failure.is_ok()) return failure;  // the links made so far close as they go

  // From here on the left link's events (its disconnect) go to the channel, not the listener.
  Status st;
  left->events = make_event_channel(st);
  if (st.is_ok() && rdma_migrate_id(left->id.get(), left->events.get()) != 0)
    st = Status::io_error(fmt::format("ring: rdma_migrate_id: {}", os_error()));
  GOSSIP_RETURN_IF_ERROR(st);
  spdlog::info("ring: connected over RDMA, left peer {}, right peer {} at {}:{}", ends.left,
               ends.right, ends.right_host, ends.right_port);
  const RingNonce given = left->nonce;
  std::unique_ptr<RingChannel> channel(new RdmaRingChannel(ends.left, ends.right, std::move(left),
                                                           std::move(right), *accepted, slot_bytes_,
                                                           options_.traffic));
  channel->set_nonces(given, accepted->nonce);
  return channel;
}

}  // namespace

Result<std::unique_ptr<RingTransport>> make_rdma_ring_transport(
    const RingTransportOptions& options) {
  auto t = std::make_unique<RdmaRingTransport>(options);
  GOSSIP_RETURN_IF_ERROR(t->start());
  return std::unique_ptr<RingTransport>(std::move(t));
}

}  // namespace gossip::peers
