// The lowering passes: sends and receives where stages cross ranks, reductions, optimizer,
// receive prefetch and recomputation.
#include <gtest/gtest.h>

#include <algorithm>

#include "schedules/error.h"
#include "schedules/lower.h"
#include "schedules/registry.h"
#include "schedules/validate.h"
#include "helpers.h"

using namespace stagecraft;
using namespace stagecraft::schedules;

namespace {
Schedule gen(const char* name, int p, int m, int v = 0) { return test::compute_only(name, p, m, v); }
std::vector<std::string> texts(const std::vector<Action>& l) {
  std::vector<std::string> out;
  for (const auto& a : l) out.push_back(to_text(a));
  return out;
}
}  // namespace

TEST(Lowering, OneFOneBTwoRanks) {
  Schedule s = lower(gen("1f1b", 2, 2));
  EXPECT_EQ(texts(s.actions[0]), (std::vector<std::string>{"0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0B0",
                                                           "0RECV_B1", "0B1", "0REDUCE_GRAD", "OPTIMIZER"}));
  EXPECT_EQ(texts(s.actions[1]), (std::vector<std::string>{"1RECV_F0", "1F0", "1B0", "1SEND_B0", "1RECV_F1", "1F1",
                                                           "1B1", "1SEND_B1", "1REDUCE_GRAD", "OPTIMIZER"}));
  EXPECT_TRUE(s.is_lowered());
}

TEST(Lowering, NoSendsBetweenStagesOnOneRank) {
  Schedule s = lower(gen("looped-bfs", 1, 2, 3));  // 3 stages, all on rank 0
  for (const auto& a : s.actions[0]) EXPECT_FALSE(is_p2p(a.op)) << to_text(a);
}

TEST(Lowering, ReceiveLookaheadPostsEarly) {
  LowerOptions o;
  o.recv_lookahead = 1;
  Schedule s = lower(gen("1f1b", 2, 2), o);
  // Rank 1 posts the receive of microbatch 1 before 1B0, one compute earlier than 1F1.
  EXPECT_EQ(texts(s.actions[1]), (std::vector<std::string>{"1RECV_F0", "1F0", "1RECV_F1", "1B0", "1SEND_B0", "1F1",
                                                           "1B1", "1SEND_B1", "1REDUCE_GRAD", "OPTIMIZER"}));
  validate(s);
}

TEST(Lowering, ReductionAfterLastBackwardOfEachStage) {
  Schedule s = lower(gen("interleaved-1f1b", 2, 4, 2));
  for (int r = 0; r < 2; ++r) {
    const auto& l = s.actions[static_cast<size_t>(r)];
    for (int st : s.stages_of(r)) {
      int last_b = -1, red = -1;
      for (int i = 0; i < static_cast<int>(l.size()); ++i) {
        if (l[static_cast<size_t>(i)].op == Op::B && l[static_cast<size_t>(i)].stage == st) last_b = i;
        if (l[static_cast<size_t>(i)].op == Op::REDUCE_GRAD && l[static_cast<size_t>(i)].stage == st) red = i;
      }
      EXPECT_GT(red, last_b);
      // ... and after the send of that backward's gradient, where there is one.
      if (s.prev_stage(st) >= 0 && s.rank_of(s.prev_stage(st)) != r) {
        EXPECT_EQ(l[static_cast<size_t>(red) - 1].op, Op::SEND_B);
      }
    }
    EXPECT_EQ(l.back().op, Op::OPTIMIZER);
  }
}

// Megatron-LM without --overlap-grad-reduce reduces once the rank's whole backward is done:
// every stage's REDUCE_GRAD follows the rank's last backward (and its send), in model order.
TEST(Lowering, ReductionsAtTheRanksEnd) {
  LowerOptions o;
  o.reduce_at = GradReduceAt::RankEnd;
  Schedule s = lower(gen("interleaved-1f1b", 2, 4, 2), o);
  for (int r = 0; r < 2; ++r) {
    const auto& l = s.actions[static_cast<size_t>(r)];
    int last_b = -1;
    std::vector<int> reduced;
    for (int i = 0; i < static_cast<int>(l.size()); ++i) {
      if (l[static_cast<size_t>(i)].op == Op::B) last_b = i;
      if (l[static_cast<size_t>(i)].op == Op::REDUCE_GRAD) {
        EXPECT_GT(i, last_b) << "rank " << r;
        reduced.push_back(l[static_cast<size_t>(i)].stage);
      }
    }
    EXPECT_EQ(reduced, s.stages_of(r));  // loop placement: stage order is model order
  }
  validate(s);
  // Chimera's copies of a stage reduce in one ring: each rank issues them in model order, so
  // rank 0 (stages 0 and 7) and rank 3 (stages 3 and 4, copies of 4 and 3's parts) agree.
  Schedule c = lower(gen("chimera", 4, 4), o);
  for (int r = 0; r < 4; ++r) {
    std::vector<int> parts;
    for (const Action& a : c.actions[static_cast<size_t>(r)])
      if (a.op == Op::REDUCE_GRAD) parts.push_back(c.model_part(a.stage));
    EXPECT_TRUE(std::is_sorted(parts.begin(), parts.end())) << "rank " << r;
  }
}

