// The schedule IR's memory semantics stated once (schedules/memory_events.h) and priced by one
// ledger (costmodel/memory_walk.h): the events of each action, the walk's peaks on a hand
// timeline, the whole-layer recompute rounding, and the evaluator reporting exactly what the
// walk gives on its own times.
#include <gtest/gtest.h>

#include "costmodel/estimate.h"
#include "costmodel/evaluator.h"
#include "costmodel/memory_walk.h"
#include "presets/load.h"
#include "schedules/error.h"
#include "schedules/lower.h"
#include "schedules/memory_events.h"
#include "schedules/registry.h"

namespace stagecraft {
namespace {

using costmodel::CostTable;
using costmodel::StageCost;
using schedules::Action;
using schedules::MemoryEffect;
using schedules::MemoryEvent;
using schedules::Op;
using schedules::PlacementKind;
using schedules::Schedule;

std::vector<MemoryEffect> effects(const std::vector<MemoryEvent>& ev) {
  std::vector<MemoryEffect> out;
  for (const MemoryEvent& e : ev) out.push_back(e.effect);
  return out;
}

// F0 R0 B0 on one stage: R is fused with the B right after it; the forward stores the
// checkpoint share the R will restore.
TEST(MemorySemantics, EventsOfARecomputedMicrobatch) {
  Schedule s = schedules::make_schedule("one", 1, 1, 1, PlacementKind::Loop);
  Action r = Action::make(0, Op::R, 0);
  r.fraction = 0.5;
  s.actions[0] = {Action::make(0, Op::F, 0), r, Action::make(0, Op::B, 0)};
  const auto ev = schedules::memory_events(s)[0];
  const std::vector<MemoryEffect> want = {MemoryEffect::StoreForward, MemoryEffect::RestoreLayer, MemoryEffect::WorkStart,
                                          MemoryEffect::WorkEnd, MemoryEffect::FreeFused};
  EXPECT_EQ(effects(ev), want);
  EXPECT_DOUBLE_EQ(ev[0].fraction, 0.5);  // F knows the share its R recomputes
  EXPECT_DOUBLE_EQ(ev[4].fraction, 0.5);
  EXPECT_FALSE(ev[0].at_end);
  EXPECT_TRUE(ev[4].at_end);
  EXPECT_EQ(ev[4].position, 2);
  // An R apart from its backward (another action between) restores everything it recomputes.
  s.actions[0] = {Action::make(0, Op::F, 0), r, Action::make(0, Op::OFFLOAD, 0), Action::make(0, Op::B, 0)};
  const auto apart = schedules::memory_events(s)[0];
  EXPECT_EQ(apart[1].effect, MemoryEffect::RestoreRecompute);
  EXPECT_EQ(apart[2].effect, MemoryEffect::OffloadEnd);
  EXPECT_TRUE(apart[2].copy);
  EXPECT_EQ(apart.back().effect, MemoryEffect::Free);
}

// An overlapped pair stores its forward and frees its backward's microbatch; a split
// backward's W releases the microbatch, its I does not.
TEST(MemorySemantics, OverlappedPairsAndSplitBackwardsChangeTheMicrobatchesHeld) {
  Schedule s = schedules::make_schedule("pair", 1, 1, 2, PlacementKind::Loop);
  Action pair = Action::make(0, Op::OVERLAP_F_B, 1);
  pair.b_stage = 0;
  pair.b_op = Op::I;
  pair.b_microbatch = 0;
  s.actions[0] = {Action::make(0, Op::F, 0), pair, Action::make(0, Op::W, 0), Action::make(0, Op::B, 1)};
  const auto ev = schedules::memory_events(s)[0];
  int held = 0, peak = 0;
  for (const MemoryEvent& e : ev) peak = std::max(peak, held += schedules::held_change(e.effect));
  EXPECT_EQ(peak, 2);  // F1 while microbatch 0 waits for its W
  EXPECT_EQ(held, 0);
  std::vector<StageCost> stages(1);
  stages[0].weight = 0.5;
  EXPECT_DOUBLE_EQ(costmodel::peak_microbatches_held(stages, ev), 1.0);
}

// The walk on a hand timeline: compute F0 [0,1], F1 [1,2], B1 [2,4], B0 [4,6]; copy stream
// empty. 10 bytes kept per microbatch, 3 of backward working set: 10, 20, 23 at B1, then down.
TEST(MemorySemantics, WalkGivesThePeakOfAHandTimeline) {
  Schedule s = schedules::make_schedule("hand", 1, 1, 2, PlacementKind::Loop);
  s.actions[0] = {Action::make(0, Op::F, 0), Action::make(0, Op::F, 1), Action::make(0, Op::B, 1), Action::make(0, Op::B, 0)};
  const auto ev = schedules::memory_events(s)[0];
  const double start[] = {0, 1, 2, 4}, end[] = {1, 2, 4, 6};
  std::vector<StageCost> stages(1);
  stages[0].act_bytes = 10;
  stages[0].ckpt_bytes = 10;
  stages[0].work_bytes = 3;
  std::vector<std::pair<double, double>> seen;
  const auto p = costmodel::walk_memory(
      stages, ev, [&](size_t i) { return ev[i].at_end ? end[ev[i].position] : start[ev[i].position]; }, {},
      [](size_t) { return 0.0; }, [&](double t, double b) { seen.emplace_back(t, b); });
  EXPECT_DOUBLE_EQ(p.gpu_bytes, 23);
  EXPECT_DOUBLE_EQ(p.host_bytes, 0);
  ASSERT_FALSE(seen.empty());
  EXPECT_DOUBLE_EQ(seen.back().first, 6);
  EXPECT_DOUBLE_EQ(seen.back().second, 0);  // everything stored is freed
}

// Recomputation by whole layers, stated once: 0.5 of 3 layers is 2 (half away from zero).
TEST(MemorySemantics, RecomputeRoundsToWholeLayers) {
  EXPECT_EQ(schedules::recomputed_layers(0.5, 3), 2);
  EXPECT_EQ(schedules::recomputed_layers(0.4, 3), 1);
  EXPECT_EQ(schedules::recomputed_layers(1.0, 7), 7);
  EXPECT_EQ(schedules::recomputed_layers(0.0, 7), 0);
  StageCost sc;
  sc.layers = 3;
  EXPECT_DOUBLE_EQ(costmodel::recomputed_layer_share(sc, 0.5), 2.0 / 3);
}

// The evaluator's peaks are the walk's on the evaluator's own times (its spans).
TEST(MemorySemantics, EvaluatorReportsTheWalkOnItsTimes) {
  Schedule s = schedules::make_schedule("hand", 1, 1, 2, PlacementKind::Loop);
  s.actions[0] = {Action::make(0, Op::F, 0), Action::make(0, Op::F, 1), Action::make(0, Op::B, 1), Action::make(0, Op::B, 0)};
  s = schedules::lower(s);
  CostTable t;
  StageCost sc;
  sc.f_s = 1;
  sc.b_s = 2;
  sc.act_bytes = sc.ckpt_bytes = 10;
  sc.work_bytes = 3;
  t.stages = {sc};
  t.optimizer_s = t.param_gather_s = {0.0};
  t.static_bytes = {100};
  t.params = {0};
  costmodel::EvalOptions o;
  o.iterations = 1;
  o.record = true;
  const costmodel::EvalResult r = costmodel::Evaluator(s, o).evaluate(t);
  EXPECT_DOUBLE_EQ(r.peak_activation_bytes[0], 23);
  EXPECT_DOUBLE_EQ(r.peak_memory_bytes[0], 123);
  EXPECT_DOUBLE_EQ(r.peak_activations[0], 2);
}

// Without copies a rank's events run in list order on its compute stream, so the untimed walk
// (what the planner uses to drop plans before compiling an evaluator) is the evaluator's peak
// exactly, on every registered schedule; with offloading there is none.
TEST(MemorySemantics, UntimedPeakIsTheEvaluatorsWithoutCopies) {
  const costmodel::ModelSpec m = presets::load_model("gpt3-7.5b");
  const costmodel::ClusterSpec c = presets::load_cluster("h100-nvl-ib-64");
  int checked = 0;
  for (const auto& g : schedules::generators())
    for (auto recompute : {costmodel::RecomputePolicy::None, costmodel::RecomputePolicy::Full}) {
      costmodel::ParallelPlan p;
      p.tp = 2;
      p.pp = 4;
      p.dp = 1;
      p.num_microbatches = 8;
      p.schedule = g.name;
      p.recompute = recompute;
      costmodel::Estimate e;
      try {
        e = costmodel::estimate(m, c, p);
      } catch (const InputError&) {
        continue;  // the generator refuses this configuration
      }
      const std::vector<double> untimed = costmodel::untimed_peak_memory_bytes(e.schedule, e.costs);
      bool copies = false;
      for (const auto& list : e.schedule.actions)
        for (const Action& a : list) copies = copies || a.op == Op::OFFLOAD;
      if (copies) {
        EXPECT_TRUE(untimed.empty()) << g.name;
        continue;
      }
      EXPECT_EQ(untimed, e.eval.peak_memory_bytes) << g.name;
      EXPECT_EQ(costmodel::UntimedMemory(e.schedule).peaks(e.costs), e.eval.peak_memory_bytes) << g.name;
      ++checked;
    }
  EXPECT_GE(checked, 20);
}

}  // namespace
}  // namespace stagecraft
