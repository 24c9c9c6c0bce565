// The lowering passes: sends and receives where stages cross ranks, reductions, optimizer,
// receive prefetch and recomputation.
#include <gtest/gtest.h>

#include "schedules/error.h"
#include "schedules/lower.h"
#include "schedules/registry.h"
#include "schedules/validate.h"

using namespace stagecraft;
using namespace stagecraft::schedules;

namespace {
Schedule gen(const char* name, int p, int m, int v = 0) {
  GeneratorOptions o;
  o.ranks = p;
  o.microbatches = m;
  o.chunks = v;
  return generate(name, o);
}
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
