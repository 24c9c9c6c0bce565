// The evaluator's semantics: transfers with rendezvous, receive prefetch, recompute waits,
// gradient reductions on their own stream, iterations, memory timeline, offload, deadlocks.
#include <gtest/gtest.h>

#include <map>

#include "costmodel/estimate.h"
#include "costmodel/evaluator.h"
#include "presets/load.h"
#include "drawing/trace.h"
#include "schedules/error.h"
#include "schedules/lower.h"
#include "schedules/registry.h"
#include "helpers.h"

using namespace stagecraft;
using namespace stagecraft::schedules;
using namespace stagecraft::costmodel;
using namespace stagecraft::drawing;

namespace {
Schedule gen(const char* name, int p, int m, int v = 0) { return test::compute_only(name, p, m, v); }
CostTable table(const Schedule& s, double send = 0) {
  CostTable t = unit_cost_table(s, {1, 2, 1, 1, 1});
  for (auto& sc : t.stages) sc.send_f_s = sc.send_b_s = send;
  return t;
}
EvalOptions one_iteration() {
  EvalOptions o;
  o.iterations = 1;
  return o;
}
}  // namespace

// Hand-computed timeline of 1F1B, p=2, m=2, F=1, B=2, each transfer 0.5 (see the comment in
// docs/evaluator.md): the receive of microbatch 1 is posted only after 1B0, so its transfer
// starts at 4.5 and the iteration ends at 10.5.
TEST(Evaluator, RendezvousTransfers) {
  Schedule s = lower(gen("1f1b", 2, 2));
  EvalResult r = Evaluator(s, one_iteration()).evaluate(table(s, 0.5));
  EXPECT_DOUBLE_EQ(r.iteration_time_s, 10.5);
  EXPECT_DOUBLE_EQ(r.compute_s[0], 6);
  EXPECT_DOUBLE_EQ(r.idle_s[1], 4.5);
}

// Posting receives one compute earlier hides the transfer of microbatch 1 under 1B0: 10.0.
TEST(Evaluator, PrefetchedReceivesHideTransfers) {
  LowerOptions pre;
  pre.recv_lookahead = 1;
  Schedule s = lower(gen("1f1b", 2, 2), pre);
  EvalResult r = Evaluator(s, one_iteration()).evaluate(table(s, 0.5));
  EXPECT_DOUBLE_EQ(r.iteration_time_s, 10.0);
}

// R after RECV_B waits for the gradient (Megatron); R before it runs early (Merak Sec. 5.1).
TEST(Evaluator, RecomputeWaitsOnlyWhenPlacedAfterTheReceive) {
  Schedule late = insert_recompute(lower(gen("1f1b", 2, 2)), {1.0, 0.0});
  Schedule early_c = insert_recompute(gen("1f1b", 2, 2), {1.0, 0.0});
  early_c.params["recompute_timing"] = "early";
  Schedule early = lower(early_c);
  EvalOptions o = one_iteration();
  double t_late = Evaluator(late, o).evaluate(table(late)).iteration_time_s;
  double t_early = Evaluator(early, o).evaluate(table(early)).iteration_time_s;
  // Late: rank 0 waits for the gradient of mb 0 (ready at 4), then R0 [4,5], B0 [5,7],
  // R1 [7,8] after the gradient of mb 1 arrives at 7, B1 [8,10].
  // Early: R0 [2,3] runs while rank 1 computes, B0 [4,6], R1 [6,7], B1 [7,9].
  EXPECT_DOUBLE_EQ(t_late, 10.0);
  EXPECT_DOUBLE_EQ(t_early, 9.0);
}

// Gradient reductions run on the communication stream; the optimizer waits for them.
TEST(Evaluator, ReductionsOverlapAndDelayTheOptimizer) {
  Schedule s = lower(gen("1f1b", 2, 2));
  CostTable t = table(s);
  t.stages[1].reduce_grad_s = 3;  // stage 1 finishes its backwards at 7, rank 0 at 9
  EvalResult r = Evaluator(s, one_iteration()).evaluate(t);
  EXPECT_DOUBLE_EQ(r.iteration_time_s, 10.0);
  EXPECT_DOUBLE_EQ(r.dp_comm_s[1], 3);
  EXPECT_DOUBLE_EQ(r.exposed_dp_comm_s[1], 3);
  // Stage 0's reduction of 1 after its last backward (9) also ends at 10.
  t.stages[0].reduce_grad_s = 1;
  EXPECT_DOUBLE_EQ(Evaluator(s, one_iteration()).evaluate(t).iteration_time_s, 10.0);
  t.stages[0].reduce_grad_s = 2;
  EXPECT_DOUBLE_EQ(Evaluator(s, one_iteration()).evaluate(t).iteration_time_s, 11.0);
}