// Auto: eager (each stage's own end) where the schedule's system reduces eagerly, the rank's
// end elsewhere.
TEST(Lowering, AutoReducesEagerlyWhereTheScheduleSaysSo) {
  LowerOptions o;
  o.reduce_at = GradReduceAt::Auto;
  auto first_reduce_before_last_backward = [](const Schedule& s) {
    const auto& l = s.actions[0];
    int last_b = -1, first_red = -1;
    for (int i = 0; i < static_cast<int>(l.size()); ++i) {
      if (l[static_cast<size_t>(i)].op == Op::B) last_b = i;
      if (l[static_cast<size_t>(i)].op == Op::REDUCE_GRAD && first_red < 0) first_red = i;
    }
    return first_red < last_b;
  };
  EXPECT_TRUE(first_reduce_before_last_backward(lower(gen("chimera", 4, 4), o)));
  EXPECT_TRUE(first_reduce_before_last_backward(lower(gen("looped-bfs", 2, 4, 2), o)));
  EXPECT_FALSE(first_reduce_before_last_backward(lower(gen("interleaved-1f1b", 2, 4, 2), o)));
  EXPECT_EQ(parse_grad_reduce_at("rank-end", "f"), GradReduceAt::RankEnd);
  try {
    parse_grad_reduce_at("later", "plan.grad_reduce_at");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "plan.grad_reduce_at = 'later' is invalid (allowed: auto, rank-end, stage-end)");
  }
}

TEST(Lowering, GeneratorPlacedReductionsKept) {
  Schedule s = gen("1f1b", 1, 2);
  Action half = Action::make(0, Op::REDUCE_GRAD);
  half.fraction = 0.5;
  s.actions[0].insert(s.actions[0].begin(), half);  // deferred half, FOLD3D-style
  s.actions[0].push_back(half);
  Schedule l = lower(s);
  int n = 0;
  for (const auto& a : l.actions[0]) n += a.op == Op::REDUCE_GRAD;
  EXPECT_EQ(n, 2);
  validate(l);
}

TEST(Lowering, RecomputeAfterReceiveWhenInsertedAfterLowering) {
  Schedule s = insert_recompute(lower(gen("1f1b", 2, 2)), {1.0, 0.5});
  EXPECT_EQ(texts(s.actions[0]), (std::vector<std::string>{"0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0R0", "0B0",
                                                           "0RECV_B1", "0R1", "0B1", "0REDUCE_GRAD", "OPTIMIZER"}));
  EXPECT_EQ(to_text(s.actions[1][2]), "1R0[frac=0.5]");
  validate(s);
  // Inserted before lowering, R counts as the gradient's consumer ("late", the default) ...
  Schedule c = insert_recompute(gen("1f1b", 2, 2), {1.0, 0.0});
  Schedule l = lower(c);
  EXPECT_EQ(to_text(l.actions[0][4]), "0RECV_B0");
  EXPECT_EQ(to_text(l.actions[0][5]), "0R0");
  // ... unless the schedule asks for early recomputation: then the receive lands between R
  // and B (Merak Sec. 5.1).
  c.params["recompute_timing"] = "early";
  Schedule e = lower(c);
  EXPECT_EQ(to_text(e.actions[0][4]), "0R0");
  EXPECT_EQ(to_text(e.actions[0][5]), "0RECV_B0");
  c.params["recompute_timing"] = "sometime";
  EXPECT_THROW(lower(c), InputError);
  EXPECT_THROW(insert_recompute(gen("1f1b", 2, 2), {1.0}), InputError);
  EXPECT_THROW(insert_recompute(gen("1f1b", 2, 2), {1.0, 1.5}), InputError);
}

TEST(Lowering, ComputeOnlyUndoesLowering) {
  Schedule s = gen("interleaved-1f1b", 4, 8, 2);
  EXPECT_EQ(compute_only(lower(s)).actions, s.actions);
}
