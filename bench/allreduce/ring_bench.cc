// One rank of our all-reduces (sgd/collectives/ring_all_reduce.h, sgd/collectives/) over the TCP
// ring transport, one process per rank, on loopback. Measures, never asserts.
//
//   ring_bench --rank 0 --size 4 --dir /tmp/rdv --sizes 4K,1M,16M --reps 50,20,10 --warmup 2
//   ring_bench --algorithm butterfly ...      # tree, butterfly, master; or auto
//   ring_bench --sealed ...                   # every link sealed (AES-256-GCM), as under CURVE
//   ring_bench --busy-poll-us 20 ...          # waits spin 20 us before they sleep
//
// Rendezvous through files: each rank listens on 127.0.0.1 (any free port), writes
// the port to DIR/<rank>.port (write, then rename, so a reader never sees half a
// number), waits for its right neighbor's file (the ring) or its partners' (the mesh
// algorithms) and connects. With auto, it links both and picks per size as the
// daemon does (sgd/collectives/choice.h). Rank 0 prints one JSON line per size
// (bench/allreduce/bench_loop.h); bench/allreduce.sh runs the ranks.

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "bench/allreduce/bench_loop.h"
#include "peers/ring_channel.h"
#include "peers/sealed_ring_channel.h"
#include "sgd/collectives/algorithm.h"
#include "sgd/collectives/choice.h"
#include "sgd/collectives/ring_all_reduce.h"

