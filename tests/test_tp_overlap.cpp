// Tensor-parallel overlap (issue 11): the inner schedule of a stage action (schedules/
// tp_overlap.h), its two-stream evaluation (costmodel/inner.h), Merak's closed forms, the
// recomputation Oases' fine-grained scheme removes, the cost table, memory, plan JSON and the
// CLI's errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "costmodel/estimate.h"
#include "costmodel/inner.h"
#include "presets/load.h"
#include "costmodel/profile.h"
#include "helpers.h"
#include "schedules/error.h"
#include "schedules/tp_overlap.h"

using namespace stagecraft;
using namespace stagecraft::costmodel;
using namespace stagecraft::presets;
using schedules::InnerSchedule;
using schedules::InnerSpec;
using schedules::Op;
using schedules::Pass;
using schedules::PieceKind;
using schedules::TpOverlap;

namespace {

constexpr TpOverlap kModes[] = {TpOverlap::Blocking, TpOverlap::Merak, TpOverlap::CrossPass, TpOverlap::Oases};

InnerSchedule inner(TpOverlap mode, Op op, int layers, int recompute_layers = 0, bool ends = false) {
  InnerSpec s;
  s.mode = mode;
  s.op = op;
  s.layers = layers;
  s.recompute_layers = recompute_layers;
  s.embedding = ends;
  s.head = ends;
  return schedules::inner_schedule(s);
}

// Merak's unit costs (Sec. 5.3): one layer's forward takes Tm and its all-reduces Ta; the
// backward 2 Tm and Ta. Split over the layer's two blocks and `sub_batches` sub-batches.
double unit_time(const InnerSchedule& s, double Tm, double Ta) {
  const double sb = s.sub_batches;
  const double per_block_compute = (s.spec.op == Op::F ? Tm : 2 * Tm) / 2 / sb;
  std::vector<double> d;
  for (const auto& p : s.pieces) d.push_back(p.kind == PieceKind::Compute ? per_block_compute : Ta / 2 / sb);
  return evaluate_inner(s, d).time_s;
}

ParallelPlan plan(int dp, int tp, int pp, int b, int m, TpOverlap mode, const char* schedule = "1f1b") {
  ParallelPlan p = test::plan_of(dp, tp, pp, m);
  p.microbatch_size = b;
  p.schedule = schedule;
  p.tp_overlap = mode;
  return p;
}

using test::error_of;

}  // namespace

// Merak Sec. 5.3: blocking (3 Tm + 2 Ta) K per microbatch; sub-pipelined
// Tm/4 + (K - 1/4) max(Tm, Ta) + Ta/4 forward and Tm/2 + (K - 1/4) max(2 Tm, Ta) + Ta/4 backward.
TEST(TpOverlapClosedForms, MerakSubPipelinedAndBlockingMatchTheFormulasExactly) {
  for (int K : {1, 2, 3, 8, 24})
    for (double Tm : {1.0, 2.5})
      for (double Ta : {0.25, 1.0, 2.0, 2.5, 6.0}) {
        SCOPED_TRACE("K " + std::to_string(K) + " Tm " + std::to_string(Tm) + " Ta " + std::to_string(Ta));
        const double f = unit_time(inner(TpOverlap::Merak, Op::F, K), Tm, Ta);
        const double b = unit_time(inner(TpOverlap::Merak, Op::B, K), Tm, Ta);
        const double tol = 1e-12 * K * (Tm + Ta);
        EXPECT_NEAR(f, Tm / 4 + (K - 0.25) * std::max(Tm, Ta) + Ta / 4, tol);
        EXPECT_NEAR(b, Tm / 2 + (K - 0.25) * std::max(2 * Tm, Ta) + Ta / 4, tol);
        const double fb = unit_time(inner(TpOverlap::Blocking, Op::F, K), Tm, Ta);
        const double bb = unit_time(inner(TpOverlap::Blocking, Op::B, K), Tm, Ta);
        EXPECT_NEAR(fb + bb, (3 * Tm + 2 * Ta) * K, tol);
        EXPECT_LE(f + b, fb + bb + tol);  // sub-pipelining never loses with these costs
        // The total of Sec. 5.3: 3/4 Tm + 1/2 Ta + (K - 1/4) max{3 Tm, 2 Tm + Ta, 2 Ta}.
        EXPECT_NEAR(f + b, 0.75 * Tm + 0.5 * Ta + (K - 0.25) * std::max({3 * Tm, 2 * Tm + Ta, 2 * Ta}), tol);
      }
}

