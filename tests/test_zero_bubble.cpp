// The zero-bubble schedules as their paper constructs them (Qi et al., "Zero Bubble Pipeline
// Parallelism", ICLR 2024, Sec. 2): with T_F = T_I = T_W = 1 and no communication, ZB-H1 ends
// one iteration at 3m + p - 1 (a bubble of (p-1)(T_F + T_I - T_W) per rank) holding p
// microbatches on every rank, and ZB-H2 keeps every rank busy for 3m without a gap (the
// parallelogram) holding 2p - 1; closed forms pinned over a grid of (p, m). ZB-V and the
// interleaved ZB1P follow their authors' constructions (the authors' handcrafted ZB-V, which
// PyTorch's ScheduleZBVZeroBubble repeats, and PyTorch's ScheduleInterleavedZeroBubble): per-rank
// orders pinned in a golden file, ZB1P equal to the file PyTorch itself wrote.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>

#include "costmodel/costs.h"
#include "costmodel/evaluator.h"
#include "helpers.h"
#include "schedules/error.h"
#include "schedules/io.h"
#include "schedules/lower.h"
#include "schedules/registry.h"

namespace stagecraft {
namespace {

using costmodel::EvalResult;
using schedules::Schedule;

using test::compute_only;

Schedule gen(const std::string& name, int p, int m, int chunks = 0) { return schedules::lower(compute_only(name, p, m, chunks)); }

std::string lists_text(const Schedule& s) {
  std::string text;
  for (int r = 0; r < s.num_ranks; ++r) {
    text += std::to_string(r) + ":";
    for (const schedules::Action& a : s.actions[static_cast<size_t>(r)]) text += " " + schedules::to_text(a);
    text += "\n";
  }
  return text;
}

// F = I = W = 1, no communication; `iterations` back to back.
EvalResult unit(const Schedule& s, int iterations) {
  costmodel::UnitCosts u;
  u.f = u.i = u.w = 1;
  u.b = 2;
  costmodel::EvalOptions opt;
  opt.iterations = iterations;
  return costmodel::Evaluator(s, opt).evaluate(costmodel::unit_cost_table(s, u));
}

double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

TEST(ZeroBubble, H1EndsAtThreeMPlusPMinusOne) {
  for (int p = 1; p <= 8; ++p)
    for (int m = p; m <= 3 * p + 2; ++m) {
      const EvalResult e = unit(gen("zb-h1", p, m), 1);
      EXPECT_DOUBLE_EQ(e.iteration_time_s, 3 * m + p - 1) << "p " << p << ", m " << m;
      for (double a : e.peak_activations) EXPECT_DOUBLE_EQ(a, p) << "p " << p << ", m " << m;  // every rank holds p
    }
  // The example: p = 4, m = 8 finishes at 24 + 3.
  EXPECT_DOUBLE_EQ(unit(gen("zb-h1", 4, 8), 1).iteration_time_s, 27);
}

TEST(ZeroBubble, H2IsAParallelogram) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 2 * p - 1; m <= 4 * p; ++m) {
      const EvalResult one = unit(gen("zb-h2", p, m), 1);
      EXPECT_DOUBLE_EQ(one.iteration_time_s, 3 * m + p - 1) << "p " << p << ", m " << m;
      EXPECT_DOUBLE_EQ(max_of(one.peak_activations), 2 * p - 1) << "p " << p << ", m " << m;
      // Back to back, each rank's iterations follow without a gap: 3m per iteration, no bubble.
      const EvalResult steady = unit(gen("zb-h2", p, m), 3);
      EXPECT_DOUBLE_EQ(steady.iteration_time_s, 3 * m) << "p " << p << ", m " << m;
      EXPECT_NEAR(steady.bubble_fraction, 0, 1e-12) << "p " << p << ", m " << m;
    }
}

// What the handcrafted schedules buy over the greedy list scheduler under the same memory.
TEST(ZeroBubble, GreedyVariantsStayBehindTheClosedForms) {
  EXPECT_DOUBLE_EQ(unit(gen("zb-h1-greedy", 4, 8), 1).iteration_time_s, 29);
  EXPECT_DOUBLE_EQ(unit(gen("zb-h1", 4, 8), 1).iteration_time_s, 27);
  EXPECT_DOUBLE_EQ(max_of(unit(gen("zb-h2-greedy", 4, 8), 1).peak_activations), 8);  // 2p where ZB-H2 holds 2p - 1
  EXPECT_DOUBLE_EQ(max_of(unit(gen("zb-h2", 4, 8), 1).peak_activations), 7);
}

