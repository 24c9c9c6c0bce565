// Import and export: PyTorch's CSV (both notations) and stagecraft's JSON, with round trips.
#include <gtest/gtest.h>

#include "costmodel/costs.h"
#include "costmodel/evaluator.h"
#include "helpers.h"
#include "schedules/error.h"
#include "schedules/io.h"
#include "schedules/lower.h"
#include "schedules/registry.h"
#include "schedules/validate.h"

using namespace stagecraft;
using namespace stagecraft::schedules;

namespace {
Schedule gen(const char* name, int p, int m, int v = 0) { return test::compute_only(name, p, m, v); }
void expect_same_lists(const Schedule& a, const Schedule& b) {
  ASSERT_EQ(a.num_ranks, b.num_ranks);
  EXPECT_EQ(a.num_stages, b.num_stages);
  EXPECT_EQ(a.num_microbatches, b.num_microbatches);
  EXPECT_EQ(a.stage_to_rank, b.stage_to_rank);
  EXPECT_EQ(a.placement, b.placement);
  EXPECT_EQ(a.actions, b.actions);
}

// PyTorch's CSV `file` (tests/data/pytorch/), loaded and validated, with its shape checked.
Schedule load_pytorch_csv(const std::string& file, int ranks, int stages, int microbatches, PlacementKind placement) {
  Schedule s = load_schedule_file(test::data_path("pytorch/" + file));
  EXPECT_EQ(s.num_ranks, ranks);
  EXPECT_EQ(s.num_stages, stages);
  EXPECT_EQ(s.num_microbatches, microbatches);
  EXPECT_EQ(s.placement, placement);
  validate(s);
  return s;
}

// The evaluation of `s` lowered, at unit costs with a backward of 2 units (or I 1 and W 1).
costmodel::EvalResult unit_evaluation(const Schedule& s) {
  costmodel::Evaluator ev(lower(s));
  return ev.evaluate(costmodel::unit_cost_table(ev.schedule(), {1, 2, 1, 1, 1}));
}
}  // namespace

TEST(ScheduleIO, CsvRoundTripLowered) {
  Schedule s = lower(gen("interleaved-1f1b", 4, 8, 2));
  Schedule back = from_csv(to_csv(s));
  expect_same_lists(s, back);
}

TEST(ScheduleIO, CsvHasIdleCellsAtDryRunSteps) {
  // 1F1B p=2: rank 1 waits one step for rank 0's first forward, so its row starts with an
  // empty cell, as PyTorch writes it.
  std::string csv = to_csv(gen("1f1b", 2, 2));
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "0F0,0F1,,0B0,,0B1");
  EXPECT_EQ(csv.substr(csv.find('\n') + 1), ",1F0,1B0,1F1,1B1\n");
}

TEST(ScheduleIO, JsonRoundTrip) {
  Schedule s = lower(gen("looped-bfs", 3, 5, 3));
  s.actions[0].front().sub_batch = 1;  // extra fields survive
  Schedule back = from_json(to_json(s));
  expect_same_lists(s, back);
  EXPECT_EQ(back.name, "looped-bfs");
  EXPECT_EQ(back.params, s.params);
}

TEST(ScheduleIO, GoldenCsvAndJsonFormats) {
  Schedule s = gen("1f1b", 4, 6);
  stagecraft::test::expect_golden("1f1b_p4_m6.csv", to_csv(s));
  stagecraft::test::expect_golden("1f1b_p4_m6.lowered.json", to_json(lower(s)).dump(1) + "\n");
}

TEST(ScheduleIO, PyTorchZb1pImportsValidatesEvaluates) {
  Schedule s = load_pytorch_csv("zb1p_2rank_2stagep_compute.csv", 2, 4, 8, PlacementKind::Loop);
  // Older notation: "2B0" followed by "2W0" is the input backward (idle cells are dropped).
  EXPECT_EQ(to_text(s.actions[0][4]), "2I0");
  EXPECT_EQ(to_text(s.actions[0][5]), "2W0");
  costmodel::EvalResult r = unit_evaluation(s);
  // The file's grid of unit steps: 49 columns, each rank idle in one (rank 0 waiting for 1F1,
  // rank 1 for 0F0) and busy in the other 48.
  EXPECT_DOUBLE_EQ(r.iteration_time_s, 49);
  EXPECT_DOUBLE_EQ(r.compute_s[0], 8 * 2 * 3.0);  // 2 stages x 8 microbatches x (F + I + W)
}

