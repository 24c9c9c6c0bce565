// The GPU catalog (costmodel/gpus.h, presets/gpus/): clusters name a GPU and override
// only what differs, every figure has a source, assumed figures are listed, and a cluster that
// names no GPU and lacks a field its pricing needs is refused naming the field (issue 49).
#include <gtest/gtest.h>

#include <algorithm>

#include "costmodel/gpus.h"
#include "presets/load.h"
#include "costmodel/shape.h"
#include "helpers.h"

using namespace stagecraft::costmodel;
using namespace stagecraft::presets;
using stagecraft::test::error_of;

namespace {

bool has_field(const std::vector<std::pair<std::string, std::string>>& v, const std::string& f) {
  return std::any_of(v.begin(), v.end(), [&](const auto& a) { return a.first == f; });
}

// A cluster preset as a complete file that names no GPU: what a user gets by copying every field.
nlohmann::json flat(const std::string& preset) {
  nlohmann::json j = to_json(load_cluster(preset));
  j.erase("gpu");
  return j;
}

ModelSpec model(bool fp8) { return stagecraft::test::model_with_fp8("gpt3-7.5b", fp8); }

}  // namespace

TEST(GpuCatalog, EveryClusterPresetNamesACatalogGpu) {
  const std::vector<std::string> gpus = gpu_preset_names();
  for (const std::string& n : cluster_preset_names()) {
    const ClusterSpec c = load_cluster(n);
    EXPECT_NE(std::find(gpus.begin(), gpus.end(), c.gpu), gpus.end()) << n << " names '" << c.gpu << "'";
  }
  for (const char* g : {"a100-40gb", "a100-80gb-sxm", "a100-80gb-pcie", "h100-sxm", "h100-pcie", "h200", "h800", "b200",
                        "gb200", "gb300", "mi300x"})
    EXPECT_NE(std::find(gpus.begin(), gpus.end(), g), gpus.end()) << g;
}

// Each figure a catalog entry gives carries a source; each assumption names a field it gives.
TEST(GpuCatalog, EveryFigureHasASource) {
  for (const std::string& n : gpu_preset_names()) {
    const nlohmann::json g = gpu_entry(n);
    ASSERT_TRUE(g.contains("sources")) << n;
    for (const char* f : {"gpu_peak_flops_per_s", "gpu_memory_bytes", "gpu_memory_bandwidth_Bps"})
      EXPECT_TRUE(g.at("sources").contains(f)) << n << " " << f;
    if (g.value("gpu_sms", 0) > 0) {
      for (const char* f : {"gpu_sms", "gemm_max_efficiency", "memory_efficiency"})
        EXPECT_TRUE(g.at("sources").contains(f) || g.at("assumed").contains(f)) << n << " " << f;
    }
    for (auto it = g.at("assumed").begin(); it != g.at("assumed").end(); ++it)
      EXPECT_TRUE(g.contains(it.key())) << n << " assumes " << it.key() << " but does not give it";
  }
}

// Every catalog GPU makes a valid cluster with nothing but a network: its figures pass the
// cluster's checks (ranges, the shape fields with gpu_sms, clocks ordered).
TEST(GpuCatalog, EveryGpuMakesAValidCluster) {
  nlohmann::json net = flat("h100-nvl-ib-64");
  for (const std::string& f : gpu_fields()) net.erase(f);
  for (const std::string& n : gpu_preset_names()) {
    nlohmann::json j = net;
    j["gpu"] = n;
    EXPECT_EQ(error_of([&] { cluster_from_json(j); }), "no error") << n;
    EXPECT_FALSE(cluster_from_json(j).clock_calibration.empty() && cluster_from_json(j).gpu_sms > 0) << n;
  }
}