TEST(TpOverlapClosedForms, ForwardIsBoundByTheSlowerStreamWhenOneDominates) {
  // Communication-bound: everything but the first compute piece hides behind the collectives.
  const int K = 6;
  const double f = unit_time(inner(TpOverlap::Merak, Op::F, K), 1.0, 10.0);
  EXPECT_NEAR(f, 1.0 / 4 + 2 * K * 2 * (10.0 / 4), 1e-9);  // Tm/4 + all 4K collectives back to back
}

TEST(TpOverlapStructure, EveryModeHasTheMegatronCollectives) {
  const int L = 3;
  for (TpOverlap m : kModes) {
    SCOPED_TRACE(std::string(schedules::tp_overlap_name(m)));
    const int sb = schedules::tp_overlap_sub_batches(m);
    for (Op op : {Op::F, Op::B, Op::I}) {
      InnerSchedule s = inner(m, op, L);
      EXPECT_EQ(s.sub_batches, sb);
      EXPECT_EQ(s.count(PieceKind::Comm), 2 * L * sb);  // one per block and sub-batch
      EXPECT_EQ(s.count(PieceKind::Compute), 2 * L * sb);
    }
    EXPECT_EQ(inner(m, Op::W, L).count(PieceKind::Comm), 0);  // weight gradients need no collective
  }
}

TEST(TpOverlapStructure, DependenciesPointBackAndStayInTheirSubBatchOrCrossABarrier) {
  for (TpOverlap m : kModes)
    for (Op op : {Op::F, Op::B, Op::I, Op::W, Op::R})
      for (int rl : {0, 2}) {
        InnerSchedule s = inner(m, op, 3, rl, true);
        for (size_t i = 0; i < s.pieces.size(); ++i)
          for (int d : s.pieces[i].deps) {
            const auto& q = s.pieces[static_cast<size_t>(d)];
            ASSERT_LT(d, static_cast<int>(i)) << schedules::to_text(s);
            EXPECT_LE(q.segment, s.pieces[i].segment) << schedules::to_text(s);
            if (q.segment == s.pieces[i].segment) {
              EXPECT_EQ(q.sub_batch, s.pieces[i].sub_batch) << schedules::to_text(s);
            }
          }
      }
}

// Merak with recomputation (Oases Fig. 4b): each recomputed layer's R is a pass of its own, so
// nothing of it overlaps the backward around it; cross-pass (Fig. 4c) removes those barriers.
TEST(TpOverlapStructure, MerakRecomputesLayerByLayerBetweenBarriers) {
  const int L = 3;
  InnerSchedule s = inner(TpOverlap::Merak, Op::B, L, 2);
  EXPECT_EQ(s.count(PieceKind::Compute, Pass::Recompute), 2 * 2 * 2);  // 2 layers, 2 blocks, 2 sub-batches
  int segments = 0;
  for (const auto& p : s.pieces) segments = std::max(segments, p.segment + 1);
  EXPECT_EQ(segments, 1 + 2 * 2);  // the backward of the last layer, then R | B for each recomputed layer
  // Every piece of a segment starts after every piece of the one before, in the evaluation.
  std::vector<double> unit(s.pieces.size(), 1.0);
  InnerResult r = evaluate_inner(s, unit);
  for (size_t i = 0; i < s.pieces.size(); ++i) {
    for (size_t j = 0; j < s.pieces.size(); ++j) {
      if (s.pieces[j].segment < s.pieces[i].segment) {
        EXPECT_GE(r.start_s[i], r.end_s[j]) << schedules::to_text(s);
      }
    }
  }
  for (const auto& p : inner(TpOverlap::CrossPass, Op::B, L, 2).pieces) EXPECT_EQ(p.segment, 0);
  // Blocking keeps R as its own action: no recomputation joins its backward.
  EXPECT_EQ(inner(TpOverlap::Blocking, Op::B, L, 2).count(PieceKind::Compute, Pass::Recompute), 0);
}

