// The validator rejects crafted bad schedules, naming the rule and printing the rank-by-step
// grid with the failing step marked.
#include <gtest/gtest.h>

#include "schedules/error.h"
#include "schedules/lower.h"
#include "schedules/registry.h"
#include "schedules/validate.h"

using namespace stagecraft;
using namespace stagecraft::schedules;

namespace {

Schedule one_f_one_b(int p, int m) {
  GeneratorOptions o;
  o.ranks = p;
  o.microbatches = m;
  return generate("1f1b", o);
}

// Expects validate() to throw a ScheduleError whose reason contains `why` and whose grid
// marks `cell` (the text of the failing action, or "(end)").
void expect_rejected(const Schedule& s, const std::string& why, const std::string& cell) {
  try {
    validate(s);
    FAIL() << "schedule was accepted; expected: " << why;
  } catch (const ScheduleError& e) {
    EXPECT_NE(e.reason().find(why), std::string::npos) << e.reason();
    EXPECT_NE(e.grid().find(">>" + cell + "<<"), std::string::npos) << e.grid();
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << "grid rows missing";
  }
}

}  // namespace

TEST(Validator, AcceptsGeneratedAndLowered) {
  Schedule s = one_f_one_b(4, 8);
  EXPECT_TRUE(check_schedule(s).ok);
  EXPECT_TRUE(check_schedule(lower(s)).ok);
}

TEST(Validator, MissingForward) {
  Schedule s = one_f_one_b(3, 4);
  auto& l = s.actions[1];
  l.erase(std::find(l.begin(), l.end(), Action::make(1, Op::F, 2)));
  // The backward of (1, 2) now has no forward.
  expect_rejected(s, "no forward", "1B2");
}

TEST(Validator, MissingForwardWholeMicrobatch) {
  Schedule s = one_f_one_b(2, 2);
  auto& l = s.actions[1];
  l.erase(std::find(l.begin(), l.end(), Action::make(1, Op::F, 1)));
  l.erase(std::find(l.begin(), l.end(), Action::make(1, Op::B, 1)));
  expect_rejected(s, "missing forward 1F1", "(end)");
}

TEST(Validator, BackwardBeforeForward) {
  Schedule s = one_f_one_b(2, 2);
  auto& l = s.actions[1];  // 1F0 1B0 1F1 1B1 -> 1F0 1B1 1F1 1B0
  std::swap(l[1], l[3]);
  expect_rejected(s, "backward before its forward", "1B1");
}

TEST(Validator, WBeforeI) {
  Schedule s = make_schedule("split", 1, 1, 1, PlacementKind::Loop);
  s.actions[0] = {Action::make(0, Op::F, 0), Action::make(0, Op::W, 0), Action::make(0, Op::I, 0)};
  expect_rejected(s, "W before its I", "0W0");
}

TEST(Validator, DuplicateForward) {
  Schedule s = one_f_one_b(2, 2);
  s.actions[0].insert(s.actions[0].begin() + 1, Action::make(0, Op::F, 0));
  expect_rejected(s, "a second F", "0F0");
}

TEST(Validator, StageOnWrongRank) {
  Schedule s = one_f_one_b(2, 2);
  s.actions[0].push_back(Action::make(1, Op::F, 0));
  expect_rejected(s, "placed on rank 1", "1F0");
}

TEST(Validator, UnmatchedSend) {
  Schedule s = lower(one_f_one_b(2, 2));
  auto& l = s.actions[1];
  l.erase(std::find(l.begin(), l.end(), Action::make(1, Op::RECV_F, 1)));
  expect_rejected(s, "SEND_F is not matched by 1RECV_F1", "0SEND_F1");
}

TEST(Validator, ReceiveAfterItsConsumer) {
  Schedule s = lower(one_f_one_b(2, 2));
  auto& l = s.actions[1];
  auto it = std::find(l.begin(), l.end(), Action::make(1, Op::RECV_F, 0));
  Action recv = *it;
  l.erase(it);
  l.insert(l.begin() + 2, recv);  // after 1F0
  expect_rejected(s, "RECV_F after the forward that needs it", "1RECV_F0");
}

TEST(Validator, SendToNowhere) {
  Schedule s = lower(one_f_one_b(2, 2));
  s.actions[1].push_back(Action::make(1, Op::SEND_F, 0));  // stage 1 is the last stage
  expect_rejected(s, "no matching receive or send", "1SEND_F0");
}

TEST(Validator, Deadlock) {
  // Both ranks run their first backward before the forward the other one needs.
  Schedule s = make_schedule("cross", 2, 2, 2, PlacementKind::Loop);
  s.actions[0] = {Action::make(0, Op::F, 0), Action::make(0, Op::B, 0), Action::make(0, Op::F, 1), Action::make(0, Op::B, 1)};
  s.actions[1] = {Action::make(1, Op::F, 1), Action::make(1, Op::B, 1), Action::make(1, Op::F, 0), Action::make(1, Op::B, 0)};
  ValidationResult r = check_schedule(s);
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.reason.find("deadlock"), std::string::npos);
  EXPECT_NE(r.reason.find("rank 1 waits at step 0 (1F1) for 0F1 on rank 0"), std::string::npos) << r.reason;
  expect_rejected(s, "rank 0 waits at step 1 (0B0)", "0B0");
  // Lowered, the same cycle is still found.
  try {
    validate(lower(s));
    FAIL();
  } catch (const ScheduleError& e) {
    EXPECT_NE(e.reason().find("deadlock"), std::string::npos);
    EXPECT_NE(e.reason().find("0SEND_F1 from rank 0"), std::string::npos) << e.reason();
  }
}

TEST(Validator, ReductionFractionsMustAddUp) {
  Schedule s = lower(one_f_one_b(2, 2));
  for (auto& a : s.actions[0])
    if (a.op == Op::REDUCE_GRAD) a.fraction = 0.5;
  expect_rejected(s, "add up to 0.5", "0REDUCE_GRAD[frac=0.5]");
}

TEST(Validator, ComputeAfterOptimizer) {
  Schedule s = lower(one_f_one_b(2, 2));
  s.actions[0].push_back(Action::make(0, Op::R, 1));
  expect_rejected(s, "after this rank's OPTIMIZER", "0R1");
}

TEST(Validator, GridWindowShowsOnlyTheNeighbourhood) {
  Schedule s = one_f_one_b(2, 64);
  auto& l = s.actions[1];
  std::swap(l[100], l[102]);  // 1F50 1B50 1F51 -> 1F51 1B50 1F50
  try {
    validate(s);
    FAIL();
  } catch (const ScheduleError& e) {
    EXPECT_NE(e.grid().find("..."), std::string::npos);
    EXPECT_LT(e.grid().size(), 1200u) << e.grid();
  }
}
