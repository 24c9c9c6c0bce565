// The simulator's what-ifs (sim/whatif.h, docs/whatif.md): a slow node, a degraded or failed
// NIC and a late rank simulated as the differing blocks of replicas plus one block standing for
// the identical ones agree with the full simulation within 0.5% at 512 and 4,096 GPUs; zero jitter gives
// the nominal times exactly; a seeded run repeats bit for bit; bad what-ifs are refused with
// the field, the value and what is allowed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "schedules/error.h"
#include "sim/simulate.h"
#include "sim/whatif.h"
#include "tests/helpers.h"
#include "tests/sim_helpers.h"

namespace stagecraft {
namespace {

costmodel::ClusterSpec cluster(int gpus_per_node, int nics_per_node, int gpus) { return test::h100_shaped(gpus_per_node, nics_per_node, gpus); }

// GPT-3 7.5B at tp 8 (a node), pp 2, dp 32: 512 GPUs, 64 nodes; node n holds pipeline rank
// n / 32 of replica n % 32.
costmodel::Estimate estimate_512(int nics_per_node = 8) {
  return costmodel::estimate(presets::load_model("gpt3-7.5b"), cluster(8, nics_per_node, 512), test::plan_of(32, 8, 2, 4));
}

struct Both {
  sim::WhatIfResult reduced, full;
};

Both run_both(const costmodel::Estimate& e, const sim::WhatIf& w) {
  sim::SimOptions o;
  Both b;
  b.reduced = sim::simulate_whatif(e, w, o, true);
  o.symmetry = false;
  b.full = sim::simulate_whatif(e, w, o);
  return b;
}

void expect_agree(const Both& b, const std::string& what) {
  EXPECT_LT(b.reduced.dp_simulated, b.reduced.dp_replicas) << what;  // reduced indeed
  EXPECT_EQ(b.full.dp_simulated, b.full.dp_replicas) << what;
  EXPECT_NEAR(b.reduced.first_iteration_s, b.full.first_iteration_s, 0.005 * b.full.first_iteration_s) << what;
  ASSERT_EQ(b.reduced.iteration_s.size(), b.full.iteration_s.size()) << what;
  for (size_t i = 0; i < b.full.iteration_s.size(); ++i)
    EXPECT_NEAR(b.reduced.iteration_s[i], b.full.iteration_s[i], 0.005 * b.full.iteration_s[i]) << what << " iteration " << i;
}

sim::WhatIf slow_node(int node, double factor) {
  sim::WhatIf w;
  w.slow.push_back({"node", node, 0, 1, factor, ""});
  return w;
}

sim::WhatIf nic(int node, int which, double factor) {
  sim::WhatIf w;
  w.nics.push_back({node, which, factor, ""});
  return w;
}

TEST(SimWhatIf, SlowNodeReducedAgreesWithFull) {
  const costmodel::Estimate e = estimate_512();
  const Both b = run_both(e, slow_node(37, 0.7));  // pipeline rank 1 of replica 5
  expect_agree(b, "slow node");
  EXPECT_GT(b.reduced.p50_s, 1.05 * b.reduced.nominal_s);  // the slow node sets the pace
}

TEST(SimWhatIf, DegradedAndFailedNicsAgreeWithFull) {
  const costmodel::Estimate e = estimate_512();
  const Both deg = run_both(e, nic(20, -1, 0.1));  // every NIC of node 20 at a tenth
  expect_agree(deg, "degraded NICs");
  EXPECT_GT(deg.reduced.p50_s, deg.reduced.nominal_s);
  const Both failed = run_both(e, nic(20, 3, 0));  // one NIC failed: its GPU's traffic moves
  expect_agree(failed, "failed NIC");
  EXPECT_GE(failed.reduced.p50_s, failed.reduced.nominal_s);
}

TEST(SimWhatIf, LateRankDelaysTheFirstIterationOnly) {
  const costmodel::Estimate e = estimate_512();
  sim::WhatIf w;
  w.late.push_back({100, 2.0, ""});
  w.iterations = 2;
  const Both b = run_both(e, w);
  expect_agree(b, "late rank");
  EXPECT_GT(b.reduced.first_iteration_s, b.reduced.nominal_s + 1.9);
  EXPECT_NEAR(b.reduced.p50_s, b.reduced.nominal_s, 0.005 * b.reduced.nominal_s);
}

// dp 256 reduces in NCCL's tree (a block of 8 replicas, sim/symmetry.h): the slow node's and the
// degraded NIC's blocks beside one clean block, 16 of 256 replicas, at 4,096 GPUs.
TEST(SimWhatIf, TreeReductionsAgreeAt4096Gpus) {
  const costmodel::Estimate e =
      costmodel::estimate(presets::load_model("gpt3-7.5b"), cluster(8, 8, 4096), test::plan_of(256, 8, 2, 4));
  const Both slow = run_both(e, slow_node(300, 0.7));  // pipeline rank 1 of replica 44
  expect_agree(slow, "slow node, 4,096 GPUs");
  EXPECT_EQ(slow.reduced.dp_simulated, 16);
  EXPECT_GT(slow.reduced.p50_s, 1.05 * slow.reduced.nominal_s);
  const Both deg = run_both(e, nic(300, -1, 0.25));
  expect_agree(deg, "degraded NICs, 4,096 GPUs");
  EXPECT_GT(deg.reduced.p50_s, deg.reduced.nominal_s);
}

// Two slow nodes in different blocks: both blocks and one clean block simulated.
TEST(SimWhatIf, TwoDifferingBlocksAgreeWithFull) {
  const costmodel::Estimate e = estimate_512();
  sim::WhatIf w = slow_node(3, 0.8);
  w.slow.push_back({"rank", 8 * 50 + 2, 0, 1, 0.6, ""});
  expect_agree(run_both(e, w), "two slow GPUs");
}

TEST(SimWhatIf, ZeroJitterGivesTheNominalTimesExactly) {
  const costmodel::Estimate e = estimate_512();
  sim::WhatIf w;
  w.jitter = {sim::JitterDist::Lognormal, 0.0, 5};
  w.iterations = 3;
  sim::SimOptions o;
  const sim::WhatIfResult r = sim::simulate_whatif(e, w, o);
  o.iterations = 4;
  const sim::SimResult nominal = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, o);
  ASSERT_EQ(r.iteration_s.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(r.iteration_s[i], nominal.iteration_times_s[i + 1]);
  EXPECT_EQ(r.iteration_s.back(), nominal.eval.iteration_time_s);
  EXPECT_EQ(r.first_iteration_s, nominal.iteration_times_s[0]);
}

TEST(SimWhatIf, SeededJitterRepeatsBitForBit) {
  costmodel::Estimate e = costmodel::estimate(presets::load_model("gpt3-7.5b"), cluster(8, 8, 64), test::plan_of(4, 8, 2, 4));
  sim::WhatIf w;
  w.jitter = {sim::JitterDist::Lognormal, 0.1, 7};
  w.iterations = 5;
  const sim::WhatIfResult a = sim::simulate_whatif(e, w, {}, true), b = sim::simulate_whatif(e, w, {});
  EXPECT_EQ(a.iteration_s, b.iteration_s);
  EXPECT_EQ(a.first_iteration_s, b.first_iteration_s);
  EXPECT_EQ(a.dp_simulated, 4);  // jitter: every replica differs
  EXPECT_LE(a.p50_s, a.p90_s);
  EXPECT_LE(a.p90_s, a.p99_s);
  EXPECT_NE(a.p50_s, a.nominal_s);
  w.jitter.seed = 8;
  EXPECT_NE(sim::simulate_whatif(e, w, {}).iteration_s, a.iteration_s);
  w.jitter.dist = sim::JitterDist::Normal;
  const sim::WhatIfResult n1 = sim::simulate_whatif(e, w, {}), n2 = sim::simulate_whatif(e, w, {});
  EXPECT_EQ(n1.iteration_s, n2.iteration_s);
}

// The draws have mean 1 and the stated coefficient of variation; normal draws stay positive.
TEST(SimWhatIf, JitterDrawsHaveTheStatedMoments) {
  for (sim::JitterDist d : {sim::JitterDist::Normal, sim::JitterDist::Lognormal}) {
    sim::JitterDraws draws({d, 0.2, 3}, 11);
    double sum = 0, sq = 0, lo = 1;
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
      const double x = draws.next();
      sum += x, sq += x * x, lo = std::min(lo, x);
    }
    const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
    EXPECT_NEAR(mean, 1.0, 0.003) << sim::jitter_dist_name(d);
    EXPECT_NEAR(sd, 0.2, 0.003) << sim::jitter_dist_name(d);
    // The smallest of 200,000 draws lies in the tail: below 3.5 standard deviations (each draw
    // there with probability 2.3e-4); normal draws are redrawn until positive, and a lognormal
    // one, exp(mu + sigma z) with sigma^2 = ln(1 + 0.2^2), mu = -sigma^2/2, is above 6 sigma
    // down (probability 2e-4 for any of them).
    const double sigma = std::sqrt(std::log(1 + 0.2 * 0.2)), mu = -sigma * sigma / 2;
    const bool normal = d == sim::JitterDist::Normal;
    EXPECT_GT(lo, normal ? 0.0 : std::exp(mu - 6 * sigma)) << sim::jitter_dist_name(d);
    EXPECT_LT(lo, normal ? 1 - 3.5 * 0.2 : std::exp(mu - 3.5 * sigma)) << sim::jitter_dist_name(d);
  }
  sim::JitterDraws none({sim::JitterDist::Lognormal, 0.0, 3}, 1);
  EXPECT_EQ(none.next(), 1.0);
}

TEST(SimWhatIf, PercentilesAreNearestRank) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  EXPECT_EQ(sim::percentile(v, 50), 50);
  EXPECT_EQ(sim::percentile(v, 90), 90);
  EXPECT_EQ(sim::percentile(v, 99), 99);
  EXPECT_EQ(sim::percentile({3.0}, 99), 3.0);
}

