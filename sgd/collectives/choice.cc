#include "sgd/collectives/choice.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <sstream>

#include "sgd/collectives/ring_schedule.h"

namespace gossip::sgd {
namespace {

bool parse_bytes(std::string_view s, uint64_t* out) {
  uint64_t scale = 1;
  if (!s.empty()) {
    const char last = s.back();
    if (last == 'K' || last == 'k') scale = uint64_t{1} << 10;
    if (last == 'M' || last == 'm') scale = uint64_t{1} << 20;
    if (last == 'G' || last == 'g') scale = uint64_t{1} << 30;
    if (scale != 1) s.remove_suffix(1);
  }
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return false;
  if (v > UINT64_MAX / scale) return false;
  *out = v * scale;
  return true;
}

}  // namespace

AlgorithmTable AlgorithmTable::measured() {
  // bench/allreduce.sh --runs 3, 2026-11-25, 2 shared cores, loopback TCP: our fastest
  // algorithm per (ranks, size), smoothed where neighbouring sizes disagreed within the
  // noise (bench/allreduce/README.md). Above 8 ranks only the small sizes are
  // extrapolated (the tree's log2 n latencies); the rest is the ring.
  return AlgorithmTable({
      {2, 32 << 20, Algorithm::kButterfly},
      {2, UINT64_MAX, Algorithm::kRing},
      {3, 256 << 10, Algorithm::kTree},
      {3, 4 << 20, Algorithm::kRing},
      {3, UINT64_MAX, Algorithm::kButterfly},
      {4, 256 << 10, Algorithm::kMaster},
      {4, 32 << 20, Algorithm::kButterfly},
      {4, UINT64_MAX, Algorithm::kRing},
      {8, 256 << 10, Algorithm::kTree},
      {8, 32 << 20, Algorithm::kButterfly},
      {8, UINT64_MAX, Algorithm::kRing},
      {RingSchedule::kMaxRanks, 256 << 10, Algorithm::kTree},
  });
}

Result<AlgorithmTable> AlgorithmTable::parse(std::string_view text, std::string_view source) {
  std::vector<ChoiceRow> rows;
  std::istringstream in{std::string(text)};
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::string ranks, bytes, name, extra;
    if (!(fields >> ranks)) continue;  // blank
    const auto bad = [&](const std::string& why) {
      return Status::invalid(
          fmt::format("{}:{}: {} (a row is \"RANKS BYTES ALGORITHM\", e.g. "
                      "\"4 64K butterfly\")",
                      source, number, why));
    };
    if (!(fields >> bytes >> name)) return bad("fewer than three fields");
    if (fields >> extra) return bad(fmt::format("unexpected '{}' after the algorithm", extra));
    ChoiceRow row;
    uint64_t r = 0;
    if (!parse_bytes(ranks, &r) || r == 0 || r > RingSchedule::kMaxRanks || ranks.back() > '9')
      return bad(
          fmt::format("ranks '{}' is not a count from 1 to {}", ranks, RingSchedule::kMaxRanks));
    row.max_ranks = static_cast<uint32_t>(r);
    if (!parse_bytes(bytes, &row.max_bytes))
      return bad(
          fmt::format("bytes '{}' is not a size (a number, optionally with K, M or G)", bytes));
    auto a = parse_algorithm(name);
    if (!a)
      return bad(fmt::format("unknown algorithm '{}' (ring, tree, butterfly or master)", name));
    row.algorithm = *a;
    rows.push_back(row);
  }
  return AlgorithmTable(std::move(rows));
}

Algorithm AlgorithmTable::choose(uint32_t ranks, uint64_t bytes) const {
  for (const ChoiceRow& row : rows_)
    if (ranks <= row.max_ranks && bytes <= row.max_bytes) return row.algorithm;
  return Algorithm::kRing;
}

std::string AlgorithmTable::text() const {
  std::string out;
  for (const ChoiceRow& row : rows_)
    out += fmt::format("{} {} {}\n", row.max_ranks, row.max_bytes, algorithm_name(row.algorithm));
  return out;
}

}  // namespace gossip::sgd
