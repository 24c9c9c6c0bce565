// Tensor-parallel overlap in the simulator (docs/sim.md, "Tensor-parallel overlap"): with
// explicit tp, a stage with an overlap mode runs each action's inner schedule as one exec per
// compute piece and one ring all-reduce per collective. On one node (tp inside NVSwitch) the
// iteration must match the evaluator's, overlap must beat blocking, Oases' fine-grained
// recomputation must move fewer tp bytes than Merak's, and bad mode names exit 2.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "costmodel/estimate.h"
#include "costmodel/evaluator.h"
#include "presets/load.h"
#include "helpers.h"
#include "schedules/io.h"
#include "schedules/lower.h"
#include "schedules/tp_overlap.h"
#include "sim/simulate.h"
#include "tests/sim_helpers.h"

namespace stagecraft {
namespace {

using costmodel::RecomputePolicy;
using schedules::TpOverlap;

const TpOverlap kModes[] = {TpOverlap::Blocking, TpOverlap::Merak, TpOverlap::CrossPass, TpOverlap::Oases};

// One node of 8 H100s: tp 4 x pp 2, so every tp collective and pipeline hop stays on NVSwitch.
costmodel::ClusterSpec one_node() {
  auto c = presets::load_cluster("h100-nvl-ib-64");
  c.nodes = 1;
  return c;
}

costmodel::ParallelPlan plan(TpOverlap mode, RecomputePolicy rc) {
  costmodel::ParallelPlan p = test::plan_of(1, 4, 2, 8);
  p.microbatch_size = 2;  // even: the overlap modes split it into two sub-batches
  p.recompute = rc;
  p.tp_overlap = mode;
  return p;
}

costmodel::Estimate estimate(TpOverlap mode, RecomputePolicy rc) {
  return costmodel::estimate(presets::load_model("gpt3-7.5b"), one_node(), plan(mode, rc));
}

sim::SimResult simulate(const costmodel::Estimate& e, bool record = false) {
  return test::simulate_estimate(e, sim::TpComm::Explicit, record);
}

// Bytes one GPU sends in tensor-parallel flows during the reported iteration.
double tp_bytes(const sim::SimResult& r) {
  double sum = 0;
  for (const sim::NetSpan& n : r.net_spans)
    if (n.kind == sim::CommKind::TensorParallel && n.src_gpu == 0) sum += n.bytes;
  return sum;
}

std::string label(TpOverlap m, RecomputePolicy rc) {
  return std::string(schedules::tp_overlap_name(m)) + (rc == RecomputePolicy::Full ? " full" : " none");
}

// A ring all-reduce over the stage's 4 GPUs of `samples` samples' (s, h) at 16 bits on NVSwitch,
// 2(n-1)/n S / (450 GB/s x 0.82) + 2(n-1) x 2 us (comm.h).
double ring_s(int samples) { return 1.5 * samples * 2048 * 4096 * 2 / (450e9 * 0.82) + 6 * 2e-6; }

// Collectives of one microbatch of a stage of `layers` layers left on the compute path, by hand:
// blocking, each of F's, B's (and R's) 2 per layer; split into two sub-batches, the last one of
// each sub-pipelined chain: F's and B's (R joined to B), or with Merak's barriers around each
// recomputed layer F's and each layer's R's and B's.
int exposed_collectives(TpOverlap m, RecomputePolicy rc, int layers) {
  const bool full = rc == RecomputePolicy::Full;
  if (m == TpOverlap::Blocking) return (full ? 3 : 2) * 2 * layers;
  return m == TpOverlap::Merak && full ? 1 + 2 * layers : 2;
}

// Rank 0 (18 of GPT-3 7.5B's 36 layers, 8 microbatches): the iteration and the exposed collectives.
TEST(SimTpOverlap, AgreesWithTheEvaluatorOnOneNode) {
  for (RecomputePolicy rc : {RecomputePolicy::None, RecomputePolicy::Full})
    for (TpOverlap m : kModes) {
      const auto e = estimate(m, rc);
      const auto r = simulate(e);
      EXPECT_NEAR(r.eval.iteration_time_s, e.eval.iteration_time_s, 0.02 * e.eval.iteration_time_s) << label(m, rc);
      const double want = 8 * exposed_collectives(m, rc, 18) * ring_s(m == TpOverlap::Blocking ? 2 : 1);
      EXPECT_NEAR(r.exposed_tp_comm_s[0], want, 1e-4 * want) << label(m, rc);
    }
}

TEST(SimTpOverlap, OverlapIsFasterThanBlocking) {
  for (RecomputePolicy rc : {RecomputePolicy::None, RecomputePolicy::Full}) {
    const auto blocking = simulate(estimate(TpOverlap::Blocking, rc));
    for (TpOverlap m : {TpOverlap::Merak, TpOverlap::CrossPass, TpOverlap::Oases}) {
      const auto r = simulate(estimate(m, rc));
      EXPECT_LT(r.eval.iteration_time_s, 0.95 * blocking.eval.iteration_time_s) << label(m, rc);
      EXPECT_LT(r.exposed_tp_comm_s[0], 0.5 * blocking.exposed_tp_comm_s[0]) << label(m, rc);
    }
  }
  // With recomputation, joining it freely to the backward hides more than Merak's barriers.
  const auto merak = simulate(estimate(TpOverlap::Merak, RecomputePolicy::Full));
  const auto cross = simulate(estimate(TpOverlap::CrossPass, RecomputePolicy::Full));
  EXPECT_LT(cross.eval.iteration_time_s, merak.eval.iteration_time_s);
}

// Per microbatch and stage, Merak with full recomputation runs 2 collectives per layer and
// sub-batch in F, in R and in B; Oases' recomputation repeats none: 2/3 of Merak's bytes.
// Each is a ring all-reduce of the sub-batch's buffer: every GPU sends 2(t-1)/t of it.
TEST(SimTpOverlap, OasesMovesFewerTensorParallelBytesThanMerak) {
  const auto em = estimate(TpOverlap::Merak, RecomputePolicy::Full);
  const auto eo = estimate(TpOverlap::Oases, RecomputePolicy::Full);
  const double merak = tp_bytes(simulate(em, true)), oases = tp_bytes(simulate(eo, true));
  const auto& st = em.costs.stages[0];
  const int t = em.plan.tp, collectives = 3 * 2 * st.layers * st.inner.sub_batches;
  const double want = em.plan.num_microbatches * collectives * 2.0 * (t - 1) / t * st.inner.comm_bytes;
  EXPECT_NEAR(merak, want, 1e-6 * want);
  EXPECT_NEAR(oases, want * 2 / 3, 1e-6 * want);
  // Without recomputation both move the same bytes.
  const double mn = tp_bytes(simulate(estimate(TpOverlap::Merak, RecomputePolicy::None), true));
  const double on = tp_bytes(simulate(estimate(TpOverlap::Oases, RecomputePolicy::None), true));
  EXPECT_NEAR(mn, on, 1e-9 * mn);
}

// The trace shows the inner schedule: a compute span per piece (more than the actions) and a
// tensor-parallel flow per collective.
TEST(SimTpOverlap, TraceShowsPiecesAndTheirCollectives) {
  const auto e = estimate(TpOverlap::Oases, RecomputePolicy::None);
  const auto r = simulate(e, true);
  size_t compute_spans = 0, actions = 0, flows = 0;
  for (const auto& s : r.eval.spans)
    if (s.stream == costmodel::Stream::Compute && s.rank == 0 && s.iteration == 2) ++compute_spans;
  for (const auto& a : e.schedule.actions[0])
    if (schedules::is_compute(a.op)) ++actions;
  for (const auto& n : r.net_spans)
    if (n.kind == sim::CommKind::TensorParallel && n.src_gpu == 0) ++flows;
  const auto& st = e.costs.stages[0];
  EXPECT_GT(compute_spans, 10 * actions);
  EXPECT_EQ(flows, static_cast<size_t>(e.plan.num_microbatches * 2 * (2 * 2 * st.layers)));  // F and B, 2 sub-batches
}

// Blocking stages can run their inner schedules too (SimOptions::inner_blocking): the same
// times as one aggregated ring after each action, also where pipeline transfers and dp rings
// share links (dp 8 over the nodes' NICs), with many more activities.
TEST(SimTpOverlap, BlockingInnerScheduleMatchesTheAggregatedRing) {
  auto p = plan(TpOverlap::Blocking, RecomputePolicy::Full);
  p.dp = 8;
  const auto e = costmodel::estimate(presets::load_model("gpt3-7.5b"), presets::load_cluster("h100-nvl-ib-64"), p);
  sim::SimOptions o;
  o.tp_comm = sim::TpComm::Explicit;
  const auto ring = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, o);
  o.inner_blocking = true;
  const auto pieces = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, o);
  EXPECT_NEAR(pieces.eval.iteration_time_s, ring.eval.iteration_time_s, 1e-9 * ring.eval.iteration_time_s);
  EXPECT_GT(pieces.activities, 5 * ring.activities);
}

