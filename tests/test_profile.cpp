// Measured costs: the profile format, lookups between and beyond measured points, and the cost
// model and CLI using them (with a hand-made fixture, tests/data/profile/synthetic-tiny.json).
#include <gtest/gtest.h>

#include <fstream>

#include "costmodel/estimate.h"
#include "costmodel/memory.h"
#include "presets/load.h"
#include "costmodel/profile.h"
#include "helpers.h"
#include "schedules/error.h"

using namespace stagecraft;
using namespace stagecraft::costmodel;
using namespace stagecraft::presets;

namespace {
Profile fixture() { return load_profile(stagecraft::test::data_path("profile/synthetic-tiny.json")); }

ClusterSpec two_gpu_node() {
  ClusterSpec c = load_cluster("merak-3090-64");
  c.name = "one-node-of-two";
  c.nodes = 1;
  c.gpus_per_node = 2;
  return c;
}

// The tiny model (4 layers) on two GPUs of one node with 4 microbatches, costed with `p`.
Estimate profiled_estimate(const Profile& p, int tp, int pp, bool sequence_parallel = false) {
  ParallelPlan plan;
  plan.tp = tp;
  plan.pp = pp;
  plan.num_microbatches = 4;
  plan.sequence_parallel = sequence_parallel;
  EstimateOptions opt;
  opt.profile = &p;
  return estimate(load_model("tiny"), two_gpu_node(), plan, opt);
}
}  // namespace

TEST(Profile, JsonRoundTrip) {
  Profile p = fixture();
  EXPECT_EQ(p.layers.size(), 6u);
  EXPECT_EQ(p.collectives.size(), 4u);
  EXPECT_EQ(to_json(profile_from_json(to_json(p))), to_json(p));
}

TEST(Profile, ExactInterpolatedExtrapolated) {
  Profile p = fixture();
  ModelSpec m = load_model("tiny");
  LayerCost exact = profiled_layer(p, "transformer", m, 1, 1);
  EXPECT_DOUBLE_EQ(exact.f_s, 1e-3);
  EXPECT_DOUBLE_EQ(exact.w_s, 0.8e-3);
  EXPECT_FALSE(exact.extrapolated);
  // b = 2: FLOPs one third of the way from b = 1 to b = 4.
  LayerCost mid = profiled_layer(p, "transformer", m, 2, 1);
  EXPECT_NEAR(mid.f_s, 2e-3, 1e-12);
  EXPECT_FALSE(mid.extrapolated);
  EXPECT_NE(mid.note.find("interpolated"), std::string::npos);
  // b = 8: twice the FLOPs of the largest point.
  LayerCost far = profiled_layer(p, "transformer", m, 8, 1);
  EXPECT_NEAR(far.f_s, 8e-3, 1e-12);
  EXPECT_TRUE(far.extrapolated);
  EXPECT_NE(far.note.find("extrapolated"), std::string::npos);
  // No measurement at tp = 2: scaled by FLOPs (half) and flagged.
  LayerCost tp2 = profiled_layer(p, "transformer", m, 1, 2);
  EXPECT_NEAR(tp2.f_s, 0.5e-3, 1e-12);
  EXPECT_TRUE(tp2.extrapolated);
  ModelSpec llama = m;
  llama.kind = ModelKind::Llama;
  EXPECT_THROW(profiled_layer(p, "transformer", llama, 1, 1), InputError);
}

