// The closed loop end to end: a tiny profile of this machine, then a 3-configuration
// validation (training for real over Gloo) that reads it. Checks the file formats and that
// every statistic is computed; accuracy is reported in docs/validation.md, not asserted.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "helpers.h"

using stagecraft::test::read_text;
using stagecraft::test::run_cli;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A measured time: positive, its median between its min and max, and under the wall time of the
// profile command that measured it (`wall_s`, the test's clock).
void expect_measured(const nlohmann::json& t, double wall_s) {
  EXPECT_GT(t["median_s"].get<double>(), 0);
  EXPECT_LE(t["min_s"].get<double>(), t["median_s"].get<double>());
  EXPECT_LE(t["median_s"].get<double>(), t["max_s"].get<double>());
  EXPECT_LT(t["max_s"].get<double>(), wall_s);
}

}  // namespace

TEST(ProfileValidate, TinyProfileThenThreeConfigurations) {
  std::string dir = stagecraft::test::scratch_path("closed_loop");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_cli("profile --hidden 64 --heads 4 --seq 64 --microbatch-size 1,2 --tp 1,2 --warmup 1 --runs 3 --nproc 2 "
                   "--max-bytes 65536 --out " + dir + "/p.json");
  const double profile_s = seconds_since(t0);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("algbw GB/s"), std::string::npos);  // the nccl-tests style table
  EXPECT_NE(r.err.find("profile: shapes 4/4"), std::string::npos) << r.err;  // progress: 2 b x 2 tp shapes
  EXPECT_NE(r.err.find("profile: collectives done"), std::string::npos) << r.err;
  auto p = nlohmann::json::parse(read_text(dir + "/p.json"));
  EXPECT_EQ(p["format"], "stagecraft-profile");
  for (const char* k : {"kind", "name", "threads", "libtorch", "compiler", "backend", "ranks"})
    EXPECT_TRUE(p["device"].contains(k)) << k << " missing from " << p["device"].dump();
  // transformer, embedding and head at two microbatch sizes and two tp degrees
  ASSERT_EQ(p["layers"].size(), 12u);
  std::map<int, double> shard_bytes;  // tp -> activation bytes of the transformer layer, b = 1
  for (const auto& l : p["layers"]) {
    expect_measured(l["forward"], profile_s);
    EXPECT_EQ(l["forward"]["runs"], 3);
    if (l["kind"] == "transformer" && l["microbatch_size"] == 1) shard_bytes[l["tp"].get<int>()] = l["activation_bytes"];
  }
  ASSERT_EQ(shard_bytes.size(), 2u);
  // A tp shard keeps less than the whole layer, and more than half of it: the norms' inputs and
  // the residual stream, (b, s, h), stay whole on each shard.
  EXPECT_LT(shard_bytes[2], shard_bytes[1]);
  EXPECT_GT(shard_bytes[2], 0.5 * shard_bytes[1]);
  // p2p, all-reduce, all-gather and reduce-scatter at 4, 16 and 64 KiB
  ASSERT_EQ(p["collectives"].size(), 4u * 3u);
  std::set<std::string> ops;
  for (const auto& c : p["collectives"]) ops.insert(c["op"].get<std::string>());
  EXPECT_EQ(ops, (std::set<std::string>{"p2p", "all_reduce", "all_gather", "reduce_scatter"}));
  // Measured, and an AdamW update of one fp32 parameter (tens of bytes moved) under a microsecond.
  EXPECT_GT(p["optimizer_s_per_param"].get<double>(), 0);
  EXPECT_LT(p["optimizer_s_per_param"].get<double>(), 1e-6);

  r = run_cli("validate --sweep " + stagecraft::test::data_path("sweep-3.json") + " --profile " + dir +
              "/p.json --out " + dir + "/v.csv --summary " + dir + "/v.json --work-dir " + dir + "/scratch --no-sim");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("elapsed"), std::string::npos) << r.out;  // each measured line: time elapsed and left
  std::istringstream csv(read_text(dir + "/v.csv"));
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line.rfind("name,schedule,dp,tp,pp,", 0), 0u) << line;
  int rows = 0;
  while (std::getline(csv, line)) {
    ++rows;
    EXPECT_EQ(std::count(line.begin(), line.end(), ','), 17) << line;
  }
  EXPECT_EQ(rows, 3);
  auto s = nlohmann::json::parse(read_text(dir + "/v.json"));
  EXPECT_EQ(s["configurations"], 3);
  ASSERT_TRUE(s.contains("evaluator"));
  for (const char* engine : {"evaluator", "simulator"}) {  // the simulator's when it is built
    if (!s.contains(engine)) continue;
    for (const char* k : {"spearman", "kendall_tau_b", "mape"}) {
      ASSERT_TRUE(s[engine][k].is_number()) << engine << " " << k;
      EXPECT_TRUE(std::isfinite(s[engine][k].get<double>()) || std::string(k) != "mape") << engine << " " << k;
    }
  }
  EXPECT_NE(s["cost_model"].get<std::string>().find("profiled"), std::string::npos);
  // The memory column: the largest rank's measured peak (live tensors) against the evaluator's.
  EXPECT_NE(r.out.find("peak memory"), std::string::npos) << r.out;
  ASSERT_TRUE(s.contains("memory")) << s.dump();
  EXPECT_GT(s["memory"]["mape"].get<double>(), 0);  // measured and predicted are both there and not identical
  EXPECT_LT(s["memory"]["mape"].get<double>(), 1);
  EXPECT_FALSE(std::filesystem::exists(dir + "/scratch"));  // the children's folder removed, and the one it made
}