TEST(SimWhatIf, SlowFractionPicksTheStatedShareBySeed) {
  const costmodel::ClusterSpec c = cluster(8, 8, 512);
  sim::WhatIf w;
  w.slow.push_back({"fraction", 0, 0.01, 42, 0.5, ""});
  const sim::Resolved a = sim::resolve(w, c, 512), b = sim::resolve(w, c, 512);
  EXPECT_EQ(a.rate, b.rate);
  EXPECT_EQ(std::count(a.rate.begin(), a.rate.end(), 0.5), 5);  // round(0.01 x 512)
  w.slow[0].seed = 43;
  EXPECT_NE(sim::resolve(w, c, 512).rate, a.rate);
}

TEST(SimWhatIf, RefusesWhatItCannotPlace) {
  const costmodel::ClusterSpec c = cluster(8, 1, 64);
  auto has = [](const std::string& message, const std::string& needle) {
    EXPECT_NE(message.find(needle), std::string::npos) << message;
  };
  has(test::error_of([&] { sim::resolve(nic(3, 0, 0), c, 64); }), "no other route");
  has(test::error_of([&] { sim::resolve(slow_node(8, 0.5), c, 64); }), "allowed: [0, 7]");
  has(test::error_of([&] { sim::resolve(slow_node(1, 1.5), c, 64); }), "(0, 1]");
  has(test::error_of([] { sim::whatif_from_json(nlohmann::json::parse(R"({"slow": [{"rank": 1}]})"), "w.json"); }),
      "w.json: slow[0].factor");
  has(test::error_of([] { sim::whatif_from_json(nlohmann::json::parse(R"({"slwo": []})"), "w.json"); }), "unknown field");
  const sim::WhatIf w = sim::whatif_from_json(
      nlohmann::json::parse(R"({"slow": [{"node": 2, "factor": 0.5}], "nics": [{"node": 1, "nic": 0, "factor": 0.5}],
                               "late": [{"rank": 3, "delay_s": 0.1}],
                               "jitter": {"distribution": "normal", "cv": 0.05, "seed": 9}, "iterations": 10})"),
      "w.json");
  EXPECT_EQ(sim::whatif_from_json(sim::to_json(w), "again").samples(), 10);
  EXPECT_EQ(sim::to_json(sim::whatif_from_json(sim::to_json(w), "again")), sim::to_json(w));
}

