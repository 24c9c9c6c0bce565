// Every option through every route (issue 33): one plan priced by estimate (the workload built
// and priced once), the simulator (its flows from the cost table's bytes), the planner (the same
// point through its evaluator cache) and, where the graph route prices the option, the graph of
// the preset. They must agree: the planner exactly, the simulator within 1% where no link is
// shared (one node, dp 1 or a dp group of one NIC each), the graph within 2%.
#include <gtest/gtest.h>

#include <array>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "graphs/estimate.h"
#include "graphs/model_graph.h"
#include "planner/search.h"
#include "sim/simulate.h"
#include "tests/sim_helpers.h"

using namespace stagecraft;
using costmodel::ParallelPlan;

namespace {

struct Option {
  std::string name;
  std::function<void(costmodel::ModelSpec&, ParallelPlan&)> apply;
  bool graph = true;  // the graph route prices it
};

const std::vector<Option>& options() {
  static const std::vector<Option> all = {
      {"defaults", [](costmodel::ModelSpec&, ParallelPlan&) {}},
      {"fused attention", [](costmodel::ModelSpec& m, ParallelPlan&) { m.attention_kernel = costmodel::AttentionKernel::Fused; }},
      {"no dropout", [](costmodel::ModelSpec& m, ParallelPlan&) { m.dropout = false; }},
      {"swiglu and gqa (llama3-8b)", [](costmodel::ModelSpec& m, ParallelPlan&) {
         m = presets::load_model("llama3-8b");
         m.num_layers = 8;
         m.seq_length = 2048;  // fits 80 GB at b 2 with its 128k vocabulary's fp32 logits
       }},
      {"stack megatron-core-te", [](costmodel::ModelSpec& m, ParallelPlan& p) {
         m.attention_kernel = costmodel::AttentionKernel::Fused;
         p.stack = "megatron-core-te";
       }},
      {"fp8", [](costmodel::ModelSpec& m, ParallelPlan& p) {
         m.fp8 = true;
         m.attention_kernel = costmodel::AttentionKernel::Fused;
         p.stack = "megatron-core-te";
       }, false},
      {"sequence parallel", [](costmodel::ModelSpec&, ParallelPlan& p) { p.sequence_parallel = true; }, false},
      {"selective recompute", [](costmodel::ModelSpec&, ParallelPlan& p) { p.recompute = costmodel::RecomputePolicy::Selective; }, false},
      {"full recompute", [](costmodel::ModelSpec&, ParallelPlan& p) { p.recompute = costmodel::RecomputePolicy::Full; }},
      {"zero 1 overlapped gather", [](costmodel::ModelSpec&, ParallelPlan& p) {
         p.zero = 1;
         p.overlap_param_gather = true;  // the default 25 MiB buckets, as the planner's plans
       }},
      {"bucketed gradient reduction", [](costmodel::ModelSpec&, ParallelPlan& p) { p.overlap_grad_reduce = true; }},
      {"zero 3 (fsdp)", [](costmodel::ModelSpec&, ParallelPlan& p) { p.zero = 3; }, false},
      {"zero 3 kept from forward to backward", [](costmodel::ModelSpec&, ParallelPlan& p) {
         p.zero = 3;
         p.reshard_after_forward = false;
       }, false},
      {"experts, ep 2 (mixtral-8x7b)", [](costmodel::ModelSpec& m, ParallelPlan& p) {
         m = presets::load_model("mixtral-8x7b");
         m.num_layers = 8;
         m.seq_length = 2048;
         p.ep = 2;
         p.sequence_parallel = true;  // experts under tp need it (Megatron-Core)
       }, false},
      {"context parallel 2 (ring)", [](costmodel::ModelSpec& m, ParallelPlan& p) {
         m.attention_kernel = costmodel::AttentionKernel::Fused;  // cp runs a fused kernel per chunk
         p.cp = 2;
         p.dp = 1;  // the same 8 GPUs: tp 2, cp 2, pp 2
       }, false},
      {"context parallel 2 with sequence parallel and full recompute", [](costmodel::ModelSpec& m, ParallelPlan& p) {
         m.attention_kernel = costmodel::AttentionKernel::Fused;
         p.cp = 2;
         p.dp = 1;
         p.sequence_parallel = true;
         p.recompute = costmodel::RecomputePolicy::Full;
       }, false},
      {"tp overlap oases", [](costmodel::ModelSpec&, ParallelPlan& p) { p.tp_overlap = schedules::TpOverlap::Oases; }, false},
      {"tp overlap te", [](costmodel::ModelSpec&, ParallelPlan& p) {
         p.sequence_parallel = true;
         p.stack = "megatron-core-te";
         p.tp_overlap = schedules::TpOverlap::Te;
       }, false},
  };
  return all;
}

// Two nodes of 4 H100s, a NIC per GPU: tp 2 inside a node, pp 2, dp 2 across the nodes.
costmodel::ClusterSpec cluster() {
  costmodel::ClusterSpec c = presets::load_cluster("h100-ib-1024");
  c.nodes = 2;
  c.gpus_per_node = 4;
  c.nics_per_node = 4;
  return c;
}

// A stack file: `stack` with no host costs (costmodel/host.h), in the test's scratch folder.
std::string host_free_stack(const std::string& stack) {
  const std::string path = test::scratch_path("routes_" + stack + "_no_host.json");
  std::ofstream(path) << nlohmann::json{{"name", stack + "-no-host"}, {"extends", stack},
                                        {"host", {{"python_op_s", 0.0}, {"launch_s", 0.0}}}}.dump();
  return path;
}

ParallelPlan base() {
  ParallelPlan p = test::plan_of(2, 2, 2, 4);
  p.microbatch_size = 2;
  return p;
}

}  // namespace

