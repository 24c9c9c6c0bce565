// Every registered generator passes the validator over a grid of (p, m, v), compute-only and
// lowered, and refuses what it cannot do with an error naming the constraint.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>

#include "helpers.h"

#include "schedules/error.h"
#include "schedules/lower.h"
#include "schedules/registry.h"
#include "schedules/validate.h"

using namespace stagecraft;
using namespace stagecraft::schedules;

TEST(Generators, RegistryLookupIgnoresCaseAndSeparators) {
  EXPECT_EQ(find_generator("1F1B").name, "1f1b");
  EXPECT_EQ(find_generator("Interleaved1F1B").name, "interleaved-1f1b");
  EXPECT_EQ(find_generator("interleaved_1f1b").name, "interleaved-1f1b");
  EXPECT_EQ(find_generator("LoopedBFS").name, "looped-bfs");
  EXPECT_EQ(find_generator("GPIPE").name, "gpipe");
  try {
    find_generator("zigzag");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("registered: gpipe, 1f1b"), std::string::npos);
  }
}

TEST(Generators, EveryGeneratorValidOverGrid) {
  int checked = 0;
  for (const auto& g : generators()) {
    bool takes_chunks = std::find(g.params.begin(), g.params.end(), "chunks") != g.params.end();
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 3 * p + 1; m += (m < 8 ? 1 : 3))
        for (int v : takes_chunks ? std::vector<int>{1, 2, 3, 4} : std::vector<int>{0}) {
          GeneratorOptions o;
          o.ranks = p;
          o.microbatches = m;
          o.chunks = v;
          try {
            g.check(o);
          } catch (const InputError&) {
            continue;  // refused with a named constraint; tested below
          }
          Schedule s = generate(g.name, o);
          ValidationResult r = check_schedule(s);
          ASSERT_TRUE(r.ok) << g.name << " p=" << p << " m=" << m << " v=" << v << ": " << r.reason;
          Schedule l = lower(s);
          r = check_schedule(l);
          ASSERT_TRUE(r.ok) << g.name << " lowered p=" << p << " m=" << m << " v=" << v << ": " << r.reason;
          // Lowered with receives posted two computes early (prefetch) stays valid.
          LowerOptions pre;
          pre.recv_lookahead = 2;
          r = check_schedule(lower(s, pre));
          ASSERT_TRUE(r.ok) << g.name << " prefetch p=" << p << " m=" << m << ": " << r.reason;
          ++checked;
        }
  }
  EXPECT_GT(checked, 300);
}

TEST(Generators, ShapesAndPlacements) {
  GeneratorOptions o;
  o.ranks = 4;
  o.microbatches = 8;
  o.chunks = 3;
  Schedule s = generate("interleaved-1f1b", o);
  EXPECT_EQ(s.num_stages, 12);
  EXPECT_EQ(s.rank_of(5), 1);
  EXPECT_EQ(s.params["chunks"], 3);
  EXPECT_EQ(s.total_actions(), 12u * 8u * 2u);
  Schedule b = generate("looped-bfs", o);
  EXPECT_EQ(b.actions[2].front(), Action::make(2, Op::F, 0));
  EXPECT_EQ(b.actions[2][8], Action::make(6, Op::F, 0));  // all of stage 2, then stage 6
}