// Issue 52: a NIC carries traffic between nodes only, so a NIC what-if on a plan whose GPUs are
// all on one node would change nothing: refused naming the entry (it printed 0% slowdown). And a
// NIC entry without "nic" (every NIC of the node) reads back as written (its JSON had nic -1,
// which the reader refused: `plan --whatif` failed after its search).
TEST(SimWhatIf, NicWhatIfsNeedTrafficBetweenNodes) {
  const costmodel::ClusterSpec c = cluster(8, 4, 64);
  sim::WhatIf w = nic(0, -1, 0.5);
  w.nics[0].source = "w.json: nics[0]";
  const std::string e = test::error_of([&] { sim::resolve(w, c, 8); });
  EXPECT_NE(e.find("w.json: nics[0]: NIC node = 0 (the plan's GPUs are all on node 0, and a NIC carries only traffic "
                   "between nodes"),
            std::string::npos) << e;
  EXPECT_NO_THROW(sim::resolve(w, c, 16));
  EXPECT_NO_THROW(sim::resolve(slow_node(0, 0.5), c, 8));  // compute what-ifs apply inside a node
  const nlohmann::json j = sim::to_json(w);
  EXPECT_FALSE(j.at("nics").at(0).contains("nic")) << j;
  EXPECT_EQ(sim::whatif_from_json(j, "again").nics.at(0).nic, -1);
  EXPECT_EQ(sim::to_json(sim::whatif_from_json(sim::to_json(nic(1, 2, 0.25)), "again")).at("nics").at(0).at("nic"), 2);
}

