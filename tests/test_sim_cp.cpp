// Context parallelism in the simulator: dp x cp ranks reduce the gradients together (one dp axis
// of dp x cp replicas, global ranks unchanged), each cp rank runs its share of the sequence with
// the ring's exposed time in its durations (costmodel/cp.h) and, with explicit tp, the ring's
// key/value chunks as a flow to the next cp rank beside the compute; the evaluator's time within
// 1%, the flows' bytes by hand, the reduced simulation equal to the full one, and a rank order
// that separates cp from dp refused.
#include <gtest/gtest.h>

#include <string>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "schedules/error.h"
#include "sim/simulate.h"
#include "tests/helpers.h"

namespace stagecraft {
namespace {

costmodel::Estimate llama(int nodes, int tp, int cp, int pp, int dp, int seq, int zero = 0) {
  costmodel::ModelSpec m = presets::load_model("llama3-8b");
  m.attention_kernel = costmodel::AttentionKernel::Fused;
  m.seq_length = seq;
  m.num_layers = 8;
  costmodel::ParallelPlan p = test::plan_of(dp, tp, pp, 4);
  p.cp = cp;
  p.zero = zero;
  p.recompute = costmodel::RecomputePolicy::Full;
  return costmodel::estimate(m, test::cluster_of("h100-ib-1024", nodes), p);
}

TEST(SimCp, AgreesWithTheEvaluator) {
  struct Case {
    int nodes, tp, cp, pp, dp, seq, zero;
  };
  for (const Case c : {Case{2, 4, 2, 2, 1, 16384, 0}, Case{8, 8, 2, 2, 2, 32768, 0}, Case{16, 8, 4, 2, 2, 65536, 1}}) {
    const std::string what = "cp " + std::to_string(c.cp) + " dp " + std::to_string(c.dp) + " zero " + std::to_string(c.zero);
    const costmodel::Estimate e = llama(c.nodes, c.tp, c.cp, c.pp, c.dp, c.seq, c.zero);
    sim::SimOptions o;
    o.iterations = 2;
    const sim::SimResult r = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, o);
    EXPECT_NEAR(r.eval.iteration_time_s, e.eval.iteration_time_s, 0.01 * e.eval.iteration_time_s) << what;
    // The cp ranks reduce their gradients even at dp 1: the cost table's reductions of rank 0's
    // stages and its parameter gather, as flows within 1%.
    double want = e.costs.param_gather_s.empty() ? 0 : e.costs.param_gather_s[0];
    for (int st = 0; st < e.schedule.num_stages; ++st)
      if (e.schedule.rank_of(st) == 0) want += e.costs.stages[static_cast<size_t>(st)].reduce_grad_s;
    EXPECT_GT(want, 0) << what;
    EXPECT_NEAR(r.eval.dp_comm_s[0], want, 0.01 * want) << what;
    o.symmetry = false;
    const sim::SimResult full = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, o);
    EXPECT_NEAR(r.eval.iteration_time_s, full.eval.iteration_time_s, 0.005 * full.eval.iteration_time_s) << what;
  }
}

// tp 8, cp 2, pp 1, dp 1 on 2 nodes, no recomputation: per microbatch GPU 0 sends its ring
// neighbour (GPU 8) every layer's K and V once forward, K, V, dK and dV once backward.
TEST(SimCp, RingFlowsCarryTheChunksByHand) {
  costmodel::Estimate e = llama(2, 8, 2, 1, 1, 16384);
  e = costmodel::estimate(e.model, e.cluster, [&] {
    costmodel::ParallelPlan p = e.plan;
    p.recompute = costmodel::RecomputePolicy::None;
    return p;
  }());
  const costmodel::CpLayer& ring = e.costs.stages[0].cp;
  ASSERT_EQ(ring.exchanges_f, 2);
  ASSERT_EQ(ring.exchanges_b, 4);
  sim::SimOptions o;
  o.iterations = 1;
  o.record = true;
  const sim::SimResult r = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, o);
  double sent = 0;
  for (const sim::NetSpan& n : r.net_spans)
    if (n.kind == sim::CommKind::ContextParallel && n.src_gpu == 0) {
      EXPECT_EQ(n.dst_gpu, 8);
      sent += n.bytes;
    }
  const double expected = 4.0 * 8 * (2 + 4) * ring.chunk_bytes;  // microbatches x layers x chunks
  EXPECT_NEAR(sent, expected, 1e-6 * expected);
  EXPECT_NEAR(r.eval.iteration_time_s, e.eval.iteration_time_s, 0.01 * e.eval.iteration_time_s);
}

TEST(SimCp, RankOrderSeparatingCpFromDpIsRefused) {
  costmodel::ModelSpec m = presets::load_model("llama3-8b");
  m.attention_kernel = costmodel::AttentionKernel::Fused;
  m.num_layers = 8;
  costmodel::ParallelPlan p = test::plan_of(2, 4, 1, 4);
  p.cp = 2;
  p.rank_order = "tp-dp-pp-cp";
  const costmodel::Estimate e = costmodel::estimate(m, test::cluster_of("h100-ib-1024", 2), p);
  const std::string err = test::error_of([&] { sim::simulate(e.schedule, e.costs, e.cluster, e.plan); });
  EXPECT_NE(err.find("plan.rank_order = 'tp-dp-pp-cp'"), std::string::npos) << err;
  EXPECT_NE(err.find("allowed"), std::string::npos) << err;
}

}  // namespace
}  // namespace stagecraft
