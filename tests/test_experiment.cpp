// Experiments (docs/experiments.md): specs as merge patches over a base, the runner's points
// and best_of, paper.csv and the comparison (ratios, aggregates over the axis, who beats whom),
// the report, the CLI, and every experiment checked in: its spec runs and its results.csv and
// compare.csv are what the runner writes today.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "reproduce/csv.h"
#include "reproduce/paper.h"
#include "reproduce/report.h"
#include "reproduce/run.h"
#include "reproduce/spec.h"
#include "helpers.h"
#ifdef STAGECRAFT_HAVE_SIM
#include "sim/simulate.h"
#endif

namespace fs = std::filesystem;
using nlohmann::json;
using namespace stagecraft;
using namespace stagecraft::reproduce;
using stagecraft::test::read_text;
using stagecraft::test::run_cli;

namespace {

const fs::path kRoot = fs::path(STAGECRAFT_TEST_DATA).parent_path().parent_path();

// A small spec: gpt-1.4b on the Merak cluster, pp 4, two schedules over two microbatch counts.
json small_spec() {
  return json::parse(R"({
    "paper": "merak", "figure": "Fig. 0", "title": "test", "metric": "tokens_per_s", "unit": "ktokens/s", "scale": 0.001,
    "base": {"model": "gpt-1.4b", "cluster": "merak-3090-64",
             "plan": {"tp": 1, "pp": 4, "dp": 1, "microbatch_size": 1, "num_microbatches": 4}},
    "x": {"label": "microbatches", "points": [{"x": "4", "set": {"plan": {"num_microbatches": 4}}},
                                              {"x": "16", "set": {"plan": {"num_microbatches": 16}}}]},
    "series": [{"name": "GPipe", "set": {"plan": {"schedule": "gpipe"}}},
               {"name": "1F1B", "set": {"plan": {"schedule": "1f1b"}}}]
  })");
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

double tokens_per_s(const std::string& schedule, int m) {
  costmodel::ParallelPlan p;
  p.pp = 4;
  p.num_microbatches = m;
  p.schedule = schedule;
  return costmodel::estimate(presets::load_model("gpt-1.4b"), presets::load_cluster("merak-3090-64"), p).tokens_per_s;
}

RunOptions run_options() {
  RunOptions o;
#ifdef STAGECRAFT_HAVE_SIM
  o.simulate = [](const costmodel::Estimate& e) { return sim::simulated_estimate(e); };
#endif
  return o;
}

}  // namespace

TEST(ExperimentCsv, QuotesWhatNeedsItAndReadsItBack) {
  const CsvRow row = {"Hanayo", "PC (8,1)", "a \"quoted\" note, with a comma", ""};
  const std::string line = csv_line(row);
  EXPECT_EQ(line, "Hanayo,\"PC (8,1)\",\"a \"\"quoted\"\" note, with a comma\",\n");
  const auto back = parse_csv("h1,h2,h3,h4\n" + line + "\n", "t.csv");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1], row);
  EXPECT_NE(message_of([] { parse_csv("a,b\n\"open,c\n", "t.csv"); }).find("t.csv:2: unterminated"), std::string::npos);
  EXPECT_EQ(fmt_double(90.0), "90");
  EXPECT_EQ(fmt_double(1.0819), "1.0819");
}

TEST(ExperimentSpec, MergesBaseThenXThenSeries) {
  json j = small_spec();
  j["x"]["points"][1]["set"]["plan"]["microbatch_size"] = 2;
  j["series"][1]["set"]["plan"]["microbatch_size"] = nullptr;  // null removes the key
  const Spec s = spec_from_json(j, "experiments/merak/fig0");
  const json c = point_config(s, s.x[1], s.series[1]);
  EXPECT_EQ(c["plan"]["num_microbatches"], 16);
  EXPECT_EQ(c["plan"]["schedule"], "1f1b");
  EXPECT_FALSE(c["plan"].contains("microbatch_size"));
  EXPECT_EQ(point_config(s, s.x[1], s.series[0])["plan"]["microbatch_size"], 2);
  EXPECT_EQ(s.id(), "merak-fig0");
  EXPECT_EQ(s.goal, "max");  // a rate: more is better
  j["metric"] = "iteration_time_s";
  EXPECT_EQ(spec_from_json(j, "d").goal, "min");
}