// `simulate` with what-if flags and a file: the JSON's what-if result, and bad input exits 2
// naming the flag, the value and what is allowed.
TEST(SimWhatIf, CommandLine) {
  const std::string cfg = "simulate --model gpt3-7.5b --cluster h100-ib-1024 --nodes 64 --tp 8 --pp 2 --dp 32 --microbatches 4 ";
  const std::string file = test::scratch_path("whatif.json");
  std::ofstream(file) << R"({"late": [{"rank": 100, "delay_s": 1.0}]})";
  auto r = test::run_cli(cfg + "--whatif " + file + " --slow-node 37:0.7 --iterations 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& w = j.at("whatif");
  EXPECT_EQ(w.at("spec").at("slow").size(), 1u);
  EXPECT_EQ(w.at("spec").at("late").size(), 1u);
  const auto& res = w.at("result");
  EXPECT_EQ(res.at("iteration_s").size(), 2u);
  EXPECT_GT(res.at("p50_s").get<double>(), res.at("nominal_s").get<double>());
  EXPECT_GT(res.at("first_iteration_s").get<double>(), res.at("p50_s").get<double>());
  EXPECT_LT(res.at("dp_simulated").get<int>(), 32);
  r = test::run_cli(cfg + "--slow-node 64:0.5");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--slow-node 64:0.5: slow node = 64 (allowed: [0, 63]"), std::string::npos) << r.err;
  r = test::run_cli(cfg + "--jitter gauss:0.1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--jitter gauss:0.1: unknown distribution"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace stagecraft
