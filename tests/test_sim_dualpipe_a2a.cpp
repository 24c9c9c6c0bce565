// DualPipe's overlapped pairs with expert parallelism in the simulator (sim/exchange.cpp
// pair_all_to_alls): each OVERLAP_F_B runs its forward half's and its backward half's all-to-alls
// as flows among its ep group, beside its compute (the pair's rule, costmodel/overlapped_pair.h),
// and ends when both are done. Where nothing else shares their links the evaluator's time within
// 1%; where pipeline transfers cross the NICs the all-to-alls stream through, the simulator is
// later by what those transfers put on the NICs; the flows of a pair by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "costmodel/estimate.h"
#include "costmodel/overlapped_pair.h"
#include "presets/load.h"
#include "sim/simulate.h"
#include "tests/helpers.h"

namespace stagecraft {
namespace {

using schedules::Action;
using schedules::Op;

// Mixtral 8x7B cut to 8 layers (every one MoE), tp 1, dp = ep = 8, pp 2, 8 microbatches.
costmodel::Estimate mixtral(const costmodel::ClusterSpec& c, const std::string& schedule) {
  costmodel::ModelSpec m = presets::load_model("mixtral-8x7b");
  m.num_layers = 8;
  costmodel::ParallelPlan p = test::plan_of(8, 1, 2, 8);
  p.ep = 8;
  p.schedule = schedule;
  return costmodel::estimate(m, c, p);
}

// h100-ib-1024 cut to `nodes` nodes of `gpus` GPUs, one NIC per GPU.
costmodel::ClusterSpec cluster(int nodes, int gpus) {
  costmodel::ClusterSpec c = test::cluster_of("h100-ib-1024", nodes);
  c.gpus_per_node = gpus;
  c.nics_per_node = gpus;
  return c;
}

// The pair's compute and communication as the cost table prices them (its halves' own stages).
costmodel::OverlappedPair pair_of(const costmodel::Estimate& e, const Action& a) {
  const costmodel::StageCost& f = e.costs.stages[static_cast<size_t>(a.stage)];
  const costmodel::StageCost& b = e.costs.stages[static_cast<size_t>(a.b_stage)];
  const double fa = f.moe.exposed_f_s, ba = b.moe.exposed_b_s;
  return costmodel::overlapped_pair(f.f_s - fa + (a.b_op == Op::I ? b.i_s : b.b_s) - ba, fa + ba, e.cluster.gpu_sms);
}

// Whether every pair of the schedule is bound by its all-to-alls (comm_s > busy_s).
bool pairs_comm_bound(const costmodel::Estimate& e) {
  bool all = true;
  for (const auto& list : e.schedule.actions)
    for (const Action& a : list)
      if (a.op == Op::OVERLAP_F_B) all = all && pair_of(e, a).comm_s > pair_of(e, a).busy_s;
  return all;
}

sim::SimResult simulate(const costmodel::Estimate& e) {
  sim::SimOptions o;
  o.iterations = 2;
  o.record = true;
  return sim::simulate(e.schedule, e.costs, e.cluster, e.plan, o);
}

// (1) The ep group inside a node (8 GPUs, NVSwitch ports), the pipeline ranks on two nodes (their
// transfers on the NICs): no link carries anything but one kind of flow at a time. At the
// preset's 450 GB/s the pairs are compute-bound; at 10 GB/s per port they are bound by their
// all-to-alls, and the iteration follows the flows.
TEST(SimDualPipeAllToAll, AgreesWithTheEvaluatorWhereNothingShares) {
  for (double port_Bps : {450e9, 10e9})
    for (const std::string schedule : {"dualpipev", "dualpipe"}) {
      costmodel::ClusterSpec c = cluster(2, 8);
      c.intra_node_bandwidth_Bps = port_Bps;
      const costmodel::Estimate e = mixtral(c, schedule);
      const sim::SimResult r = simulate(e);
      SCOPED_TRACE(schedule + " port " + std::to_string(port_Bps));
      EXPECT_EQ(pairs_comm_bound(e), port_Bps < 100e9);
      std::printf("[figures] %s port %.0f GB/s: simulator %.4f s, evaluator %.4f s (%+.3f%%), pairs %s-bound\n",
                  schedule.c_str(), port_Bps / 1e9, r.eval.iteration_time_s, e.eval.iteration_time_s,
                  100 * (r.eval.iteration_time_s / e.eval.iteration_time_s - 1), pairs_comm_bound(e) ? "all-to-all" : "compute");
      EXPECT_NEAR(r.eval.iteration_time_s, e.eval.iteration_time_s, 0.01 * e.eval.iteration_time_s);
    }
}

// (3) The flows of one overlapped pair, by hand: each member of the ep group sends every other
// member its share of the forward half's 2 all-to-alls per MoE layer (dispatch, combine) and then
// of the backward half's 2 (their gradients): 2 (ep - 1) flows out of each GPU, in all
// (2 + 2) x layers x (in-node + cross-node bytes of one all-to-all). Flows are told to the action
// that issued them by time: the last compute span of GPU 0's rank starting at or before the flow.
TEST(SimDualPipeAllToAll, FlowsOfAPairByHand) {
  const costmodel::Estimate e = mixtral(cluster(4, 4), "dualpipev");  // the ep group over 2 nodes of 4
  const sim::SimResult r = simulate(e);
  const costmodel::MoeStage& moe = e.costs.stages[0].moe;
  ASSERT_EQ(moe.moe_layers, 2);  // 8 layers over 4 stages
  ASSERT_EQ(moe.layer.all_to_alls_f, 2);
  ASSERT_EQ(moe.layer.all_to_alls_b, 2);
  const double per_a2a = moe.layer.bytes.intra_node_bytes + moe.layer.bytes.cross_node_bytes;
  // s = 4096 tokens' 2 copies of h at 16 bits, half of them to the group's other node.
  ASSERT_DOUBLE_EQ(moe.layer.bytes.cross_node_bytes, 4096.0 * 2 * 4096 * 2 / 2);
  const int ep = 8;
  const double pair_bytes = (2 + 2) * 2 * per_a2a;  // 4 all-to-alls x 2 layers
  // GPU 0 is rank 0's dp 0: its compute spans in the last iteration, by start.
  const auto& list = e.schedule.actions[0];
  std::map<double, int> at;  // start -> position
  for (const costmodel::Span& s : r.eval.spans)
    if (s.rank == 0 && s.stream == costmodel::Stream::Compute && s.iteration == 1) at[s.start_s] = s.position;
  std::map<int, std::pair<int, double>> per_action;  // position -> (flows, bytes)
  std::map<int, double> first_flow;                  // position -> its first flow's start
  for (const sim::NetSpan& n : r.net_spans) {
    if (n.kind != sim::CommKind::ExpertParallel || n.src_gpu != 0 || n.iteration != 1) continue;
    auto it = at.upper_bound(n.start_s + 1e-12);
    ASSERT_NE(it, at.begin());
    const int pos = std::prev(it)->second;
    per_action[pos].first += 1;
    per_action[pos].second += n.bytes;
    first_flow.try_emplace(pos, n.start_s);
  }
  int pairs = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    const auto& [flows, bytes] = per_action[static_cast<int>(i)];
    if (a.op == Op::OVERLAP_F_B) {
      ++pairs;
      EXPECT_EQ(flows, 2 * (ep - 1)) << "position " << i;
      EXPECT_NEAR(bytes, pair_bytes, 1e-6 * pair_bytes) << "position " << i;
    } else if (a.op == Op::F || a.op == Op::B || a.op == Op::I) {
      EXPECT_EQ(flows, ep - 1) << "position " << i;  // the forward's or the backward's half alone
      EXPECT_NEAR(bytes, pair_bytes / 2, 1e-6 * pair_bytes) << "position " << i;
    } else {
      EXPECT_EQ(flows, 0) << "position " << i;  // W: none
    }
  }
  EXPECT_EQ(pairs, 11);  // rank 0's row: stagecraft schedule --schedule dualpipev --stages 2 --microbatches 8
  // Beside the compute: a pair's first flows start with its compute, not after it.
  for (const costmodel::Span& s : r.eval.spans)
    if (s.rank == 0 && s.stream == costmodel::Stream::Compute && s.iteration == 1 &&
        list[static_cast<size_t>(s.position)].op == Op::OVERLAP_F_B) {
      ASSERT_TRUE(first_flow.count(s.position));
      EXPECT_LT(first_flow[s.position], s.end_s) << "position " << s.position;
      EXPECT_NEAR(first_flow[s.position], s.start_s, 1e-6) << "position " << s.position;
    }
  std::printf("[figures] per pair out of GPU 0: %d flows, %.1f MB (2 x 2 x 2 all-to-alls of %.1f MB)\n", 2 * (ep - 1),
              pair_bytes / 1e6, per_a2a / 1e6);
}

// (2) Contention: nodes of 4 GPUs, one NIC each, at 2.5 GB/s, so an ep group of 8 spans two
// nodes and the cross-node half of its all-to-alls bounds every pair (rank 0 on nodes 0-1, rank
// 1 on nodes 2-3). Rank 1's two data-parallel reductions (stages 1 and 2, S bytes each) are
// issued right after its first pair, as overlapped reductions would be, so that they run beside
// the pairs that follow. The evaluator runs them on their own stream, hidden: its iteration does
// not change. The simulator puts their flows on the NICs the pairs' all-to-alls stream through.
// By hand: dp 8 over 2 nodes of 4 takes NCCL's ring with a channel per NIC (the evaluator's
// choice for S); channel c carries S/4 and crosses each node boundary once each way, each hop
// with 2(n - 1)/n x S/4 = 0.4375 S, through one NIC per node. The NICs stay busy with the
// all-to-alls while the pairs run (work-conserving), and every exchange waits for the whole ep
// group, so the pairs end later by what the rings put on one NIC: 2 x 0.4375 S / B.
// Beside it, what the simulator already adds without the reductions: each (0F;3B) pair of rank 0
// sends an activation and a gradient (P bytes each) to rank 1 at once through one NIC, each then
// taking 2 P / B where the evaluator gives each its link (5 such pairs followed by a pair that
// waits for them, and 3B6's gradient beside 0F7's activation: 11 P / B).
TEST(SimDualPipeAllToAll, DataParallelReductionsOnTheAllToAllsNicsDelayThePairs) {
  costmodel::ClusterSpec c = cluster(4, 4);
  c.inter_node_bandwidth_Bps = 2.5e9;
  const costmodel::Estimate e = mixtral(c, "dualpipev");
  ASSERT_TRUE(pairs_comm_bound(e));
  costmodel::Estimate moved = e;
  auto& list = moved.schedule.actions[1];
  std::vector<Action> reductions;
  for (auto it = list.begin(); it != list.end();)
    if (it->op == Op::REDUCE_GRAD) reductions.push_back(*it), it = list.erase(it);
    else ++it;
  ASSERT_EQ(reductions.size(), 2u);
  auto pair = std::find_if(list.begin(), list.end(), [](const Action& a) { return a.op == Op::OVERLAP_F_B; });
  ASSERT_NE(pair, list.end());
  list.insert(pair + 1, reductions.begin(), reductions.end());
  moved.eval = costmodel::Evaluator(moved.schedule).evaluate(moved.costs);
  EXPECT_NEAR(moved.eval.iteration_time_s, e.eval.iteration_time_s, 1e-9);  // hidden in the evaluator
  const sim::SimResult r0 = simulate(e), r = simulate(moved);
  const double S = e.costs.stages[1].grad_bytes - e.costs.stages[1].expert_grad_bytes, B = c.inter_node_achieved_Bps();
  ASSERT_NEAR(S, e.costs.stages[2].grad_bytes - e.costs.stages[2].expert_grad_bytes, 1e-6 * S);
  const double P = e.costs.stages[0].send_f_bytes;
  const double rings = 2 * 0.4375 * S / B, sends = 11 * P / B;
  const double margin = r.eval.iteration_time_s - moved.eval.iteration_time_s, from_rings = r.eval.iteration_time_s - r0.eval.iteration_time_s;
  std::printf("[figures] contention: simulator %.4f s, evaluator %.4f s (%+.2f%%), margin %.1f ms; of it the reductions "
              "%.1f ms (by hand 2 x 0.4375 S / B = 0.875 x %.1f MB / %.2f GB/s = %.1f ms) and the pairs' own sends "
              "%.1f ms (by hand 11 P / B = 11 x %.1f MB / %.2f GB/s = %.1f ms)\n",
              r.eval.iteration_time_s, moved.eval.iteration_time_s, 100 * margin / moved.eval.iteration_time_s, 1e3 * margin,
              1e3 * from_rings, S / 1e6, B / 1e9, 1e3 * rings, 1e3 * (r0.eval.iteration_time_s - e.eval.iteration_time_s),
              P / 1e6, B / 1e9, 1e3 * sends);
  EXPECT_GT(margin, 0.01 * moved.eval.iteration_time_s);  // beyond the agreement band
  EXPECT_NEAR(from_rings, rings, 0.15 * rings);
  EXPECT_NEAR(r0.eval.iteration_time_s - e.eval.iteration_time_s, sends, 0.05 * sends);
  // The pairs' all-to-alls are flows of their own, running beside the reductions: GPU 8 (rank 1,
  // dp 0; the trace holds dp 0's flows) sends across nodes while its collective stream is busy.
  double red_start = 1e30, red_end = 0;
  for (const costmodel::Span& sp : r.eval.spans)
    if (sp.rank == 1 && sp.iteration == 1 && sp.stream == costmodel::Stream::Collective)
      red_start = std::min(red_start, sp.start_s), red_end = std::max(red_end, sp.end_s);
  int beside = 0, crossing = 0;
  for (const sim::NetSpan& a : r.net_spans) {
    const bool out = a.kind == sim::CommKind::ExpertParallel && a.src_gpu == 8 && a.dst_gpu >= 12;
    crossing += out;
    beside += out && a.start_s < red_end && a.end_s > red_start;
  }
  // Some, and at most every one, of its cross-node flows (timing decides which).
  EXPECT_GT(beside, 0);
  EXPECT_LE(beside, crossing);
  std::printf("[figures] %d cross-node all-to-all flows out of GPU 8 run beside its reductions (%.3f-%.3f s)\n", beside,
              red_start, red_end);
}

}  // namespace
}  // namespace stagecraft
