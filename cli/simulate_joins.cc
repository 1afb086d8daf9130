// `gossipctl simulate --joins K`: nodes joining by seeds (sim/joins.h), its CSV and
// summary.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/simulate.h"

namespace gossip::cli {

int run_join_simulation(const sim::JoinOptions& options, const std::string& out) {
  std::ofstream csv;
  if (!out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out, ec);
    csv.open(std::filesystem::path(out) / "joins.csv");
    if (ec || !csv) {
      std::fprintf(stderr, "gossipctl simulate: cannot write %s/joins.csv\n", out.c_str());
      return kExitFailure;
    }
  }
  // Every member logs each add, and every joiner each wait, as gossipd would: at a
  // thousand members through a partition that is thousands of lines, which the
  // summary and joins.csv say in a few. Errors (an id given twice) still show.
  spdlog::set_level(spdlog::level::err);
  auto report = sim::simulate_joins(options);
  if (!report) {
    std::fprintf(stderr, "gossipctl simulate: %s\n", report.status().message().c_str());
    return kExitUsage;
  }
  if (csv.is_open()) {
    csv << "joiner,asked_s,answered_s,id,all_knew_s,knew,should_know,messages\n";
    for (const auto& r : report->rows)
      csv << fmt::format("{},{:.6f},{:.6f},{},{:.6f},{},{},{}\n", r.joiner, r.asked_s, r.answered_s,
                         r.id, r.all_knew_s, r.knew, r.should_know, r.messages);
  }
  size_t answered = 0, known = 0;
  double worst_answer = 0, worst_known = 0, messages = 0, most = 0, per_member = 0;
  for (const auto& r : report->rows) {
    messages += static_cast<double>(r.messages);
    most = std::max(most, static_cast<double>(r.messages));
    // Of the nodes that were members when it came (more with every join before it).
    per_member += static_cast<double>(r.messages) /
                  static_cast<double>(r.should_know > 0 ? r.should_know : options.members);
    if (r.answered_s < 0) continue;
    ++answered;
    worst_answer = std::max(worst_answer, r.answered_s - r.asked_s);
    if (r.all_knew_s < 0) continue;
    ++known;
    worst_known = std::max(worst_known, r.all_knew_s - r.asked_s);
  }
  std::printf("simulated %u members and %u joiners (one every %.3g s, --join-quorum %s)\n",
              options.members, options.joins, std::chrono::duration<double>(options.every).count(),
              options.majority ? "majority" : "any");
  std::printf("virtual time %.3f s in %.1f s of real time, %llu messages\n", report->virtual_s,
              report->real_s, static_cast<unsigned long long>(report->messages));
  std::printf(
      "%zu of %u got an id, at most %.3f s after asking; %zu known to every node "
      "before them, at most %.3f s after asking\n",
      answered, options.joins, worst_answer, known, worst_known);
  std::printf("messages per join: %.0f on average, %.0f at most (%.2f per member)\n",
              messages / options.joins, most, per_member / options.joins);
  std::printf("ids given twice: %zu\n", report->duplicates.size());
  for (const auto& d : report->duplicates) std::printf("  %s\n", d.c_str());
  for (const auto& r : report->rows)
    if (!r.failure.empty())
      std::fprintf(stderr, "gossipctl simulate: joiner %u: %s\n", r.joiner, r.failure.c_str());
  return report->duplicates.empty() && answered == options.joins && known == answered
             ? kExitOk
             : kExitFailure;
}

}  // namespace gossip::cli
