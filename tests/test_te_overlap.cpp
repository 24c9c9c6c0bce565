// Transformer Engine's tensor-parallel overlap (plan.tp_overlap = te; schedules/tp_overlap.h):
// each block's collective in n chunks, n-1 of them beside the block's compute and the last after
// it, the compute slowed by the SMs the communication kernels hold; sequence parallelism
// required, as Megatron-LM requires it. The runtime's refusal is in test_runtime_tp_overlap.cpp
// (it needs the runtime built).
#include <gtest/gtest.h>

#include <algorithm>

#include "costmodel/estimate.h"
#include "costmodel/inner.h"
#include "presets/load.h"
#include "helpers.h"
#include "schedules/tp_overlap.h"

using namespace stagecraft;
using namespace stagecraft::costmodel;
using namespace stagecraft::presets;
using schedules::Op;
using schedules::PieceKind;
using schedules::TpOverlap;
using test::error_of;

namespace {
InnerCosts te_costs(int layers, double attn, double mlp, double comm, int chunks, double slowdown) {
  InnerCosts c;
  c.mode = TpOverlap::Te;
  c.layers = layers;
  c.attn_f_s = c.attn_i_s = c.attn_w_s = c.attn_r_s = attn;
  c.mlp_f_s = c.mlp_i_s = c.mlp_w_s = c.mlp_r_s = mlp;
  c.comm_s = comm;
  c.comm_bytes = 1;
  c.comm_chunks = chunks;
  c.comm_sm_slowdown = slowdown;
  return c;
}
}  // namespace

// Two collective pieces per block: (n-1)/n issued with the compute, 1/n after both.
TEST(TeOverlap, EachBlockCollectiveInTwoPartsAroundItsCompute) {
  InnerCosts c = te_costs(2, 1, 1, 1, 4, 0);
  const schedules::InnerSchedule s = inner_schedule_for(c, Op::F);
  EXPECT_EQ(s.sub_batches, 1);
  EXPECT_EQ(s.count(PieceKind::Compute), 4);
  EXPECT_EQ(s.count(PieceKind::Comm), 8);
  double moved = 0;
  for (const auto& p : s.pieces)
    if (p.kind == PieceKind::Comm) moved += p.fraction;
  EXPECT_DOUBLE_EQ(moved, 4);  // every block's collective whole
  EXPECT_EQ(inner_schedule_for(c, Op::W).count(PieceKind::Comm), 0);
}

// Closed form of one block: max(C', H) + T with H = (n-1)/n A, T = A/n, C' = C + min(C, H) k/(SMs-k).
TEST(TeOverlap, BlockTimeIsTheSlowerStreamPlusTheLastChunk) {
  const double C = 2, A = 1, slow = 16.0 / (132 - 16);
  for (int n : {2, 4, 8}) {
    const InnerCosts c = te_costs(1, C, C, A, n, slow);
    const double H = A * (n - 1) / n, T = A / n, Cp = C + std::min(C, H) * slow;
    EXPECT_NEAR(evaluate_inner(inner_schedule_for(c, Op::F), c).time_s, 2 * (std::max(Cp, H) + T), 1e-12) << n;
  }
  // Communication-bound: the collective's chunks set the pace.
  const InnerCosts cb = te_costs(1, 0.1, 0.1, 4, 4, 0);
  EXPECT_NEAR(evaluate_inner(inner_schedule_for(cb, Op::F), cb).time_s, 2 * (3 + 1), 1e-12);
}

// On a GPT-3 175B plan (tp 8, sequence parallel) te hides most of the blocking collectives and
// pays the SMs; it needs sequence parallelism; the runtime refuses it before training.
TEST(TeOverlap, FasterThanBlockingAndRefusedWithoutSequenceParallelism) {
  const ModelSpec m = load_model("gpt3-175b");
  const ClusterSpec c = load_cluster("h100-ib-1024");
  ParallelPlan p = stagecraft::test::plan_of(1, 8, 8, 16);
  p.sequence_parallel = true;
  p.stack = "megatron-core-te";
  const Estimate blocking = estimate(m, c, p);
  p.tp_overlap = TpOverlap::Te;
  const Estimate te = estimate(m, c, p);
  EXPECT_LT(te.eval.iteration_time_s, blocking.eval.iteration_time_s);
  const StageCost& sb = blocking.costs.stages[1];
  const StageCost& st = te.costs.stages[1];
  EXPECT_LT(st.tp_exposed_f_s, 0.5 * sb.tp_exposed_f_s);
  // The last chunk of each collective stays exposed, the blocks compute-bound: 1/8 of each of the
  // 2 x 12 collectives, each (without a profile) the ring all-reduce of (b, s, h) at 16 bits over
  // 8 GPUs, 2(n-1)/n S / (450 GB/s x 0.82) + 2(n-1) x 2 us (comm.h).
  const double ring_s = 14.0 / 8 * 2048 * 12288 * 2 / (450e9 * 0.82) + 14 * 2e-6;
  EXPECT_NEAR(st.tp_exposed_f_s, 24 * ring_s / 8, 1e-9 * ring_s);
  EXPECT_EQ(st.inner.comm_chunks, 8);
  EXPECT_NEAR(st.inner.comm_sm_slowdown, 16.0 / (132 - 16), 1e-12);  // 16 of the H100's 132 SMs
  p.stack = "megatron-lm";  // a stack without Transformer Engine's overlap
  EXPECT_NE(error_of([&] { estimate(m, c, p); }).find("megatron-lm"), std::string::npos);
  p.stack = "megatron-core-te";
  p.sequence_parallel = false;
  const std::string err = error_of([&] { check_fit(m, c, p); });
  EXPECT_NE(err.find("plan.tp_overlap = te"), std::string::npos) << err;
  EXPECT_NE(err.find("sequence parallelism"), std::string::npos) << err;
}
