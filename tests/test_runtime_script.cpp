// Training a sharded TorchScript model as pipeline stages (runtime/script_part.h; issue 14):
// a stack with a residual branch that skips a block, written from C++ and saved, trained by
// `stagecraft train --model FILE.pt` with Merak's subgraphs as the layers of the stages. Its
// per-step losses equal those of the unsharded module trained directly (torch::jit::Module's
// forward, the same AdamW and batches) to 1e-5, on several schedules and (dp, pp) grids.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "presets/load.h"
#include "graphs/estimate.h"
#include "graphs/partition.h"
#include "runtime/optim.h"
#include "runtime/rank.h"
#include "runtime/script_part.h"
#include "runtime/torch_pch.h"
#include "runtime/torchscript_graph.h"
#include "schedules/error.h"
#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

constexpr int kSteps = 6;
constexpr int kMicrobatches = 4;
constexpr std::uint64_t kSeed = 11;
const std::vector<std::vector<std::int64_t>> kShapes = {{2, 8, 16}, {2, 8, 8}};  // input, target: b = 2

// x (b, 8, 16), target (b, 8, 8): five tanh blocks, block 2's output adding block 0's (a skip
// over block 1), a linear read-out and the mean squared error. `tied`: the read-out goes
// through w0 transposed, the first block's weight (a weight tied across the model's ends).
std::string save_residual_stack(const std::string& name, bool tied = false) {
  torch::manual_seed(3);
  torch::jit::Module m("ResidualStack");
  m.register_parameter("w0", torch::randn({16, 32}) * 0.25, false);
  for (int k = 1; k < 5; ++k) m.register_parameter("w" + std::to_string(k), torch::randn({32, 32}) * 0.18, false);
  for (int k = 0; k < 5; ++k) m.register_parameter("b" + std::to_string(k), torch::randn({32}) * 0.1, false);
  m.register_parameter("w5", tied ? torch::randn({16, 8}) * 0.25 : torch::randn({32, 8}) * 0.18, false);
  const std::string head = tied ? "torch.matmul(torch.matmul(h4, self.w0.t()), self.w5)" : "torch.matmul(h4, self.w5)";
  m.define(R"(
def forward(self, x, target):
    h0 = torch.tanh(torch.matmul(x, self.w0) + self.b0)
    h1 = torch.tanh(torch.matmul(h0, self.w1) + self.b1)
    h2 = torch.tanh(torch.matmul(h1, self.w2) + self.b2) + h0
    h3 = torch.tanh(torch.matmul(h2, self.w3) + self.b3)
    h4 = torch.tanh(torch.matmul(h3, self.w4) + self.b4)
    y = )" + head + R"(
    return torch.mean((y - target) * (y - target))
)");
  const std::string path = temp_path(name);
  m.save(path);
  // docs/graphs.md's example: STAGECRAFT_SAVE_RESIDUAL_STACK=FILE keeps a copy of the model.
  if (const char* keep = std::getenv("STAGECRAFT_SAVE_RESIDUAL_STACK"); keep && !tied) m.save(keep);
  return path;
}

std::string shape_flags() {
  std::string s;
  for (const auto& shape : kShapes) {
    s += " --example-shape ";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  }
  return s;
}

// The unsharded module trained directly: per step, the mean loss of dp x m microbatches
// (script_batch's samples, in the runtime's order), gradients of their mean, one AdamW step.
std::vector<double> reference_losses(const std::string& path, int dp, double lr) {
  torch::jit::Module m = torch::jit::load(path);
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& p : m.named_parameters()) params.emplace_back(p.name, p.value.requires_grad_(true));
  runtime::AdamWOptions ao;
  ao.lr = lr;
  runtime::AdamW opt(params, ao);
  const int micro = dp * kMicrobatches;
  const std::int64_t b = kShapes[0][0];
  std::vector<double> out;
  for (int step = 0; step < kSteps; ++step) {
    double sum = 0;
    for (int mb = 0; mb < micro; ++mb) {
      auto [x, t] = runtime::script_batch(kSeed, (static_cast<std::int64_t>(step) * micro + mb) * b, kShapes);
      torch::Tensor loss = m.forward({x, t}).toTensor();
      sum += loss.item<double>();
      (loss / static_cast<double>(micro)).backward();
    }
    opt.step();
    out.push_back(sum / micro);
  }
  return out;
}

std::string train_flags(const std::string& path) {
  return "--model " + path + shape_flags() + " --steps " + std::to_string(kSteps) + " --seed " + std::to_string(kSeed) +
         " --lr 1e-2 --microbatches " + std::to_string(kMicrobatches) + " --timeout 60";
}

