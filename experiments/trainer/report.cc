#include "experiments/trainer/report.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

namespace gossip::trainer {
namespace {

std::string number(double x) { return std::isfinite(x) ? fmt::format("{:.6g}", x) : "null"; }

}  // namespace

Result<CsvLog> CsvLog::open(const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) {
    return Status::io_error(
        fmt::format("{}: cannot open the CSV file: {}", path, std::strerror(errno)));
  }
  out << "step,wall_seconds,loss,test_accuracy,payload_sent,payload_recv,wire_sent,wire_recv\n";
  out.flush();
  if (!out) return Status::io_error(fmt::format("{}: cannot write the CSV file", path));
  return CsvLog(path, std::move(out));
}

Status CsvLog::write(const CsvRow& row) {
  // Non-finite values (a diverged run) print as nan/inf, which CSV readers parse.
  out_ << fmt::format("{},{:.3f},{:.6g},{:.6g},{},{},{},{}\n", row.step, row.wall_seconds, row.loss,
                      row.test_accuracy, row.traffic.payload_sent, row.traffic.payload_recv,
                      row.traffic.wire_sent, row.traffic.wire_recv);
  out_.flush();
  if (!out_) return Status::io_error(fmt::format("{}: cannot write the CSV file", path_));
  return Status::ok();
}

std::string to_json(const RunResult& r) {
  return fmt::format(
      "{{\"node\":{},\"steps\":{},\"accuracy_local\":{},\"accuracy_average\":{},\"loss\":{},"
      "\"test_loss\":{},\"payload_sent\":{},\"payload_recv\":{},\"wire_sent\":{},"
      "\"wire_recv\":{},\"wall_seconds\":{},\"wait_seconds\":{:.3f},\"attached_seconds\":{:.3f},"
      "\"eval_seconds\":{:.3f}}}",
      r.node, r.steps, number(r.accuracy_local), number(r.accuracy_average), number(r.loss),
      number(r.test_loss), r.traffic.payload_sent, r.traffic.payload_recv, r.traffic.wire_sent,
      r.traffic.wire_recv, fmt::format("{:.3f}", r.wall_seconds), r.wait_seconds,
      r.attached_seconds, r.eval_seconds);
}

Status write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) {
      return Status::io_error(fmt::format("{}: cannot open: {}", tmp, std::strerror(errno)));
    }
    out << text;
    out.close();
    if (!out) return Status::io_error(fmt::format("{}: cannot write", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    return Status::io_error(fmt::format("cannot rename {} to {}: {}", tmp, path, why));
  }
  return Status::ok();
}

}  // namespace gossip::trainer
