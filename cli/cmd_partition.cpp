// `stagecraft partition`: a model (preset, model JSON or graph JSON) as a graph, cut into
// Merak's subgraph sequence and balanced into pipeline stages (docs/graphs.md).
#include <chrono>
#include <iostream>

#include "cli/commands.h"
#include "cli/common.h"
#include "presets/load.h"
#include "graphs/model_graph.h"
#include "graphs/estimate.h"
#include "graphs/partition.h"
#include "schedules/json_read.h"
#ifdef STAGECRAFT_WITH_RUNTIME
#include "cli/runtime_plugin.h"
#endif

namespace stagecraft::cli {
namespace {

struct PartitionOpts {
  std::string model;             // preset, model JSON or graph JSON
  std::string cluster;           // preset or JSON; empty: balance FLOPs
  int pp = 1;                    // stages
  int microbatch_size = 1;       // b, for a model (a graph file fixes its own shapes)
  std::optional<int> max_subgraphs;  // Merak's k; absent = no bound
  int common_min_users = 3;      // users that make a node common
  std::string recompute = "none";
  std::string graph_out;         // write the graph JSON here
  std::vector<std::string> example_shape;  // a TorchScript model's example arguments, "4,8,16" each (float)
  bool measure = false;          // time a TorchScript model's subgraphs here (fwd_s, bwd_s)
  bool json = false;
};

graphs::Graph load(const PartitionOpts& o) {
  if (o.measure && !is_torchscript(o.model))
    throw InputError("--measure is for a TorchScript model (--model FILE.pt); --model is " + o.model);
  if (is_torchscript(o.model)) {  // a TorchScript module (torch::jit::save or torch.jit.save)
    if (o.example_shape.empty()) throw InputError("--model " + o.model + " is TorchScript: --example-shape is required (e.g. 4,128,1024)");
    const auto shapes = example_shapes(o.example_shape);
#ifdef STAGECRAFT_WITH_RUNTIME
    return runtime_plugin().import_torchscript(o.model, shapes, o.measure);
#else
    throw InputError("--model " + o.model + ": importing TorchScript needs the runtime (LibTorch), which this build lacks");
#endif
  }
  if (!o.example_shape.empty())
    throw InputError("--example-shape is for a TorchScript model (--model FILE.pt); --model is " + o.model + " (allowed: absent)");
  const bool file = ends_with(o.model, ".json");
  if (file) {
    nlohmann::json j = schedules::read_json_file(o.model, "--model");
    if (j.is_object() && j.contains("format") && j["format"] == "stagecraft-graph") return graphs::from_json(j, "graph '" + o.model + "'");
  }
  if (o.microbatch_size < 1) throw InputError("--microbatch-size = " + std::to_string(o.microbatch_size) + " is invalid (at least 1)");
  return graphs::model_graph(presets::load_model(o.model), o.microbatch_size);
}

std::string span(const graphs::Graph& g, const graphs::Subgraph& s) {
  const std::string a = g.nodes[static_cast<size_t>(s.nodes.front())].name, b = g.nodes[static_cast<size_t>(s.nodes.back())].name;
  return s.nodes.size() == 1 ? a : a + " .. " + b;
}

void run(const PartitionOpts& o) {
  if (o.recompute != "none" && o.recompute != "full")
    throw InputError("--recompute = '" + o.recompute + "' is invalid (allowed: none, full)");
  if (!o.graph_out.empty()) check_output_file("--graph-out", o.graph_out);
  const graphs::Graph g = load(o);
  graphs::ShardOptions so;
  so.max_subgraphs = o.max_subgraphs.value_or(0);
  so.common_min_users = o.common_min_users;
  const auto t0 = std::chrono::steady_clock::now();
  const graphs::Sharding sh = graphs::shard(g, so);
  const double shard_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  costmodel::ClusterSpec cl;
  graphs::PartitionOptions po;
  po.stages = o.pp;
  po.full_recompute = o.recompute == "full";
  if (!o.cluster.empty()) cl = presets::load_cluster(o.cluster), po.cluster = &cl;
  // On a cluster, balanced by each subgraph's seconds as estimate prices them (one tp rank, the
  // default stack); else by measured times or FLOPs.
  costmodel::ParallelPlan plan;
  plan.pp = o.pp;
  plan.recompute = po.full_recompute ? costmodel::RecomputePolicy::Full : costmodel::RecomputePolicy::None;
  const graphs::Partition p = po.cluster ? graphs::stage_partition(g, sh, cl, plan, o.pp) : graphs::partition(sh, po);
  if (!o.graph_out.empty()) write_file_atomic(o.graph_out, graphs::to_json(g).dump(1) + "\n");
  if (o.json) {
    nlohmann::json subs = nlohmann::json::array(), stages = nlohmann::json::array();
    for (const auto& s : sh.subgraphs) {
      nlohmann::json names = nlohmann::json::array();
      for (int n : s.nodes) names.push_back(g.nodes[static_cast<size_t>(n)].name);
      subs.push_back({{"nodes", names}, {"fwd_flops", s.fwd_flops}, {"bwd_flops", s.bwd_flops}, {"param_bytes", s.param_bytes},
                      {"act_bytes", s.act_bytes}, {"boundary_bytes", s.boundary_bytes}});
    }
    for (const auto& st : p.stages)
      stages.push_back({{"first_subgraph", st.first}, {"subgraphs", st.count}, {"flops", st.flops}, {"time_s", st.time_s},
                        {"param_bytes", st.param_bytes}, {"static_bytes", st.static_bytes}, {"act_bytes", st.act_bytes},
                        {"send_bytes", st.send_bytes}});
    std::cout << nlohmann::json{{"model", g.name}, {"nodes", g.nodes.size()}, {"shard_s", shard_s}, {"subgraphs", subs}, {"stages", stages}}.dump(2) << "\n";
    return;
  }
  std::cout << wrap_text("model " + g.name + ": " + std::to_string(g.nodes.size()) + " nodes, " + std::to_string(sh.subgraphs.size()) +
                             " subgraphs (Merak's graph sharding, " + fmt_seconds(shard_s) + "), " + std::to_string(o.pp) + " stages" +
                             (po.cluster ? " on " + cl.name : p.by_time ? " (balanced by measured times)" : " (balanced by FLOPs; --cluster prices them)"),
                         kHelpWidth)
            << "\n\nSubgraphs\n";
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < sh.subgraphs.size(); ++i) {
    const auto& s = sh.subgraphs[i];
    rows.push_back({std::to_string(i), span(g, s), std::to_string(s.nodes.size()), fmt_num((s.fwd_flops + s.bwd_flops) / 1e9, 4),
                    fmt_bytes(s.param_bytes), i + 1 < sh.subgraphs.size() ? fmt_bytes(s.boundary_bytes) : "-"});
  }
  std::cout << format_table({"#", "nodes", "count", "GFLOP f+b", "params", "to next"}, rows, kHelpWidth, 1) << "\nStages\n";
  rows.clear();
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const auto& st = p.stages[i];
    const auto& a = sh.subgraphs[static_cast<size_t>(st.first)];
    const auto& b = sh.subgraphs[static_cast<size_t>(st.first + st.count - 1)];
    rows.push_back({std::to_string(i), std::to_string(st.first) + "-" + std::to_string(st.first + st.count - 1),
                    g.nodes[static_cast<size_t>(a.nodes.front())].name + " .. " + g.nodes[static_cast<size_t>(b.nodes.back())].name,
                    p.by_time ? fmt_seconds(st.time_s) : fmt_num(st.flops / 1e9, 4) + " GFLOP", fmt_bytes(st.static_bytes),
                    fmt_bytes(st.act_bytes), i + 1 < p.stages.size() ? fmt_bytes(st.send_bytes) : "-"});
  }
  std::cout << format_table({"stage", "subgraphs", "from .. to", p.by_time ? "time/mb" : "work/mb", "weights+grads+Adam",
                             "activations/mb", "sent at cut"},
                            rows, kHelpWidth, 2);
  std::cout << "(mb: one microbatch)\n";
}

}  // namespace