TEST(TpOverlapStructure, SubBatchesAlternateAfterEachCollective) {
  InnerSchedule s = inner(TpOverlap::Merak, Op::F, 2);
  // C sb0, A sb0, C sb1, A sb1, C sb0 ...: a compute piece of one sub-batch follows the other's collective.
  for (size_t i = 1; i + 1 < s.pieces.size(); ++i) {
    if (s.pieces[i].kind == PieceKind::Comm) {
      EXPECT_NE(s.pieces[i + 1].sub_batch, s.pieces[i].sub_batch) << schedules::to_text(s);
    }
  }
}

// Oases eq. (1): recomputing a layer as Megatron does repeats its two forward all-reduces (the
// second one is read by nothing). Fine-grained recomputation starts after each forward
// collective and repeats none.
TEST(TpOverlapStructure, FineGrainedRecomputationRemovesTheRepeatedCollectives) {
  const int L = 4;
  for (TpOverlap m : {TpOverlap::Blocking, TpOverlap::Merak}) {
    InnerSchedule r = inner(m, Op::R, L);
    const int sb = r.sub_batches;
    EXPECT_EQ(r.count(PieceKind::Comm, Pass::Recompute), 2 * L * sb);
    int redundant = 0;
    for (const auto& p : r.pieces) redundant += p.redundant;
    EXPECT_EQ(redundant, sb);  // the last block's: its output is the next layer's checkpoint
  }
  // Cross-pass: the recomputation sits in the backward, layer by layer, collectives included.
  InnerSchedule cross = inner(TpOverlap::CrossPass, Op::B, L, L);
  EXPECT_EQ(cross.count(PieceKind::Comm, Pass::Recompute), 2 * L * 2);
  EXPECT_EQ(cross.count(PieceKind::Compute, Pass::Recompute), 2 * L * 2);
  InnerSchedule oases = inner(TpOverlap::Oases, Op::B, L, L);
  EXPECT_EQ(oases.count(PieceKind::Comm, Pass::Recompute), 0);
  EXPECT_EQ(oases.count(PieceKind::Compute, Pass::Recompute), 2 * L * 2);
  EXPECT_EQ(oases.count(PieceKind::Comm, Pass::Backward), cross.count(PieceKind::Comm, Pass::Backward));
  EXPECT_EQ(inner(TpOverlap::Oases, Op::R, L).count(PieceKind::Comm), 0);
  // Only B and I join a recomputation.
  EXPECT_EQ(inner(TpOverlap::Oases, Op::F, L, L).count(PieceKind::Compute, Pass::Recompute), 0);
}

TEST(TpOverlapStructure, JoinedRecomputationPrecedesTheBackwardOfItsBlock) {
  InnerSchedule s = inner(TpOverlap::Oases, Op::B, 2, 2);
  for (size_t i = 0; i < s.pieces.size(); ++i) {
    const auto& p = s.pieces[i];
    if (p.kind != PieceKind::Compute || p.pass != Pass::Backward) continue;
    bool found = false;
    for (int d : p.deps) {
      const auto& q = s.pieces[static_cast<size_t>(d)];
      found = found || (q.pass == Pass::Recompute && q.block == p.block);
    }
    EXPECT_TRUE(found) << "piece " << i << "\n" << schedules::to_text(s);
  }
}

