#include "experiments/trainer/report.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace gossip::trainer {

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
  // One line, fields in this order; NaN and infinities (a diverged run) are null.
  const auto ms = [](double seconds) { return std::round(seconds * 1000.0) / 1000.0; };
  nlohmann::ordered_json j;
  j["node"] = r.node;
  j["steps"] = r.steps;
  j["accuracy_local"] = r.accuracy_local;
  j["accuracy_average"] = r.accuracy_average;
  j["loss"] = r.loss;
  j["test_loss"] = r.test_loss;
  j["payload_sent"] = r.traffic.payload_sent;
  j["payload_recv"] = r.traffic.payload_recv;
  j["wire_sent"] = r.traffic.wire_sent;
  j["wire_recv"] = r.traffic.wire_recv;
  j["wall_seconds"] = ms(r.wall_seconds);
  j["wait_seconds"] = ms(r.wait_seconds);
  j["attached_seconds"] = ms(r.attached_seconds);
  j["eval_seconds"] = ms(r.eval_seconds);
  return j.dump();
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
