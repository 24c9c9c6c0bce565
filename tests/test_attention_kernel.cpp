// The attention kernel of a model (costmodel::AttentionKernel): a fused core (flash attention)
// keeps no s x s tensor for its backward, only each row's log-sum-exp; the formulas, the model
// JSON, the model graph, the profile lookup, the estimate and the CLI follow it.
#include <gtest/gtest.h>

#include "costmodel/estimate.h"
#include "costmodel/memory.h"
#include "presets/load.h"
#include "costmodel/profile.h"
#include "graphs/model_graph.h"
#include "helpers.h"
#include "schedules/error.h"

using namespace stagecraft;
using namespace stagecraft::costmodel;
using namespace stagecraft::presets;

namespace {

ModelSpec fused(ModelSpec m) {
  m.attention_kernel = AttentionKernel::Fused;
  return m;
}

// Korthikanti's 5as^2b/t at 2 bytes goes; the fp32 log-sum-exp, (b, a/t, s), comes.
TEST(AttentionKernel, FusedKeepsTheLogSumExpInsteadOfTheScores) {
  const ModelSpec m = load_model("gpt-1.4b");
  const double s = m.seq_length, a = m.num_heads, h = m.hidden_size;
  for (int t : {1, 2, 4})
    for (int b : {1, 4}) {
      const double sbh = s * b * h;
      EXPECT_DOUBLE_EQ(memory::attention_core_bytes(m, b, t), sbh * 5 * a * s / (h * t));
      EXPECT_DOUBLE_EQ(memory::attention_core_bytes(fused(m), b, t), 4 * a * s * b / t);
      EXPECT_DOUBLE_EQ(memory::layer_activation_bytes(fused(m), b, t),
                       memory::layer_activation_selective_bytes(m, b, t) + 4 * a * s * b / t);
      EXPECT_DOUBLE_EQ(memory::layer_activation_bytes(fused(m), b, t, true),
                       memory::layer_activation_selective_bytes(m, b, t, true) + 4 * a * s * b / t);
      // What stays is the kernel's, not the tensors': selective and full recomputation keep
      // the same bytes with either kernel.
      EXPECT_DOUBLE_EQ(memory::layer_activation_selective_bytes(fused(m), b, t), memory::layer_activation_selective_bytes(m, b, t));
      EXPECT_DOUBLE_EQ(memory::layer_checkpoint_bytes(fused(m), b, t), memory::layer_checkpoint_bytes(m, b, t));
    }
}

// The backward's working set: the softmax pair (2as^2b/t) only exists materialised; with s = 4h
// it is the larger pair, so the fused backward's is the GELU pair's.
TEST(AttentionKernel, FusedBackwardWorkingSetIsTheGeluPair) {
  ModelSpec m = load_model("gpt-1.4b");
  m.seq_length = 8192;
  const double s = m.seq_length, f = m.ffn_hidden_size, h = m.hidden_size, b = 2, A = m.bytes_per_activation;
  EXPECT_DOUBLE_EQ(memory::layer_backward_working_bytes(fused(m), 2, 1), (2 * f * s * b + s * b * h) * A);
  EXPECT_GT(memory::layer_backward_working_bytes(m, 2, 1), memory::layer_backward_working_bytes(fused(m), 2, 1));
}

TEST(AttentionKernel, ModelJsonCarriesItAndNamesABadValue) {
  const ModelSpec m = fused(load_model("gpt-1.4b"));
  const nlohmann::json j = to_json(m);
  EXPECT_EQ(j.at("attention_kernel"), "fused");
  EXPECT_EQ(model_from_json(j).attention_kernel, AttentionKernel::Fused);
  EXPECT_FALSE(to_json(load_model("gpt-1.4b")).contains("attention_kernel"));  // the default stays implicit
  nlohmann::json bad = j;
  bad["attention_kernel"] = "flash";
  try {
    model_from_json(bad);
    FAIL() << "a bad kernel was taken";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("attention_kernel"), std::string::npos) << msg;
    EXPECT_NE(msg.find("flash"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fused"), std::string::npos) << msg;
  }
}

// The estimate of a whole plan drops one core per layer in flight, and the model graph's
// attention nodes keep what the formulas say.
TEST(AttentionKernel, EstimateAndGraphFollowTheKernel) {
  const ModelSpec m = load_model("gpt-1.4b");
  const ClusterSpec c = load_cluster("h100-ib-1024");
  ParallelPlan p = stagecraft::test::plan_of(1, 1, 1, 8);
  p.microbatch_size = 4;
  const Estimate eager = estimate(m, c, p), flash = estimate(fused(m), c, p);
  const double cores = m.num_layers * (memory::attention_core_bytes(m, 4, 1) - memory::attention_core_bytes(fused(m), 4, 1));
  // One microbatch in flight at pp 1 (1F1B): its layers' cores, and nothing else, differ.
  EXPECT_NEAR(eager.eval.peak_memory_bytes[0] - flash.eval.peak_memory_bytes[0], cores, 1e-6 * cores);
  // Time too: on a cluster priced by shape the fused core is one flash kernel, without the score
  // matrix's traffic (docs/costmodel.md "The kernel stack").
  EXPECT_LT(flash.eval.iteration_time_s, eager.eval.iteration_time_s);

  const graphs::Graph ge = graphs::model_graph(m, 2), gf = graphs::model_graph(fused(m), 2);
  double saved_e = 0, saved_f = 0;
  for (const auto& n : ge.nodes)
    if (n.kind == "attention") saved_e += n.saved_bytes;
  for (const auto& n : gf.nodes)
    if (n.kind == "attention") saved_f += n.saved_bytes;
  EXPECT_NEAR(saved_e - saved_f, m.num_layers * (memory::attention_core_bytes(m, 2, 1) - memory::attention_core_bytes(fused(m), 2, 1)),
              1e-6 * saved_e);
}

// A profile measured one kernel; a model with the other finds no transformer layer in it.
TEST(AttentionKernel, ProfileLayersMatchTheKernel) {
  Profile p = load_profile(test::data_path("profile/synthetic-tiny.json"));
  ModelSpec m = load_model("tiny");
  EXPECT_NO_THROW(profiled_layer(p, "transformer", m, 1, 1));
  try {
    profiled_layer(p, "transformer", fused(m), 1, 1);
    FAIL() << "a materialised profile priced a fused layer";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("attention_kernel fused"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(profiled_layer(p, "head", fused(m), 1, 1));  // the ends have no attention
  for (auto& l : p.layers) l.attention_kernel = "fused";
  EXPECT_NO_THROW(profiled_layer(p, "transformer", fused(m), 1, 1));
  EXPECT_EQ(profile_from_json(to_json(p)).layers.front().attention_kernel, "fused");
}

TEST(AttentionKernel, CliFlag) {
  const std::string cfg = "--model gpt-1.4b --cluster h100-ib-1024 --dp 1 --microbatch-size 4 --microbatches 8 --json";
  auto eager = test::run_cli("estimate " + cfg), flash = test::run_cli("estimate " + cfg + " --attention-kernel fused");
  ASSERT_EQ(eager.exit_code, 0) << eager.err;
  ASSERT_EQ(flash.exit_code, 0) << flash.err;
  const double pe = nlohmann::json::parse(eager.out).at("max_memory_bytes"), pf = nlohmann::json::parse(flash.out).at("max_memory_bytes");
  EXPECT_LT(pf, pe);
  auto bad = test::run_cli("estimate " + cfg + " --attention-kernel flash");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--attention-kernel"), std::string::npos) << bad.err;
}

}  // namespace