// The clusters took their figures out of their own files without changing one: the values the
// presets carried before the catalog (git history of presets/clusters/), pinned here.
TEST(GpuCatalog, PresetFiguresUnchanged) {
  const ClusterSpec h = load_cluster("h100-ib-1024");
  EXPECT_EQ(h.gpu, "h100-sxm");
  EXPECT_EQ(h.gpu_name, "H100 SXM 80GB");
  EXPECT_EQ(h.gpu_peak_flops_per_s, 989e12);
  EXPECT_EQ(h.gpu_fp8_peak_flops_per_s, 1.979e15);
  EXPECT_EQ(h.gpu_sms, 132);
  EXPECT_EQ(h.gemm_tile_n, 256);
  EXPECT_EQ(h.gemm_max_efficiency, 0.8);
  EXPECT_EQ(h.gemm_max_efficiency_fp8, 0.79);
  EXPECT_EQ(h.memory_efficiency, 0.9);
  EXPECT_EQ(h.sustained_clock_share(), 1575.0 / 1980);
  const ClusterSpec pcie = load_cluster("hanayo-pc-a100-8");  // no clocks before: still none
  EXPECT_EQ(pcie.gpu, "a100-80gb-pcie");
  EXPECT_EQ(pcie.sustained_clock_share(), 1.0);
  EXPECT_EQ(pcie.gpu_memory_bandwidth_Bps, 1.935e12);
  const ClusterSpec a = load_cluster("fold3d-a100-128");
  EXPECT_EQ(a.sustained_clock_share(), 1305.0 / 1410);
  EXPECT_EQ(a.gemm_tile_n, 128);
  const ClusterSpec v = load_cluster("fold3d-v100-64");
  EXPECT_EQ(v.gpu_sms, 0);
  EXPECT_EQ(v.achieved_efficiency, 0.55);
  EXPECT_EQ(load_cluster("merak-3090-64").achieved_efficiency, 0.5);
  EXPECT_EQ(load_cluster("local-cpu-2").achieved_efficiency, 0.025);
  EXPECT_EQ(load_cluster("h200-ib-1024").gpu_memory_bytes, 143771 * 1048576.0);
}

// A cluster's own field overrides the catalog's; an assumed figure it overrides is its own.
TEST(GpuCatalog, ClusterOverridesAndAssumptions) {
  nlohmann::json j = to_json(load_cluster("b200-ib-1024"));
  ASSERT_EQ(j.at("gpu"), "b200");
  ClusterSpec c = cluster_from_json(j);
  EXPECT_TRUE(has_field(c.gpu_assumed, "gemm_max_efficiency"));
  j["gemm_max_efficiency"] = 0.7;
  c = cluster_from_json(j);
  EXPECT_EQ(c.gemm_max_efficiency, 0.7);
  EXPECT_FALSE(has_field(c.gpu_assumed, "gemm_max_efficiency"));
  EXPECT_TRUE(has_field(c.gpu_assumed, "gpu_sustained_clock_mhz"));
  // What pricing uses: the flat rate's efficiency only without compute by shape, FP8's only for FP8.
  auto used = used_assumptions(c, model(false));
  EXPECT_FALSE(has_field(used, "achieved_efficiency"));
  EXPECT_FALSE(has_field(used, "gemm_max_efficiency_fp8"));
  EXPECT_TRUE(has_field(used, "memory_efficiency"));
  EXPECT_TRUE(has_field(used_assumptions(c, model(true)), "gemm_max_efficiency_fp8"));
  // The H100's GEMM figures are measured: only the tile shape and the flat rate are assumed.
  used = used_assumptions(load_cluster("h100-ib-1024"), model(true));
  EXPECT_FALSE(has_field(used, "gemm_max_efficiency"));
  EXPECT_FALSE(has_field(used, "gpu_sustained_clock_mhz"));
  EXPECT_TRUE(has_field(used, "gemm_tile_m"));
}

// The clock calibration is named in every cluster priced by shape, and its line says the share.
TEST(GpuCatalog, ClockCalibrationIsNamed) {
  const ClusterSpec h = load_cluster("h100-nvl-ib-64");
  EXPECT_NE(h.clock_calibration.find("h100-sxm-700w"), std::string::npos);
  EXPECT_NE(h.clock_calibration.find("DeepGEMM issue #120"), std::string::npos);
  const std::string line = clock_line(h);
  EXPECT_NE(line.find("1575 of 1980 MHz"), std::string::npos) << line;
  EXPECT_NE(line.find("0.795 of the measured rate"), std::string::npos) << line;  // 1575 / 1980 = 0.7955
  EXPECT_NE(clock_line(load_cluster("merak-3090-64")).find("flat rate"), std::string::npos);
  nlohmann::json j = to_json(h);
  j["gpu_sustained_clock_mhz"] = 1700;
  j.erase("clock_calibration");
  EXPECT_NE(cluster_from_json(j).clock_calibration.find("states its own clocks"), std::string::npos);
}

// A cluster naming no catalog GPU states what its pricing needs, one test per class of field.
TEST(GpuCatalog, MissingPeakOrMemoryIsRefused) {
  for (const char* f : {"gpu_peak_flops_per_s", "gpu_memory_bytes", "gpu_memory_bandwidth_Bps", "achieved_efficiency"}) {
    nlohmann::json j = flat("h100-ib-1024");
    j.erase(f);
    EXPECT_NE(error_of([&] { cluster_from_json(j); }).find(std::string("cluster.") + f + " is missing"), std::string::npos) << f;
  }
}

