// The GPU catalog as a user meets it (issue 49): `presets` lists and shows GPUs with sources,
// `estimate` prints the GPU, its clock calibration and the assumed figures it used, a cluster
// file missing a clock is refused (exit 2), `--gpu-calibration` and `--fp8-recipe` take effect,
// and `profile --gemm-calibration` needs a CUDA device.
#include <gtest/gtest.h>

#include <fstream>

#include "helpers.h"

using stagecraft::test::run_cli;
using stagecraft::test::scratch_path;

namespace {
void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
}  // namespace

TEST(GpuCli, PresetsListAndShowGpus) {
  auto r = run_cli("presets");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("GPUs (clusters name one with \"gpu\")"), std::string::npos);
  EXPECT_NE(r.out.find("gb300"), std::string::npos);
  r = run_cli("presets --show b200");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("gpu_peak_flops_per_s = 2.25e+15"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("source: NVIDIA GB200 NVL72 / HGX B200 specifications"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ASSUMED: the H100 SXM's measured share (0.80)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("none here, ASSUMED at its other GPUs"), std::string::npos) << r.out;  // no B200 table
  r = run_cli("presets --show h100-sxm");
  EXPECT_NE(r.out.find("36 measured points"), std::string::npos) << r.out;
}

TEST(GpuCli, EstimateListsClockAndAssumedFigures) {
  const std::string plan = " --model gpt3-7.5b --dp 1 --tp 8 --pp 1 --microbatches 1";
  auto r = run_cli("estimate --cluster b200-ib-1024" + plan);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  gpu: b200 (catalog;"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  clock: 1575 of 1980 MHz, compute-bound kernels at 0.795 of the measured rate; b200-assumed"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  assumed, not measured: gemm_max_efficiency 0.8, gemm_tile_m 128, gpu_boost_clock_mhz 1980.0"), std::string::npos)
      << r.out;
  r = run_cli("estimate --cluster h100-ib-1024 --json" + plan);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"gpu\": \"h100-sxm\""), std::string::npos);
  EXPECT_NE(r.out.find("\"gpu_assumed\": {"), std::string::npos);
}

// Issue 49: the H100 preset copied without its clock fields is refused, naming them.
TEST(GpuCli, ClusterWithoutClocksIsRefused) {
  const std::string path = scratch_path("h100-no-clocks.json");
  auto r = run_cli("presets --json");
  ASSERT_EQ(r.exit_code, 0);
  auto j = nlohmann::json::parse(r.out);
  nlohmann::json c;
  for (const auto& x : j.at("clusters"))
    if (x.at("name") == "h100-nvl-ib-64") c = x;
  c.erase("gpu");
  c.erase("gpu_boost_clock_mhz");
  c.erase("gpu_sustained_clock_mhz");
  write(path, c.dump());
  r = run_cli("estimate --cluster " + path + " --model gpt3-7.5b --dp 1 --tp 8 --pp 1 --microbatches 1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("lacks cluster.gpu_boost_clock_mhz, cluster.gpu_sustained_clock_mhz"), std::string::npos) << r.err;
}

// A calibration written by hand: its efficiency in place of the catalog's efficiency and clock.
TEST(GpuCli, GpuCalibrationFlag) {
  const std::string path = scratch_path("h100-cal.json");
  write(path, R"({"gpu": "h100-sxm", "gemm_max_efficiency": 0.7, "source": "by hand"})");
  auto r = run_cli("estimate --cluster h100-ib-1024 --model gpt3-7.5b --dp 1 --tp 8 --pp 1 --microbatches 1 --gpu-calibration " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The lines wrap at 100 columns wherever the scratch path's length puts the breaks: read them as
  // one line with single spaces.
  std::string flat;
  for (char ch : r.out) {
    const bool space = ch == ' ' || ch == '\n';
    if (!space || (!flat.empty() && flat.back() != ' ')) flat += space ? ' ' : ch;
  }
  EXPECT_NE(flat.find("clock: none: compute-bound kernels at the clock of the measurements (measured,"), std::string::npos)
      << r.out;
  EXPECT_NE(flat.find("h100-cal.json: sustained GEMM rate (by hand)"), std::string::npos) << r.out;
  r = run_cli("estimate --cluster b200-ib-1024 --model gpt3-7.5b --dp 1 --tp 8 --pp 1 --microbatches 1 --gpu-calibration " + path);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("gpu = \"h100-sxm\" is invalid"), std::string::npos) << r.err;
}

TEST(GpuCli, Fp8RecipeFlag) {
  const std::string plan = " --model gpt3-7.5b --dp 1 --tp 8 --pp 1 --microbatches 1";
  auto r = run_cli("estimate --cluster h100-ib-1024 --fp8-recipe current" + plan);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(", fp8 current scaling"), std::string::npos) << r.out;
  r = run_cli("estimate --cluster h100-ib-1024 --fp8-recipe mxfp8" + plan);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("gpu_mxfp8_peak_flops_per_s = 0"), std::string::npos) << r.err;
  r = run_cli("estimate --cluster h100-ib-1024 --fp8-recipe e5m2" + plan);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--fp8-recipe = \"e5m2\""), std::string::npos) << r.err;
  r = run_cli("estimate --cluster h100-ib-1024 --fp8 --zero 3 --model gpt3-7.5b --dp 8 --tp 1 --pp 1 --microbatches 1");
  EXPECT_EQ(r.exit_code, 0) << r.err;  // FP8 with zero 3 is priced (the FP8 parameter all-gather)
}