namespace {

namespace fs = std::filesystem;
using gossip::Result;
using gossip::Status;
using gossip::bench::Clock;

Status publish_port(const fs::path& dir, int rank, uint16_t port) {
  const fs::path tmp = dir / (std::to_string(rank) + ".port.tmp");
  const fs::path final_path = dir / (std::to_string(rank) + ".port");
  {
    std::ofstream f(tmp);
    f << port << "\n";
    if (!f) return Status::io_error("ring_bench: cannot write " + tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, final_path, ec);
  if (ec)
    return Status::io_error("ring_bench: rename to " + final_path.string() + ": " + ec.message());
  return Status::ok();
}

// The port rank `rank` published in dir, waiting for it until the deadline.
Result<uint16_t> await_port(const fs::path& dir, int rank, Clock::time_point deadline) {
  const fs::path path = dir / (std::to_string(rank) + ".port");
  while (Clock::now() < deadline) {
    std::ifstream f(path);
    unsigned port = 0;
    if (f >> port && port > 0 && port < 65536) return static_cast<uint16_t>(port);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Status::timeout("ring_bench: no port file " + path.string() + " in time");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"One rank of the TCP ring all-reduce benchmark"};
  gossip::bench::LoopOptions o;
  std::string dir, sizes = "4K,1M,16M", reps = "20", warmup = "2";
  uint64_t chunk_bytes = uint64_t{1} << 20;
  uint32_t depth = 4;
  uint64_t gather_below = gossip::sgd::RingOptions{}.gather_below_bytes;
  int timeout_s = 60;
  int socket_buffer = gossip::peers::RingTransportOptions{}.socket_buffer_bytes;
  app.add_option("--rank", o.rank)->required();
  app.add_option("--size", o.size)->required()->check(CLI::Range(1, 128));
  app.add_option("--dir", dir, "rendezvous directory (one <rank>.port file per rank)")->required();
  app.add_option("--sizes", sizes, "buffer sizes in bytes, comma separated (K/M/G suffixes)");
  app.add_option("--reps", reps, "timed calls per size (one value, or one per size)");
  app.add_option("--warmup", warmup, "untimed calls per size (one value, or one per size)");
  app.add_option("--chunk-bytes", chunk_bytes, "pipeline chunk (RingOptions.chunk_elems * 4)");
  app.add_option("--depth", depth, "receives posted ahead (RingOptions.depth)");
  app.add_option("--gather-below", gather_below,
                 "bytes up to which whole vectors go round (RingOptions.gather_below_bytes)");
  app.add_option(
      "--socket-buffer", socket_buffer,
      "SO_SNDBUF / SO_RCVBUF in bytes (RingTransportOptions; 0: the kernel's autotuning)");
  app.add_option("--timeout", timeout_s, "seconds for the rendezvous and for each call");
  unsigned busy_poll_us = 0;
  auto* busy_poll =
      app.add_option(
             "--busy-poll-us", busy_poll_us,
             "microseconds a wait retries before it sleeps (RingTransportOptions::busy_poll)")
          ->check(CLI::Range(0, static_cast<int>(gossip::peers::kMaxBusyPoll.count())));
  std::string algorithm = "ring", table_file;
  app.add_option("--algorithm", algorithm, "ring, tree, butterfly, master, or auto");
  app.add_option("--table", table_file,
                 "auto's table (sgd/collectives/choice.h); default built in");
  bool sealed = false;
  app.add_flag("--sealed", sealed,
               "seal every link (peers/sealed_ring_channel.h), as the daemon does under CURVE");
  CLI11_PARSE(app, argc, argv);
  o.sizes = gossip::bench::parse_sizes(sizes);
  o.reps = gossip::bench::parse_ints(reps);
  o.warmup = gossip::bench::parse_ints(warmup);
  o.mean = true;
  spdlog::set_level(spdlog::level::warn);  // rank 0's stdout carries the JSON lines only

  const auto fail = [&](const Status& st) {
    std::fprintf(stderr, "ring_bench rank %d: %s\n", o.rank, st.message().c_str());
    return 1;
  };
  const auto timeout = std::chrono::seconds(timeout_s);
  gossip::peers::RingTransportOptions to;
  to.listen_host = "127.0.0.1";
  to.socket_buffer_bytes = socket_buffer;
  to.busy_poll = std::chrono::microseconds(busy_poll_us);
  auto transport = gossip::peers::make_ring_transport("tcp", to);
  if (!transport.is_ok()) return fail(transport.status());
  if (Status st = publish_port(dir, o.rank, (*transport)->port()); !st.is_ok()) return fail(st);

  const bool automatic = algorithm == "auto";
  const auto fixed = gossip::sgd::parse_algorithm(algorithm);
  if (!automatic && !fixed) return fail(Status::invalid("unknown --algorithm " + algorithm));
  gossip::sgd::AlgorithmTable table = gossip::sgd::AlgorithmTable::measured();
  if (!table_file.empty()) {
    std::ifstream f(table_file);
    std::stringstream text;
    text << f.rdbuf();
    auto parsed = gossip::sgd::AlgorithmTable::parse(text.str(), table_file);
    if (!f || !parsed.is_ok()) return fail(parsed.status());
    table = std::move(parsed).value();
  }

  const uint32_t n = static_cast<uint32_t>(o.size), r = static_cast<uint32_t>(o.rank);
  const uint64_t session = 0x62656e6368000000ull | n;  // "bench" | n
  // The cipher's cost does not depend on where the keys came from: a bench key per
  // direction, as curve_link_key gives the daemon one.
  const auto key = [](uint32_t from, uint32_t to) {
    gossip::peers::LinkKey k{};
    k[0] = static_cast<uint8_t>(from);
    k[1] = static_cast<uint8_t>(to);
    return k;
  };
  const auto seal = [&](std::unique_ptr<gossip::peers::RingChannel> ch) {
    if (!sealed) return ch;
    const gossip::peers::SealKeys keys{.to_right = key(r, ch->right()),
                                       .from_left = key(ch->left(), r),
                                       .right_session = session,
                                       .left_session = session};
    return gossip::peers::seal_ring_channel(std::move(ch), keys);
  };
  const auto deadline = Clock::now() + timeout;
  std::unique_ptr<gossip::peers::RingChannel> channel;
  if (n > 1 && (automatic || fixed == gossip::sgd::Algorithm::kRing)) {
    auto right_port = await_port(dir, static_cast<int>((r + 1) % n), deadline);
    if (!right_port.is_ok()) return fail(right_port.status());
    const gossip::peers::RingEnds ends{.self = r,
                                       .left = (r + n - 1) % n,
                                       .right = (r + 1) % n,
                                       .right_host = "127.0.0.1",
                                       .right_port = *right_port,
                                       .session = session};
    auto ch = (*transport)->connect(ends, {deadline, nullptr});
    if (!ch.is_ok()) return fail(ch.status());
    channel = seal(std::move(ch).value());
  }
  // The mesh algorithms' links: with auto, the union of every mesh algorithm's partners.
  std::vector<std::unique_ptr<gossip::peers::RingChannel>> mesh;
  std::vector<gossip::peers::RingChannel*> links(n, nullptr);
  std::map<gossip::sgd::Algorithm, std::unique_ptr<gossip::sgd::MeshAllReduce>> meshes;
  if (n > 1 && (automatic || fixed != gossip::sgd::Algorithm::kRing)) {
    std::set<uint32_t> partners;
    for (gossip::sgd::Algorithm a : gossip::sgd::kAlgorithms) {
      if (a == gossip::sgd::Algorithm::kRing || (!automatic && a != fixed)) continue;
      meshes[a] = gossip::sgd::make_mesh_all_reduce(a);
      for (uint32_t q : gossip::sgd::mesh_partners(a, n, r)) partners.insert(q);
    }
    std::vector<gossip::peers::MeshEnd> ends;
    for (uint32_t q : partners) {
      auto port = await_port(dir, static_cast<int>(q), deadline);
      if (!port.is_ok()) return fail(port.status());
      ends.push_back({.peer = q,
                      .host = "127.0.0.1",
                      .port = *port,
                      .session = session,
                      .peer_session = session});
    }
    auto chs = (*transport)->connect_mesh(r, ends, {deadline, nullptr});
    if (!chs.is_ok()) return fail(chs.status());
    mesh = std::move(chs).value();
    for (auto& ch : mesh) ch = seal(std::move(ch));
    for (size_t i = 0; i < ends.size(); ++i) links[ends[i].peer] = mesh[i].get();
  }

  gossip::sgd::RingAllReduce ring, barrier_ring;
  uint64_t round = 0;
  const auto options = [&] {
    gossip::sgd::RingOptions ro;
    ro.size = n;
    ro.rank = r;
    ro.round = round++;
    ro.chunk_elems = std::max<uint64_t>(1, chunk_bytes / sizeof(float));
    ro.restore_on_failure = false;  // as MPI and Gloo: no copy kept to undo a failed call
    ro.depth = depth;
    ro.gather_below_bytes = gather_below;
    ro.wait = {Clock::now() + timeout, nullptr};
    return ro;
  };
  const auto run = [&](gossip::sgd::Algorithm a, std::vector<float>& data,
                       gossip::sgd::RingAllReduce& on_ring) {
    if (a == gossip::sgd::Algorithm::kRing) return on_ring.mean(*channel, data, options());
    return meshes.at(a)->mean(links, data, options());
  };
  const auto allreduce = [&](std::vector<float>& data) {
    if (n == 1) return true;
    const auto a = automatic ? table.choose(n, data.size() * sizeof(float)) : *fixed;
    Status st = run(a, data, ring);
    if (!st.is_ok()) fail(st);
    return st.is_ok();
  };
  std::vector<float> token(n);
  const auto barrier = [&] {
    if (n == 1) return true;
    Status st = run(automatic ? gossip::sgd::Algorithm::kRing : *fixed, token, barrier_ring);
    if (!st.is_ok()) fail(st);
    return st.is_ok();
  };
  const std::string extra = ",\"chunk_bytes\":" + std::to_string(chunk_bytes) +
                            ",\"depth\":" + std::to_string(depth) +
                            ",\"gather_below\":" + std::to_string(gather_below) +
                            ",\"socket_buffer\":" + std::to_string(socket_buffer) +
                            ",\"busy_poll_us\":" + std::to_string(busy_poll_us);
  // Where rank 0's calls go: its channels' system calls and sleeps; the rest is the
  // call's own work (reducing, copying, sealing, bookkeeping).
  const auto channel_times = [&] {
    gossip::peers::ChannelTimes t;
    if (channel) t += channel->times();
    for (const auto& ch : mesh) t += ch->times();
    return t;
  };
  gossip::peers::ChannelTimes before;
  // The spin's probes that found nothing are its own column; the loop between them is the rest.
  const gossip::bench::Probe probe{
      .start = [&] { before = channel_times(); },
      .report =
          [&](int reps, double seconds) {
            const gossip::peers::ChannelTimes t = channel_times() - before;
            const double per = 1e-3 / reps;  // ns in all -> us per call
            const double wall = seconds * 1e6 / reps;
            const double sleep = t.sleep_ns * per, spin = t.spin_ns * per;
            const double send = t.send_ns * per, recv = t.recv_ns * per;
            char buf[400];
            std::snprintf(
                buf, sizeof buf,
                ",\"per_call_us\":{\"wall\":%.2f,\"sleep\":%.2f,\"spin\":%.2f,"
                "\"send\":%.2f,\"recv\":%.2f,\"other\":%.2f},"
                "\"syscalls_per_call\":{\"sendmsg\":%.2f,\"recv\":%.2f,"
                "\"recv_empty\":%.2f,\"ppoll\":%.2f,\"spin_probes\":%.2f}",
                wall, sleep, spin, send, recv, wall - sleep - spin - send - recv,
                static_cast<double>(t.send_calls) / reps, static_cast<double>(t.recv_calls) / reps,
                static_cast<double>(t.empty_recvs) / reps, static_cast<double>(t.sleeps) / reps,
                static_cast<double>(t.spin_calls) / reps);
            return std::string(buf);
          }};
  const std::string impl = "gossipd-" + algorithm + (sealed ? "-sealed" : "") +
                           (busy_poll->count() ? "-spin" + std::to_string(busy_poll_us) : "");
  return gossip::bench::run_loop(impl.c_str(), o, extra, allreduce, barrier, probe);
}
