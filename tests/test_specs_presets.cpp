// Model, cluster and plan specs: JSON in and out, presets, and errors that name the field.
#include <gtest/gtest.h>

#include <fstream>

#include "presets/load.h"
#include "costmodel/specs.h"
#include "helpers.h"
#include "schedules/error.h"

using namespace stagecraft;
using namespace stagecraft::costmodel;
using namespace stagecraft::presets;

using stagecraft::test::error_of;

TEST(Presets, EveryPresetLoadsAndCitesASource) {
  EXPECT_GE(model_preset_names().size(), 20u);
  EXPECT_GE(cluster_preset_names().size(), 8u);
  for (const auto& n : model_preset_names()) {
    ModelSpec m = load_model(n);
    EXPECT_EQ(m.name, n);
    EXPECT_FALSE(m.source.empty()) << n;
  }
  for (const auto& n : cluster_preset_names()) {
    ClusterSpec c = load_cluster(n);
    EXPECT_EQ(c.name, n);
    EXPECT_FALSE(c.source.empty()) << n;
  }
}

TEST(Presets, PaperClustersArePresent) {
  for (const char* n : {"merak-3090-64", "oases-3090-32", "oases-3090-nvlink-32", "hanayo-tacc-a100-32", "fold3d-a100-128",
                        "fold3d-v100-64", "h100-nvl-ib-64"})
    EXPECT_NO_THROW(load_cluster(n)) << n;
  EXPECT_EQ(load_cluster("merak-3090-64").num_gpus(), 64);
  EXPECT_EQ(load_cluster("fold3d-a100-128").num_gpus(), 128);
  EXPECT_EQ(load_cluster("oases-3090-nvlink-32").fast_group_size, 2);
  for (const char* n : {"gpt3-175b", "tiny", "gpt3-18b", "gpt3-39b", "gpt-8.3b", "llama-7b", "bert-large"})
    EXPECT_NO_THROW(load_model(n)) << n;
}

// A cluster that extends a preset takes its fields and overrides some: the H200 is the H100's
// GPU with more and faster memory; a user's file can extend a preset the same way.
TEST(Presets, ClusterExtendsAPreset) {
  const ClusterSpec h100 = load_cluster("h100-ib-1024"), h200 = load_cluster("h200-ib-1024");
  EXPECT_EQ(h200.gpu_memory_bytes, 143771 * 1048576.0);  // as CUDA reports it (NVIDIA's 141 GB)
  EXPECT_EQ(h200.gpu_memory_bandwidth_Bps, 4.8e12);
  EXPECT_EQ(h200.gpu_peak_flops_per_s, h100.gpu_peak_flops_per_s);
  EXPECT_EQ(h200.gpu_fp8_peak_flops_per_s, h100.gpu_fp8_peak_flops_per_s);
  EXPECT_EQ(h200.num_gpus(), h100.num_gpus());
  EXPECT_NE(h200.source, h100.source);
  const std::string file = test::scratch_path("two-h200-nodes.json");
  std::ofstream(file) << R"({"extends": "h200-ib-1024", "name": "mine", "nodes": 2})";
  const ClusterSpec mine = load_cluster(file);
  EXPECT_EQ(mine.num_gpus(), 16);
  EXPECT_EQ(mine.gpu_memory_bytes, h200.gpu_memory_bytes);
  std::ofstream(file) << R"({"extends": "h300", "name": "mine"})";
  EXPECT_NE(error_of([&] { load_cluster(file); }).find("extends = \"h300\" is not a cluster preset"), std::string::npos)
      << error_of([&] { load_cluster(file); });
}

