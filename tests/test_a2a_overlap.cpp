// Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm; schedules/registry.h
// a2a_overlap): the paired action lists by hand, their memory (one stage: the forward keeps what
// the backward frees; two stages: both held, as DualPipe's pairs), an MoE iteration priced faster
// by at most the all-to-alls it hides, and the refusals naming the parameter.
#include <gtest/gtest.h>

#include <string>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "helpers.h"
#include "schedules/registry.h"

using namespace stagecraft;
using namespace stagecraft::costmodel;
using namespace stagecraft::presets;
using stagecraft::test::error_of;
using schedules::Action;
using schedules::Op;

namespace {

schedules::GeneratorOptions options(int ranks, int microbatches, int chunks, bool paired) {
  schedules::GeneratorOptions o;
  o.ranks = ranks;
  o.microbatches = microbatches;
  o.chunks = chunks;
  if (paired) o.extra["a2a_overlap"] = true;
  return o;
}

int pairs_on(const schedules::Schedule& s, int rank) {
  int n = 0;
  for (const Action& a : s.actions[static_cast<size_t>(rank)]) n += a.op == Op::OVERLAP_F_B;
  return n;
}

// Qwen3-30B-A3B on one 8-GPU H100 node, ep 8, no pipeline: its all-to-alls are exposed without pairs.
Estimate qwen(bool paired) {
  ParallelPlan p = test::plan_of(8, 1, 1, 8);
  p.ep = 8;
  if (paired) p.schedule_params["a2a_overlap"] = true;
  return estimate(load_model("qwen3-30b-a3b"), test::cluster_of("h100-ib-1024", 1), p);
}

}  // namespace

// One rank, 4 microbatches: F0, then each forward with the backward before it, then B3
// (combined_1f1b_schedule_for_no_pipelining).
TEST(A2aOverlap, OneRankPairsByHand) {
  const schedules::Schedule s = schedules::generate("1f1b", options(1, 4, 0, true));
  const std::vector<Action> want = {Action::make(0, Op::F, 0), Action::overlap(0, 1, 0, 0), Action::overlap(0, 2, 0, 1),
                                    Action::overlap(0, 3, 0, 2), Action::make(0, Op::B, 3)};
  EXPECT_EQ(s.actions[0], want);
}

// Interleaved, p 2, v 2, m 4 (8 virtual microbatches a rank): Megatron-LM's warm-up
// (p - r - 1) 2 + (v - 1) p plus one, then pairs for the rest of the forwards.
TEST(A2aOverlap, InterleavedWarmsUpOneMoreThenPairs) {
  const schedules::Schedule plain = schedules::generate("interleaved-1f1b", options(2, 4, 2, false));
  const schedules::Schedule s = schedules::generate("interleaved-1f1b", options(2, 4, 2, true));
  for (int r = 0; r < 2; ++r) {
    const int warmup = (2 - r - 1) * 2 + (2 - 1) * 2 + 1;
    EXPECT_EQ(pairs_on(s, r), 8 - warmup) << "rank " << r;
    EXPECT_EQ(pairs_on(plain, r), 0);
    EXPECT_EQ(s.actions[static_cast<size_t>(r)].size(), plain.actions[static_cast<size_t>(r)].size() - (8 - warmup));
  }
}

// Memory: without a pipeline a pair holds one microbatch, as 1F1B does (the forward keeps layer by
// layer what the backward frees); on two stages both halves are held, one microbatch more.
TEST(A2aOverlap, PairsOnOneStageHoldOneMicrobatch) {
  EXPECT_EQ(qwen(false).eval.peak_activations[0], 1.0);
  EXPECT_EQ(qwen(true).eval.peak_activations[0], 1.0);
  ParallelPlan p = test::plan_of(1, 1, 2, 4);
  p.schedule = "interleaved-1f1b";
  p.schedule_params["chunks"] = 2;
  const Estimate plain = estimate(load_model("gpt3-7.5b"), test::cluster_of("h100-ib-1024", 1), p);
  p.schedule_params["a2a_overlap"] = true;
  const Estimate paired = estimate(load_model("gpt3-7.5b"), test::cluster_of("h100-ib-1024", 1), p);
  EXPECT_GT(paired.eval.peak_activations[0], plain.eval.peak_activations[0]);
}

// Each of the 7 pairs hides at most its forward's and backward's exposed all-to-alls, and some of
// them: faster than 1F1B by more than nothing and by at most 7 x (forward + backward) all-to-alls
// of the rank's 48 layers.
TEST(A2aOverlap, PairsHideAtMostTheirAllToAlls) {
  const Estimate plain = qwen(false), paired = qwen(true);
  const StageCost& sc = plain.costs.stages[0];
  ASSERT_GT(sc.moe.exposed_f_s + sc.moe.exposed_b_s, 0.0);
  const double saved_s = plain.eval.iteration_time_s - paired.eval.iteration_time_s;
  EXPECT_GT(saved_s, 0.1 * 7 * (sc.moe.exposed_f_s + sc.moe.exposed_b_s));
  EXPECT_LE(saved_s, 7 * (sc.moe.exposed_f_s + sc.moe.exposed_b_s) * (1 + 1e-9));
  // The compute by kind adds up to the paired rank's compute: the hidden all-to-alls leave it.
  const ComputeByKind k = compute_by_kind(paired).at(0), k0 = compute_by_kind(plain).at(0);
  EXPECT_NEAR(k.other_s, 0.0, 1e-9 * paired.eval.compute_s[0]);
  EXPECT_LT(k.passes.comm_s, k0.passes.comm_s);
  EXPECT_NEAR(k.passes.products_s, k0.passes.products_s, 1e-9 * k0.passes.products_s);
}

TEST(A2aOverlap, RefusalsNameTheParameter) {
  EXPECT_NE(error_of([] { schedules::generate("1f1b", options(2, 4, 0, true)); }).find("a2a_overlap = true with ranks = 2"),
            std::string::npos);
  schedules::GeneratorOptions o = options(1, 4, 0, false);
  o.extra["a2a_overlap"] = 3;
  EXPECT_NE(error_of([&] { schedules::generate("1f1b", o); }).find("a2a_overlap = 3 is invalid (expected true or false)"),
            std::string::npos);
  o.ranks = 2;
  o.chunks = 2;
  EXPECT_NE(error_of([&] { schedules::generate("interleaved-1f1b", o); }).find("a2a_overlap = 3"), std::string::npos);
}