struct Case {
  std::string schedule;
  int dp, pp;
  std::string extra;  // more flags
};

TEST(RuntimeScript, ShardedLossesEqualTheUnshardedModule) {
  const std::string path = save_residual_stack("residual_stack.pt");
  runtime::ScriptModel sm(path, kShapes);
  ASSERT_GE(sm.subgraphs(), 6) << "one subgraph per block at least";
  std::map<int, std::vector<double>> ref;
  for (int dp : {1, 2}) ref[dp] = reference_losses(path, dp, 1e-2);
  EXPECT_LT(ref[1].back(), ref[1].front()) << "the module learns";
  const std::vector<Case> cases = {{"gpipe", 1, 2, ""},          {"1f1b", 1, 3, ""},
                                   {"1f1b", 2, 2, ""},           {"interleaved-1f1b", 1, 2, " --chunks 2"},
                                   {"1f1b", 1, 2, " --recompute full"}, {"zb-h1", 1, 2, ""}};
  for (const Case& c : cases) {
    TrainRun r = train(train_flags(path) + " --schedule " + c.schedule + " --dp " + std::to_string(c.dp) + " --pp " +
                       std::to_string(c.pp) + " --nproc " + std::to_string(c.dp * c.pp) + c.extra);
    ASSERT_EQ(r.cli.exit_code, 0) << c.schedule << c.extra << "\n" << r.cli.err;
    const std::vector<double> got = losses(r.summary);
    const std::vector<double>& want = ref[c.dp];
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i])) << c.schedule << " dp " << c.dp << " pp " << c.pp << c.extra << " step " << i;
    // The graph's FLOPs of a microbatch (16 rows), by hand: the products 2 x 16 x (16 x 32 +
    // 4 x 32 x 32 + 32 x 8) = 155,648 and at most 6,017 elementwise (5 bias adds and 5 tanh of
    // 512, the skip's add, the loss's subtractions, product and mean), the backward twice that.
    const double per_microbatch = r.summary["model_flops_per_s"].get<double>() *
                                  r.summary["mean_iteration_time_s"].get<double>() / (kMicrobatches * c.dp);
    EXPECT_GE(per_microbatch, 3 * 155648.0 * (1 - 1e-12));
    EXPECT_LE(per_microbatch, 3 * (155648.0 + 6017) * (1 + 1e-12));
  }
  std::remove(path.c_str());
}

// The stages are runs of whole subgraphs, each compiled alone; every cut carries one tensor.
TEST(RuntimeScript, SubgraphProgramsPassOneTensor) {
  const std::string path = save_residual_stack("residual_programs.pt");
  runtime::ScriptModel sm(path, kShapes);
  const int last = sm.subgraphs() - 1;
  for (int i = 0; i <= last; ++i) {
    int boundary = 0, data = 0;
    for (const auto& a : sm.program(i).args) {
      boundary += a.source == runtime::SubgraphProgram::Source::Boundary;
      data += a.source == runtime::SubgraphProgram::Source::Input || a.source == runtime::SubgraphProgram::Source::Target;
    }
    EXPECT_EQ(boundary, i == 0 ? 0 : 1) << i;
    EXPECT_EQ(data, i == 0 || i == last ? 1 : 0) << i;
  }
  EXPECT_EQ(sm.program(0).out_shape, (std::vector<std::int64_t>{2, 8, 32}));
  // One stage holding everything computes the module's own loss.
  runtime::ScriptPart whole(sm, 0, sm.subgraphs(), true, true);
  auto [x, t] = runtime::script_batch(kSeed, 0, kShapes);
  torch::jit::Module m = torch::jit::load(path);
  const double direct = m.forward({x, t}).toTensor().item<double>();
  const torch::Tensor staged = whole.loss(whole.layers(whole.embed(x), 0, whole.shape().num_layers), t);
  EXPECT_NEAR(staged.item<double>(), direct, 1e-6 * std::fabs(direct));
  std::remove(path.c_str());
}