// Bytes away from a measured shape scale by the formulas from the precision the layer was
// measured in: an fp32 layer's bytes for a 4-byte model scale by shape alone (activations are
// linear in b), and halve for a 2-byte one. (They doubled before the layer's precision set the
// formulas' bytes: a 4-byte model read fp32 measurements as 2-byte ones.)
TEST(Profile, ScaledBytesFollowTheMeasuredPrecision) {
  Profile p = fixture();
  ModelSpec m = load_model("tiny");  // 4-byte activations
  ASSERT_EQ(m.bytes_per_activation, 4);
  const LayerCost at4 = profiled_layer(p, "transformer", m, 4, 1), at8 = profiled_layer(p, "transformer", m, 8, 1);
  EXPECT_DOUBLE_EQ(at4.activation_bytes, 400000.0);
  EXPECT_DOUBLE_EQ(at8.activation_bytes, 2 * 400000.0);
  ModelSpec half = m;
  half.bytes_per_activation = 2;
  EXPECT_DOUBLE_EQ(profiled_layer(p, "transformer", half, 4, 1).activation_bytes, 400000.0 / 2);  // not read as measured
  // A layer measured in bf16 at the same shape is the 2-byte model's, the fp32 one the 4-byte's.
  LayerProfile bf16 = p.layers.front();  // transformer, b = 1
  bf16.precision = "bf16";
  bf16.activation_bytes = 70000;
  p.layers.push_back(bf16);
  EXPECT_DOUBLE_EQ(profiled_layer(p, "transformer", m, 1, 1).activation_bytes, 100000.0);
  EXPECT_DOUBLE_EQ(profiled_layer(p, "transformer", half, 1, 1).activation_bytes, 70000.0);
  EXPECT_EQ(profile_from_json(to_json(p)).layers.back().precision, "bf16");
  nlohmann::json bad = to_json(p);
  bad["layers"][0]["precision"] = "fp8";
  try {
    profile_from_json(bad);
    FAIL() << "fp8 was taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("layers[0].precision = 'fp8'"), std::string::npos) << e.what();
  }
}

TEST(Profile, Collectives) {
  Profile p = fixture();  // two sizes per op: the fitted line goes through both
  bool ex = true;
  EXPECT_NEAR(profiled_collective_s(p, "p2p", 2, 1024, &ex), 20e-6, 1e-15);
  EXPECT_FALSE(ex);
  double half = 1024 + (1048576.0 - 1024) / 2;
  EXPECT_NEAR(profiled_collective_s(p, "all_reduce", 2, half, &ex), (40e-6 + 500e-6) / 2, 1e-15);
  EXPECT_FALSE(ex);
  // Beyond the largest size: scaled by bytes, flagged; below the smallest: its time.
  EXPECT_NEAR(profiled_collective_s(p, "all_reduce", 2, 2 * 1048576.0, &ex), 1000e-6, 1e-15);
  EXPECT_TRUE(ex);
  EXPECT_NEAR(profiled_collective_s(p, "all_reduce", 2, 512, &ex), 40e-6, 1e-15);
  EXPECT_TRUE(ex);
  // p2p beyond the largest size: the fitted line.
  double slope = (200e-6 - 20e-6) / (1048576.0 - 1024);
  EXPECT_NEAR(profiled_collective_s(p, "p2p", 2, 2 * 1048576.0, &ex), 200e-6 + slope * 1048576.0, 1e-15);
  EXPECT_TRUE(ex);
  EXPECT_LT(profiled_collective_s(p, "all_gather", 2, 1024, &ex), 0);  // not measured
}