// ZB-V (Qi et al. 2024), two stages per rank in V placement, each of half a 1F1B stage: with
// T_F = T_I = T_W = 1 per stage and m >= 2p-1, rank r idles r steps before its first forward
// and p-1-r after its last W, so one iteration takes 6m + p - 1; back to back the next
// iteration's start fills the end and every rank is busy for 6m: zero bubble. Each rank holds
// 2p activations of its half-size stages, p microbatches of its whole share: 1F1B's memory.
TEST(ZeroBubble, ZbvIsZeroBubbleAtOneF1BMemory) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 2 * p - 1; m <= 4 * p; ++m) {
      const EvalResult one = unit(gen("zb-v", p, m), 1);
      EXPECT_DOUBLE_EQ(one.iteration_time_s, 6 * m + p - 1) << "p " << p << ", m " << m;
      for (double a : one.peak_activations) EXPECT_DOUBLE_EQ(a, p) << "p " << p << ", m " << m;
      const EvalResult steady = unit(gen("zb-v", p, m), 3);
      EXPECT_DOUBLE_EQ(steady.iteration_time_s, 6 * m) << "p " << p << ", m " << m;
      EXPECT_NEAR(steady.bubble_fraction, 0, 1e-12) << "p " << p << ", m " << m;
    }
  // Below 2p-1 the V cannot fill: the construction drops the missing microbatches' passes; the
  // order stays valid (it evaluates), no faster than the closed form, within 1F1B's memory, and
  // with few microbatches strictly slower (p = 4, m = 3: 26 where 6m + p - 1 = 21).
  for (int p = 2; p <= 8; ++p)
    for (int m = 1; m < 2 * p - 1; ++m) {
      const EvalResult e = unit(gen("zb-v", p, m), 1);
      EXPECT_GE(e.iteration_time_s, 6 * m + p - 1) << "p " << p << ", m " << m;
      for (double a : e.peak_activations) EXPECT_LE(a, p) << "p " << p << ", m " << m;
    }
  EXPECT_DOUBLE_EQ(unit(gen("zb-v", 4, 3), 1).iteration_time_s, 26);
}

// The file PyTorch's ScheduleInterleavedZeroBubble wrote (2 ranks, 2 stages each, 8
// microbatches; its test suite's artifact) and this project's zb1p: the same lists, action for
// action (PyTorch's older notation writes the input backward as B; the importer reads it as I).
TEST(ZeroBubble, Zb1pEqualsTheListsPyTorchWrote) {
  const Schedule theirs = schedules::load_schedule_file(stagecraft::test::data_path("pytorch/zb1p_2rank_2stagep_compute.csv"));
  const Schedule ours = compute_only("zb1p", 2, 8, 2);
  ASSERT_EQ(theirs.stage_to_rank, ours.stage_to_rank);
  EXPECT_EQ(lists_text(theirs), lists_text(ours));
}

// The per-rank orders of ZB-V (the authors' handcrafted construction: 2(p-r)-1 forwards down,
// r pairs up/down, p-r rounds of F, I, W up, then F, I, W down and up alternately, the cool-down
// pairing I passes with the oldest W) and ZB1P (rounds of m / max(1, m/p) microbatches, (v-1)
// rounds + p-1-r warm-up forwards, the oldest W after each I once r I passes have gone by), over
// a grid; regenerate with STAGECRAFT_UPDATE_GOLDEN=1 (docs/testing.md).
TEST(ZeroBubble, ZbvAndZb1pFollowTheirAuthorsOrder) {
  std::string text;
  for (auto [p, m] : std::vector<std::array<int, 2>>{{2, 3}, {4, 8}, {4, 5}, {3, 2}}) {
    text += "zb-v p=" + std::to_string(p) + " m=" + std::to_string(m) + "\n" + lists_text(compute_only("zb-v", p, m));
    // The first 2(p-r)-1 actions of rank r are forwards of its stage on the way down.
    const Schedule s = compute_only("zb-v", p, m);
    for (int r = 0; r < p; ++r)
      for (int k = 0; k < std::min(2 * (p - r) - 1, m); ++k)
        EXPECT_EQ(s.actions[static_cast<size_t>(r)][static_cast<size_t>(k)], schedules::Action::make(r, schedules::Op::F, k));
  }
  for (auto [p, v, m] : std::vector<std::array<int, 3>>{{2, 2, 8}, {4, 2, 8}, {4, 3, 10}, {3, 2, 4}, {4, 2, 3}}) {
    text += "zb1p p=" + std::to_string(p) + " v=" + std::to_string(v) + " m=" + std::to_string(m) + "\n" +
            lists_text(compute_only("zb1p", p, m, v));
  }
  stagecraft::test::expect_golden("zero_bubble_authors_order.txt", text);
  // Rounds of equal size: 9 microbatches over 4 ranks make 2 rounds, which 9 does not divide.
  EXPECT_THROW(compute_only("zb1p", 4, 9, 2), InputError);
}

}  // namespace
}  // namespace stagecraft