// The Blackwell presets: NVIDIA's dense peaks (its tables give them with sparsity: halved), memory
// as nvidia-smi reports it and NVLink 5 per GPU; GB200 NVL72's node is the rack's 72-GPU NVLink domain, one NIC per GPU.
TEST(Presets, BlackwellClusters) {
  const ClusterSpec b200 = load_cluster("b200-ib-1024"), gb200 = load_cluster("gb200-nvl72-1152");
  EXPECT_EQ(b200.gpu_peak_flops_per_s, 2.25e15);
  EXPECT_EQ(b200.gpu_fp8_peak_flops_per_s, 4.5e15);
  EXPECT_EQ(b200.gpu_memory_bytes, 183359 * 1048576.0);  // nvidia-smi's total (NVIDIA's 180 GB)
  EXPECT_EQ(b200.intra_node_bandwidth_Bps, 900e9);
  EXPECT_EQ(b200.num_gpus(), 1024);
  EXPECT_EQ(b200.gpu_sms, 148);
  EXPECT_EQ(gb200.gpus_per_node, 72);
  EXPECT_EQ(gb200.nics_per_node, 72);
  EXPECT_EQ(gb200.num_gpus(), 16 * 72);
  EXPECT_EQ(gb200.gpu_peak_flops_per_s, 2.5e15);
  EXPECT_EQ(gb200.gpu_fp8_peak_flops_per_s, 5e15);
  EXPECT_EQ(gb200.gpu_memory_bytes, 189471 * 1048576.0);  // nvidia-smi's total (NVIDIA's 186 GB)
  EXPECT_EQ(gb200.gpu_memory_bandwidth_Bps, 8e12);
  for (const ClusterSpec* c : {&b200, &gb200}) EXPECT_NE(c->compute_source.find("ASSUMED"), std::string::npos) << c->name;
}

TEST(Specs, JsonRoundTrip) {
  ModelSpec m = load_model("llama-7b");
  EXPECT_EQ(model_from_json(to_json(m)).ffn_hidden_size, m.ffn_hidden_size);
  EXPECT_EQ(to_json(model_from_json(to_json(m))), to_json(m));
  ClusterSpec c = load_cluster("oases-3090-nvlink-32");
  EXPECT_EQ(to_json(cluster_from_json(to_json(c))), to_json(c));
  ParallelPlan p = stagecraft::test::plan_of(2, 4, 8, 32);
  p.schedule = "interleaved-1f1b";
  p.schedule_params = {{"chunks", 2}};
  p.recompute = RecomputePolicy::Selective;
  p.rank_order = "dp-tp-pp";
  p.stage_layers = {1, 2, 3};
  EXPECT_EQ(to_json(plan_from_json(to_json(p))), to_json(p));
}

// A cluster file missing several required fields is told all of them in one run, nics_per_node
// among them (one NIC where a node has eight changes an iteration by up to half: issue 36).
TEST(Specs, EveryMissingFieldIsNamedAtOnce) {
  nlohmann::json j = to_json(load_cluster("h100-ib-1024"));
  for (const char* f : {"nodes", "nics_per_node", "inter_node_latency_s"}) j.erase(f);
  const std::string err = error_of([&] { cluster_from_json(j); });
  EXPECT_NE(err.find("cluster.nodes, cluster.inter_node_latency_s, cluster.nics_per_node are missing (required)"), std::string::npos)
      << err;
}

