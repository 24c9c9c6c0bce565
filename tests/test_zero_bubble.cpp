// The zero-bubble schedules as their paper constructs them (Qi et al., "Zero Bubble Pipeline
// Parallelism", ICLR 2024, Sec. 2): with T_F = T_I = T_W = 1 and no communication, ZB-H1 ends
// one iteration at 3m + p - 1 (a bubble of (p-1)(T_F + T_I - T_W) per rank) holding p
// microbatches on every rank, and ZB-H2 keeps every rank busy for 3m without a gap (the
// parallelogram) holding 2p - 1; closed forms pinned over a grid of (p, m).
#include <gtest/gtest.h>

#include <algorithm>

#include "costmodel/costs.h"
#include "costmodel/evaluator.h"
#include "schedules/lower.h"
#include "schedules/registry.h"

namespace stagecraft {
namespace {

using costmodel::EvalResult;
using schedules::Schedule;

Schedule gen(const std::string& name, int p, int m) {
  schedules::GeneratorOptions o;
  o.ranks = p;
  o.microbatches = m;
  return schedules::lower(schedules::generate(name, o));
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

}  // namespace
}  // namespace stagecraft