TEST(ExperimentSpec, BadSpecsNameTheField) {
  auto err = [](const std::function<void(json&)>& edit) {
    json j = small_spec();
    edit(j);
    return message_of([&] { spec_from_json(j, "dir"); });
  };
  EXPECT_NE(err([](json& j) { j["paper"] = "megatron"; }).find("paper = 'megatron' is invalid (allowed: merak, oases, hanayo, fold3d)"),
            std::string::npos);
  EXPECT_NE(err([](json& j) { j["colour"] = 1; }).find("unknown field 'colour'"), std::string::npos);
  EXPECT_NE(err([](json& j) { j.erase("metric"); }).find("metric is missing"), std::string::npos);
  EXPECT_NE(err([](json& j) { j["x"]["points"][1]["x"] = "4"; }).find("labels must differ"), std::string::npos);
  EXPECT_NE(err([](json& j) { j["x"]["points"][1]["x"] = "max"; }).find("x = max is invalid"), std::string::npos);
  EXPECT_NE(err([](json& j) { j["series"][0]["best_of"] = json::array(); }).find("best_of"), std::string::npos);
  EXPECT_NE(err([](json& j) { j["engine"] = "gpu"; }).find("engine = 'gpu' is invalid (allowed: eval, sim)"), std::string::npos);
  EXPECT_NE(err([](json& j) { j["scale"] = 0; }).find("scale = 0 is invalid"), std::string::npos);
}

TEST(ExperimentRun, EveryPointIsTheEstimateOfItsConfiguration) {
  const Spec s = spec_from_json(small_spec(), "experiments/merak/fig0");
  const Results r = run(s);
  ASSERT_EQ(r.points.size(), 4u);
  EXPECT_DOUBLE_EQ(r.find("GPipe", "4")->predicted, tokens_per_s("gpipe", 4) * 0.001);
  EXPECT_DOUBLE_EQ(r.find("1F1B", "16")->predicted, tokens_per_s("1f1b", 16) * 0.001);
  EXPECT_TRUE(r.find("1F1B", "16")->fits);
  const std::string csv = results_csv(s, r);
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "series,x,metric,predicted,unit,fits,choice");
  EXPECT_NE(csv.find("1F1B,16,tokens_per_s,"), std::string::npos);
}

TEST(ExperimentRun, BestOfKeepsTheBestCandidateThePointAllows) {
  json j = small_spec();
  j["series"] = json::parse(R"([{"name": "interleaved", "set": {"plan": {"schedule": "interleaved-1f1b"}},
      "best_of": [{"plan": {"schedule_params": {"chunks": 1}}}, {"plan": {"schedule_params": {"chunks": 2}}},
                  {"plan": {"schedule_params": {"chunks": 1000}}}]}])");
  const Spec s = spec_from_json(j, "d");
  const Results r = run(s);
  // chunks 1000 needs more layers than gpt-1.4b has: not a candidate. 2 chunks halve the bubble.
  for (const Point& p : r.points) EXPECT_EQ(p.choice, R"({"plan":{"schedule_params":{"chunks":2}}})") << p.x;
  j["series"][0]["best_of"] = json::parse(R"([{"plan": {"schedule_params": {"chunks": 1000}}}])");
  EXPECT_NE(message_of([&] { run(spec_from_json(j, "d")); }).find("no best_of candidate applies here"), std::string::npos);
}