// Hockney's line fitted on relative error: exact on points that lie on a line; noisy points
// pull it by their relative, not absolute, error; never a negative latency or bandwidth.
TEST(Profile, CollectiveFit) {
  Profile p;
  auto add = [&](const char* op, double bytes, double t) { p.collectives.push_back({op, 2, bytes, measurement_of({t}), 0, 0}); };
  for (double b : {1e3, 1e4, 1e5, 1e6}) add("p2p", b, 100e-6 + b / 1e9);
  CollectiveFit f = fit_collective(p, "p2p", 2);
  EXPECT_EQ(f.points, 4);
  EXPECT_NEAR(f.alpha_s, 100e-6, 1e-12);
  EXPECT_NEAR(f.beta_s_per_byte, 1e-9, 1e-18);
  EXPECT_DOUBLE_EQ(f.min_bytes, 1e3);
  EXPECT_DOUBLE_EQ(f.max_bytes, 1e6);
  // By hand: points (1, 1) and (2, 4) and (3, 3) in (bytes, s), weights 1, 1/16, 1/9:
  // sw = 1.1736, sb = 1.4583, sbb = 1.25 + 1 = 2.25, st = 1.5833, sbt = 2.5;
  // det = 0.5139, alpha = (st sbb - sb sbt) / det = -0.1621 < 0, so through the origin:
  // beta = sbt / sbb = 1.1111.
  add("all_reduce", 1, 1), add("all_reduce", 2, 4), add("all_reduce", 3, 3);
  f = fit_collective(p, "all_reduce", 2);
  EXPECT_DOUBLE_EQ(f.alpha_s, 0);
  EXPECT_NEAR(f.beta_s_per_byte, 2.5 / 2.25, 1e-12);
  // Time falling with size: a constant, the weighted mean.
  add("all_gather", 1e3, 2e-3), add("all_gather", 1e6, 1e-3);
  f = fit_collective(p, "all_gather", 2);
  EXPECT_DOUBLE_EQ(f.beta_s_per_byte, 0);
  EXPECT_NEAR(f.alpha_s, (1 / 2e-3 + 1 / 1e-3) / (1 / 4e-6 + 1 / 1e-6), 1e-12);
  EXPECT_EQ(fit_collective(p, "reduce_scatter", 2).points, 0);

  // The cluster's intra-node link becomes the p2p line.
  ClusterSpec c = two_gpu_node();
  std::vector<std::string> notes;
  ClusterSpec k = calibrated_cluster(c, p, &notes);
  EXPECT_NEAR(k.intra_node_latency_s, 100e-6, 1e-12);
  EXPECT_NEAR(k.intra_node_bandwidth_Bps, 1e9, 1e-3);
  EXPECT_EQ(k.inter_node_bandwidth_Bps, c.inter_node_bandwidth_Bps);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("measured p2p"), std::string::npos);
}

TEST(Profile, CostModelUsesMeasurements) {
  Profile p = fixture();
  ModelSpec m = load_model("tiny");  // 4 layers
  Estimate e = profiled_estimate(p, 1, 2);
  EXPECT_NEAR(e.costs.stages[0].f_s, 2 * 1e-3 + 0.05e-3, 1e-12);  // two layers and the embedding
  EXPECT_NEAR(e.costs.stages[1].f_s, 2 * 1e-3 + 0.2e-3, 1e-12);   // two layers and the head
  EXPECT_NEAR(e.costs.stages[1].w_s, 2 * 0.8e-3 + 0.2e-3, 1e-12);
  // Pipeline message of s*b*h*4 bytes = 16 KiB, between the measured p2p points.
  double bytes = 64.0 * 64 * 4, w = (bytes - 1024) / (1048576.0 - 1024);
  EXPECT_NEAR(e.costs.stages[0].send_f_s, (1 - w) * 20e-6 + w * 200e-6, 1e-15);
  EXPECT_NEAR(e.costs.optimizer_s[0], e.costs.params[0] * 2e-9, 1e-15);
  EXPECT_NEAR(e.costs.stages[0].act_bytes, 2 * 100000.0 + 4096, 1e-6);
  ASSERT_EQ(e.costs.notes.size(), 1u);  // nothing extrapolated; the link calibrated
  EXPECT_NE(e.costs.notes[0].find("intra-node link from the measured p2p"), std::string::npos) << e.costs.notes[0];
  EXPECT_NEAR(e.cluster.intra_node_latency_s, 20e-6 - 1024 * (180e-6 / (1048576.0 - 1024)), 1e-12);
  EXPECT_EQ(to_json(e)["cost_model"], "profiled: " + p.source);
  ParallelPlan plan;
  plan.pp = 2;
  plan.num_microbatches = 4;
  Estimate a = estimate(m, two_gpu_node(), plan);
  EXPECT_EQ(to_json(a)["cost_model"], "analytic");
  EXPECT_NE(a.eval.iteration_time_s, e.eval.iteration_time_s);
}

