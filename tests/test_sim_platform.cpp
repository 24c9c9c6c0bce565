// The simulator's platform: simulated links take latency + bytes / bandwidth (the network
// model is configured, not LV08's defaults), XML platforms load with their GPU hosts marked,
// and bad platforms or deadlocking schedules fail with InputError.
#include <gtest/gtest.h>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "helpers.h"
#include "schedules/error.h"
#include "sim/simulate.h"

namespace stagecraft {
namespace {

using costmodel::Stream;

constexpr double kLatency_s = 1e-3;
constexpr double kBandwidth_Bps = 1e9;
constexpr double kBytes = 5e8;

// Two GPUs, one per node (inter = true) or both on one node, one pipeline stage each.
struct TwoGpus {
  costmodel::ClusterSpec cluster;
  costmodel::ParallelPlan plan;
  schedules::Schedule schedule;
  costmodel::CostTable costs;
};

TwoGpus two_gpus(bool inter) {
  TwoGpus s;
  s.cluster = presets::load_cluster("h100-nvl-ib-64");
  s.cluster.nodes = inter ? 2 : 1;
  s.cluster.gpus_per_node = inter ? 1 : 2;
  s.cluster.nics_per_node = 1;
  s.cluster.inter_node_latency_s = s.cluster.intra_node_latency_s = kLatency_s;
  s.cluster.inter_node_bandwidth_Bps = s.cluster.intra_node_bandwidth_Bps = kBandwidth_Bps;
  s.cluster.inter_node_bus_efficiency = s.cluster.intra_node_bus_efficiency = 1;  // kBandwidth_Bps is what a transfer gets
  s.plan.pp = 2;
  s.plan.num_microbatches = 2;
  s.schedule = costmodel::plan_schedule(s.plan);
  s.costs = costmodel::unit_cost_table(s.schedule, {});
  s.costs.stages[0].send_f_s = kLatency_s + kBytes / kBandwidth_Bps;
  s.costs.stages[1].send_b_s = kLatency_s + kBytes / kBandwidth_Bps;
  s.costs.stages[0].send_f_bytes = s.costs.stages[1].send_b_bytes = kBytes;  // what the simulator moves
  return s;
}

// Durations of the last iteration's spans of one stream of rank 0.
std::vector<double> durations(const sim::SimResult& r, Stream st) {
  int last = 0;
  for (const auto& sp : r.eval.spans) last = std::max(last, sp.iteration);
  std::vector<double> out;
  for (const auto& sp : r.eval.spans)
    if (sp.rank == 0 && sp.stream == st && sp.iteration == last) out.push_back(sp.end_s - sp.start_s);
  return out;
}

void expect_link_timing(bool inter) {
  TwoGpus s = two_gpus(inter);
  sim::SimOptions o;
  o.record = true;
  sim::SimResult r = sim::simulate(s.schedule, s.costs, s.cluster, s.plan, o);
  auto sends = durations(r, Stream::P2P);
  ASSERT_EQ(sends.size(), 2u);
  const double expected = kLatency_s + kBytes / kBandwidth_Bps;
  for (double d : sends) EXPECT_NEAR(d, expected, 0.01 * expected) << (inter ? "inter-node" : "intra-node");
  for (double d : durations(r, Stream::Compute)) EXPECT_TRUE(std::abs(d - 1) < 1e-6 || std::abs(d - 2) < 1e-6 || d == 0) << d;
  costmodel::Evaluator ev(s.schedule);
  EXPECT_NEAR(r.eval.iteration_time_s, ev.evaluate(s.costs).iteration_time_s, 1e-3);
}

TEST(SimPlatform, InterNodeTransferTakesLatencyPlusBytesOverBandwidth) { expect_link_timing(true); }
TEST(SimPlatform, IntraNodeTransferTakesLatencyPlusBytesOverBandwidth) { expect_link_timing(false); }

TEST(SimPlatform, XmlPlatformUsesItsOwnLinks) {
  TwoGpus s = two_gpus(true);
  sim::SimOptions o;
  o.record = true;
  o.platform_file = test::data_path("sim/two_gpus.xml");
  sim::SimResult r = sim::simulate(s.schedule, s.costs, s.cluster, s.plan, o);
  const double expected = 100e-6 + kBytes / 10e9;  // the file's link: 10 GB/s, 100 us
  for (double d : durations(r, Stream::P2P)) EXPECT_NEAR(d, expected, 0.01 * expected);
  EXPECT_EQ(r.busiest_link.name.rfind("wire", 0), 0u) << r.busiest_link.name;
}

void expect_input_error(const TwoGpus& s, const sim::SimOptions& o, const std::string& needle) {
  try {
    sim::simulate(s.schedule, s.costs, s.cluster, s.plan, o);
    FAIL() << "expected InputError containing '" << needle << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(SimPlatform, HostCountMismatchIsRefused) {
  sim::SimOptions o;
  o.platform_file = test::data_path("sim/three_gpus.xml");
  expect_input_error(two_gpus(true), o, "stagecraft_gpu");
}

TEST(SimPlatform, ZeroBandwidthLinksAreRefused) {
  sim::SimOptions o;
  o.platform_file = test::data_path("sim/zero_bandwidth.xml");
  expect_input_error(two_gpus(true), o, "bandwidth");
  TwoGpus s = two_gpus(true);
  s.cluster.inter_node_bandwidth_Bps = 0;
  expect_input_error(s, {}, "inter_node_bandwidth_Bps");
}

TEST(SimPlatform, MissingPlatformFileIsRefused) {
  sim::SimOptions o;
  o.platform_file = "no/such/platform.xml";
  expect_input_error(two_gpus(true), o, "no/such/platform.xml");
}

TEST(SimDeadlock, NamesTheRanksAndWhatTheyWaitFor) {
  TwoGpus s = two_gpus(true);
  auto parse = [](std::vector<std::string> texts) {
    std::vector<schedules::Action> out;
    for (const auto& t : texts) out.push_back(schedules::parse_action(t));
    return out;
  };
  // Rank 0 waits for the gradient before sending the activation that produces it.
  s.schedule.num_microbatches = 1;
  s.schedule.actions = {parse({"0F0", "0RECV_B0", "0B0", "0SEND_F0", "0REDUCE_GRAD", "OPTIMIZER"}),
                        parse({"1RECV_F0", "1F0", "1B0", "1SEND_B0", "1REDUCE_GRAD", "OPTIMIZER"})};
  try {
    sim::simulate(s.schedule, s.costs, s.cluster, s.plan);
    FAIL() << "expected a deadlock";
  } catch (const InputError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("deadlocks"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0 (iteration 0) waits at step 2 (0B0)"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1 (iteration 0) waits at step 1 (1F0)"), std::string::npos) << m;
    EXPECT_NE(m.find("1SEND_B0 from rank 1 to rank 0"), std::string::npos) << m;
  }
}

// One flow per tensor-parallel group (tp lanes aggregated over links tp times wider) must give
// the same times as one flow per GPU, also where flows share links: dp rings and pipeline
// transfers on the NICs (tp 8, one NIC per GPU), and two tp-4 groups sharing a node's 4 NICs.
void expect_aggregation_exact(costmodel::ClusterSpec c, costmodel::ParallelPlan p, sim::TpComm tp_comm) {
  auto e = costmodel::estimate(presets::load_model("gpt3-7.5b"), c, p);
  sim::SimOptions on, off;
  on.tp_comm = off.tp_comm = tp_comm;
  off.aggregate_tp = false;
  sim::SimResult a = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, on);
  sim::SimResult b = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, off);
  EXPECT_LT(a.activities, b.activities);
  EXPECT_NEAR(a.eval.iteration_time_s, b.eval.iteration_time_s, 1e-6 * b.eval.iteration_time_s);
  EXPECT_NEAR(a.busiest_link.utilisation, b.busiest_link.utilisation, 1e-6);
  for (size_t i = 0; i < a.eval.exposed_dp_comm_s.size(); ++i)
    EXPECT_NEAR(a.eval.exposed_dp_comm_s[i], b.eval.exposed_dp_comm_s[i], 1e-9);
}

TEST(SimPlatform, TpLaneAggregationMatchesPerGpuFlows) {
  costmodel::ClusterSpec c = presets::load_cluster("h100-nvl-ib-64");
  c.nodes = 4;
  costmodel::ParallelPlan p;
  p.dp = 2;
  p.tp = 8;
  p.pp = 2;
  p.num_microbatches = 4;
  expect_aggregation_exact(c, p, sim::TpComm::Folded);
  expect_aggregation_exact(c, p, sim::TpComm::Explicit);
  c.nics_per_node = 4;  // groups of 4 GPUs: two per node, on the same 4 NICs
  p.tp = 4;
  p.dp = 4;
  expect_aggregation_exact(c, p, sim::TpComm::Folded);
}

}  // namespace
}  // namespace stagecraft
