// Tune auto (daemon/tuner.h): the cost model picks the period and ratio that hide the
// rounds under compute, the consensus bound caps the period, the codec follows the
// plan, and three tuners over real ZeroMQ transports on loopback, fed different
// measurements, reach the same plan from each other's reports.

#include "daemon/tuner.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compression/codec_spec.h"
#include "peers/zmq_transport.h"
#include "tests/sgd/loopback_port.h"

namespace gossip::daemon {
namespace {

using namespace std::chrono_literals;
using sgd::free_port;

TuneSettings ladder() {
  TuneSettings s;
  s.wait = 0.05;
  s.periods = {1, 2, 4, 8, 16, 32, 64};
  s.ratios = {0.1, 0.03, 0.01, 0.003};
  return s;
}

// A round costs 2 ms + its bytes at `bandwidth` (B/s); a step 10 ms; the compressed
// rounds at ratio 0.01 send 50 kB, the probe 1.6 MB.
TuneMeasured measured(double bandwidth, double step_s = 0.010) {
  TuneMeasured m;
  m.step_s = step_s;
  m.round_bytes = 50e3;
  m.round_s = 0.002 + m.round_bytes / bandwidth;
  m.probe_bytes = 1.6e6;
  m.probe_s = 0.002 + m.probe_bytes / bandwidth;
  return m;
}

TunePlan at(uint64_t period, double ratio) {
  TunePlan p;
  p.period = period;
  p.ratio = ratio;
  return p;
}

TEST(Tune, ASlowLinkGetsTheShortestPeriodThatHidesItsRounds) {
  // 12.5 MB/s: a round costs 2 ms + 4 ms per 0.01 of ratio. At 5% of a 10 ms step,
  // T steps hide a round of T * 10 / 19 ms: ratio 0.003's 3.2 ms at T = 8 first.
  const TunePlan p = decide(ladder(), measured(12.5e6), at(4, 0.01));
  EXPECT_EQ(p.period, 8u);
  EXPECT_DOUBLE_EQ(p.ratio, 0.003);
  EXPECT_NEAR(p.bandwidth, 12.5e6, 1e3);
  EXPECT_NEAR(p.fixed_s, 0.002, 1e-6);
  EXPECT_LE(p.predicted_wait, 0.05);
  EXPECT_NE(p.reason.find("hides"), std::string::npos) << p.reason;
}

TEST(Tune, AFastLinkGetsAShortPeriodAndTheLargestRatio) {
  // 10 GB/s: the bytes cost nothing, the 2 ms fixed cost hides under T = 4 (40 ms).
  const TunePlan p = decide(ladder(), measured(10e9), at(4, 0.01));
  EXPECT_EQ(p.period, 4u);
  EXPECT_DOUBLE_EQ(p.ratio, 0.1);
  // Faster steps need a longer period for the same fixed cost.
  EXPECT_EQ(decide(ladder(), measured(10e9, 0.001), at(4, 0.01)).period, 64u);
}

TEST(Tune, NothingHidesOnAVerySlowLink) {
  const TunePlan p = decide(ladder(), measured(10e3), at(4, 0.01));
  EXPECT_EQ(p.period, 64u);
  EXPECT_DOUBLE_EQ(p.ratio, 0.003);
  EXPECT_GT(p.predicted_wait, 0.05);
  EXPECT_NE(p.reason.find("no period hides"), std::string::npos) << p.reason;
}

TEST(Tune, AShorterPeriodNeedsAMargin) {
  // Measured at ratio 0.01, ratio 0.003 at period 8 predicts 3.8% (under 4.5%, over
  // 0.8 * 4.5%): from period 16 it is not worth moving back, from period 4 it is.
  TuneSettings s = ladder();
  s.wait = 0.045;
  s.ratios = {0.003};
  const TuneMeasured m = measured(12.5e6);
  EXPECT_EQ(decide(s, m, at(4, 0.01)).period, 8u);
  EXPECT_EQ(decide(s, m, at(16, 0.01)).period, 16u);
}

TEST(Tune, TheConsensusBoundCapsThePeriod) {
  TuneSettings s = ladder();
  s.consensus = 0.02;
  TuneMeasured m = measured(10e3);  // alone, nothing hides: period 64
  m.consensus = 0.01;               // at period 4: 0.02 at 8, 0.04 at 16
  const TunePlan p = decide(s, m, at(4, 0.01));
  EXPECT_EQ(p.period, 8u);
  EXPECT_DOUBLE_EQ(p.ratio, 0.003);  // the fewest bytes where it cannot hide
  EXPECT_NE(p.reason.find("distance"), std::string::npos) << p.reason;

  // At 125 MB/s alone period 8 would hide (with ratio 0.03); bounded to period 4, where
  // nothing hides, ratio 0.03's bytes cost 1.1 ms more than 0.003's, under 5% of 4
  // steps of 10 ms, and 0.1's 3.9 ms more, over it.
  s.consensus = 0.015;
  m = measured(125e6);
  m.consensus = 0.01;
  EXPECT_EQ(decide(s, m, at(4, 0.01)).period, 4u);
  EXPECT_DOUBLE_EQ(decide(s, m, at(4, 0.01)).ratio, 0.03);
  s.consensus = 0;
  EXPECT_EQ(decide(s, m, at(4, 0.01)).period, 8u);
}

TEST(Tune, WithoutMeasurementsThePlanStays) {
  const TunePlan p = decide(ladder(), TuneMeasured{}, at(4, 0.01));
  EXPECT_EQ(p.period, 4u);
  EXPECT_DOUBLE_EQ(p.ratio, 0.01);
}

TEST(Tune, WithoutAProbeTheBytesCostNothing) {
  TuneMeasured m = measured(12.5e6);
  m.probe_s = m.probe_bytes = 0;
  const TunePlan p = decide(ladder(), m, at(4, 0.01));
  EXPECT_EQ(p.bandwidth, 0.0);
  EXPECT_DOUBLE_EQ(p.ratio, 0.1);  // all of the round's 6 ms taken as fixed
  EXPECT_EQ(p.period, 16u);        // 6 ms hides under 16 steps of 10 ms (3.6%)
}

TEST(Tune, CombineTakesTheSlowestStepTheFastestRoundAndTheSamplesSpread) {
  std::vector<TuneReportIn> r(3);
  r[0].report.step_s = 0.010, r[0].report.round_s = 0.030, r[0].report.round_bytes = 100;
  r[1].report.step_s = 0.020, r[1].report.round_s = 0.005, r[1].report.round_bytes = 200;
  r[2].report.step_s = 0.015, r[2].report.round_s = 0.010, r[2].report.round_bytes = 300;
  r[2].report.probe_s = 0.5, r[2].report.probe_bytes = 3000;
  r[0].samples = {1, 1}, r[1].samples = {3, 3}, r[2].samples = {2, 2};
  TuneMeasured m = combine(r);
  EXPECT_DOUBLE_EQ(m.step_s, 0.020);
  EXPECT_DOUBLE_EQ(m.round_s, 0.005);
  EXPECT_DOUBLE_EQ(m.round_bytes, 200);
  EXPECT_DOUBLE_EQ(m.probe_s, 0.5);
  // Mean (2, 2): squared distances 2, 2 and 0 over 3 nodes, against |mean|^2 = 8.
  EXPECT_NEAR(m.consensus, std::sqrt(4.0 / 3.0 / 8.0), 1e-12);
  // A node without a sample (or of another size): the distance is not measured.
  r[1].samples.clear();
  EXPECT_EQ(combine(r).consensus, 0.0);
}

TEST(Tune, TheCodecEncodesAtThePlansRatio) {
  auto spec = compression::make_codec("topk:0.01+quant:2+idx:auto+ef");
  ASSERT_TRUE(spec) << spec.status().message();
  EXPECT_DOUBLE_EQ(TunedCodec::ratio_of(spec->codec->spec()), 0.01);
  auto tuned = TunedCodec::make(*spec->codec, {0.1, 0.003});
  ASSERT_TRUE(tuned) << tuned.status().message();
  EXPECT_EQ((*tuned)->ratios(), (std::vector<double>{0.1, 0.01, 0.003}));
  EXPECT_DOUBLE_EQ((*tuned)->ratio(), 0.01);

  std::vector<float> x(100000);
  std::mt19937 rng(7);
  std::normal_distribution<float> g;
  for (auto& v : x) v = g(rng);
  std::vector<size_t> sizes;
  for (double r : {0.1, 0.01, 0.003}) {
    (*tuned)->set_ratio(r);
    EXPECT_NE((*tuned)->spec().find(fmt::format("topk:{:g}", r)), std::string::npos)
        << (*tuned)->spec();
    std::vector<std::byte> out;
    ASSERT_TRUE((*tuned)->encode(x, {}, out));
    std::vector<float> y(x.size());
    ASSERT_TRUE((*tuned)->decode(out, {}, y));
    size_t kept = 0;
    for (float v : y) kept += v != 0.0f;
    EXPECT_NEAR(static_cast<double>(kept), r * static_cast<double>(x.size()), 2.0);
    sizes.push_back(out.size());
  }
  EXPECT_GT(sizes[0], 5 * sizes[1]);
  EXPECT_GT(sizes[1], 2 * sizes[2]);

  auto sign = compression::make_codec("sign");
  ASSERT_TRUE(sign);
  auto refused = TunedCodec::make(*sign->codec, {0.1});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("no top-k ratio"), std::string::npos);
}

// Three nodes over real ZeroMQ transports, each with its own measurements: after the
// epoch's reports (sent after round 3, one epoch being 4 rounds) every node holds the same plan,
// and it moved where the slowest step and the probe say.
TEST(Tune, EveryNodeReachesTheSamePlanFromTheReports) {
  constexpr uint32_t kNodes = 3;
  std::vector<std::string> ep;
  for (uint32_t i = 0; i < kNodes; ++i)
    ep.push_back("tcp://127.0.0.1:" + std::to_string(free_port()));
  std::vector<std::unique_ptr<peers::ZmqTransport>> t;
  std::vector<std::unique_ptr<peers::Router>> r;
  std::vector<std::unique_ptr<TunedCodec>> codecs;
  std::vector<std::unique_ptr<Tuner>> tuners;
  auto base = compression::make_codec("topk:0.01+ef");
  ASSERT_TRUE(base);
  for (uint32_t i = 0; i < kNodes; ++i) {
    std::vector<peers::Peer> peers;
    for (uint32_t j = 0; j < kNodes; ++j)
      if (j != i) peers.push_back({j, ep[j], ""});
    t.push_back(peers::ZmqTransport::create(i, ep[i], peers).value());
    r.push_back(std::make_unique<peers::Router>(*t.back()));
    codecs.push_back(std::move(TunedCodec::make(*base->codec, {0.1, 0.003})).value());
    TuneSettings s = ladder();
    s.ratios = codecs.back()->ratios();
    tuners.push_back(std::make_unique<Tuner>(*r.back(), s, 4, codecs.back().get()));
  }
  // Rounds 0 to 3 make epoch 0: round 0 is not measured, round 1 is the probe; node
  // 2's steps are the slowest.
  for (uint32_t i = 0; i < kNodes; ++i) {
    tuners[i]->round_ran({0, 0.5, 1600000, 0, 0, false});
    EXPECT_EQ(tuners[i]->next_period(0, 0ms, [] {}), 4u);
    // The probe runs at the ladder's largest ratio, through the codec, not raw.
    ASSERT_TRUE(Tuner::probes(1));
    EXPECT_FALSE(tuners[i]->before_round(1, std::vector<float>(1000, 1.0f)));
    EXPECT_DOUBLE_EQ(codecs[i]->ratio(), 0.1);
    tuners[i]->round_ran({1, 0.002 + 1.6e6 / 12.5e6, 1600000, 0, 0, true});
    EXPECT_FALSE(tuners[i]->before_round(2, std::vector<float>(1000, 1.0f)));
    EXPECT_DOUBLE_EQ(codecs[i]->ratio(), 0.01) << "the plan's ratio after the probe";
    const double step = i == 2 ? 0.010 : 0.004;
    // The others wait for node 2 in their rounds: theirs look longer.
    const double round = 0.006 + (i == 2 ? 0 : 0.024);
    // Before the epoch's last round: node i's model is 1 + i/10 everywhere.
    tuners[i]->before_round(3, std::vector<float>(1000, 1.0f + 0.1f * static_cast<float>(i)));
    for (uint64_t k = 2; k <= 3; ++k) {
      tuners[i]->round_ran({k, round, 50000, 4 * step, 4, false});
      if (k < 3) {
        EXPECT_EQ(tuners[i]->next_period(k, 0ms, [] {}), 4u);
      }
    }
  }
  // After round 4 the plan is due: every node waits for the others' reports.
  std::vector<uint64_t> periods(kNodes);
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < kNodes; ++i)
    threads.emplace_back([&, i] {
      EXPECT_EQ(tuners[i]->next_period(3, 0ms, [] {}), 4u);
      tuners[i]->round_ran({4, 0.006, 50000, 0.04, 4, false});
      periods[i] = tuners[i]->next_period(4, 5s, [&] { r[i]->poll(5ms); });
    });
  for (auto& th : threads) th.join();
  for (uint32_t i = 0; i < kNodes; ++i) {
    EXPECT_EQ(periods[i], 8u) << "node " << i << ": " << tuners[i]->plan().reason;
    EXPECT_DOUBLE_EQ(codecs[i]->ratio(), 0.003) << "node " << i;
    EXPECT_EQ(tuners[i]->plan().reason, tuners[0]->plan().reason);
  }
  // Mean 1.1: squared distances 0.01, 0 and 0.01 over 3 nodes, against 1.21 (per entry).
  const double consensus = std::sqrt(0.02 / 3 / 1.21);
  for (uint32_t i = 0; i < kNodes; ++i) {
    std::map<std::string, double> g;
    std::map<std::string, std::string> alias;
    for (const auto& gauge : tuners[i]->gauges()) {
      g[gauge.name] = gauge.value;
      alias[gauge.name] = gauge.alias;
    }
    EXPECT_EQ(g["gossipd_tune_period_steps"], 8.0);
    EXPECT_NEAR(g["gossipd_tune_consensus_distance_ratio"], consensus, 1e-6) << "node " << i;
    EXPECT_EQ(alias["gossipd_tune_period_steps"], "gossipd_tune_period") << "kept one release";
  }
}