TEST(TpOverlapStructure, BadSpecsAreRefused) {
  EXPECT_THROW(inner(TpOverlap::Merak, Op::F, 0), InputError);
  EXPECT_THROW(inner(TpOverlap::Oases, Op::B, 2, 3), InputError);
  EXPECT_THROW(inner(TpOverlap::Merak, Op::SEND_F, 2), InputError);
  std::string e = error_of([] { schedules::parse_tp_overlap("overlapped", "--tp-overlap"); });
  EXPECT_NE(e.find("--tp-overlap"), std::string::npos) << e;
  EXPECT_NE(e.find("overlapped"), std::string::npos) << e;
  EXPECT_NE(e.find("cross-pass"), std::string::npos) << e;
}

// With the cost model's costs (Oases Table V's setting: BERT-1.3B, tp 4, full recomputation):
// merak sub-pipelines F and B but recomputes layer by layer between pass barriers; cross-pass
// removes the barriers; oases also drops R's collectives, which pays once communication, not
// compute, bounds the joint schedule.
std::map<TpOverlap, StageCost> ablation(double link_scale) {
  ModelSpec m = load_model("bert-1.3b");
  ClusterSpec c = load_cluster("oases-3090-32");
  c.intra_node_bandwidth_Bps *= link_scale;
  std::map<TpOverlap, StageCost> st;
  for (TpOverlap mode : kModes) {
    ParallelPlan p = plan(8, 4, 1, 16, 1, mode);
    p.recompute = RecomputePolicy::Full;
    st[mode] = estimate(m, c, p).costs.stages[0];
  }
  return st;
}

double r_plus_b(const StageCost& s) { return s.r_s + s.b_s; }

TEST(TpOverlapCosts, AblationOrderOnTheOasesCluster) {
  auto st = ablation(1.0);
  EXPECT_LT(st[TpOverlap::Merak].f_s, st[TpOverlap::Blocking].f_s);
  EXPECT_LT(r_plus_b(st[TpOverlap::Merak]), r_plus_b(st[TpOverlap::Blocking]));
  EXPECT_LT(r_plus_b(st[TpOverlap::CrossPass]), r_plus_b(st[TpOverlap::Merak]));
  EXPECT_LE(r_plus_b(st[TpOverlap::Oases]), r_plus_b(st[TpOverlap::CrossPass]) + 1e-12);
  EXPECT_DOUBLE_EQ(st[TpOverlap::Merak].f_s, st[TpOverlap::Oases].f_s);  // the forward is sub-pipelined alike
  // Blocking exposes every collective; overlap exposes less but not more than it issues.
  const StageCost& b = st[TpOverlap::Blocking];
  EXPECT_NEAR(b.tp_exposed_f_s, b.tp_comm_f_s, 1e-12);
  for (TpOverlap mode : {TpOverlap::Merak, TpOverlap::Oases}) {
    EXPECT_LT(st[mode].tp_exposed_f_s, st[mode].tp_comm_f_s);
    EXPECT_GE(st[mode].tp_exposed_f_s, 0);
    EXPECT_EQ(st[mode].tp_allreduces_f, 2 * st[TpOverlap::Blocking].tp_allreduces_f);  // two sub-batches
    EXPECT_DOUBLE_EQ(st[mode].tp_allreduce_bytes, b.tp_allreduce_bytes / 2);
  }
}

