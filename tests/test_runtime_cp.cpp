// Context parallelism in the runtime (runtime/cp.h, docs/runtime.md "Context parallelism"):
// `stagecraft train` with the sequence split over cp ranks and attention as a ring of key/value
// chunks. The losses of cp 2 and cp 4, alone and with tp, pp and dp (and ZeRO 1, full
// recomputation), equal a single process's within 1e-5 for a GPT (learned positions), a LLaMA
// (rotary positions) and a grouped-query model; the first step's squared gradients show that
// gradients are averaged over dp x cp; the ring's sends per step in those runs follow the closed
// form; the combinations the runtime does not run exit 2 naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <iomanip>
#include <iostream>
#include <map>

#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

constexpr int kSteps = 3;
constexpr int kGlobalMicrobatches = 4;  // dp x microbatches: the same global batch in every run
constexpr int kLayers = 8;              // the runtime-tiny8 models

std::string model(const std::string& name) { return data_path("models/" + name + ".json"); }

// The ring is the cost model's fused kernel per key/value chunk (costmodel/cp.h); a single
// process runs the materialized kernel (LibTorch 1.13 has no fused one), the same mathematics.
std::string flags(const std::string& m, int dp) {
  return "--model " + model(m) + " --steps " + std::to_string(kSteps) + " --seed 7 --lr 3e-3 --timeout 60 --microbatches " +
         std::to_string(kGlobalMicrobatches / dp);
}

const TrainRun& single_process(const std::string& m) { return train_once(flags(m, 1) + " --schedule gpipe"); }

double first_grad_sq(const nlohmann::json& summary) { return summary["steps"][0]["grad_sq_sum"].get<double>(); }

struct Split {
  int cp, tp, pp, dp;
  std::string extra;
};

TrainRun run_split(const std::string& m, const Split& sp) {
  const std::string args = flags(m, sp.dp) + " --attention-kernel fused --nproc " + std::to_string(sp.cp * sp.tp * sp.pp * sp.dp) +
                           " --cp " + std::to_string(sp.cp) + " --tp " + std::to_string(sp.tp) + " --pp " +
                           std::to_string(sp.pp) + " --dp " + std::to_string(sp.dp) + " " + sp.extra;
  TrainRun r = train(args);
  EXPECT_EQ(r.cli.exit_code, 0) << args << "\n" << r.cli.err;
  return r;
}

// Each attention forward sends its k and v chunks cp - 1 times (2 (cp - 1) sends); its backward
// the same plus the two gradients cp times (2 (cp - 1) + 2 cp); full recomputation runs the
// forward once more inside the backward. One stage of kLayers layers (pp 1), dp x microbatches
// = kGlobalMicrobatches.
void expect_ring_sends(const nlohmann::json& summary, const Split& sp) {
  const long forwards = sp.extra.find("--recompute full") != std::string::npos ? 2 : 1;
  const long per_attention = forwards * 2 * (sp.cp - 1) + 2 * (sp.cp - 1) + 2 * sp.cp;
  for (const auto& rank : summary["ranks"])
    EXPECT_EQ(rank["cp_sends_per_step"].get<long>(), per_attention * kLayers * (kGlobalMicrobatches / sp.dp))
        << "cp " << sp.cp << " dp " << sp.dp << " " << sp.extra << " rank " << rank["rank"];
  std::cout << "cp " << sp.cp << " dp " << sp.dp << " " << sp.extra << ": " << summary["ranks"][0]["cp_sends_per_step"]
            << " ring sends per step and rank\n";
}

void check_parity(const std::string& m, const std::vector<Split>& splits) {
  const TrainRun& one = single_process(m);
  ASSERT_EQ(one.cli.exit_code, 0);
  const std::vector<double> ref = losses(one.summary);
  ASSERT_EQ(ref.size(), static_cast<size_t>(kSteps));
  for (const Split& sp : splits) {
    TrainRun r = run_split(m, sp);
    if (r.cli.exit_code != 0) continue;
    const std::vector<double> got = losses(r.summary);
    ASSERT_EQ(got.size(), ref.size()) << m;
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_NEAR(got[i], ref[i], 1e-5 * std::fabs(ref[i])) << m << " cp " << sp.cp << " tp " << sp.tp << " pp " << sp.pp << " dp "
                                                            << sp.dp << " " << sp.extra << ": step " << i;
    // Every rank holds its stage's parameters whole (tp 1), each averaged over dp x cp: the sum of
    // the ranks' squared gradients is dp cp times the single process's. A rank that summed
    // instead of averaging over cp would give cp^2 times that.
    if (sp.tp == 1)
      EXPECT_NEAR(first_grad_sq(r.summary), sp.dp * sp.cp * first_grad_sq(one.summary), 1e-4 * sp.dp * sp.cp * first_grad_sq(one.summary))
          << m << " cp " << sp.cp << " dp " << sp.dp << " pp " << sp.pp << ": squared gradients";
    if (sp.pp == 1) expect_ring_sends(r.summary, sp);
  }
}

TEST(RuntimeCp, GptLossesEqualSingleProcess) {
  check_parity("runtime-tiny8", {{2, 1, 1, 1, ""},
                                 {4, 1, 1, 1, ""},
                                 {2, 2, 1, 1, ""},
                                 {2, 1, 2, 1, "--schedule 1f1b"},
                                 {2, 1, 1, 2, "--zero 1"},
                                 {2, 1, 1, 1, "--recompute full"}});
}

TEST(RuntimeCp, LlamaRotaryPositionsEqualSingleProcess) {
  check_parity("runtime-tiny8-llama", {{4, 1, 1, 1, ""}, {2, 1, 2, 1, "--schedule interleaved-1f1b"}});
}

TEST(RuntimeCp, GroupedQueryAttentionEqualsSingleProcess) {
  check_parity("runtime-tiny8-gqa", {{2, 1, 2, 1, "--schedule zb-h1"}, {4, 1, 1, 1, "--recompute selective"}});
}

TEST(RuntimeCp, UnsupportedCombinationsExit2NamingTheField) {
  const std::string base = flags("runtime-tiny8", 1) + " --attention-kernel fused";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {base + " --nproc 2 --cp 2 --dp 1 --rank-order dp-tp-pp", "plan.rank_order"},  // cp lands between tp and pp
      {base + " --nproc 2 --cp 2 --dp 1 --rank-order cp-tp-dp-pp", "cp next to dp"},
      {base + " --nproc 3 --cp 3 --dp 1", "cp"},  // 2 cp = 6 does not divide the 16 tokens
      {flags("runtime-tiny8-moe", 2) + " --attention-kernel fused --nproc 4 --cp 2 --dp 2 --ep 2", "plan.ep"},
  };
  for (const auto& [args, want] : cases) expect_train_refused(args, want);
}

}  // namespace
}  // namespace stagecraft::test