// Measured costs from the graph itself: each subgraph timed on this CPU and written onto its
// nodes; the graph route then prices a stage's forward as the sum of its nodes' measured times.
TEST(RuntimeScript, MeasuredSubgraphTimesPriceTheStages) {
  const std::string path = save_residual_stack("residual_measured.pt");
  const auto t0 = std::chrono::steady_clock::now();
  const graphs::Graph g = runtime::import_torchscript_measured(path, kShapes, 3);
  const double import_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double fwd = 0;
  for (const graphs::Node& n : g.nodes) {
    if (n.kind == "input") continue;
    EXPECT_GE(n.fwd_s, 0) << n.name;
    EXPECT_GE(n.bwd_s, 0) << n.name;
    fwd += n.fwd_s;
  }
  // Measured, and within the wall time of the import that ran every subgraph at least once.
  EXPECT_GT(fwd, 0);
  EXPECT_LT(fwd, import_s);
  EXPECT_DOUBLE_EQ(graphs::from_json(graphs::to_json(g)).nodes.back().fwd_s, g.nodes.back().fwd_s);
  const costmodel::ClusterSpec c = presets::load_cluster("h100-nvl-ib-64");
  costmodel::ParallelPlan p;
  p.pp = 2;
  p.num_microbatches = 4;
  p.microbatch_size = static_cast<int>(kShapes[0][0]);
  const costmodel::Estimate e = graphs::estimate_graph(g, c, p);
  const graphs::Sharding sh = graphs::shard(g);
  const int first_stage = graphs::stage_partition(g, sh, c, p, 2).stages[0].count;
  double stage0 = 0;
  for (int i = 0; i < first_stage; ++i)
    for (int k : sh.subgraphs[static_cast<size_t>(i)].nodes) stage0 += g.nodes[static_cast<size_t>(k)].fwd_s;
  EXPECT_NEAR(e.costs.stages[0].f_s, stage0, 1e-12 + 1e-9 * stage0);
  // The stages are balanced on the measured times too: without a cluster, in seconds.
  graphs::PartitionOptions po;
  po.stages = 2;
  const graphs::Partition by_time = graphs::partition(sh, po);
  EXPECT_TRUE(by_time.by_time);
  double all = 0, staged = 0;
  for (const graphs::Node& n : g.nodes) all += n.kind == "input" ? 0 : n.fwd_s + n.bwd_s;
  for (const graphs::StagePart& sp : by_time.stages) staged += sp.time_s;
  EXPECT_NEAR(staged, all, 1e-12 + 1e-9 * all);
  bool noted = false;
  for (const std::string& n : e.costs.notes) noted = noted || n.find("measured times") != std::string::npos;
  EXPECT_TRUE(noted);
  // Through the commands: partition --measure writes the graph, estimate prices it.
  const std::string out = temp_path("residual_measured.graph.json");
  RunResult m = run_cli("partition --model " + path + shape_flags() + " --measure --pp 2 --graph-out " + out);
  ASSERT_EQ(m.exit_code, 0) << m.err;
  RunResult est = run_cli("estimate --model " + out + " --cluster h100-nvl-ib-64 --pp 2 --dp 1 --microbatches 4 --microbatch-size 2");
  EXPECT_EQ(est.exit_code, 0) << est.err;
  EXPECT_NE(est.out.find("measured times"), std::string::npos) << est.out;
  RunResult preset = run_cli("partition --model tiny --measure");
  EXPECT_EQ(preset.exit_code, 2);
  EXPECT_NE(preset.err.find("--measure is for a TorchScript model"), std::string::npos) << preset.err;
  std::remove(out.c_str());
  std::remove(path.c_str());
}

TEST(RuntimeScript, BadInputIsRefusedBeforeTraining) {
  const std::string path = save_residual_stack("residual_bad.pt");
  auto refused = [&](const std::string& args, const std::string& what) {
    TrainRun r = train(args);
    EXPECT_EQ(r.cli.exit_code, 2) << args << "\n" << r.cli.err;
    EXPECT_NE(r.cli.err.find(what), std::string::npos) << r.cli.err;
  };
  refused("--model " + path + " --example-shape 2,8,16 --pp 2 --nproc 2", "--example-shape is needed twice");
  refused("--model " + path + shape_flags() + " --microbatch-size 4 --pp 2 --nproc 2", "the first dimension (2) is the microbatch size");
  refused("--model " + path + shape_flags() + " --tp 2 --nproc 2", "plan.tp = 2");
  refused("--model " + path + " --example-shape 2,8,5 --example-shape 2,8,8 --nproc 1", "does not run on the example input");
  refused("--model tiny --example-shape 2,8 --nproc 1", "--example-shape is for a TorchScript model");
  std::remove(path.c_str());
  // A weight read at both ends of the model cannot sit on two stages.
  const std::string tied = save_residual_stack("residual_tied.pt", true);
  TrainRun r = train(train_flags(tied) + " --pp 2 --nproc 2");
  EXPECT_NE(r.cli.exit_code, 0);
  EXPECT_NE(r.cli.err.find("tied weights across stages"), std::string::npos) << r.cli.err;
  std::remove(tied.c_str());
}

}  // namespace
}  // namespace stagecraft::test