// Selective recomputation takes the layer's bytes measured with its attention core recomputed;
// a profile without them leaves the analytic selective formula in place. The selective fields
// survive a round trip and stay out of profiles that lack them.
TEST(Profile, SelectiveRecomputationUsesItsMeasuredBytes) {
  Profile p = fixture();
  ModelSpec m = load_model("tiny");  // 4 layers
  ParallelPlan plan;
  plan.pp = 2;
  plan.num_microbatches = 4;
  plan.recompute = RecomputePolicy::Selective;
  EstimateOptions opt;
  opt.profile = &p;
  const double analytic = estimate(m, two_gpu_node(), plan, opt).costs.stages[0].act_bytes;
  EXPECT_NEAR(analytic, 2 * memory::layer_activation_selective_bytes(m, 1, 1, false) + memory::embedding_activation_bytes(m, 1, 1, false), 1e-6);
  EXPECT_FALSE(to_json(p)["layers"][0].contains("selective_activation_bytes"));
  for (auto& l : p.layers)
    if (l.kind == "transformer") l.selective_activation_bytes = 70000, l.selective_backward_working_bytes = 50000;
  EXPECT_EQ(to_json(profile_from_json(to_json(p))), to_json(p));
  const Estimate e = estimate(m, two_gpu_node(), plan, opt);
  EXPECT_NEAR(e.costs.stages[0].act_bytes, 2 * 70000.0 + 4096, 1e-6);  // two layers and the embedding, as measured
  plan.recompute = RecomputePolicy::None;
  EXPECT_NEAR(estimate(m, two_gpu_node(), plan, opt).costs.stages[0].act_bytes, 2 * 100000.0 + 4096, 1e-6);
}

// A profiled layer at tp > 1 is one shard's compute; its all-reduces come from the measured
// all-reduce over tp ranks (two per layer and direction), and with sequence parallelism from
// the measured all-gather plus reduce-scatter of the same buffer.
TEST(Profile, TensorParallelCommunicationFromTheCollectives) {
  Profile p = fixture();
  ModelSpec m = load_model("tiny");  // 4 layers
  Estimate e = profiled_estimate(p, 2, 1);
  const double bytes = memory::tp_allreduce_bytes(m, 1);  // (b, s, h) activations, 16 KiB
  const double ar = profiled_collective_s(p, "all_reduce", 2, bytes, nullptr);
  // The fixture's all-reduce over 2 ranks, joined linearly between its 1 KiB (40 us) and 1 MiB
  // (500 us) points.
  ASSERT_NEAR(ar, 40e-6 + (16384.0 - 1024) / (1048576 - 1024) * (500e-6 - 40e-6), 1e-15);
  const StageCost& st = e.costs.stages[0];
  EXPECT_NEAR(st.tp_comm_f_s, 4 * 2 * ar, 1e-15);
  // The shard (tp = 2 not measured: half the tp = 1 layer by FLOPs) plus its all-reduces, the
  // embedding and the head, with the vocabulary-parallel ends' collectives: the embedding's
  // all-reduce of (b, s, h) and the loss's of its row maxima, (b s) fp32, and of its exponent
  // sums with the target logits, (b s, 2).
  LayerCost head = profiled_layer(p, "head", m, 1, 2), embed = profiled_layer(p, "embedding", m, 1, 2);
  const double rows = 4.0 * m.seq_length;
  const double loss_ar = profiled_collective_s(p, "all_reduce", 2, rows, nullptr) +
                         profiled_collective_s(p, "all_reduce", 2, 2 * rows, nullptr);
  EXPECT_NEAR(st.f_s, 4 * 0.5e-3 + 4 * 2 * ar + head.f_s + embed.f_s + ar + loss_ar, 1e-12);
  // The head input's gradient all-reduce in the backward.
  const LayerCost layer = profiled_layer(p, "transformer", m, 1, 2);
  EXPECT_NEAR(st.b_s - st.tp_comm_i_s, 4 * (layer.i_s + layer.w_s) + head.i_s + head.w_s + embed.b_s + ar, 1e-12)
      << "the backward: the layers' shards, the ends and the head's all-reduce";

  for (const char* op : {"all_gather", "reduce_scatter"})
    for (double b : {1024.0, 1048576.0})
      p.collectives.push_back({op, 2, b, measurement_of({b / 1e9 + 5e-6}), 0, 0});
  Estimate sp = profiled_estimate(p, 2, 1, /*sequence_parallel=*/true);
  const double ag = profiled_collective_s(p, "all_gather", 2, bytes, nullptr);
  const double rs = profiled_collective_s(p, "reduce_scatter", 2, bytes, nullptr);
  EXPECT_NEAR(sp.costs.stages[0].tp_comm_f_s, 4 * 2 * (ag + rs), 1e-15);
  EXPECT_NE(ag + rs, ar);
}