TEST(TpOverlapCosts, FineGrainedRecomputationPaysWhenCommunicationBounds) {
  auto st = ablation(1.0 / 8);  // links 8x slower: the collectives outweigh the compute
  EXPECT_LT(r_plus_b(st[TpOverlap::CrossPass]), r_plus_b(st[TpOverlap::Merak]));
  EXPECT_LT(r_plus_b(st[TpOverlap::Oases]), 0.9 * r_plus_b(st[TpOverlap::CrossPass]));
  // Communication-bound, cross-pass's R + B costs its collectives: 4 per layer and sub-batch
  // (2 recomputed, 2 backward); oases' 2.
  const StageCost& x = st[TpOverlap::CrossPass];
  const double comm = x.inner.comm_s * 2 * x.inner.layers * x.inner.sub_batches;  // one pass's collectives
  EXPECT_GE(r_plus_b(x), 2 * comm - 1e-12);
  EXPECT_GE(r_plus_b(st[TpOverlap::Oases]), comm - 1e-12);
  EXPECT_LT(r_plus_b(st[TpOverlap::Oases]), 2 * comm);
}

TEST(TpOverlapCosts, BlockingIsComputePlusEveryCollective) {
  ModelSpec m = load_model("gpt-1.4b");
  ClusterSpec c = load_cluster("merak-3090-64");
  Estimate e = estimate(m, c, plan(4, 4, 4, 2, 8, TpOverlap::Blocking));
  for (const StageCost& s : e.costs.stages) {
    const InnerCosts& ic = s.inner;
    const double compute = ic.layers * (ic.attn_f_s + ic.mlp_f_s) + ic.embed_f_s + ic.head_f_s;
    EXPECT_NEAR(s.f_s, compute + 2 * ic.layers * ic.comm_s, 1e-12 * s.f_s);
    EXPECT_EQ(ic.sub_batches, 1);
  }
}

// The cost model prices a mode at tp = 1 as blocking (an experiment may sweep tp under one
// series' mode); a user asking for it is refused (TpOverlapPlan.ModesOtherThanBlockingNeedTensorParallelism).
TEST(TpOverlapCosts, WithoutTensorParallelismEveryModeIsTheSame) {
  ModelSpec m = load_model("gpt-1.4b");
  ClusterSpec c = load_cluster("merak-3090-64");
  const double blocking = estimate(m, c, plan(16, 1, 4, 1, 8, TpOverlap::Blocking)).eval.iteration_time_s;
  for (TpOverlap mode : kModes)  // tp = 1: no split, so an odd microbatch size is fine
    EXPECT_DOUBLE_EQ(estimate(m, c, plan(16, 1, 4, 1, 8, mode)).eval.iteration_time_s, blocking);
}

TEST(TpOverlapCosts, OverlapSpeedsUpATensorParallelRun) {
  ModelSpec m = load_model("gpt-2.5b");
  ClusterSpec c = load_cluster("merak-3090-64");
  const double blocking = estimate(m, c, plan(4, 4, 4, 2, 16, TpOverlap::Blocking)).eval.iteration_time_s;
  const double merak = estimate(m, c, plan(4, 4, 4, 2, 16, TpOverlap::Merak)).eval.iteration_time_s;
  EXPECT_LT(merak, blocking);
  EXPECT_GT(merak, 0.5 * blocking);  // compute still has to run
}

TEST(TpOverlapCosts, PerStageModesApplyToTheirStageOnly) {
  ModelSpec m = load_model("gpt-1.4b");
  ClusterSpec c = load_cluster("merak-3090-64");
  ParallelPlan p = plan(4, 4, 4, 2, 8, TpOverlap::Blocking);
  Estimate all_blocking = estimate(m, c, p);
  p.stage_tp_overlap = {TpOverlap::Blocking, TpOverlap::Merak, TpOverlap::Blocking, TpOverlap::Blocking};
  Estimate one = estimate(m, c, p);
  EXPECT_DOUBLE_EQ(one.costs.stages[0].f_s, all_blocking.costs.stages[0].f_s);
  EXPECT_LT(one.costs.stages[1].f_s, all_blocking.costs.stages[1].f_s);
  EXPECT_EQ(one.costs.stages[1].inner.mode, TpOverlap::Merak);
  p.stage_tp_overlap = {TpOverlap::Merak};
  std::string e = error_of([&] { estimate(m, c, p); });
  EXPECT_NE(e.find("stage_tp_overlap"), std::string::npos) << e;
}