// Folded tp keeps the cost table's (overlap-aware) durations: the evaluator's iteration, and
// only what the inner schedule leaves unhidden as exposed tp time.
TEST(SimTpOverlap, FoldedUsesTheOverlapAwareDurations) {
  sim::SimOptions o;
  o.tp_comm = sim::TpComm::Folded;
  std::vector<double> exposed;
  for (TpOverlap m : kModes) {
    const auto e = estimate(m, RecomputePolicy::Full);
    const auto r = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, o);
    EXPECT_NEAR(r.eval.iteration_time_s, e.eval.iteration_time_s, 1e-6 * e.eval.iteration_time_s) << label(m, RecomputePolicy::Full);
    exposed.push_back(r.exposed_tp_comm_s[0]);
  }
  for (size_t i = 1; i < exposed.size(); ++i) EXPECT_LT(exposed[i], 0.5 * exposed[0]);
}

// A planner's per-stage modes, and an imported DualPipeV schedule (OVERLAP_F_B actions run the
// forward's inner schedule, then the backward's): still the evaluator's iteration on one node.
TEST(SimTpOverlap, PerStageModesAndOverlappedPairsAgree) {
  auto p = plan(TpOverlap::Blocking, RecomputePolicy::Full);
  p.stage_tp_overlap = {TpOverlap::Oases, TpOverlap::Blocking};
  const auto e = costmodel::estimate(presets::load_model("gpt3-7.5b"), one_node(), p);
  const auto r = simulate(e);
  EXPECT_NEAR(r.eval.iteration_time_s, e.eval.iteration_time_s, 0.02 * e.eval.iteration_time_s);

  auto dv = plan(TpOverlap::Oases, RecomputePolicy::None);
  dv.pp = 4;
  dv.num_microbatches = 10;
  auto cluster = one_node();
  cluster.gpus_per_node = 16;
  const auto s = schedules::lower(schedules::load_schedule_file(test::data_path("pytorch/dualpipev_4rank_10mb.csv")));
  const auto model = presets::load_model("gpt3-7.5b");
  const auto costs = costmodel::analytic_cost_table(model, cluster, dv, s);
  const double want = costmodel::Evaluator(s).evaluate(costs).iteration_time_s;
  sim::SimOptions o;
  o.tp_comm = sim::TpComm::Explicit;
  const auto got = sim::simulate(s, costs, cluster, dv, o);
  EXPECT_NEAR(got.eval.iteration_time_s, want, 0.02 * want);
}

