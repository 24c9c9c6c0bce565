// DualPipe (DeepSeek-V3 Technical Report, arXiv 2412.19437, Sec. 3.2.1) and DualPipeV (its
// cut-in-half V shape, PyTorch's ScheduleDualPipeV): DualPipeV equals, action for action, the
// lists PyTorch itself wrote for 4 ranks and 10 microbatches; both run every (stage,
// microbatch) forward and backward once, pair forwards and backwards of a rank's two stages in
// OVERLAP_F_B actions, and meet the report's Table 2: bubble (PP/2 - 1)(F&B + B - 3W), 2x
// parameters for DualPipe (one copy for DualPipeV), PP + 1 stage activations per device.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "costmodel/costs.h"
#include "costmodel/evaluator.h"
#include "helpers.h"
#include "schedules/error.h"
#include "schedules/io.h"
#include "schedules/lower.h"
#include "schedules/registry.h"
#include "schedules/validate.h"

namespace stagecraft {
namespace {

using schedules::Action;
using schedules::Op;
using schedules::Schedule;

using test::compute_only;

// The shapes each generator accepts, over a grid: DualPipeV m >= 2p; DualPipe p even, m even >= 2p.
std::vector<std::array<int, 2>> shapes(const std::string& name) {
  std::vector<std::array<int, 2>> out;
  for (int p = 1; p <= 8; ++p)
    for (int m = 2 * p; m <= 4 * p + 1; ++m) {
      if (name == "dualpipe" && (p % 2 != 0 || m % 2 != 0)) continue;
      if (m > 2 * p + 3 && m != 3 * p && m != 4 * p) continue;  // a few sizes past the floor
      out.push_back({p, m});
    }
  return out;
}

// Compute actions of a list, in order (the file and the generator both hold nothing else).
std::vector<Action> compute_actions(const std::vector<Action>& list) {
  std::vector<Action> out;
  for (const Action& a : list)
    if (schedules::is_compute(a.op)) out.push_back(a);
  return out;
}

// The file PyTorch's ScheduleDualPipeV wrote (4 ranks, stages r and 7-r on rank r, 10
// microbatches; its test suite's artifact, also ../shared/reference/pytorch-pipelining-csv/)
// and this project's dualpipev for the same shape: the same placement and, rank by rank, the
// same compute actions in the same order (forwards, full backwards B, input backwards I,
// weight passes W, and each OVERLAP_F_B with its forward and backward halves).
TEST(DualPipe, DualPipeVEqualsTheListsPyTorchWrote) {
  const Schedule theirs = schedules::load_schedule_file(test::data_path("pytorch/dualpipev_4rank_10mb.csv"));
  const Schedule ours = compute_only("dualpipev", 4, 10);
  ASSERT_EQ(theirs.num_ranks, ours.num_ranks);
  ASSERT_EQ(theirs.num_stages, ours.num_stages);
  ASSERT_EQ(theirs.num_microbatches, ours.num_microbatches);
  ASSERT_EQ(theirs.placement, ours.placement);
  ASSERT_EQ(theirs.stage_to_rank, ours.stage_to_rank);
  int overlaps = 0;
  for (int r = 0; r < ours.num_ranks; ++r) {
    const auto t = compute_actions(theirs.actions[static_cast<size_t>(r)]);
    const auto o = compute_actions(ours.actions[static_cast<size_t>(r)]);
    ASSERT_EQ(t.size(), o.size()) << "rank " << r;
    for (size_t i = 0; i < t.size(); ++i) {
      EXPECT_EQ(t[i], o[i]) << "rank " << r << " action " << i << ": PyTorch " << schedules::to_text(t[i]) << ", ours "
                            << schedules::to_text(o[i]);
      overlaps += o[i].op == Op::OVERLAP_F_B;
    }
  }
  EXPECT_EQ(overlaps, 9 + 10 + 11 + 11);  // as many as the file's rows hold
}

// Every (stage, microbatch) runs one forward and one backward (a B, or an I and its W),
// whether alone or as a half of an OVERLAP_F_B; the schedule validates compute-only and
// lowered. Each OVERLAP_F_B pairs the forward of one of the rank's two stages with the full
// backward of the other, and their number is the steady state's: with P the ranks a direction
// crosses before it turns (DualPipeV p, DualPipe p/2), h the rank's distance from the start of
// its first stage's direction and n microbatches per stage, 2(n - 2P + h + 1) + (P - h - 1),
// less the first pair of the turning rank (h = P - 1), which runs unoverlapped.
TEST(DualPipe, EveryStageAndMicrobatchForwardAndBackwardOnce) {
  for (const std::string name : {"dualpipev", "dualpipe"})
    for (auto [p, m] : shapes(name)) {
      const std::string at = name + " p=" + std::to_string(p) + " m=" + std::to_string(m);
      const Schedule s = compute_only(name, p, m);
      ASSERT_EQ(s.num_stages, 2 * p) << at;
      std::map<std::pair<int, int>, std::array<int, 4>> seen;  // (stage, mb) -> F, B, I, W counts
      for (int r = 0; r < p; ++r) {
        const std::vector<int> mine = s.stages_of(r);
        ASSERT_EQ(mine, (std::vector<int>{std::min(r, 2 * p - 1 - r), std::max(r, 2 * p - 1 - r)})) << at;
        int overlaps = 0;
        for (const Action& a : s.actions[static_cast<size_t>(r)]) {
          switch (a.op) {
            case Op::F: ++seen[{a.stage, a.microbatch}][0]; break;
            case Op::B: ++seen[{a.stage, a.microbatch}][1]; break;
            case Op::I: ++seen[{a.stage, a.microbatch}][2]; break;
            case Op::W: ++seen[{a.stage, a.microbatch}][3]; break;
            case Op::OVERLAP_F_B:
              ++overlaps;
              ++seen[{a.stage, a.microbatch}][0];
              EXPECT_EQ(a.b_op, Op::B) << at;
              EXPECT_NE(a.stage, a.b_stage) << at << ": " << schedules::to_text(a);
              ++seen[{a.b_stage, a.b_microbatch}][1];
              break;
            default: ADD_FAILURE() << at << ": unexpected " << schedules::to_text(a);
          }
        }
        const bool v = name == "dualpipev";
        const int P = v ? p : p / 2, h = v ? r : std::min(r, p - 1 - r), n = v ? m : m / 2;
        EXPECT_EQ(overlaps, 2 * (n - 2 * P + h + 1) + (P - h - 1) - (h == P - 1 ? 1 : 0)) << at << " rank " << r;
      }
      EXPECT_EQ(seen.size(), static_cast<size_t>(2 * p * (name == "dualpipe" ? m / 2 : m))) << at;
      for (const auto& [key, c] : seen) {
        EXPECT_EQ(c[0], 1) << at << " stage " << key.first << " mb " << key.second << ": forwards";
        EXPECT_EQ(c[1] + c[2], 1) << at << " stage " << key.first << " mb " << key.second << ": backwards";
        EXPECT_EQ(c[3], c[2]) << at << " stage " << key.first << " mb " << key.second << ": W after each I";
      }
      const auto r = schedules::check_schedule(schedules::lower(s));
      EXPECT_TRUE(r.ok) << at << ": " << r.reason;
    }
}

// DualPipe's two directions: the forward one holds stages 0..p-1 (part k on rank k) and runs
// microbatches 0..m/2-1, the reverse one stages p..2p-1 (part k on rank p-1-k) and m/2..m-1.
// "The micro-batches in the reverse direction are symmetric to those in the forward direction"
// (Fig. 5's caption): rank p-1-r runs rank r's list with each stage replaced by the same model
// part of the other direction and each microbatch by its counterpart m/2 away.
TEST(DualPipe, TwoDirectionsMirrorEachOther) {
  for (auto [ranks, m] : shapes("dualpipe")) {
    const int p = ranks;  // a plain variable: lambdas cannot capture a structured binding in C++17 (clang)
    const Schedule s = compute_only("dualpipe", p, m);
    ASSERT_EQ(s.num_chains, 2);
    for (int k = 0; k < p; ++k) {
      EXPECT_EQ(s.rank_of(k), k);
      EXPECT_EQ(s.rank_of(p + k), p - 1 - k);
    }
    const int half = m / 2;
    auto other = [&](int stage) { return stage < p ? stage + p : stage - p; };
    auto twin = [&](int mb) { return mb < half ? mb + half : mb - half; };
    for (int r = 0; r < p; ++r) {
      const auto& mine = s.actions[static_cast<size_t>(r)];
      const auto& theirs = s.actions[static_cast<size_t>(p - 1 - r)];
      ASSERT_EQ(mine.size(), theirs.size());
      for (size_t i = 0; i < mine.size(); ++i) {
        Action x = mine[i];
        x.stage = other(x.stage);
        x.microbatch = twin(x.microbatch);
        if (x.op == Op::OVERLAP_F_B) {
          x.b_stage = other(x.b_stage);
          x.b_microbatch = twin(x.b_microbatch);
        }
        EXPECT_EQ(x, theirs[i]) << "p " << p << " m " << m << " rank " << r << " action " << i;
      }
      // The forward direction's microbatches only on its stages, the reverse one's on theirs.
      for (const Action& a : mine) EXPECT_EQ(a.stage < p, a.microbatch < half) << schedules::to_text(a);
    }
  }
}

// Table 2 of the DeepSeek-V3 report: DualPipe's bubble (PP/2 - 1)(F&B + B - 3W), 2x
// parameters, PP + 1 activations per device; the deepseek-ai/DualPipe README adds DualPipeV,
// counted over PP stages: the same bubble and PP + 1 stage activations per device on PP/2
// devices, one copy of the model in all. F is a
// forward chunk, B a full backward, W a weight backward, F&B an overlapped forward-backward
// pair. Here, per stage and without communication: F = I, W <= I, B = I + W, and F&B = F + B
// (the evaluator runs an OVERLAP_F_B's halves back to back: overlap hides communication only).
// PP is DualPipe's ranks p (stages per direction) and DualPipeV's 2p stages. The bubble is
// every rank's idle time T - C_r, one iteration alone or back to back, for any microbatch count
// (the report: it does not grow with m). Where F != I or W > I the evaluator's idle time
// departs from the formula (e.g. DualPipeV p = 4, F = 2, I = W = 1: 12, the formula 9); those
// are not pinned.
TEST(DualPipe, BubbleAndMemoryAreTable2ClosedForms) {
  struct Costs {
    double f, w;  // I = F, B = I + W
  };
  for (const std::string name : {"dualpipe", "dualpipev"})
    for (auto [p, m] : shapes(name)) {
      const Schedule l = schedules::lower(compute_only(name, p, m));
      const int PP = name == "dualpipe" ? p : 2 * p;
      for (Costs c : {Costs{1, 1}, Costs{1, 0.5}, Costs{2, 1}, Costs{2, 2}, Costs{3, 1}}) {
        costmodel::UnitCosts u;
        u.f = u.i = c.f;
        u.w = c.w;
        u.b = u.i + u.w;
        const double fb = u.f + u.b;
        const double bubble = (PP / 2.0 - 1) * (fb + u.b - 3 * u.w);
        for (int iterations : {1, 3}) {
          costmodel::EvalOptions opt;
          opt.iterations = iterations;
          const costmodel::EvalResult e = costmodel::Evaluator(l, opt).evaluate(costmodel::unit_cost_table(l, u));
          const std::string at = name + " p=" + std::to_string(p) + " m=" + std::to_string(m) + " F=I=" + std::to_string(c.f) +
                                 " W=" + std::to_string(c.w) + " iterations " + std::to_string(iterations);
          for (int r = 0; r < p; ++r) {
            // Every rank computes F + B for each of its two stages and each microbatch through it.
            const int per_stage = name == "dualpipe" ? m / 2 : m;
            EXPECT_DOUBLE_EQ(e.compute_s[static_cast<size_t>(r)], 2 * per_stage * (u.f + u.b)) << at << " rank " << r;
            EXPECT_DOUBLE_EQ(e.idle_s[static_cast<size_t>(r)], bubble) << at << " rank " << r;
          }
        }
      }
      // Activations: PP + 1 microbatches of one stage at the peak, on every rank. The evaluator
      // counts in microbatches through L/p layers: a DualPipe stage is that (one direction's
      // p stages hold the model), a DualPipeV stage half of it.
      const costmodel::EvalResult e = costmodel::Evaluator(l).evaluate(costmodel::unit_cost_table(l, costmodel::UnitCosts{}));
      const double stage_size = name == "dualpipe" ? 1.0 : 0.5;
      for (double a : e.peak_activations) EXPECT_DOUBLE_EQ(a, (PP + 1) * stage_size) << name << " p=" << p << " m=" << m;
      // Parameters: each rank holds two stages of a chain of stages_per_chain: 2/p of the model
      // for DualPipe (2x a 1F1B rank's 1/p: two copies), 1/p for DualPipeV (one copy over p ranks).
      for (int r = 0; r < p; ++r) {
        const double share = static_cast<double>(l.stages_of(r).size()) / l.stages_per_chain();
        EXPECT_DOUBLE_EQ(share * p, name == "dualpipe" ? 2.0 : 1.0) << name << " p=" << p << " rank " << r;
      }
    }
  // PyTorch's 4-rank, 10-microbatch shape at F = I = W = 1: T = 66 of which 6 idle on every rank,
  // (8/2 - 1)(3 + 2 - 3); DualPipe on 4 ranks, 20 microbatches: T = 62, idle (4/2 - 1)(3 + 2 - 3).
  const Schedule v = schedules::lower(compute_only("dualpipev", 4, 10));
  const Schedule d = schedules::lower(compute_only("dualpipe", 4, 20));
  EXPECT_DOUBLE_EQ(costmodel::Evaluator(v).evaluate(costmodel::unit_cost_table(v, costmodel::UnitCosts{})).iteration_time_s, 66);
  EXPECT_DOUBLE_EQ(costmodel::Evaluator(d).evaluate(costmodel::unit_cost_table(d, costmodel::UnitCosts{})).iteration_time_s, 62);
}

TEST(DualPipe, ConstraintsAreNamed) {
  auto refused = [](const char* name, int p, int m, int v, const char* needle) {
    try {
      compute_only(name, p, m, v);
    } catch (const InputError& e) {
      if (std::string(e.what()).find(needle) != std::string::npos) return true;
      ADD_FAILURE() << e.what();
      return false;
    }
    ADD_FAILURE() << name << " p=" << p << " m=" << m << " accepted";
    return false;
  };
  EXPECT_TRUE(refused("dualpipev", 4, 7, 0, "microbatches = 7 is invalid (must be at least 8"));
  EXPECT_TRUE(refused("dualpipev", 4, 8, 2, "chunks = 2 is invalid"));
  EXPECT_TRUE(refused("dualpipev", 0, 8, 0, "ranks = 0"));
  EXPECT_TRUE(refused("dualpipe", 3, 12, 0, "ranks = 3 is invalid (must be a multiple of 2"));
  EXPECT_TRUE(refused("dualpipe", 1, 4, 0, "ranks = 1 is invalid (must be at least 2"));
  EXPECT_TRUE(refused("dualpipe", 4, 6, 0, "microbatches = 6 is invalid (must be at least 8"));
  EXPECT_TRUE(refused("dualpipe", 4, 9, 0, "microbatches = 9 is invalid (must be a multiple of 2"));
  EXPECT_TRUE(refused("dualpipe", 4, 8, 2, "chunks = 2 is invalid"));
  // The floors themselves are accepted; names and aliases resolve.
  EXPECT_NO_THROW(compute_only("dualpipev", 4, 8));
  EXPECT_NO_THROW(compute_only("dualpipe", 4, 8));
  EXPECT_EQ(schedules::find_generator("DualPipeV").name, "dualpipev");
  EXPECT_EQ(schedules::find_generator("dualpipe-v").name, "dualpipev");
  EXPECT_EQ(schedules::find_generator("ScheduleDualPipeV").name, "dualpipev");
  EXPECT_EQ(schedules::find_generator("DualPipe").name, "dualpipe");
}

}  // namespace
}  // namespace stagecraft