// A configuration no engine can price (interleaved 1F1B needs the microbatches to be a multiple
// of the stages) is reported in its row and left out of the statistics; the rest of the sweep
// is measured and written, and the work folder is gone afterwards (issue 36).
TEST(ProfileValidate, ARowThatCannotBePricedIsReportedAndTheRestKept) {
  const std::string dir = stagecraft::test::scratch_path("one_bad_row");
  std::filesystem::create_directories(dir + "/work");  // exists before: kept, emptied of this run's files
  auto r = run_cli("validate --sweep " + stagecraft::test::data_path("sweep-one-bad.json") + " --out " + dir + "/v.csv --summary " +
                   dir + "/v.json --work-dir " + dir + "/work --no-sim --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("1 of 2 rows failed"), std::string::npos) << r.out;
  std::istringstream csv(read_text(dir + "/v.csv"));
  std::string header, bad, good;
  std::getline(csv, header);
  std::getline(csv, bad);
  std::getline(csv, good);
  EXPECT_EQ(header.substr(header.rfind(',') + 1), "failed");
  EXPECT_EQ(bad.rfind("interleaved-m3,", 0), 0u) << bad;
  EXPECT_NE(bad.find("estimate of 'interleaved-m3' failed"), std::string::npos) << bad;
  EXPECT_EQ(good.rfind("1f1b-pp2-m4,", 0), 0u) << good;
  EXPECT_EQ(good.back(), ',');  // nothing failed in it
  auto s = nlohmann::json::parse(read_text(dir + "/v.json"));
  EXPECT_EQ(s["configurations"], 2);
  EXPECT_EQ(s["evaluator"]["rows"], 1);
  EXPECT_TRUE(std::filesystem::is_empty(dir + "/work"));
  std::filesystem::remove_all(dir);
}

// Three ranks: the collectives check their own results (reduce-scatter's ring, all-gather's
// blocks, all-reduce's sums) before timing, so a wrong sum fails the command.
TEST(ProfileValidate, CollectivesOverThreeRanksAreChecked) {
  std::string dir = stagecraft::test::scratch_path("three_ranks");
  std::filesystem::create_directories(dir);
  auto r = run_cli("profile --hidden 32 --heads 2 --seq 16 --microbatch-size 1 --warmup 0 --runs 1 --nproc 3 "
                   "--max-bytes 4096 --out " + dir + "/p.json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto p = nlohmann::json::parse(read_text(dir + "/p.json"));
  ASSERT_EQ(p["collectives"].size(), 4u);
  for (const auto& c : p["collectives"]) EXPECT_EQ(c["ranks"], c["op"] == "p2p" ? 2 : 3) << c.dump();
  std::filesystem::remove_all(dir);
}

TEST(ProfileValidate, BadInput) {
  auto r = run_cli("validate --sweep missing.json --out x.csv");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--sweep = 'missing.json' does not exist"), std::string::npos) << r.err;
  r = run_cli("profile --hidden 64 --heads 5 --out x.json --nproc 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("heads dividing hidden"), std::string::npos) << r.err;
}

// LLaMA's decoder (RMSNorm, rotary, SwiGLU, grouped-query attention) is profiled as the runtime
// builds it, and a LLaMA estimate reads that profile; a GPT profile has no LLaMA layer for it.
TEST(ProfileValidate, LlamaLayersWithGroupedQueryAttention) {
  const std::string dir = stagecraft::test::scratch_path("llama_profile");
  std::filesystem::create_directories(dir);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_cli("profile --model-kind llama --kv-heads 2 --hidden 64 --heads 4 --seq 32 --microbatch-size 1 --tp 1,2 "
                   "--warmup 1 --runs 2 --nproc 0 --quiet --out " + dir + "/llama.json");
  const double profile_s = seconds_since(t0);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto p = nlohmann::json::parse(read_text(dir + "/llama.json"));
  ASSERT_EQ(p["layers"].size(), 6u);  // transformer, embedding, head at tp 1 and 2
  std::map<int, double> layer_bytes;
  for (const auto& l : p["layers"]) {
    EXPECT_EQ(l["model_kind"], "llama");
    EXPECT_EQ(l["num_kv_heads"], 2);
    expect_measured(l["forward"], profile_s);
    if (l["kind"] == "transformer") layer_bytes[l["tp"].get<int>()] = l["activation_bytes"];
  }
  EXPECT_LT(layer_bytes[2], layer_bytes[1]);
  const std::string model = stagecraft::test::data_path("models/runtime-tiny8-llama.json");
  r = run_cli("estimate --model " + model + " --cluster local-cpu-2 --pp 2 --microbatches 4 --profile " + dir + "/llama.json --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(nlohmann::json::parse(r.out)["cost_model"].get<std::string>().find("profiled"), std::string::npos);
  r = run_cli("profile --hidden 64 --heads 4 --seq 32 --microbatch-size 1 --warmup 1 --runs 1 --nproc 0 --quiet --out " + dir + "/gpt.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_cli("estimate --model " + model + " --cluster local-cpu-2 --pp 2 --microbatches 4 --profile " + dir + "/gpt.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no transformer layer of a llama model"), std::string::npos) << r.err;
  r = run_cli("profile --model-kind bert --out " + dir + "/x.json --nproc 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--model-kind = 'bert' is invalid (allowed: gpt, llama"), std::string::npos) << r.err;
  r = run_cli("profile --model-kind llama --kv-heads 3 --heads 4 --out " + dir + "/x.json --nproc 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--kv-heads = 3 is invalid"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/x.json"));
}