// A reduction of an early-finishing stage hides under the other stages' compute.
TEST(Evaluator, ReductionHiddenUnderCompute) {
  Schedule s = lower(gen("looped-bfs", 1, 2, 2));  // stages 0 and 1 on one rank; stage 1's backwards first
  CostTable t = table(s);
  t.stages[1].reduce_grad_s = 3;  // starts after 1B0,1B1 (t=8), runs under 0B1,0B0 (t=8..12)
  EvalResult r = Evaluator(s, one_iteration()).evaluate(t);
  EXPECT_DOUBLE_EQ(r.iteration_time_s, 12.0);
  EXPECT_DOUBLE_EQ(r.exposed_dp_comm_s[0], 0.0);
}

// Several iterations: the steady-state period of 1F1B equals one iteration's makespan.
TEST(Evaluator, SteadyStateOverIterations) {
  Schedule s = lower(gen("1f1b", 4, 8));
  for (int k : {1, 2, 3, 5}) {
    EvalOptions o;
    o.iterations = k;
    EXPECT_DOUBLE_EQ(Evaluator(s, o).evaluate(table(s)).iteration_time_s, 3.0 * (8 + 4 - 1)) << k;
  }
}

// Memory follows the timeline: 1F1B stage i holds p-i microbatches; with full recompute it
// holds checkpoints plus one recomputed microbatch.
TEST(Evaluator, PeakMemoryFromTimeline) {
  Schedule s = lower(gen("1f1b", 4, 8));
  CostTable t = table(s);
  for (auto& sc : t.stages) {
    sc.act_bytes = 10;
    sc.ckpt_bytes = 2;
  }
  t.static_bytes = {100, 100, 100, 100};
  EvalResult r = Evaluator(s).evaluate(t);
  for (int i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(r.peak_activation_bytes[static_cast<size_t>(i)], 10.0 * (4 - i));
    EXPECT_DOUBLE_EQ(r.peak_memory_bytes[static_cast<size_t>(i)], 100 + 10.0 * (4 - i));
  }
  Schedule rc = insert_recompute(s, {1, 1, 1, 1});
  EvalResult q = Evaluator(rc).evaluate(t);
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(q.peak_activation_bytes[static_cast<size_t>(i)], 2.0 * (4 - i) + 8);
}

namespace {
// A lowered schedule `name` of one rank and one stage, 2 microbatches, running `ops` (op,
// microbatch) in order.
Schedule one_stage(const char* name, const std::vector<std::pair<Op, int>>& ops) {
  Schedule s = make_schedule(name, 1, 1, 2, PlacementKind::Loop);
  for (const auto& [op, mb] : ops) s.actions[0].push_back(Action::make(0, op, mb));
  return lower(s);
}
}  // namespace

// OFFLOAD frees GPU memory when its copy ends; RELOAD brings it back before the backward.
TEST(Evaluator, OffloadMovesActivationsToHost) {
  const Schedule s = one_stage("offload", {{Op::F, 0}, {Op::OFFLOAD, 0}, {Op::F, 1}, {Op::RELOAD, 0}, {Op::B, 1}, {Op::B, 0}});
  CostTable t = table(s);
  t.stages[0].act_bytes = 10;
  t.stages[0].offload_s = 0.5;
  t.stages[0].reload_s = 0.5;
  EvalResult r = Evaluator(s, one_iteration()).evaluate(t);
  EXPECT_DOUBLE_EQ(r.peak_host_bytes[0], 10);
  // F1 starts at 1, before the offload of mb 0 ends at 1.5: two microbatches for half a
  // unit; then one, until the reload starts at 2 while mb 1 is still held.
  EXPECT_DOUBLE_EQ(r.peak_activation_bytes[0], 20);
  EXPECT_DOUBLE_EQ(r.iteration_time_s, 6.0);  // the reload hides under B1
}