// Memory: the two sub-batches together keep what the microbatch kept (the activation formulas
// are linear in b); fine-grained recomputation keeps each block's input, two per layer.
TEST(TpOverlapMemory, FineGrainedRecomputationKeepsTwoCheckpointsPerLayer) {
  ModelSpec m = load_model("gpt-1.4b");
  ClusterSpec c = load_cluster("merak-3090-64");
  auto middle = [&](TpOverlap mode) {
    ParallelPlan p = plan(4, 4, 4, 2, 8, mode);
    p.recompute = RecomputePolicy::Full;
    return estimate(m, c, p).costs.stages[1];  // no embedding, no head
  };
  StageCost blocking = middle(TpOverlap::Blocking), merak = middle(TpOverlap::Merak), oases = middle(TpOverlap::Oases);
  EXPECT_NEAR(merak.act_bytes, blocking.act_bytes, 1e-9 * blocking.act_bytes);
  EXPECT_NEAR(merak.ckpt_bytes, blocking.ckpt_bytes, 1e-9 * blocking.ckpt_bytes);
  EXPECT_NEAR(oases.ckpt_bytes, 2 * merak.ckpt_bytes, 1e-9 * merak.ckpt_bytes);
}

TEST(TpOverlapPlan, JsonRoundTrip) {
  ParallelPlan p = plan(2, 4, 2, 4, 8, TpOverlap::CrossPass);
  p.stage_tp_overlap = {TpOverlap::Oases, TpOverlap::Blocking};
  nlohmann::json j = to_json(p);
  EXPECT_EQ(j["tp_overlap"], "cross-pass");
  EXPECT_EQ(j["stage_tp_overlap"], nlohmann::json({"oases", "blocking"}));
  ParallelPlan q = plan_from_json(j);
  EXPECT_EQ(q.tp_overlap, TpOverlap::CrossPass);
  EXPECT_EQ(q.stage_tp_overlap, p.stage_tp_overlap);
  EXPECT_EQ(q.overlap_of(0), TpOverlap::Oases);
  j["stage_tp_overlap"] = {"oases", "sideways"};
  std::string e = error_of([&] { plan_from_json(j); });
  EXPECT_NE(e.find("stage_tp_overlap[1]"), std::string::npos) << e;
  EXPECT_NE(e.find("sideways"), std::string::npos) << e;
}

TEST(TpOverlapPlan, OddMicrobatchIsRefusedWhenTheModeSplits) {
  ParallelPlan p = plan(1, 2, 1, 3, 4, TpOverlap::Merak);
  std::string e = error_of([&] { check_tp_overlap(p); });
  EXPECT_NE(e.find("microbatch_size"), std::string::npos) << e;
  EXPECT_NE(e.find("merak"), std::string::npos) << e;
  p.tp_overlap = TpOverlap::Blocking;
  EXPECT_NO_THROW(check_tp_overlap(p));
  p.stage_tp_overlap = {TpOverlap::Oases};
  e = error_of([&] { check_tp_overlap(p); });
  EXPECT_NE(e.find("stage_tp_overlap[0] 'oases'"), std::string::npos) << e;
  p.tp = 1;  // nothing to overlap: no split
  EXPECT_NO_THROW(check_tp_overlap(p));
}