TEST(ExperimentRun, BadConfigurationsNameThePoint) {
  json j = small_spec();
  j["series"][1]["set"]["plan"]["schedule"] = "2f2b";
  std::string m = message_of([&] { run(spec_from_json(j, "d")); });
  EXPECT_NE(m.find("d: series '1F1B', x '4'"), std::string::npos) << m;
  EXPECT_NE(m.find("2f2b"), std::string::npos) << m;
  j = small_spec();
  j["base"]["gpus"] = 8;
  m = message_of([&] { run(spec_from_json(j, "d")); });
  EXPECT_NE(m.find("unknown field 'gpus'"), std::string::npos) << m;
  j = small_spec();
  j["metric"] = "joules";
  m = message_of([&] { run(spec_from_json(j, "d")); });
  EXPECT_NE(m.find("metric = 'joules' is not a field of the estimate"), std::string::npos) << m;
  j = small_spec();
  j["base"]["plan"].erase("dp");
  j["base"]["plan"]["pp"] = 3;  // 64 GPUs: dp cannot be derived
  m = message_of([&] { run(spec_from_json(j, "d")); });
  EXPECT_NE(m.find("plan.dp not given"), std::string::npos) << m;
}

TEST(ExperimentRun, GlobalBatchSetsTheMicrobatchesOfEachCandidate) {
  json j = small_spec();
  j["base"]["global_batch"] = 64;
  j["base"]["plan"].erase("dp");  // 64 GPUs / pp 4: dp 16, so 4 microbatches of 1 or 2 of 2
  j["series"] = json::parse(R"([{"name": "1F1B", "set": {"plan": {"schedule": "1f1b"}},
      "best_of": [{"plan": {"microbatch_size": 1}}, {"plan": {"microbatch_size": 2}}]}])");
  j["x"]["points"] = json::parse(R"([{"x": "64"}])");
  const Results r = run(spec_from_json(j, "d"));
  costmodel::ParallelPlan p;
  p.pp = 4;
  p.dp = 16;
  p.microbatch_size = std::stoi(json::parse(r.points[0].choice)["plan"]["microbatch_size"].dump());
  p.num_microbatches = 64 / (16 * p.microbatch_size);
  const auto e = costmodel::estimate(presets::load_model("gpt-1.4b"), presets::load_cluster("merak-3090-64"), p);
  EXPECT_DOUBLE_EQ(r.points[0].predicted, e.tokens_per_s * 0.001);
  j["base"]["global_batch"] = 100;
  EXPECT_NE(message_of([&] { run(spec_from_json(j, "d")); }).find("global_batch = 100 is invalid (must be a positive multiple of dp * microbatch_size"),
            std::string::npos);
}

TEST(ExperimentRun, PerRankMetricsTakeTheRankOrTheLargest) {
  json j = small_spec();
  j["metric"] = "peak_memory_bytes";
  j["x"]["points"] = json::parse(R"([{"x": "rank 0", "rank": 0}, {"x": "rank 3", "rank": 3}, {"x": "largest"}])");
  const Results r = run(spec_from_json(j, "d"));
  const Point* r0 = r.find("1F1B", "rank 0");
  EXPECT_GT(r0->predicted, r.find("1F1B", "rank 3")->predicted);  // 1F1B: the first stage holds p microbatches
  EXPECT_DOUBLE_EQ(r.find("1F1B", "largest")->predicted, r0->predicted);
  j["reduce"] = "variance";
  j["scale"] = 1e-9;
  j["x"]["points"] = json::parse(R"([{"x": "all"}])");
  costmodel::ParallelPlan p;
  p.pp = 4;
  p.num_microbatches = 4;
  p.schedule = "1f1b";
  const auto e = costmodel::estimate(presets::load_model("gpt-1.4b"), presets::load_cluster("merak-3090-64"), p);
  double mean = 0, var = 0;
  for (double b : e.eval.peak_memory_bytes) mean += b * 1e-9 / 4;
  for (double b : e.eval.peak_memory_bytes) var += (b * 1e-9 - mean) * (b * 1e-9 - mean) / 4;
  EXPECT_NEAR(run(spec_from_json(j, "d")).find("1F1B", "all")->predicted, var, 1e-12);
  j["reduce"] = "median";
  EXPECT_NE(message_of([&] { spec_from_json(j, "d"); }).find("reduce = 'median' is invalid (allowed: max, min, mean, variance)"),
            std::string::npos);
}