TEST(Specs, ErrorsNameFieldValueAndAllowed) {
  nlohmann::json m = to_json(load_model("tiny"));
  nlohmann::json j = m;
  j.erase("num_layers");
  EXPECT_NE(error_of([&] { model_from_json(j); }).find("model.num_layers is missing"), std::string::npos);
  // One field of a valid file set at a time: the error says what is wrong with it.
  struct Case {
    const char* preset;  // a model preset, or a cluster preset below
    const char* field;
    nlohmann::json value;
    const char* says;
  };
  for (const Case& k : {Case{"tiny", "hidden_size", -64, "hidden_size = -64 is invalid (must be greater than 0)"},
                        Case{"tiny", "num_heads", 3, "must be a multiple of num_heads = 3"},
                        Case{"tiny", "kind", "rnn", "allowed: gpt, bert, llama"},
                        Case{"tiny", "hiden_size", 64, "model.hiden_size is not a known field"},
                        Case{"tiny", "num_layers", "four", "expected an integer"}}) {
    j = to_json(load_model(k.preset));
    j[k.field] = k.value;
    EXPECT_NE(error_of([&] { model_from_json(j); }).find(k.says), std::string::npos) << k.field;
  }
  for (const Case& k : {Case{"merak-3090-64", "inter_node_bandwidth_Bps", 0, "inter_node_bandwidth_Bps = 0 is invalid"},
                        Case{"merak-3090-64", "achieved_efficiency", 1.5, "must be in (0, 1]"},
                        Case{"h100-nvl-ib-64", "inter_node_bus_efficiency", 0, "inter_node_bus_efficiency = 0 is invalid (must be in (0, 1])"}}) {
    nlohmann::json c = to_json(load_cluster(k.preset));
    c[k.field] = k.value;
    const std::string err = error_of([&] { cluster_from_json(c); });
    EXPECT_NE(err.find(k.says), std::string::npos) << err;
  }

  EXPECT_NE(error_of([] { plan_from_json({{"num_microbatches", 4}, {"rank_order", "tp-pp"}}); }).find("permutation"),
            std::string::npos);
  EXPECT_NE(error_of([] { plan_from_json({{"num_microbatches", 0}}); }).find("plan.num_microbatches = 0"), std::string::npos);
  EXPECT_NE(error_of([] { plan_from_json({{"num_microbatches", 4}, {"recompute", "some"}}); }).find("none, full, selective"),
            std::string::npos);
  // Integer lists are range-checked element by element (found by fuzzing: a float past int's
  // range converted unchecked).
  EXPECT_NE(error_of([] { plan_from_json({{"num_microbatches", 4}, {"layer_tp", {2.7e58, 4}}}); })
                .find("plan.layer_tp[0] = 2.7e+58 is invalid (expected an integer within 32 bits)"),
            std::string::npos)
      << error_of([] { plan_from_json({{"num_microbatches", 4}, {"layer_tp", {2.7e58, 4}}}); });
  EXPECT_NE(error_of([] { plan_from_json({{"num_microbatches", 4}, {"stage_layers", 3}}); }).find("expected an array of integers"),
            std::string::npos);
}

TEST(Specs, UnknownPresetListsTheNames) {
  std::string e = error_of([] { load_model("gpt-5"); });
  EXPECT_NE(e.find("model 'gpt-5' is not a preset"), std::string::npos);
  EXPECT_NE(e.find("gpt3-175b"), std::string::npos);
  EXPECT_NE(error_of([] { load_cluster("dgx-z"); }).find("h100-nvl-ib-64"), std::string::npos);
}

TEST(Specs, FilesAndMalformedJson) {
  std::string path = stagecraft::test::scratch_path("model_ok.json");
  std::ofstream(path) << to_json(load_model("tiny")).dump();
  EXPECT_EQ(load_model(path).hidden_size, 64);
  std::string bad = stagecraft::test::scratch_path("model_bad.json");
  std::ofstream(bad) << "{\"num_layers\": 4,";
  EXPECT_NE(error_of([&] { load_model(bad); }).find("is not valid JSON"), std::string::npos);
  EXPECT_NE(error_of([] { load_model("missing-file.json"); }).find("cannot be read"), std::string::npos);
  // A number JSON cannot hold is bad input too, not a failure at run time (found by fuzzing).
  std::string huge = stagecraft::test::scratch_path("model_huge.json");
  std::ofstream(huge) << "{\"num_layers\": 1e400}";
  EXPECT_NE(error_of([&] { load_model(huge); }).find("is not valid JSON"), std::string::npos);
}

TEST(Specs, FitChecks) {
  ModelSpec m = load_model("gpt-8.3b");
  ClusterSpec c = load_cluster("merak-3090-64");
  ParallelPlan p;
  p.dp = 2;
  p.tp = 4;
  p.pp = 4;
  p.num_microbatches = 8;
  EXPECT_EQ(error_of([&] { check_fit(m, c, p); }), "no error");  // 32 of the 64 GPUs: the first 8 nodes
  p.dp = 5;
  EXPECT_NE(error_of([&] { check_fit(m, c, p); }).find("dp*tp*pp = 5*4*4 = 80 GPUs, but cluster 'merak-3090-64' has 64"),
            std::string::npos);
  p.tp = 3;
  p.pp = 1;
  p.dp = 21;  // 63 GPUs: fewer than the cluster's, but tp must divide the heads
  EXPECT_NE(error_of([&] { check_fit(m, c, p); }).find("tp = 3 is invalid"), std::string::npos);
}
