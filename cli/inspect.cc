#include "cli/inspect.h"

#include <fmt/format.h>

#include <filesystem>
#include <zmq.hpp>

#include "proto/ipc.h"

namespace gossip::cli {

namespace ipc = proto::ipc;

Result<ipc::Message> ask_daemon(const std::string& endpoint, const ipc::Message& request,
                                std::chrono::milliseconds wait) {
  if (endpoint.starts_with("ipc://") && !std::filesystem::exists(endpoint.substr(6)))
    return Status::not_found(fmt::format(
        "no gossipd socket at {}: is gossipd running on this host, with this --run-dir and id?",
        endpoint.substr(6)));
  try {
    zmq::context_t context(1);
    zmq::socket_t socket(context, zmq::socket_type::dealer);
    socket.set(zmq::sockopt::linger, 0);
    socket.connect(endpoint);
    if (!socket.send(zmq::buffer(ipc::encode(request)), zmq::send_flags::dontwait))
      return Status::io_error(fmt::format("cannot send to {}", endpoint));
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, wait) == 0)
      return Status::timeout(
          fmt::format("no answer from the daemon at {} in {:.0f} s: is gossipd running there?",
                      endpoint, std::chrono::duration<double>(wait).count()));
    zmq::message_t answer;
    if (!socket.recv(answer, zmq::recv_flags::dontwait))
      return Status::io_error(fmt::format("no answer from {}", endpoint));
    auto m = ipc::decode(answer.data(), answer.size());
    if (!m) return m.status().with_context("the daemon's answer");
    if (auto* e = std::get_if<ipc::Error>(&*m)) return Status::invalid(e->message);
    return std::move(m).value();
  } catch (const zmq::error_t& e) {
    return Status::io_error(fmt::format("{}: {}", endpoint, e.what()));
  }
}

namespace {

Result<ipc::InspectReply> ask(const std::string& endpoint, uint32_t what,
                              std::chrono::milliseconds timeout) {
  // The node waits `timeout` for its peers, then answers; give it time to.
  auto m = ask_daemon(endpoint, ipc::InspectRequest{what, static_cast<uint64_t>(timeout.count())},
                      timeout + std::chrono::seconds(5));
  if (!m) return m.status();
  auto* r = std::get_if<ipc::InspectReply>(&*m);
  if (!r)
    return Status::protocol(
        fmt::format("the daemon answered '{}', not inspect_reply (an older "
                    "gossipd?)",
                    ipc::message_name(*m)));
  if (r->parts.empty()) return Status::protocol("the daemon's inspect_reply is empty");
  return std::move(*r);
}

// The summary, then one report per member that answered; one member's unreadable
// report does not hide the others'.
template <class Cluster, class Report, class Decode>
Result<Cluster> gather(const std::string& endpoint, uint32_t what,
                       std::chrono::milliseconds timeout, std::vector<Report> Cluster::*reports,
                       Decode decode) {
  auto r = ask(endpoint, what, timeout);
  if (!r) return r.status();
  Cluster out;
  auto s = proto::inspect::decode_summary(r->parts[0].data(), r->parts[0].size());
  if (!s) return s.status();
  out.summary = std::move(*s);
  for (size_t i = 1; i < r->parts.size(); ++i) {
    auto report = decode(r->parts[i].data(), r->parts[i].size());
    if (report)
      (out.*reports).push_back(std::move(*report));
    else
      out.unreadable.push_back(report.status().message());
  }
  return out;
}

}  // namespace

Result<ClusterLinks> ask_links(const std::string& endpoint, std::chrono::milliseconds timeout) {
  return gather(endpoint, ipc::InspectRequest::kLinks, timeout, &ClusterLinks::rows,
                proto::inspect::decode_links);
}

Result<ClusterStatus> ask_status(const std::string& endpoint, std::chrono::milliseconds timeout) {
  return gather(endpoint, ipc::InspectRequest::kStatus, timeout, &ClusterStatus::members,
                proto::inspect::decode_status);
}

}  // namespace gossip::cli
