// Bubble and activation-memory closed forms, evaluated with T_B = 2 T_F and no communication.
#include <gtest/gtest.h>

#include "costmodel/costs.h"
#include "costmodel/evaluator.h"
#include "schedules/lower.h"
#include "schedules/registry.h"

using namespace stagecraft;
using namespace stagecraft::schedules;

namespace {
costmodel::EvalResult unit_eval(const char* name, int p, int m, int v = 0) {
  GeneratorOptions o;
  o.ranks = p;
  o.microbatches = m;
  o.chunks = v;
  Schedule s = lower(generate(name, o));
  costmodel::Evaluator ev(s);
  costmodel::UnitCosts u;
  u.f = 1;
  u.b = 2;
  return ev.evaluate(costmodel::unit_cost_table(s, u));
}
}  // namespace

// GPipe and 1F1B: bubble/compute = (p-1)/m. Source: Narayanan et al., Megatron-LM, SC 2021,
// Sec. 2.2.1; Merak Sec. 5.1.
TEST(BubbleClosedForms, GPipeAnd1F1BBubbleIsPMinus1OverM) {
  for (const char* name : {"gpipe", "1f1b"})
    for (int p = 2; p <= 16; ++p)
      for (int m = p; m <= 4 * p; ++m) {
        costmodel::EvalResult r = unit_eval(name, p, m);
        double expect = static_cast<double>(p - 1) / m;
        ASSERT_NEAR(r.bubble_over_compute, expect, 1e-12) << name << " p=" << p << " m=" << m;
        // bubble fraction = x / (1 + x), from the two definitions
        ASSERT_NEAR(r.bubble_fraction, expect / (1 + expect), 1e-12);
        ASSERT_NEAR(r.iteration_time_s, 3.0 * (m + p - 1), 1e-9);
      }
}

// Peak activations: 1F1B stage i holds p - i microbatches, GPipe holds all m.
// Source: Narayanan et al., PipeDream-flush, SC 2021 Sec. 2.2.
TEST(BubbleClosedForms, PeakActivations1F1BAndGPipe) {
  for (int p = 2; p <= 16; ++p)
    for (int m = p; m <= 4 * p; m += p) {
      costmodel::EvalResult f = unit_eval("1f1b", p, m);
      costmodel::EvalResult g = unit_eval("gpipe", p, m);
      for (int i = 0; i < p; ++i) {
        ASSERT_DOUBLE_EQ(f.peak_activations[static_cast<size_t>(i)], p - i) << "1f1b p=" << p << " m=" << m << " stage " << i;
        ASSERT_DOUBLE_EQ(g.peak_activations[static_cast<size_t>(i)], m) << "gpipe p=" << p << " m=" << m;
      }
    }
}

// Interleaved 1F1B with v chunks: bubble/compute = (p-1)/(v*m) (Megatron-LM SC21 Sec. 2.2.2).
TEST(BubbleClosedForms, InterleavedBubbleShrinksByChunks) {
  for (int p = 2; p <= 8; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = p; m <= 4 * p; m += p) {
        costmodel::EvalResult r = unit_eval("interleaved-1f1b", p, m, v);
        ASSERT_NEAR(r.bubble_over_compute, static_cast<double>(p - 1) / (v * m), 1e-12) << "p=" << p << " v=" << v << " m=" << m;
      }
}

// Mean idle fraction equals the bubble fraction when every rank does the same work.
TEST(BubbleClosedForms, MeanIdleEqualsBubbleForEqualStages) {
  costmodel::EvalResult r = unit_eval("1f1b", 4, 8);
  EXPECT_NEAR(r.mean_idle_fraction, r.bubble_fraction, 1e-12);
}