// From the CLI, on 64 GPUs (dp 8: data-parallel rings over the NICs share the run).
TEST(SimTpOverlap, CliSimulatesAModeAndRefusesABadOne) {
  const std::string config = "simulate --model gpt3-7.5b --cluster h100-nvl-ib-64 --tp 4 --pp 2 --dp 8 --microbatch-size 2 "
                             "--microbatches 8 --iterations 2 --json --tp-overlap ";
  auto bad = test::run_cli(config + "bogus");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--tp-overlap"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("bogus"), std::string::npos) << bad.err;
  auto blocking = test::run_cli(config + "blocking");
  auto oases = test::run_cli(config + "oases");
  ASSERT_EQ(blocking.exit_code, 0) << blocking.err;
  ASSERT_EQ(oases.exit_code, 0) << oases.err;
  auto jb = nlohmann::json::parse(blocking.out), jo = nlohmann::json::parse(oases.out);
  EXPECT_EQ(jo.at("plan").at("tp_overlap"), "oases");
  EXPECT_LT(jo.at("iteration_time_s").get<double>(), 0.95 * jb.at("iteration_time_s").get<double>());
}

}  // namespace
}  // namespace stagecraft

namespace stagecraft {
namespace {

// Transformer Engine's chunked overlap (te): the simulator runs each block's collective as the
// two flows the inner schedule issues (n-1 of n chunks beside the compute, the last after it)
// and agrees with the evaluator on one node, with and without recomputation, moving each
// collective's bytes once.
TEST(SimTpOverlap, TeChunksAgreeWithTheEvaluator) {
  for (RecomputePolicy rc : {RecomputePolicy::None, RecomputePolicy::Full}) {
    costmodel::ParallelPlan p = plan(TpOverlap::Te, rc);
    p.sequence_parallel = true;
    p.stack = "megatron-core-te";
    const auto e = costmodel::estimate(presets::load_model("gpt3-7.5b"), one_node(), p);
    const sim::SimResult r = simulate(e, true);
    EXPECT_NEAR(r.eval.iteration_time_s, e.eval.iteration_time_s, 0.01 * e.eval.iteration_time_s) << label(TpOverlap::Te, rc);
    costmodel::ParallelPlan pb = p;
    pb.tp_overlap = TpOverlap::Blocking;
    const auto eb = costmodel::estimate(presets::load_model("gpt3-7.5b"), one_node(), pb);
    EXPECT_NEAR(tp_bytes(r), tp_bytes(simulate(eb, true)), 1e-6 * tp_bytes(r)) << label(TpOverlap::Te, rc);
    EXPECT_LT(e.eval.iteration_time_s, eb.eval.iteration_time_s);
  }
}

}  // namespace
}  // namespace stagecraft