TEST(Generators, ConstraintsAreNamed) {
  auto refused = [](const char* name, int p, int m, int v, const char* needle) {
    GeneratorOptions o;
    o.ranks = p;
    o.microbatches = m;
    o.chunks = v;
    try {
      generate(name, o);
    } catch (const InputError& e) {
      return std::string(e.what()).find(needle) != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(refused("interleaved-1f1b", 4, 6, 2, "microbatches = 6 is invalid (must be a multiple of 4"));
  EXPECT_TRUE(refused("1f1b", 4, 8, 2, "chunks = 2 is invalid"));
  EXPECT_TRUE(refused("gpipe", 0, 8, 0, "ranks = 0"));
  EXPECT_TRUE(refused("looped-bfs", 2, 0, 2, "microbatches = 0"));
  EXPECT_TRUE(refused("looped-bfs", 2, 2, -1, "chunks = -1"));
}

// Interleaved 1F1B in Megatron-LM's order (forward_backward_pipelining_with_interleaving,
// Narayanan et al., SC 2021, Sec. 2.2): rank r runs (p-r-1)*2 + (v-1)*p warm-up forwards,
// virtual microbatch k is chunk (k mod pv) div p (backwards: v-1 minus that) and microbatch
// (k div pv)*p + k mod p. The lists over a grid of (p, v, m) are pinned in a golden file
// (regenerate: docs/testing.md), and the rule's consequences are checked directly.
TEST(Generators, InterleavedFollowsMegatronOrder) {
  std::string text;
  for (auto [p, v, m] : std::vector<std::array<int, 3>>{{2, 2, 4}, {4, 2, 8}, {4, 3, 8}, {4, 2, 12}, {3, 4, 6}}) {
    GeneratorOptions o;
    o.ranks = p;
    o.microbatches = m;
    o.chunks = v;
    Schedule s = generate("interleaved-1f1b", o);
    text += "p=" + std::to_string(p) + " v=" + std::to_string(v) + " m=" + std::to_string(m) + "\n";
    for (int r = 0; r < p; ++r) {
      const auto& list = s.actions[static_cast<size_t>(r)];
      text += std::to_string(r) + ":";
      for (const Action& a : list) text += " " + to_text(a);
      text += "\n";
      // Warm-up: forwards before the first backward.
      const int warmup = std::min((p - r - 1) * 2 + (v - 1) * p, m * v);
      int before_b = 0;
      while (list[static_cast<size_t>(before_b)].op == Op::F) ++before_b;
      EXPECT_EQ(before_b, warmup + (warmup < m * v ? 1 : 0)) << "p=" << p << " v=" << v << " m=" << m << " r=" << r;
      // The first forwards go chunk by chunk in groups of p microbatches; the first backward is
      // microbatch 0 of the last chunk.
      std::vector<Action> fwd;
      for (const Action& a : list)
        if (a.op == Op::F) fwd.push_back(a);
      for (int k = 0; k < p * v; ++k)
        EXPECT_EQ(fwd[static_cast<size_t>(k)], Action::make((k / p) * p + r, Op::F, k % p)) << "r=" << r << " k=" << k;
      EXPECT_EQ(list[static_cast<size_t>(before_b)], Action::make((v - 1) * p + r, Op::B, 0)) << "r=" << r;
    }
  }
  stagecraft::test::expect_golden("interleaved_megatron_order.txt", text);
}

// Megatron-LM's microbatch_group_size_per_vp_stage N (megatron/core/pipeline_parallel/
// schedules.py, get_schedule_table and get_pp_rank_microbatches): its own example, PP 2, N 3,
// M 5, VP 2, maps virtual microbatches 0..9 to microbatches 0 1 2 0 1 2 3 4 3 4 on chunks
// 0 0 0 1 1 1 0 0 1 1; rank r warms up with (p-r-1)*2 + (v-1)*N forwards; backwards visit the
// same table with the chunks reversed. N = p is the default order; N outside [p, m] or a last
// group shorter than p is refused as Megatron-LM refuses it.
TEST(Generators, InterleavedMicrobatchGroupSize) {
  GeneratorOptions o;
  o.ranks = 2;
  o.microbatches = 5;
  o.chunks = 2;
  o.extra["microbatch_group_size_per_vp_stage"] = 3;
  Schedule s = generate("interleaved-1f1b", o);
  const std::array<int, 10> mb{0, 1, 2, 0, 1, 2, 3, 4, 3, 4}, chunk{0, 0, 0, 1, 1, 1, 0, 0, 1, 1};
  for (int r = 0; r < 2; ++r) {
    std::vector<Action> fwd, bwd;
    for (const Action& a : s.actions[static_cast<size_t>(r)]) (a.op == Op::F ? fwd : bwd).push_back(a);
    ASSERT_EQ(fwd.size(), 10u);
    ASSERT_EQ(bwd.size(), 10u);
    for (size_t k = 0; k < 10; ++k) {
      EXPECT_EQ(fwd[k], Action::make(chunk[k] * 2 + r, Op::F, mb[k])) << "r=" << r << " k=" << k;
      EXPECT_EQ(bwd[k], Action::make((1 - chunk[k]) * 2 + r, Op::B, mb[k])) << "r=" << r << " k=" << k;
    }
    int warm = 0;
    while (s.actions[static_cast<size_t>(r)][static_cast<size_t>(warm)].op == Op::F) ++warm;
    EXPECT_EQ(warm, (2 - r - 1) * 2 + (2 - 1) * 3 + 1) << r;  // the warm-up, then the first 1F1B forward
  }
  EXPECT_EQ(s.params.at("microbatch_group_size_per_vp_stage"), 3);

  // N = p is the order without the parameter.
  GeneratorOptions d;
  d.ranks = 4;
  d.microbatches = 8;
  d.chunks = 2;
  GeneratorOptions n = d;
  n.extra["microbatch_group_size_per_vp_stage"] = 4;
  EXPECT_EQ(generate("interleaved-1f1b", d).actions, generate("interleaved-1f1b", n).actions);

  auto refused = [](int p, int m, int group, const char* needle) {
    GeneratorOptions g;
    g.ranks = p;
    g.microbatches = m;
    g.chunks = 2;
    g.extra["microbatch_group_size_per_vp_stage"] = group;
    try {
      generate("interleaved-1f1b", g);
    } catch (const InputError& e) {
      return std::string(e.what()).find(needle) != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(refused(4, 8, 3, "microbatch_group_size_per_vp_stage = 3 is invalid (allowed: ranks = 4 to microbatches = 8"));
  EXPECT_TRUE(refused(4, 8, 9, "microbatch_group_size_per_vp_stage = 9 is invalid"));
  EXPECT_TRUE(refused(4, 9, 4, "leaves a last group of 1"));
  EXPECT_FALSE(refused(4, 10, 6, "invalid"));  // 10 = 6 + 4: a last group of p is allowed
}