TEST(ExperimentPaper, ComparesValuesRatiosAndAggregates) {
  const Spec s = spec_from_json(small_spec(), "d");
  const Results r = run(s);
  const auto paper = parse_paper(
      "figure,series,x,quantity,value,source,note\n"
      "Fig. 0,1F1B,4,value,100,table,Table 1\n"
      "Fig. 0,1F1B,max,over:GPipe,1.2,text,\"up to 20%, Sec. 1\"\n"
      "Fig. 0,GPipe,min,over:1F1B,1.1,text,the paper says GPipe wins\n"
      "Fig. 0,GPipe,16,over_x:4,2,bar,read off\n",
      s, "paper.csv");
  const auto c = compare(s, r, paper);
  ASSERT_EQ(c.size(), 4u);
  const double g4 = r.find("GPipe", "4")->predicted, g16 = r.find("GPipe", "16")->predicted;
  const double f4 = r.find("1F1B", "4")->predicted, f16 = r.find("1F1B", "16")->predicted;
  EXPECT_DOUBLE_EQ(c[0].predicted, f4);
  EXPECT_DOUBLE_EQ(c[0].error, f4 / 100 - 1);
  EXPECT_FALSE(c[0].same_order.has_value());
  EXPECT_DOUBLE_EQ(c[1].predicted, std::max(f4 / g4, f16 / g16));
  EXPECT_EQ(*c[1].same_order, c[1].predicted > 1);
  EXPECT_DOUBLE_EQ(c[2].predicted, std::min(g4 / f4, g16 / f16));
  EXPECT_EQ(*c[2].same_order, c[2].predicted > 1);
  EXPECT_DOUBLE_EQ(c[3].predicted, g16 / g4);
  const std::string csv = compare_csv(c);
  EXPECT_NE(csv.find("\"up to 20%, Sec. 1\""), std::string::npos);
  const Summary m = summarize(c);
  EXPECT_EQ(m.values, 1);
  EXPECT_EQ(m.ratios, 3);
}

TEST(ExperimentPaper, BadRowsNameTheLineAndTheField) {
  const Spec s = spec_from_json(small_spec(), "d");
  auto err = [&](const std::string& row) {
    return message_of([&] { parse_paper("figure,series,x,quantity,value,source,note\n" + row + "\n", s, "p.csv"); });
  };
  EXPECT_NE(err("Fig. 0,DAPPLE,4,value,1,text,").find("p.csv:2: series = 'DAPPLE' is not a series"), std::string::npos);
  EXPECT_NE(err("Fig. 0,GPipe,8,value,1,text,").find("x = '8' is not an x label"), std::string::npos);
  EXPECT_NE(err("Fig. 0,GPipe,4,speedup,1,text,").find("quantity = 'speedup' is invalid"), std::string::npos);
  EXPECT_NE(err("Fig. 0,GPipe,4,over:Megatron,1,text,").find("names no series"), std::string::npos);
  EXPECT_NE(err("Fig. 0,GPipe,max,over_x:4,1,text,").find("cannot go with quantity over_x"), std::string::npos);
  EXPECT_NE(err("Fig. 0,GPipe,4,value,fast,text,").find("value = 'fast' is invalid"), std::string::npos);
  EXPECT_NE(err("Fig. 0,GPipe,4,value,1,blog,").find("source = 'blog' is invalid (allowed: text, table, bar)"), std::string::npos);
  EXPECT_NE(err("Fig. 0,GPipe,4,value,1,text").find("6 fields (expected 7"), std::string::npos);
  EXPECT_NE(message_of([&] { parse_paper("series,x\n", s, "p.csv"); }).find("p.csv:1: header"), std::string::npos);
}