// The measurement runs only on a CUDA device: on a build without CUDA, refused naming --device.
TEST(GpuCli, GemmCalibrationNeedsCuda) {
  const std::string out = scratch_path("cal.json");
  auto r = run_cli("profile --device cuda --gemm-calibration " + out + " --gpu h200");
  if (r.exit_code == 0) {  // a CUDA build on a GPU machine: the file is written
    EXPECT_NE(stagecraft::test::read_text(out).find("\"gemm_max_efficiency\""), std::string::npos);
    return;
  }
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--device cuda"), std::string::npos) << r.err;
  r = run_cli("profile --device cuda --gemm-calibration " + out);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--gpu is required"), std::string::npos) << r.err;
}

// A job using 64 of each NVL72 rack's 72 GPUs: 16 racks give 1,024 GPUs.
TEST(GpuCli, GpusUsedPerNode) {
  const std::string plan = " --model llama3-8b --attention-kernel fused --dp 128 --tp 8 --pp 1 --microbatches 1";
  auto r = run_cli("estimate --cluster gb300-nvl72-1152 --gpus-used-per-node 64" + plan);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("on cluster gb300-nvl72-1152 (1024 x GB300"), std::string::npos) << r.out;
  r = run_cli("estimate --cluster gb300-nvl72-1152 --gpus-used-per-node 73" + plan);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--gpus-used-per-node = 73 is invalid (must be in [1, 72]"), std::string::npos) << r.err;
}

// plan --precisions searches the FP8 recipes, each a value of the precision choice; MXFP8 off
// Blackwell is refused naming it.
TEST(GpuCli, PlanSearchesFp8Recipes) {
  const std::string base = "plan --model gpt3-7.5b --nodes 1 --global-batch 8 --tp 8 --pp 1 --schedules 1f1b --quiet";
  auto r = run_cli(base + " --cluster b200-ib-1024 --precisions fp8,fp8-current,fp8-blockwise,fp8-mxfp8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* k : {"fp8-current ", "fp8-blockwise ", "fp8-mxfp8 "}) EXPECT_NE(r.out.find(k), std::string::npos) << k << r.out;
  r = run_cli(base + " --cluster h100-ib-1024 --precisions bf16,fp8-mxfp8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("gpu_mxfp8_peak_flops_per_s = 0"), std::string::npos) << r.err;
}
