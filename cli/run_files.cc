#include "cli/run_files.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

#include "cli/json.h"

namespace gossip::cli {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_csv(std::string_view line) {
  std::vector<std::string_view> cells;
  size_t start = 0;
  for (;;) {
    const size_t comma = line.find(',', start);
    cells.push_back(trim(line.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return cells;
}

// Reads up to max_bytes ending at the end of the file.
std::optional<std::string> read_file_end(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) return std::nullopt;
  const std::streamoff start = size > static_cast<std::streamoff>(max_bytes)
                                   ? size - static_cast<std::streamoff>(max_bytes)
                                   : 0;
  in.seekg(start);
  std::string data(static_cast<size_t>(size - start), '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  return data;
}

Status parse_double(std::string_view cell, double& out) {
  if (cell.empty()) return Status::ok();
  if (cell == "nan" || cell == "NaN") {
    out = std::nan("");
    return Status::ok();
  }
  const auto [ptr, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), out);
  if (ec != std::errc() || ptr != cell.data() + cell.size()) {
    return Status::protocol(fmt::format("not a number: '{}'", cell));
  }
  return Status::ok();
}

template <typename Int>
Status parse_integer(std::string_view cell, Int& out) {
  if (cell.empty()) return Status::ok();
  const auto [ptr, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), out);
  if (ec == std::errc() && ptr == cell.data() + cell.size()) return Status::ok();
  double d = 0;  // tolerate "240.0" and "1.2e6"
  GOSSIP_RETURN_IF_ERROR(parse_double(cell, d));
  if (!std::isfinite(d) || d < static_cast<double>(std::numeric_limits<Int>::min()) ||
      d > static_cast<double>(std::numeric_limits<Int>::max())) {
    return Status::protocol(fmt::format("not an integer: '{}'", cell));
  }
  out = static_cast<Int>(d);
  return Status::ok();
}

}  // namespace

Result<TrainerCsvRow> parse_trainer_csv_row(std::span<const std::string> header,
                                            std::string_view line) {
  const auto cells = split_csv(trim(line));
  TrainerCsvRow row;
  bool have_step = false;
  for (size_t c = 0; c < header.size() && c < cells.size(); ++c) {
    const std::string& name = header[c];
    const std::string_view cell = cells[c];
    Status st;
    if (name == "step") {
      st = parse_integer(cell, row.step);
      have_step = !cell.empty();
    } else if (name == "wall_seconds") {
      st = parse_double(cell, row.wall_seconds);
    } else if (name == "loss") {
      st = parse_double(cell, row.loss);
    } else if (name == "test_accuracy") {
      st = parse_double(cell, row.test_accuracy);
    } else if (name == "payload_sent") {
      st = parse_integer(cell, row.payload_sent);
    } else if (name == "payload_recv") {
      st = parse_integer(cell, row.payload_recv);
    } else if (name == "wire_sent") {
      st = parse_integer(cell, row.wire_sent);
    } else if (name == "wire_recv") {
      st = parse_integer(cell, row.wire_recv);
    }
    if (!st) return st.with_context("column " + name);
  }
  if (!have_step) return Status::protocol("row has no step");
  return row;
}

Result<std::vector<TrainerCsvRow>> read_trainer_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::not_found(fmt::format("{}: cannot open", path));
  std::string line;
  if (!std::getline(in, line)) return Status::protocol(fmt::format("{}: empty, no header", path));
  std::vector<std::string> header;
  for (std::string_view name : split_csv(trim(line))) header.emplace_back(name);
  std::vector<TrainerCsvRow> rows;
  for (size_t number = 2; std::getline(in, line); ++number) {
    if (trim(line).empty()) continue;
    auto row = parse_trainer_csv_row(header, line);
    if (!row) return row.status().with_context(fmt::format("{}:{}", path, number));
    rows.push_back(*row);
  }
  return rows;
}

std::optional<TrainerCsvRow> TrainerCsvTail::latest() {
  if (header_.empty()) {
    std::ifstream in(path_);
    std::string first;
    if (!in || !std::getline(in, first) || in.eof()) return last_;  // no complete header yet
    for (std::string_view name : split_csv(trim(first))) header_.emplace_back(name);
  }
  const auto data = read_file_end(path_, 8192);
  if (!data) return last_;
  std::string_view complete(*data);
  const size_t end = complete.rfind('\n');
  if (end == std::string_view::npos) return last_;
  complete = complete.substr(0, end);  // drop a line still being written
  const size_t nl = complete.rfind('\n');
  const std::string_view line = nl == std::string_view::npos ? complete : complete.substr(nl + 1);
  // The header line (no data yet) does not parse, and keeps the previous row.
  if (auto row = parse_trainer_csv_row(header_, line)) last_ = *row;
  return last_;
}

Result<TrainerResult> parse_trainer_result(std::string_view text) {
  auto obj = parse_flat_json_object(text);
  if (!obj) return obj.status();
  TrainerResult r;
  auto number = [&](const char* key, double& out) -> Status {
    auto v = json_get_number(*obj, key);
    if (!v) return v.status();
    out = *v;
    return Status::ok();
  };
  auto uint = [&](const char* key, uint64_t& out) -> Status {
    auto v = json_get_uint(*obj, key);
    if (!v) return v.status();
    out = *v;
    return Status::ok();
  };
  uint64_t node = 0, steps = 0;
  GOSSIP_RETURN_IF_ERROR(uint("node", node));
  GOSSIP_RETURN_IF_ERROR(uint("steps", steps));
  r.node = static_cast<int>(node);
  r.steps = static_cast<int64_t>(steps);
  GOSSIP_RETURN_IF_ERROR(number("accuracy_local", r.accuracy_local));
  GOSSIP_RETURN_IF_ERROR(number("accuracy_average", r.accuracy_average));
  GOSSIP_RETURN_IF_ERROR(number("loss", r.loss));
  GOSSIP_RETURN_IF_ERROR(uint("payload_sent", r.payload_sent));
  GOSSIP_RETURN_IF_ERROR(uint("payload_recv", r.payload_recv));
  GOSSIP_RETURN_IF_ERROR(uint("wire_sent", r.wire_sent));
  GOSSIP_RETURN_IF_ERROR(uint("wire_recv", r.wire_recv));
  GOSSIP_RETURN_IF_ERROR(number("wall_seconds", r.wall_seconds));
  for (auto [key, out] : {std::pair{"wait_seconds", &r.wait_seconds},
                          std::pair{"attached_seconds", &r.attached_seconds},
                          std::pair{"eval_seconds", &r.eval_seconds}})
    if (obj->count(key)) GOSSIP_RETURN_IF_ERROR(number(key, *out));
  return r;
}

Result<TrainerResult> read_trainer_result(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found(fmt::format("{}: cannot be read", path));
  std::ostringstream text;
  text << in.rdbuf();
  auto r = parse_trainer_result(text.str());
  if (!r) return r.status().with_context(path);
  return r;
}

std::vector<std::string> read_last_lines(const std::string& path, size_t n, size_t max_bytes) {
  std::vector<std::string> lines;
  const auto data = read_file_end(path, max_bytes);
  if (!data || n == 0) return lines;
  std::string_view rest(*data);
  while (!rest.empty() && (rest.back() == '\n' || rest.back() == '\r')) rest.remove_suffix(1);
  while (!rest.empty() && lines.size() < n) {
    const size_t nl = rest.rfind('\n');
    std::string_view line = nl == std::string_view::npos ? rest : rest.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.emplace(lines.begin(), line);
    if (nl == std::string_view::npos) break;
    rest = rest.substr(0, nl);
  }
  return lines;
}

}  // namespace gossip::cli