TEST(Profile, MeasurementOfRepeatedRuns) {
  Measurement m = measurement_of({3e-3, 1e-3, 2e-3, 10e-3});
  EXPECT_DOUBLE_EQ(m.median_s, 2.5e-3);
  EXPECT_DOUBLE_EQ(m.min_s, 1e-3);
  EXPECT_DOUBLE_EQ(m.max_s, 10e-3);
  EXPECT_EQ(m.runs, 4);
  EXPECT_THROW(measurement_of({}), InputError);
}

TEST(Profile, BadFilesAreNamed) {
  std::string path = stagecraft::test::scratch_path("bad_profile.json");
  std::ofstream(path) << R"({"format": "stagecraft-profile", "version": 1, "layers": [{"kind": "mlp", "hidden_size": 4, "seq_length": 4, "microbatch_size": 1}]})";
  try {
    load_profile(path);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("layers[0].kind = \"mlp\""), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_profile("no-such-profile.json"), InputError);
  std::ofstream(path) << R"({"format": "something-else"})";
  EXPECT_THROW(load_profile(path), InputError);
}

// Issue 52: a profile of another version of the format, or of none, is refused naming the field,
// the value and the version this build reads (it was read as version 1 whatever it said).
TEST(Profile, UnknownOrMissingVersionIsRefused) {
  nlohmann::json j = to_json(Profile{});
  EXPECT_EQ(j.at("version"), 1);
  EXPECT_NO_THROW(profile_from_json(j));
  j["version"] = 2;
  std::string e = stagecraft::test::error_of([&] { profile_from_json(j); });
  EXPECT_NE(e.find("profile: version = 2 is invalid (allowed: 1, the version `stagecraft profile` writes"), std::string::npos) << e;
  j.erase("version");
  e = stagecraft::test::error_of([&] { profile_from_json(j); });
  EXPECT_NE(e.find("profile: version = (missing) is invalid (allowed: 1"), std::string::npos) << e;
  std::string path = stagecraft::test::scratch_path("old_profile.json");
  std::ofstream(path) << R"({"format": "stagecraft-profile", "version": 0, "layers": []})";
  auto r = stagecraft::test::run_cli("estimate --model tiny --cluster local-cpu-2 --pp 2 --profile " + path);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("stagecraft: error: profile: version = 0 is invalid"), std::string::npos) << r.err;
}

TEST(Profile, CliEstimateAndCompareTakeAProfile) {
  std::string prof = stagecraft::test::data_path("profile/synthetic-tiny.json");
  auto r = stagecraft::test::run_cli("estimate --model tiny --cluster merak-3090-64 --pp 2 --microbatches 4 --json --profile " + prof);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"cost_model\": \"profiled: "), std::string::npos);
  r = stagecraft::test::run_cli("compare --model tiny --cluster merak-3090-64 --pp 2 --microbatches 4 --schedules 1f1b,zb-h1 --profile " + prof);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("costs: measured, profile"), std::string::npos);
  r = stagecraft::test::run_cli("estimate --model tiny --cluster merak-3090-64 --pp 2 --profile missing.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cannot be read"), std::string::npos);
}

// Fields of the wrong JSON type are bad input (InputError), not a library exception; the
// long fuzz run found "format" given as an array.
TEST(Profile, WrongFieldTypesAreInputErrors) {
  for (const char* text : {R"({"format": ["stagecraft-profile"], "layers": []})",
                           R"({"format": "stagecraft-profile", "version": 1, "optimizer_s_per_param": "fast", "layers": []})",
                           R"({"format": "stagecraft-profile", "version": "1", "layers": []})"}) {
    try {
      costmodel::profile_from_json(nlohmann::json::parse(text));
      FAIL() << "expected InputError for " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("profile"), std::string::npos) << e.what();
    }
  }
}
