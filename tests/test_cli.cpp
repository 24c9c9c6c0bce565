// The `stagecraft` program as a user runs it: outputs, files, exit codes (0 ok, 1 run-time
// failure, 2 bad input).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>
#include <nlohmann/json.hpp>

#include "helpers.h"
#include "schedules/registry.h"

using stagecraft::test::run_cli;

TEST(Cli, HelpOnEveryCommand) {
  for (const char* c : {"", "presets", "schedule", "estimate", "compare"}) {
    auto r = run_cli(std::string(c) + " --help");
    EXPECT_EQ(r.exit_code, 0) << c;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << c;
  }
}

TEST(Cli, ScheduleGridAndUnitCosts) {
  auto r = run_cli("schedule --schedule 1f1b --stages 4 --microbatches 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("valid"), std::string::npos);
  EXPECT_NE(r.out.find("rank 3"), std::string::npos);
  r = run_cli("schedule --schedule GPipe --stages 4 --microbatches 8 --unit-costs F=1,B=2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["bubble_over_compute"].get<double>(), 3.0 / 8);
  for (const char* k : {"iteration_time", "bubble_fraction", "mean_idle_fraction", "peak_activations"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["peak_activations"][0], 8);
}

TEST(Cli, ScheduleFormatsAndImport) {
  std::string dir = stagecraft::test::scratch_path("cli_formats");
  std::filesystem::create_directories(dir);
  auto r = run_cli("schedule --schedule interleaved-1f1b --stages 2 --microbatches 4 --format csv --out " + dir + "/s.csv");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_cli("schedule --import " + dir + "/s.csv --format json --out " + dir + "/s.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(stagecraft::test::read_text(dir + "/s.json"));
  EXPECT_EQ(j["num_stages"], 4);
  r = run_cli("schedule --import " + dir + "/s.json --format trace --unit-costs F=1,B=2 --out " + dir + "/s.trace.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto t = nlohmann::json::parse(stagecraft::test::read_text(dir + "/s.trace.json"));
  EXPECT_GT(t["traceEvents"].size(), 16u);
  r = run_cli("schedule --import " + stagecraft::test::data_path("pytorch/dualpipev_4rank_10mb.csv") + " --unit-costs F=1,I=1,W=1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out).contains("bubble_fraction"));
}

TEST(Cli, EstimateJson) {
  auto r = run_cli("estimate --model gpt3-18b --cluster fold3d-a100-128 --dp 4 --tp 8 --pp 4 --microbatch-size 1 "
                   "--microbatches 16 --schedule 1f1b --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  for (const char* k : {"iteration_time_s", "tokens_per_s", "tflops_per_gpu", "bubble_over_compute", "bubble_fraction",
                        "peak_memory_bytes", "fits"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["peak_memory_bytes"].size(), 4u);
  r = run_cli("estimate --model gpt3-18b --cluster fold3d-a100-128 --tp 8 --pp 4 --microbatches 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("dp 4"), std::string::npos);  // dp defaults to GPUs / (tp * pp)
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos);
}

TEST(Cli, CompareWritesTraces) {
  std::string dir = stagecraft::test::scratch_path("cli_compare");
  std::filesystem::remove_all(dir);
  auto r = run_cli("compare --model gpt-8.3b --cluster merak-3090-64 --tp 4 --pp 4 --microbatches 16 --schedules all "
                   "--trace-dir " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s : {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
    auto t = nlohmann::json::parse(stagecraft::test::read_text(dir + "/" + s + ".trace.json"));
    EXPECT_TRUE(t.contains("traceEvents")) << s;
  }
  // A schedule that refuses the configuration gets a row saying why, not an abort.
  r = run_cli("compare --model gpt-8.3b --cluster merak-3090-64 --tp 4 --pp 4 --microbatches 6 --schedules 1f1b,interleaved");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rejected: schedule interleaved-1f1b: microbatches = 6"), std::string::npos) << r.out;
}

TEST(Cli, SvgPicturesAreValidXml) {
  std::string dir = stagecraft::test::scratch_path("cli_svg");
  std::filesystem::create_directories(dir);
  auto r = run_cli("schedule --schedule hanayo --stages 4 --microbatches 4 --waves 2 --svg " + dir + "/h.svg");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string svg = stagecraft::test::read_text(dir + "/h.svg");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("<title>15F0</title>"), std::string::npos);  // the wave's last stage
  r = run_cli("compare --model gpt-8.3b --cluster merak-3090-64 --tp 4 --pp 4 --microbatches 8 --schedules 1f1b,merak,fold3d "
              "--svg " + dir + "/c.svg");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string c = stagecraft::test::read_text(dir + "/c.svg");
  for (const char* s : {"1f1b: ", "merak: ", "fold3d-aiao: "}) EXPECT_NE(c.find(s), std::string::npos) << s;
  // Balanced tags: every opened element is closed (a cheap well-formedness check).
  size_t opens = 0, closes = 0, selfs = 0;
  for (size_t i = 0; (i = c.find('<', i)) != std::string::npos; ++i) {
    if (c[i + 1] == '/') ++closes;
    else if (c[i + 1] != '?') {
      size_t end = c.find('>', i);
      if (c[end - 1] == '/') ++selfs;
      else ++opens;
    }
  }
  EXPECT_EQ(opens, closes);
}

TEST(Cli, CompareAllRanksEverySchedule) {
  auto r = run_cli("compare --model gpt3-39b --cluster fold3d-a100-128 --tp 8 --pp 4 --microbatches 16 --sequence-parallel "
                   "--schedules all --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.size(), stagecraft::schedules::generators().size());
  int fits = 0, rejected = 0;
  for (const auto& row : j) {
    if (row.contains("rejected")) {
      ++rejected;
      continue;
    }
    fits += row["fits"].get<bool>();
    EXPECT_TRUE(row.contains("peak_host_bytes"));
  }
  EXPECT_EQ(rejected, 0);
  EXPECT_LT(fits, 14);  // GPipe and looped BFS do not fit 40 GB: marked, not dropped
}

// `schedule --list` fits a 100-column terminal and names every schedule; --verbose adds the
// constraints and sources, wrapped the same way.
TEST(Cli, ScheduleListFitsHundredColumns) {
  for (const char* args : {"schedule --list", "schedule --list --verbose"}) {
    auto r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::istringstream in(r.out);
    std::set<std::string> first_words;
    for (std::string line; std::getline(in, line);) {
      EXPECT_LE(line.size(), 100u) << args << ": " << line;
      if (!line.empty() && line[0] != ' ') first_words.insert(line.substr(0, line.find(' ')));
    }
    for (const auto& g : stagecraft::schedules::generators()) EXPECT_TRUE(first_words.count(g.name)) << args << ": " << g.name;
    EXPECT_EQ(r.out.find("constraints:") != std::string::npos, std::string(args).find("--verbose") != std::string::npos) << args;
  }
}

// Every command's help fits 100 columns: descriptions wrap into the right column (cli/common.h,
// WrappingFormatter).
TEST(Cli, HelpFitsHundredColumns) {
  for (const char* command : {"", "schedule", "estimate", "compare", "plan", "presets", "experiment", "partition", "simulate",
                              "train", "profile", "validate", "import", "check-run"}) {
    auto r = run_cli(std::string(command) + " --help");
    ASSERT_EQ(r.exit_code, 0) << command << "\n" << r.err;
    std::istringstream in(r.out);
    int lines = 0;
    for (std::string line; std::getline(in, line); ++lines) EXPECT_LE(line.size(), 100u) << command << ": " << line;
    EXPECT_GT(lines, 3) << command;
  }
}

// --nodes scales a preset: 32 nodes of h100-nvl-ib-64 are 256 GPUs, and a 70B-class Llama
// question needs no hand-written JSON.
TEST(Cli, NodesScalesAClusterPreset) {
  auto r = run_cli("estimate --model llama3-70b --cluster h100-nvl-ib-64 --nodes 32 --tp 8 --pp 4 --microbatches 16 "
                   "--recompute selective --sequence-parallel --zero 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["plan"]["dp"], 8);  // 256 GPUs / (tp 8 * pp 4)
  EXPECT_TRUE(j["fits"].get<bool>()) << r.out;
  r = run_cli("estimate --model llama3-70b --cluster h100-nvl-ib-64 --tp 8 --pp 4 --microbatches 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("dp 2"), std::string::npos) << r.out;  // the preset's own 8 nodes
}

TEST(Cli, BadInputExitsTwoWithMessage) {
  struct Case {
    std::string args, needle;
  };
  std::string bad_json = stagecraft::test::scratch_path("bad_model.json");
  std::ofstream(bad_json) << "{ \"num_layers\": ";
  std::vector<Case> cases = {
      {"estimate --model gpt-99 --cluster merak-3090-64 --pp 4", "model 'gpt-99' is not a preset"},
      {"estimate --model gpt-8.3b --cluster nowhere --pp 4", "cluster 'nowhere' is not a preset"},
      {"estimate --model gpt-8.3b --cluster merak-3090-64 --dp 5 --tp 4 --pp 4", "dp*tp*pp = 5*4*4 = 80 GPUs"},
      {"estimate --model gpt-8.3b --cluster merak-3090-64 --pp 4 --schedule zigzag", "schedule 'zigzag' is unknown"},
      {"estimate --model tiny --cluster merak-3090-64 --pp 8", "fewer than the 8 stages"},
      {"estimate --model gpt-8.3b --cluster merak-3090-64 --pp 4 --microbatches 6 --schedule interleaved-1f1b",
       "must be a multiple of 4"},
      {"estimate --model gpt-8.3b --cluster merak-3090-64 --pp 4 --microbatch-size 0", "--microbatch-size: '0' is invalid (allowed: an integer from 1 to 65536)"},
      {"estimate --model gpt-8.3b --cluster merak-3090-64 --tp 0", "--tp: '0' is invalid (allowed: an integer from 1 to 1024)"},
      {"estimate --model gpt-8.3b --cluster merak-3090-64 --pp 4 --nodes 0", "--nodes: '0' is invalid (allowed: an integer from 1 to 131072)"},
      {"estimate --model llama3-70b --cluster h100-nvl-ib-64 --nodes 4 --tp 16 --pp 2", "must divide the model's num_kv_heads = 8"},
      {"estimate --model " + bad_json + " --cluster merak-3090-64", "is not valid JSON"},
      {"estimate --cluster merak-3090-64", "--model is required"},
      {"estimate --model gpt-8.3b --cluster merak-3090-64 --recompute sometimes", "allowed: none, full, selective"},
      {"schedule --schedule 1f1b --stages 0", "--stages: '0' is invalid (allowed: an integer from 1 to 4096)"},
      {"schedule --schedule 1f1b --format pdf", "--format pdf is invalid"},
      {"schedule --schedule 1f1b --unit-costs X=3", "--unit-costs entry 'X=3' is invalid"},
      {"schedule --import nowhere.csv", "cannot read schedule file"},
      {"compare --model gpt-8.3b --cluster merak-3090-64 --pp 4 --schedules 1f1b,nope", "schedule 'nope' is unknown"},
      {"presets --show nothing", "no such preset"},
      {"schedule --schedule chimera --stages 3 --microbatches 6", "ranks = 3 is invalid"},
      {"schedule --schedule merak --stages 4 --microbatches 8 --alpha1 auto", "needs a model and a cluster"},
      {"schedule --schedule 1f1b --stages 4 --waves 2", "takes no parameter 'waves'"},
      {"schedule --schedule fold3d --stages 2 --microbatches 4 --param offload=maybe", "offload = \"maybe\" is invalid"},
      {"estimate --model gpt-8.3b --cluster merak-3090-64 --pp 4 --fp8", "gpu_fp8_peak_flops_per_s = 0"},
      {"plan --model gpt-8.3b --cluster merak-3090-64 --global-batch 64 --fp8", "gpu_fp8_peak_flops_per_s = 0"},
      {"estimate --model gpt-8.3b --cluster merak-3090-64 --stack nowhere", "stack 'nowhere' is not a preset"},
      {"estimate --model llama3-8b --cluster h100-ib-1024 --nodes 1 --tp 4 --cp 2", "--attention-kernel fused"},
      {"estimate --model llama3-8b --cluster h100-ib-1024 --nodes 1 --tp 2 --cp 3 --dp 1 --attention-kernel fused",
       "2 cp must divide the model's seq_length = 8192"},
      {"simulate --model llama3-8b --cluster h100-ib-1024 --nodes 1 --tp 2 --cp 2 --attention-kernel fused --rank-order tp-dp-pp-cp",
       "plan.rank_order = 'tp-dp-pp-cp'"},
      {"estimate --model llama3-8b --cluster h100-ib-1024 --nodes 1 --dp 8 --zero 3 --shard-group 3", "shard_group"},
      {"estimate --model llama3-8b --cluster h100-ib-1024 --seq-length 0", "--seq-length: '0' is invalid"},
  };
  for (const auto& c : cases) {
    auto r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
  }
}

// An output under a regular file is now bad input found before the work (CliBadInput); a written
// output leaves no temporary file beside it.
TEST(Cli, OutputLeavesNoTemporaryFile) {
  auto r = run_cli("schedule --schedule 1f1b --stages 2 --microbatches 4 --unit-costs F=1,B=2 --format trace --out " +
                   stagecraft::test::scratch_path("ok/s.trace.json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const auto& e : std::filesystem::recursive_directory_iterator(stagecraft::test::scratch_path("ok")))
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();
}

namespace {

// The last line of standard error: one line of its own naming every needle (issue 52's pass).
void expect_one_line_error(const stagecraft::test::RunResult& r, const std::string& args, const std::vector<std::string>& needles) {
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
  std::string err = r.err;
  while (!err.empty() && err.back() == '\n') err.pop_back();
  const std::string last = err.substr(err.rfind('\n') == std::string::npos ? 0 : err.rfind('\n') + 1);
  EXPECT_EQ(last.rfind("stagecraft: error: ", 0), 0u) << args << "\n" << r.err;
  for (const auto& n : needles) EXPECT_NE(last.find(n), std::string::npos) << args << ": " << n << "\n" << r.err;
}

bool built(const std::string& command) {
  static const std::string help = run_cli("--help").out;
  return help.find("\n  " + command + " ") != std::string::npos;
}

}  // namespace

// A flag CLI11 refuses (its value, a missing or an unknown flag) is one line, as every input error
// (issue 52: a second line "Run with --help" followed it).
TEST(CliBadInput, ParseErrorsAreOneLine) {
  for (const std::string args : {"estimate --model tiny --cluster local-cpu-2 --tp x", "estimate --model tiny --tpp 2"}) {
    const auto r = run_cli(args);
    expect_one_line_error(r, args, {"--tp"});
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// An empty value is refused naming the flag, where it read as the flag not given (`--trace ''`
// wrote no trace and exited 0).
TEST(CliBadInput, EmptyValuesAreRefused) {
  for (const std::string flag : {"--trace", "--schedule", "--model"}) {
    const std::string args = "estimate --model tiny --cluster local-cpu-2 " + flag + " ''";
    expect_one_line_error(run_cli(args), args, {flag, "empty"});
  }
  expect_one_line_error(run_cli("plan --model tiny --cluster local-cpu-2 --global-batch 8 --gpus ''"), "plan --gpus ''", {"--gpus"});
}

// Output paths are checked before any work (schedule, partition, import, experiment): exit 2
// naming the flag, and nothing written (they failed at the end with exit 1).
TEST(CliBadInput, OutputPathsCheckedBeforeWork) {
  const std::string file = stagecraft::test::scratch_path("plain-file");
  std::ofstream(file) << "x";
  const std::string dir = stagecraft::test::scratch_dir();
  const std::string megatron = stagecraft::test::data_path("import/megatron_llama3_8b.sh");
  for (const auto& [args, flag] : std::vector<std::pair<std::string, std::string>>{
           {"schedule --schedule 1f1b --out " + dir, "--out"},
           {"schedule --schedule 1f1b --unit-costs F=1,B=2 --svg " + file + "/s.svg", "--svg"},
           {"partition --model tiny --pp 2 --graph-out " + file + "/g.json", "--graph-out"},
           {"import " + megatron + " --out-model " + dir + "/m.json --out-plan " + dir, "--out-plan"},
           {"experiment run " + stagecraft::test::data_path("../../experiments/hanayo/fig1") + " --report " + dir, "--report"}}) {
    expect_one_line_error(run_cli(args), args, {flag});
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/m.json"));
}

// --emit is checked while parsing (plan checked it after its search, with --out already written)
// and excludes --json; --from-format and --hf-config need --from.
TEST(CliBadInput, ConflictingAndOrphanFlags) {
  const std::string out = stagecraft::test::scratch_path("emit-plan.json");
  const std::string plan = "plan --model tiny --cluster local-cpu-2 --global-batch 8 --quiet --emit yaml --out " + out;
  expect_one_line_error(run_cli(plan), plan, {"--emit", "yaml"});
  EXPECT_FALSE(std::filesystem::exists(out));
  for (const std::string args : {"estimate --model tiny --cluster local-cpu-2 --emit megatron --json",
                                 "plan --model tiny --cluster local-cpu-2 --global-batch 8 --emit megatron --json"})
    expect_one_line_error(run_cli(args), args, {"--emit", "--json"});
  for (const std::string flag : {"--from-format megatron", "--hf-config x.json"}) {
    const std::string args = "estimate --model tiny --cluster local-cpu-2 " + flag;
    expect_one_line_error(run_cli(args), args, {flag.substr(0, flag.find(' ')), "--from"});
  }
}

// A message of several lines (a schedule's rule and its marked grid) ends with its one line.
TEST(CliBadInput, MultiLineErrorsEndWithTheirLine) {
  const std::string csv = stagecraft::test::scratch_path("twice.csv");
  std::ofstream(csv) << "0F0,0F0\n,1F0\n";
  const auto r = run_cli("schedule --import " + csv);
  expect_one_line_error(r, "schedule --import twice.csv", {});
  EXPECT_GT(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;  // the grid stays, above
}

// The simulator's inputs: a platform SimGrid cannot parse and an infinite delay (it deadlocked).
TEST(CliBadInput, SimulatorInputs) {
  if (!built("simulate")) GTEST_SKIP() << "no simulator in this build";
  const std::string text = stagecraft::test::scratch_path("platform.txt");
  std::ofstream(text) << "not xml\n";
  const std::string sim = "simulate --model tiny --cluster local-cpu-2 --pp 2 --microbatches 4 ";
  expect_one_line_error(run_cli(sim + "--platform " + text), "--platform text", {"--platform"});
  expect_one_line_error(run_cli(sim + "--late-rank 0:inf"), "--late-rank 0:inf", {"--late-rank", "inf"});
}

// validate's sweep file, field by field, before any run: exit 2 naming the field, no --out.
TEST(CliBadInput, SweepFieldsCheckedBeforeAnyRun) {
  if (!built("validate")) GTEST_SKIP() << "no runtime in this build";
  const std::string out = stagecraft::test::scratch_path("v.csv");
  const nlohmann::json ok = nlohmann::json::parse(stagecraft::test::read_text(stagecraft::test::data_path("sweep-3.json")));
  std::vector<std::pair<nlohmann::json, std::string>> bad;
  for (const auto& [field, value, needle] : std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"steps", "ten", "sweep.steps"}, {"threads", 0, "sweep.threads = 0"}, {"cluster", "nowhere", "nowhere"},
           {"stepz", 3, "sweep.stepz is not a known field"}}) {
    nlohmann::json j = ok;
    j[field] = value;
    bad.push_back({j, needle});
  }
  nlohmann::json j = ok;
  j["configs"][0]["schedule"] = "nope";
  bad.push_back({j, "configs[0]"});
  for (const auto& [doc, needle] : bad) {
    const std::string sweep = stagecraft::test::scratch_path("sweep.json");
    std::ofstream(sweep) << doc.dump();
    const std::string args = "validate --sweep " + sweep + " --out " + out + " --no-sim --quiet";
    expect_one_line_error(run_cli(args), args, {needle});
    EXPECT_FALSE(std::filesystem::exists(out)) << args;
  }
}

// train: flags that would be ignored or found only by the ranks are refused before launching.
TEST(CliBadInput, TrainRefusesBeforeLaunch) {
  if (!built("train")) GTEST_SKIP() << "no runtime in this build";
  const std::string train = "train --model tiny --nproc 2 --pp 2 --microbatches 4 --steps 1 --log-every 0 ";
  expect_one_line_error(run_cli(train + "--bf16-weights cast"), "--bf16-weights cast", {"--bf16-weights", "--precision bf16"});
  expect_one_line_error(run_cli(train + "--resume " + stagecraft::test::scratch_dir()), "--resume DIR", {"--resume", "meta.json"});
}

TEST(Cli, PresetsList) {
  auto r = run_cli("presets");
  ASSERT_EQ(r.exit_code, 0);
  for (const char* n : {"gpt3-175b", "merak-3090-64", "h100-nvl-ib-64", "fold3d-v100-64"}) EXPECT_NE(r.out.find(n), std::string::npos) << n;
  r = run_cli("presets --show tiny");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(r.out)["hidden_size"], 64);
}
