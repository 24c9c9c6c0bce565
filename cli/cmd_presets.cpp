// `stagecraft presets`: the named models and clusters, with their key figures and sources.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "costmodel/flops.h"
#include "costmodel/presets.h"
#include "schedules/error.h"

namespace stagecraft::cli {
namespace {

struct PresetsOpts {
  bool json = false;
  bool wide = false;  // sources in full, however wide (default: cut to fit 100 columns)
  std::string show;
};

void run(const PresetsOpts& o) {
  using namespace costmodel;
  if (!o.show.empty()) {
    for (const auto& e : preset_entries())
      if (e.name == o.show) {
        std::cout << e.json;
        return;
      }
    throw InputError("--show " + o.show + ": no such preset (see `stagecraft presets`)");
  }
  if (o.json) {
    nlohmann::json j = {{"models", nlohmann::json::array()}, {"clusters", nlohmann::json::array()}};
    for (const auto& n : model_preset_names()) j["models"].push_back(to_json(load_model(n)));
    for (const auto& n : cluster_preset_names()) j["clusters"].push_back(to_json(load_cluster(n)));
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::vector<std::vector<std::string>> models;
  for (const auto& n : model_preset_names()) {
    ModelSpec m = load_model(n);
    models.push_back({n, std::string(kind_name(m.kind)), std::to_string(m.num_layers), std::to_string(m.hidden_size),
                      std::to_string(m.num_heads) + (kv_heads(m) != m.num_heads ? "/" + std::to_string(kv_heads(m)) : ""),
                      std::to_string(m.seq_length), std::to_string(m.vocab_size),
                      fmt_num(flops::model_params(m) / 1e9, 2) + "B", m.source});
  }
  std::cout << "Models\n"
            << format_table({"name", "kind", "layers", "hidden", "heads (/kv)", "seq", "vocab", "params", "source"}, models,
                            o.wide ? 0 : kHelpWidth, 8, true);
  std::vector<std::vector<std::string>> clusters;
  for (const auto& n : cluster_preset_names()) {
    ClusterSpec c = load_cluster(n);
    const std::string intra = fmt_num(c.intra_node_bandwidth_Bps / 1e9, 0) + " GB/s",
                      inter = fmt_num(c.inter_node_bandwidth_Bps * c.nics_per_node / 1e9, 1) + " GB/s";
    clusters.push_back({n, std::to_string(c.nodes) + " x " + std::to_string(c.gpus_per_node), c.gpu_name,
                        fmt_num(c.gpu_peak_flops_per_s / 1e12, 0) + " TF", fmt_bytes(c.gpu_memory_bytes),
                        o.wide ? c.intra_node_link + " " + intra : intra, o.wide ? c.inter_node_link + " " + inter : inter});
    if (o.wide) clusters.back().push_back(c.source);
  }
  std::vector<std::string> header = {"name", "nodes x gpus", "gpu", "peak", "memory", "intra-node", "inter-node/node"};
  if (o.wide) header.push_back("source");
  // Within 100 columns the links are their bandwidths and the GPU's name is cut (--wide: all).
  std::cout << "\nClusters\n" << format_table(header, clusters, o.wide ? 0 : kHelpWidth, 2, true);
  std::cout << "\nSources and link names in full: --wide; every field: stagecraft presets --show NAME\n";
}

}  // namespace

void add_presets_command(CLI::App& app) {
  auto o = std::make_shared<PresetsOpts>();
  CLI::App* c = app.add_subcommand("presets", "list the model and cluster presets with their sources");
  c->add_flag("--json", o->json, "print every preset as JSON");
  c->add_flag("--wide", o->wide, "sources in full, the clusters' links named, however wide (default: cut to fit 100 columns)");
  c->add_option("--show", o->show, "print one preset's JSON file")->check(non_empty("a preset name"));
  c->callback([o] { run(*o); });
}

}  // namespace stagecraft::cli