// Issue 52: a mode other than blocking at tp = 1 overlaps nothing; the plans the CLI reads refuse
// it (plan.tp_overlap or stage_tp_overlap[i], the mode and tp named), as Megatron-LM refuses
// --tp-comm-overlap without tensor parallelism.
TEST(TpOverlapPlan, ModesOtherThanBlockingNeedTensorParallelism) {
  for (TpOverlap mode : kModes) {
    EXPECT_TRUE(tp_overlap_applies(mode, 2));
    EXPECT_EQ(tp_overlap_applies(mode, 1), mode == TpOverlap::Blocking);
  }
  EXPECT_FALSE(tp_overlap_applies(TpOverlap::Te, 1));
  ParallelPlan p = plan(4, 1, 2, 2, 8, TpOverlap::Te);
  std::string e = error_of([&] { check_tp_overlap_applies(p); });
  EXPECT_NE(e.find("plan.tp_overlap = te with tp = 1 is invalid"), std::string::npos) << e;
  EXPECT_NE(e.find("allowed: --tp-overlap blocking, or --tp above 1"), std::string::npos) << e;
  p.tp_overlap = TpOverlap::Blocking;
  EXPECT_NO_THROW(check_tp_overlap_applies(p));
  p.stage_tp_overlap = {TpOverlap::Blocking, TpOverlap::Oases};
  e = error_of([&] { check_tp_overlap_applies(p); });
  EXPECT_NE(e.find("plan.stage_tp_overlap[1] = oases with tp = 1"), std::string::npos) << e;
  p.tp = 2;
  EXPECT_NO_THROW(check_tp_overlap_applies(p));
}

// Sequence parallelism splits the tp group's activations along the sequence: at tp = 1 there is
// no group, so a plan the CLI reads refuses it (Megatron-LM turns it off there; its importer too).
TEST(TpOverlapPlan, SequenceParallelismNeedsTensorParallelism) {
  ParallelPlan p = plan(4, 1, 2, 2, 8, TpOverlap::Blocking);
  p.sequence_parallel = true;
  const std::string e = error_of([&] { check_sequence_parallel_applies(p); });
  EXPECT_NE(e.find("plan.sequence_parallel = true with tp = 1 is invalid"), std::string::npos) << e;
  EXPECT_NE(e.find("allowed: --tp above 1, or no --sequence-parallel"), std::string::npos) << e;
  p.tp = 2;
  EXPECT_NO_THROW(check_sequence_parallel_applies(p));
}

TEST(TpOverlapCli, ModesAtTpOneAreRefusedBeforeAnyWork) {
  const std::string cfg = "--model gpt-1.4b --cluster merak-3090-64 --dp 4 --tp 1 --pp 4 --microbatches 8 --microbatch-size 2 ";
  auto r = test::run_cli("estimate " + cfg + "--tp-overlap merak");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("plan.tp_overlap = merak with tp = 1"), std::string::npos) << r.err;
  r = test::run_cli("compare " + cfg + "--schedules 1f1b --tp-overlaps blocking,oases");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--tp-overlaps = 'blocking,oases' is invalid with tp = 1: 'oases'"), std::string::npos) << r.err;
  r = test::run_cli("plan --model gpt-1.4b --cluster merak-3090-64 --gpus 8 --global-batch 16 --tp 1 --tp-overlaps merak --quiet");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("tp_overlap = merak with tp = 1 only"), std::string::npos) << r.err;
  // With tp 2 in the space, merak is tried where it applies (tp 1 has no point): a search, not a refusal.
  r = test::run_cli("plan --model gpt-1.4b --cluster merak-3090-64 --gpus 8 --global-batch 16 --tp 1,2 --pp 1 "
                    "--microbatch-sizes 2 --recompute none --zero 0 --sequence-parallel off --tp-overlaps merak --quiet --top 1");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(TpOverlapCli, BadInputExitsTwoNamingTheField) {
  auto r = test::run_cli("estimate --model gpt-1.4b --cluster merak-3090-64 --dp 4 --tp 4 --pp 4 --microbatches 8 "
                         "--microbatch-size 2 --tp-overlap sideways");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--tp-overlap"), std::string::npos) << r.err;
  r = test::run_cli("estimate --model gpt-1.4b --cluster merak-3090-64 --dp 4 --tp 4 --pp 4 --microbatches 8 "
                    "--microbatch-size 1 --tp-overlap merak");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("microbatch_size"), std::string::npos) << r.err;
  r = test::run_cli("compare --model gpt-1.4b --cluster merak-3090-64 --dp 4 --tp 4 --pp 4 --microbatches 8 "
                    "--microbatch-size 2 --tp-overlaps blocking,sideways");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--tp-overlaps"), std::string::npos) << r.err;
}