TEST(ScheduleIO, PyTorchDualPipeVImportsValidatesEvaluates) {
  costmodel::EvalResult r = unit_evaluation(load_pytorch_csv("dualpipev_4rank_10mb.csv", 4, 8, 10, PlacementKind::V));
  // Every rank computes 2 stages x 10 microbatches x (F + backward of 2 units).
  for (double c : r.compute_s) EXPECT_DOUBLE_EQ(c, 2 * 10 * 3.0);
}

TEST(ScheduleIO, CsvErrors) {
  EXPECT_THROW(from_csv(""), InputError);
  EXPECT_THROW(from_csv("0F0,1F0\n1F1\n"), InputError);  // stage 1 on two ranks
  EXPECT_THROW(from_csv("0F0,2F0\n"), InputError);        // stage 1 never appears
  try {
    from_csv("0F0\n1Q0\n");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("CSV line 2"), std::string::npos);
  }
  EXPECT_THROW(load_schedule_file("does-not-exist.csv"), InputError);
}

TEST(ScheduleIO, JsonErrorsNameTheField) {
  nlohmann::json j = to_json(gen("1f1b", 2, 2));
  j.erase("num_stages");
  try {
    from_json(j);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("num_stages"), std::string::npos);
  }
  nlohmann::json k = to_json(gen("1f1b", 2, 2));
  k["stage_to_rank"] = {0, 5};
  EXPECT_THROW(from_json(k), InputError);
}