// A split backward: I frees what only the input gradient read, W what the weight gradients
// read (w_kept_bytes); not modelled (< 0), W frees everything. One stage: F0 I0 F1 I1 W0 W1.
TEST(Evaluator, SplitBackwardFreesAtIWhatOnlyTheInputGradientRead) {
  const Schedule s = one_stage("split", {{Op::F, 0}, {Op::I, 0}, {Op::F, 1}, {Op::I, 1}, {Op::W, 0}, {Op::W, 1}});
  CostTable t = table(s);
  t.stages[0].act_bytes = 10;
  EXPECT_DOUBLE_EQ(Evaluator(s, one_iteration()).evaluate(t).peak_activation_bytes[0], 20);  // both held to their W
  t.stages[0].w_kept_bytes = 4;
  EXPECT_DOUBLE_EQ(Evaluator(s, one_iteration()).evaluate(t).peak_activation_bytes[0], 14);  // F1 on top of I0's 4
  t.stages[0].w_kept_bytes = 12;  // the output gradients I keeps outweigh what it frees
  EXPECT_DOUBLE_EQ(Evaluator(s, one_iteration()).evaluate(t).peak_activation_bytes[0], 24);
}

// A schedule that cannot run is refused at construction with the marked grid.
TEST(Evaluator, RefusesDeadlocksAndUnloweredSchedules) {
  Schedule s = make_schedule("cross", 2, 2, 2, PlacementKind::Loop);
  s.actions[0] = {Action::make(0, Op::F, 0), Action::make(0, Op::B, 0), Action::make(0, Op::F, 1), Action::make(0, Op::B, 1)};
  s.actions[1] = {Action::make(1, Op::F, 1), Action::make(1, Op::B, 1), Action::make(1, Op::F, 0), Action::make(1, Op::B, 0)};
  EXPECT_THROW(Evaluator{lower(s)}, ScheduleError);
  EXPECT_THROW(Evaluator{gen("1f1b", 2, 2)}, InputError);
  Schedule ok = lower(gen("1f1b", 2, 2));
  CostTable wrong = table(ok);
  wrong.stages.pop_back();
  EXPECT_THROW(Evaluator(ok).evaluate(wrong), InputError);
}

// The Chrome trace has one complete event per executed action, on the rank's tracks.
TEST(Evaluator, ChromeTrace) {
  Schedule s = lower(gen("1f1b", 2, 2));
  EvalOptions o = one_iteration();
  o.record = true;
  CostTable t = table(s, 0.5);
  t.stages[0].reduce_grad_s = 1;
  EvalResult r = Evaluator(s, o).evaluate(t);
  nlohmann::json j = chrome_trace(s, r);
  int compute = 0, p2p = 0, coll = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    int tid = e["tid"];
    compute += tid == 0;
    p2p += tid == 1;
    coll += tid == 2;
    EXPECT_GE(e["dur"].get<double>(), 0);
  }
  EXPECT_EQ(compute, 2 * (4 + 1));  // F, B per microbatch and the optimizer, per rank
  EXPECT_EQ(p2p, 4);                // two activations, two gradients
  EXPECT_EQ(coll, 2);
  EXPECT_DOUBLE_EQ(j["metadata"]["iteration_time_s"].get<double>(), r.iteration_time_s);
}

// The predicted memory track, as the runtime's trace has one: per rank, static bytes plus the
// activations after each change; its largest value is the rank's predicted peak, and it rises
// from the static bytes with the first forward.
TEST(Evaluator, ChromeTraceMemoryTrack) {
  costmodel::EstimateOptions eo;
  eo.eval.record = true;
  const costmodel::Estimate e = costmodel::estimate(presets::load_model("tiny"), presets::load_cluster("local-cpu-2"),
                                                    [] {
                                                      costmodel::ParallelPlan p;
                                                      p.pp = 2;
                                                      p.num_microbatches = 4;
                                                      return p;
                                                    }(),
                                                    eo);
  ASSERT_EQ(e.eval.memory_timeline.size(), 2u);
  std::map<int, double> top;
  const nlohmann::json trace = chrome_trace(e.schedule, e.eval);
  for (const auto& ev : trace["traceEvents"])
    if (ev["ph"] == "C" && ev["name"] == "memory")
      top[ev["pid"].get<int>()] = std::max(top[ev["pid"].get<int>()], ev["args"]["predicted (MiB)"].get<double>());
  for (int r = 0; r < 2; ++r) {
    const auto& tl = e.eval.memory_timeline[static_cast<size_t>(r)];
    ASSERT_FALSE(tl.empty());
    EXPECT_GT(tl.front().second, e.costs.static_bytes[static_cast<size_t>(r)]);
    EXPECT_NEAR(top[r] * 1024 * 1024, e.eval.peak_memory_bytes[static_cast<size_t>(r)], 1e-3) << r;
    for (size_t k = 1; k < tl.size(); ++k) EXPECT_GE(tl[k].first, tl[k - 1].first) << r;
  }
}