TEST(GpuCatalog, MissingShapeFieldIsRefused) {
  for (const char* f : {"gemm_tile_m", "gemm_tile_n", "gemm_max_efficiency", "memory_efficiency"}) {
    nlohmann::json j = flat("h100-ib-1024");
    j.erase(f);
    const std::string msg = error_of([&] { cluster_from_json(j); });
    EXPECT_NE(msg.find(std::string("names no catalog GPU and lacks cluster.") + f), std::string::npos) << msg;
  }
  nlohmann::json j = flat("fold3d-a100-128");
  j.erase("gpu_sms");  // shape fields without the SM count would be ignored: refused
  const std::string msg = error_of([&] { cluster_from_json(j); });
  EXPECT_NE(msg.find("lacks cluster.gpu_sms (gemm_tile_m is given"), std::string::npos) << msg;
}

// Issue 49's case: the H100 preset copied without its two clock fields priced compute 1980/1575
// = 1.26 times faster; now it is refused naming them.
TEST(GpuCatalog, MissingClocksAreRefused) {
  nlohmann::json j = flat("h100-ib-1024");
  j.erase("gpu_boost_clock_mhz");
  j.erase("gpu_sustained_clock_mhz");
  const std::string msg = error_of([&] { cluster_from_json(j); });
  EXPECT_NE(msg.find("lacks cluster.gpu_boost_clock_mhz, cluster.gpu_sustained_clock_mhz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("h100-sxm"), std::string::npos) << msg;  // lists the catalog
  j["gpu_boost_clock_mhz"] = 0;  // stated outright: the measurements' clock is the training clock
  j["gpu_sustained_clock_mhz"] = 0;
  EXPECT_EQ(cluster_from_json(j).sustained_clock_share(), 1.0);
}

TEST(GpuCatalog, MissingFp8EfficiencyIsRefused) {
  nlohmann::json j = flat("h100-ib-1024");
  j.erase("gemm_max_efficiency_fp8");
  const std::string msg = error_of([&] { cluster_from_json(j); });
  EXPECT_NE(msg.find("lacks cluster.gemm_max_efficiency_fp8"), std::string::npos) << msg;
  j.erase("gpu_fp8_peak_flops_per_s");  // a GPU without FP8 needs no FP8 efficiency
  EXPECT_EQ(cluster_from_json(j).gpu_fp8_peak_flops_per_s, 0);
}

TEST(GpuCatalog, UnknownGpuIsRefused) {
  nlohmann::json j = to_json(load_cluster("h100-ib-1024"));
  j["gpu"] = "h1000";
  const std::string msg = error_of([&] { cluster_from_json(j); });
  EXPECT_NE(msg.find("cluster.gpu = \"h1000\" is not a catalog GPU (allowed: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("gb300"), std::string::npos) << msg;
}

// A cluster file naming the GPU needs none of its figures (the 'extends' of the clusters too).
TEST(GpuCatalog, ShortClusterFile) {
  nlohmann::json j = flat("h100-nvl-ib-64");
  for (const std::string& f : gpu_fields()) j.erase(f);
  j["gpu"] = "h100-sxm";
  const ClusterSpec c = cluster_from_json(j);
  const ClusterSpec p = load_cluster("h100-nvl-ib-64");
  EXPECT_EQ(c.gpu_peak_flops_per_s, p.gpu_peak_flops_per_s);
  EXPECT_EQ(c.sustained_clock_share(), p.sustained_clock_share());
  EXPECT_EQ(c.gemm_max_efficiency_fp8, p.gemm_max_efficiency_fp8);
  EXPECT_EQ(to_json(cluster_from_json(to_json(c))), to_json(c));  // round trip
}

// A calibration file written by hand (what `profile --gemm-calibration` writes on a GPU): its
// sustained efficiency replaces the catalog's efficiency and clock ratio. One 8192^3 bf16 GEMM on
// an H100 (132 SMs, 128x256 tiles: 64 x 32 = 2,048 tiles in 16 waves of 132, wave use 2048/2112):
// before, 2 x 8192^3 / (989e12 x 0.80 x 1575/1980 x 2048/2112) = 1.802 ms; calibrated at 0.70,
// 2 x 8192^3 / (989e12 x 0.70 x 2048/2112) = 1.638 ms (compute-bound: its 403 MB take 0.13 ms).
TEST(GpuCatalog, CalibrationFileReplacesEfficiencyAndClock) {
  ClusterSpec c = load_cluster("h100-ib-1024");
  const double n = 8192, flops = 2 * n * n * n, waves = 2048.0 / 2112;
  EXPECT_NEAR(shape::gemm_s(c, n, n, n, 1, 2, c.sustained_clock_share()), flops / (989e12 * 0.8 * 1575 / 1980 * waves), 1e-12);
  const nlohmann::json cal = {{"gpu", "h100-sxm"}, {"gemm_max_efficiency", 0.7}, {"sm_clock_mhz", 1600},
                              {"source", "written by hand for this test"}};
  apply_gpu_calibration(c, cal, "hand.json");
  EXPECT_EQ(c.sustained_clock_share(), 1.0);
  EXPECT_NEAR(shape::gemm_s(c, n, n, n, 1, 2, c.sustained_clock_share()), flops / (989e12 * 0.7 * waves), 1e-12);
  EXPECT_NEAR(flops / (989e12 * 0.7 * waves), 1.6378e-3, 1e-7);
  EXPECT_NE(clock_line(c).find("measured, hand.json: sustained GEMM rate at 1600 MHz"), std::string::npos) << clock_line(c);
  EXPECT_FALSE(has_field(c.gpu_assumed, "gpu_sustained_clock_mhz"));
  // On another GPU, or out of range: refused naming the field.
  ClusterSpec b = load_cluster("b200-ib-1024");
  EXPECT_NE(error_of([&] { apply_gpu_calibration(b, cal, "hand.json"); }).find("gpu = \"h100-sxm\" is invalid (cluster 'b200-ib-1024' has b200"),
            std::string::npos);
  nlohmann::json bad = cal;
  bad["gemm_max_efficiency"] = 1.3;
  ClusterSpec h = load_cluster("h100-ib-1024");
  EXPECT_NE(error_of([&] { apply_gpu_calibration(h, bad, "hand.json"); }).find("gemm_max_efficiency = 1.3 is invalid"), std::string::npos);
  bad.erase("source");
  EXPECT_NE(error_of([&] { apply_gpu_calibration(h, bad, "hand.json"); }).find("source is missing"), std::string::npos);
}

// GB300 NVL72 (catalog gb300 and the cluster preset): NVIDIA's figures per GPU (rack figures over
// 72 GPUs, halved from sparse: 360 PFLOP/s bf16 and 720 FP8 with sparsity per rack give 2.5 and
// 5 PFLOP/s dense per GPU; 288 GB at 8 TB/s, 160 SMs: NVIDIA's Blackwell Ultra blog).
TEST(GpuCatalog, Gb300Preset) {
  const ClusterSpec c = load_cluster("gb300-nvl72-1152");
  EXPECT_EQ(c.gpu, "gb300");
  EXPECT_EQ(c.gpu_peak_flops_per_s, 360e15 / 72 / 2);
  EXPECT_EQ(c.gpu_fp8_peak_flops_per_s, 720e15 / 72 / 2);
  EXPECT_EQ(c.gpu_mxfp8_peak_flops_per_s, 5e15);
  EXPECT_EQ(c.gpu_memory_bytes, 284208 * 1048576.0);  // nvidia-smi's total of NVIDIA's 288 GB
  EXPECT_EQ(c.gpu_memory_bandwidth_Bps, 8e12);
  EXPECT_EQ(c.gpu_sms, 160);
  EXPECT_EQ(c.num_gpus(), 16 * 72);
  EXPECT_EQ(c.inter_node_bandwidth_Bps, 100e9);  // one 800 Gb/s ConnectX-8 per GPU
  EXPECT_TRUE(has_field(c.gpu_assumed, "gemm_max_efficiency"));
}

// A job on NVL72 racks that uses 64 of each rack's 72 GPUs: the node (rack) has 64 GPUs and the
// NICs beside them (one per GPU: 64), 16 racks give 1,024 GPUs.
TEST(GpuCatalog, GpusUsedPerRack) {
  nlohmann::json j = to_json(load_cluster("gb200-nvl72-1152"));
  j["gpus_used_per_node"] = 64;
  const ClusterSpec c = cluster_from_json(j);
  EXPECT_EQ(c.gpus_per_node, 64);
  EXPECT_EQ(c.nics_per_node, 64);
  EXPECT_EQ(c.node_gpus, 72);
  EXPECT_EQ(c.num_gpus(), 1024);
  EXPECT_EQ(to_json(cluster_from_json(to_json(c))), to_json(c));
  EXPECT_EQ(to_json(c).at("gpus_per_node"), 72);
  ClusterSpec all = c;
  set_gpus_used_per_node(all, 0, "gpus_used_per_node");
  EXPECT_EQ(all.num_gpus(), 1152);
  j["gpus_used_per_node"] = 73;
  EXPECT_NE(error_of([&] { cluster_from_json(j); }).find("cluster.gpus_used_per_node = 73 is invalid (must be in [1, 72]"),
            std::string::npos);
}