// PyTorch CSV conformance: every registered schedule, written in PyTorch's format and read
// back, is the same schedule (placement, chains, every rank's list); lowered, written and read
// back, it prices the same under unit costs. The compute-only file prices the same too, except
// where a generator parameter steers the lowering (Merak's early recomputation: R before the
// gradient's receive), which a compute-only file cannot carry. docs/schedules.md.
TEST(ScheduleIO, EveryScheduleSurvivesPyTorchCsv) {
  int checked = 0;
  for (const auto& g : generators()) {
    for (int p : {2, 4}) {
      GeneratorOptions o;
      o.ranks = p;
      o.microbatches = 2 * p;
      Schedule s = generate(g.name, o);
      Schedule back = from_csv(to_csv(s), g.name);
      EXPECT_EQ(back.num_chains, s.num_chains) << g.name << " p=" << p;
      expect_same_lists(s, back);
      costmodel::UnitCosts u;  // F 1, B 2, R 1, I 1, W 1
      auto price = [&](const Schedule& lowered) {
        return costmodel::Evaluator(lowered).evaluate(costmodel::unit_cost_table(lowered, u)).iteration_time_s;
      };
      const Schedule ls = lower(s);
      const Schedule lb = from_csv(to_csv(ls), g.name);
      expect_same_lists(ls, lb);
      EXPECT_DOUBLE_EQ(price(ls), price(lb)) << g.name << " p=" << p << " (lowered)";
      if (!s.params.contains("recompute_timing")) {
        EXPECT_DOUBLE_EQ(price(ls), price(lower(back))) << g.name << " p=" << p << " (compute only)";
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 * static_cast<int>(generators().size()));
}

TEST(ScheduleIO, CsvMicrobatchGapIsRefused) {
  // Microbatch 1 missing: an error naming it, not three microbatches (nor 10^9 of them).
  try {
    from_csv("0F0,0F2,0B0,0B2\n", "gap");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("microbatch 1 never appears, yet indices run to 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(from_csv("0F0,0F999999999,0B0,0B999999999\n", "huge"), InputError);
  // Likewise stages: a stray huge stage index names the first missing stage.
  try {
    from_csv("0F0,0B0\n999999999F0,999999999B0\n", "huge-stage");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("stage 1 never appears (stages run 0..999999999)"), std::string::npos) << e.what();
  }
}

TEST(ScheduleIO, CsvChainsInferredFromMicrobatchShares) {
  // Chimera p=4: stages 0-3 run one half of the microbatches, 4-7 (the other direction) the other.
  Schedule s = gen("chimera", 4, 8);
  ASSERT_EQ(s.num_chains, 2);
  EXPECT_EQ(from_csv(to_csv(s)).num_chains, 2);
  // Stages that share microbatches unevenly fit no chain split.
  EXPECT_THROW(from_csv("0F0,0F1,0B0,0B1\n1F0,1B0\n"), InputError);
}

TEST(ScheduleIO, JsonWrongFieldTypesAreInputErrors) {
  // The long fuzz run found "name" given as a number escaping as nlohmann's type_error.
  nlohmann::json j = to_json(gen("1f1b", 2, 2));
  j["name"] = 5;
  EXPECT_THROW(from_json(j), InputError);
  j = to_json(gen("1f1b", 2, 2));
  j["placement"] = nlohmann::json::array();
  EXPECT_THROW(from_json(j), InputError);
}

TEST(ScheduleIO, JsonIntegersOutsideIntAreInputErrors) {
  // nlohmann's get<int>() of 2.5e62 is undefined behaviour; the loaders refuse it by name.
  nlohmann::json j = to_json(gen("1f1b", 2, 2));
  j["num_stages"] = 2.5e62;
  try {
    from_json(j);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("num_stages = 2.5e+62 is invalid"), std::string::npos) << e.what();
  }
  j = to_json(gen("1f1b", 2, 2));
  j["stage_to_rank"][1] = 1.5;
  EXPECT_THROW(from_json(j), InputError);
  j = to_json(gen("1f1b", 2, 2));
  j["num_chains"] = -1e300;
  EXPECT_THROW(from_json(j), InputError);
  j = to_json(gen("1f1b", 2, 2));
  j["num_stages"] = 2.0;  // an integral float is an integer
  EXPECT_EQ(from_json(j).num_stages, 2);
}

// FSDP's UNSHARD and RESHARD (PyTorch's _ComputationType; torchtitan's CSVs and PyTorch's lowered
// files hold them): imported as actions of the IR, written back unchanged, validated (per stage of
// a rank they alternate from UNSHARD, and the stage computes only while gathered), priced by the
// plan's zero 3 model (a schedule file with them and another zero is refused: estimate's test).
// The file is interleaved 1F1B on 2 ranks with PyTorch's rule (_add_unshard_reshard, at most 3
// stages gathered) applied to it: tests/data/pytorch/README.md.
TEST(ScheduleIO, FsdpUnshardAndReshardImport) {
  const std::string path = stagecraft::test::data_path("pytorch/interleaved1f1b_2rank_4mb_fsdp.csv");
  Schedule s = load_schedule_file(path);
  EXPECT_EQ(s.num_ranks, 2);
  EXPECT_EQ(s.num_stages, 4);
  EXPECT_EQ(s.num_microbatches, 4);
  EXPECT_EQ(to_text(s.actions[0][0]), "0UNSHARD");
  EXPECT_EQ(to_text(s.actions[0][1]), "2UNSHARD");
  EXPECT_EQ(parse_action("3RESHARD").op, Op::RESHARD);
  validate(s);
  // Round trip: the CSV and JSON forms keep them.
  Schedule back = from_csv(to_csv(s), s.name);
  EXPECT_EQ(back.actions, s.actions);
  EXPECT_EQ(from_json(to_json(s)).actions, s.actions);
  // Without them the compute actions are the generator's.
  Schedule compute = s;
  for (auto& list : compute.actions)
    list.erase(std::remove_if(list.begin(), list.end(), [](const Action& a) { return is_fsdp(a.op); }), list.end());
  EXPECT_EQ(compute.actions, gen("interleaved-1f1b", 2, 4, 2).actions);
  // Unit costs: they take no time (the collectives are the plan's, not unit costs').
  costmodel::Evaluator ev(lower(s));
  costmodel::Evaluator plain(lower(compute));
  const costmodel::UnitCosts u{1, 2, 1, 1, 1};
  EXPECT_DOUBLE_EQ(ev.evaluate(costmodel::unit_cost_table(ev.schedule(), u)).iteration_time_s,
                   plain.evaluate(costmodel::unit_cost_table(plain.schedule(), u)).iteration_time_s);
  // Computing a stage while sharded, or resharding one that is not gathered, is refused.
  Schedule early = s;
  std::swap(early.actions[0][1], early.actions[0][2]);  // 0F0 before 2UNSHARD: fine
  EXPECT_NO_THROW(validate(early));
  Schedule sharded = s;
  sharded.actions[0].insert(sharded.actions[0].begin() + 3, parse_action("0RESHARD"));  // after 0F0, before 0F1
  EXPECT_NE(test::error_of([&] { validate(sharded); }).find("stage 0 computes while its parameters are sharded"), std::string::npos);
  Schedule twice = s;
  twice.actions[0].insert(twice.actions[0].begin() + 1, parse_action("0UNSHARD"));
  EXPECT_NE(test::error_of([&] { validate(twice); }).find("a second UNSHARD of stage 0"), std::string::npos);
  Schedule stray = s;
  stray.actions[1].insert(stray.actions[1].begin(), parse_action("1RESHARD"));
  EXPECT_NE(test::error_of([&] { validate(stray); }).find("RESHARD of stage 1 that is not gathered"), std::string::npos);
}