TEST(Routes, EveryOptionAgreesInEveryEngine) {
  for (const Option& o : options()) {
    SCOPED_TRACE(o.name);
    costmodel::ModelSpec m = presets::load_model("gpt-1.4b");
    m.num_layers = 8;
    ParallelPlan p = base();
    o.apply(m, p);
    const costmodel::ClusterSpec c = cluster();
    const costmodel::Estimate e = costmodel::estimate(m, c, p);
    // The simulator, collectives folded into compute as the evaluator counts them.
    const sim::SimResult r = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, test::folded_tp());
    EXPECT_NEAR(r.eval.iteration_time_s, e.eval.iteration_time_s, 0.01 * e.eval.iteration_time_s);
    for (size_t i = 0; i < e.eval.peak_memory_bytes.size(); ++i)
      EXPECT_NEAR(r.eval.peak_memory_bytes[i], e.eval.peak_memory_bytes[i], 0.01 * e.eval.peak_memory_bytes[i]);
    // The planner on a space of this one point.
    planner::PlanSpace s;
    s.gpus = p.num_gpus();
    s.global_batch = p.global_batch();
    s.schedules = {{p.schedule, 0}};
    s.microbatch_sizes = {p.microbatch_size};
    s.recompute = {p.recompute};
    s.zero = {p.zero};
    s.shard_groups = {p.shard_group};
    s.reshard_after_forward = p.reshard_after_forward;
    s.sequence_parallel = {p.sequence_parallel};
    s.tp_overlap = {p.tp_overlap};
    s.tp_degrees = {p.tp};
    s.pp_degrees = {p.pp};
    s.ep_degrees = {p.ep};
    s.cp_degrees = {p.cp};
    s.overlap_grad_reduce = p.overlap_grad_reduce;
    s.overlap_param_gather = p.overlap_param_gather;
    s.stack = p.stack;
    planner::SearchOptions so;
    so.balance = false;
    so.prune = false;
    const planner::SearchResult found = planner::search(m, c, s, so);
    ASSERT_FALSE(found.best.empty());
    EXPECT_DOUBLE_EQ(found.best.front().iteration_time_s, e.eval.iteration_time_s);
    EXPECT_DOUBLE_EQ(found.best.front().max_memory_bytes, e.max_memory_bytes);
    if (!o.graph) continue;
    // The graph of the preset, cut where the preset's stages are (two subgraphs per layer). The
    // graph route prices no host time (docs/graphs.md): where the preset's layers wait for the
    // host (megatron-core-te's launches outlast this small model's kernels), it is compared with
    // the same stack without host costs.
    ParallelPlan gp = p;
    const graphs::Graph g = graphs::model_graph(m, p.microbatch_size);
    const int total = static_cast<int>(graphs::shard(g).subgraphs.size());
    gp.stage_layers = {m.num_layers + 1, total - m.num_layers - 1};
    const costmodel::Estimate ge = graphs::estimate_graph(g, c, gp);
    ParallelPlan free = p;
    if (costmodel::compute_by_kind(e).front().passes.host_s > 0) free.stack = host_free_stack(p.stack);
    const double t = costmodel::estimate(m, c, free).eval.iteration_time_s;
    EXPECT_NEAR(ge.eval.iteration_time_s, t, 0.02 * t);
  }
}

// Expert parallelism with several copies of each expert (dp 8, ep 2 and 4 on two and four nodes
// of 8 H100s): the simulator reduces the routed experts' gradients on each expert-data-parallel
// group after the rest (sim/executor.cpp expert_reductions), as the evaluator prices them
// (costmodel/moe.h); within 1%.
TEST(Routes, ExpertGradientGroupsAgreeInTheSimulator) {
  costmodel::ModelSpec m = presets::load_model("mixtral-8x7b");
  m.num_layers = 8;
  m.seq_length = 2048;
  for (auto [nodes, dp, pp, ep] : {std::array<int, 4>{2, 8, 1, 2}, std::array<int, 4>{4, 8, 2, 4}}) {
    SCOPED_TRACE("ep " + std::to_string(ep));
    const costmodel::ClusterSpec c = test::cluster_of("h100-ib-1024", nodes);
    ParallelPlan p = test::plan_of(dp, 2, pp, 4);
    p.ep = ep;
    p.sequence_parallel = true;
    const costmodel::Estimate e = costmodel::estimate(m, c, p);
    // By hand: the stage's 8 / pp layers x E / ep = 8 / ep local experts x 3 h f_e / t, at 16 bits.
    EXPECT_DOUBLE_EQ(e.costs.stages[0].expert_grad_bytes, 8.0 / pp * 8 / ep * 3 * 4096 * 14336 / 2 * 2);
    const sim::SimResult r = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, test::folded_tp());
    EXPECT_NEAR(r.eval.iteration_time_s, e.eval.iteration_time_s, 0.01 * e.eval.iteration_time_s);
  }
}