TEST(ExperimentReport, ShowsEachFigureWithItsTableAndDiscussion) {
  json j = small_spec();
  j["discussion"] = "GPipe holds every microbatch.";
  Outcome o{spec_from_json(j, "experiments/merak/fig0"), {}, {}};
  o.results = run(o.spec);
  o.comparisons = compare(o.spec, o.results,
                          parse_paper("figure,series,x,quantity,value,source,note\nFig. 0,1F1B,4,over:GPipe,0.5,text,\n", o.spec, "p"));
  const std::string md = report_markdown({o});
  EXPECT_NE(md.find("## Merak Fig. 0: test"), std::string::npos);
  EXPECT_NE(md.find("![Merak Fig. 0](figures/merak-fig0.png)"), std::string::npos);
  EXPECT_NE(md.find("| 1F1B | 4 | over:GPipe | 0.5 |"), std::string::npos);
  EXPECT_NE(md.find("**no**"), std::string::npos);  // 1F1B is not slower than GPipe, as this made-up row claims
  EXPECT_NE(md.find("GPipe holds every microbatch."), std::string::npos);
}

TEST(ExperimentCli, WritesNothingWhenAnyExperimentFails) {
  const std::string dir = stagecraft::test::scratch_path("exp_cli");
  fs::create_directories(dir + "/good");
  fs::create_directories(dir + "/bad");
  std::ofstream(dir + "/good/spec.json") << small_spec().dump(2);
  std::ofstream(dir + "/good/paper.csv") << "figure,series,x,quantity,value,source,note\nFig. 0,1F1B,16,over_x:4,1.5,text,\n";
  json bad = small_spec();
  bad["series"][0]["set"]["plan"]["pp"] = 0;
  std::ofstream(dir + "/bad/spec.json") << bad.dump(2);
  std::ofstream(dir + "/bad/paper.csv") << "figure,series,x,quantity,value,source,note\n";
  auto r = run_cli("experiment run " + dir + " --report " + dir + "/figures.md");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("series 'GPipe'"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/good/results.csv"));  // bad sorts first, but nothing is written either way
  EXPECT_FALSE(fs::exists(dir + "/figures.md"));
  fs::remove_all(dir + "/bad");
  r = run_cli("experiment run " + dir + " --report " + dir + "/figures.md");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("4 points, 1 published values, 1/1 ratios in the paper's order"), std::string::npos) << r.out;
  EXPECT_NE(read_text(dir + "/good/compare.csv").find("Fig. 0,1F1B,16,over_x:4,1.5,"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir + "/figures.md"));
  EXPECT_EQ(run_cli("experiment run " + dir + "/none").exit_code, 2);
}

// Every experiment checked in runs, and its CSVs are today's: after a change to the cost model,
// ./scripts/figures.sh regenerates them (and the figures).
TEST(ExperimentsCheckedIn, EverySpecRunsAndItsCsvFilesAreCurrent) {
  const auto dirs = find_experiments((kRoot / "experiments").string());
  ASSERT_GE(dirs.size(), 12u);
  std::set<std::string> papers;
  for (const std::string& dir : dirs) {
    SCOPED_TRACE(dir);
    const Spec s = load_spec(dir);
    papers.insert(s.paper);
    const Results r = run(s, run_options());
    const auto c = compare(s, r, load_paper(s));
    EXPECT_EQ(read_text(dir + "/results.csv"), results_csv(s, r)) << "stale: run ./scripts/figures.sh";
    EXPECT_EQ(read_text(dir + "/compare.csv"), compare_csv(c)) << "stale: run ./scripts/figures.sh";
  }
  EXPECT_EQ(papers, (std::set<std::string>{"merak", "oases", "hanayo", "fold3d"}));
}