TEST(TpOverlapCli, CompareShowsTheModesSideBySide) {
  auto r = test::run_cli("compare --model gpt-1.4b --cluster merak-3090-64 --dp 4 --tp 4 --pp 4 --microbatches 8 "
                         "--microbatch-size 2 --schedules 1f1b --tp-overlaps blocking,merak,cross-pass,oases --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 4u);
  std::vector<std::string> modes;
  std::vector<double> times;
  for (const auto& row : j) {
    modes.push_back(row["plan"]["tp_overlap"]);
    times.push_back(row["iteration_time_s"]);
  }
  EXPECT_EQ(modes, (std::vector<std::string>{"blocking", "merak", "cross-pass", "oases"}));
  EXPECT_LT(times[1], times[0]);
  r = test::run_cli("compare --model gpt-1.4b --cluster merak-3090-64 --dp 4 --tp 4 --pp 4 --microbatches 8 "
                    "--microbatch-size 2 --schedules 1f1b,gpipe --tp-overlaps blocking,oases");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* label : {"1f1b.blocking", "1f1b.oases", "gpipe.blocking", "gpipe.oases"})
    EXPECT_NE(r.out.find(label), std::string::npos) << r.out;
}

// A profile measured at the sub-batch's microbatch size prices the splitting modes from that
// measurement: the stage's blocks add up to the measured layer at b / 2, with no note of an
// extrapolation for it (the profiler's default grid, 1, 2, 4, covers b = 2, 4 and 8).
TEST(TpOverlapProfiled, SubBatchesUseTheMeasurementAtHalfTheMicrobatch) {
  nlohmann::json j = nlohmann::json::parse(test::read_text(test::data_path("profile/synthetic-tiny.json")));
  nlohmann::json layers = j["layers"];
  for (auto l : layers) {  // the fixture is measured at tp 1: the same numbers stand for tp 2 here
    l["tp"] = 2;
    j["layers"].push_back(l);
  }
  Profile prof = profile_from_json(j);
  ModelSpec m = load_model("tiny");
  ClusterSpec c = load_cluster("merak-3090-64");
  EstimateOptions eo;
  eo.profile = &prof;
  ParallelPlan p = plan(16, 2, 2, 8, 4, TpOverlap::Merak);
  Estimate e = estimate(m, c, p, eo);
  const LayerCost at4 = profiled_layer(prof, "transformer", m, 4, 2);
  ASSERT_FALSE(at4.extrapolated);
  for (const StageCost& s : e.costs.stages) {
    EXPECT_EQ(s.inner.sub_batches, 2);
    EXPECT_NEAR(s.inner.attn_f_s + s.inner.mlp_f_s, at4.f_s, 1e-12);
    EXPECT_NEAR(s.inner.attn_w_s + s.inner.mlp_w_s, at4.w_s, 1e-12);
  }
  for (const std::string& n : e.costs.notes) EXPECT_EQ(n.find("transformer"), std::string::npos) << n;
  // Blocking at b = 8 is outside the grid: said so.
  p.tp_overlap = TpOverlap::Blocking;
  Estimate b = estimate(m, c, p, eo);
  bool noted = false;
  for (const std::string& n : b.costs.notes) noted = noted || n.find("transformer") != std::string::npos;
  EXPECT_TRUE(noted);
  EXPECT_LT(e.eval.iteration_time_s, b.eval.iteration_time_s * 1.5);  // both priced, neither absurd
}