// A peer that never reports: the plan stays, after a bounded wait, and the next plan
// does not wait for it again.
TEST(Tune, AMissingReportKeepsThePlanAndIsNotWaitedForAgain) {
  const std::string ep0 = "tcp://127.0.0.1:" + std::to_string(free_port());
  const std::string ep1 = "tcp://127.0.0.1:" + std::to_string(free_port());
  auto t = peers::ZmqTransport::create(0, ep0, {{1, ep1, ""}}).value();
  peers::Router router(*t);
  TuneSettings s = ladder();
  s.every = 2;
  s.ratios = {0.0};
  Tuner tuner(router, s, 4, nullptr);
  EXPECT_TRUE(tuner.before_round(1, std::vector<float>(10, 1.0f))) << "no ratio: a raw probe";
  tuner.round_ran({1, 0.1, 1600000, 0, 0, true});
  tuner.round_ran({2, 0.006, 50000, 0.04, 4, false});
  tuner.round_ran({3, 0.006, 50000, 0.04, 4, false});
  const auto t0 = std::chrono::steady_clock::now();
  tuner.round_ran({4, 0.006, 50000, 0.04, 4, false});
  EXPECT_EQ(tuner.next_period(4, 200ms, [&] { router.poll(5ms); }), 4u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);  // the wait is bounded
  // The next epoch's plan does not wait for the peer that withheld its report.
  for (uint64_t k = 5; k <= 6; ++k) tuner.round_ran({k, 0.006, 50000, 0.04, 4, false});
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(tuner.next_period(6, 2s, [&] { router.poll(5ms); }), 4u);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 500ms);
}

}  // namespace
}  // namespace gossip::daemon