void add_partition_command(CLI::App& app) {
  auto o = std::make_shared<PartitionOpts>();
  CLI::App* c = app.add_subcommand("partition", "cut a model's graph into Merak's subgraph sequence and balance it into pipeline stages");
  c->add_option("--model", o->model, "model preset, model JSON, graph JSON or TorchScript .pt (docs/graphs.md)")->required();
  c->add_flag("--measure", o->measure,
              "with a TorchScript model whose forward(input, target) returns the loss: time each subgraph's forward and backward "
              "on this CPU and write them onto its nodes (fwd_s, bwd_s; --graph-out keeps them for estimate)");
  c->add_option("--example-shape", o->example_shape, "a TorchScript model's example argument shape, comma-separated (random floats); once per argument of its forward");
  c->add_option("--pp", o->pp, "pipeline stages (default 1)");
  c->add_option("--cluster", o->cluster, "cluster preset or JSON: stage times from its GEMM rate (default: balance FLOPs)");
  c->add_option("--microbatch-size", o->microbatch_size, "samples per microbatch for a model (default 1)");
  c->add_option("--max-subgraphs", o->max_subgraphs, "Merak's upper bound k on the subgraphs (default: none, the finest cut)");
  c->add_option("--common-min-users", o->common_min_users, "users that make a node common, passed to every subgraph (default 3)");
  c->add_option("--recompute", o->recompute, "none or full: full adds the forward to each subgraph's work (default none)");
  c->add_option("--graph-out", o->graph_out, "also write the model's graph JSON to this file");
  c->add_flag("--json", o->json, "print JSON");
  c->callback([o] { run(*o); });
}

}  // namespace stagecraft::cli
