// `stagecraft presets`: the named models and clusters, with their key figures and sources.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "costmodel/flops.h"
#include "costmodel/gpus.h"
#include "costmodel/stack.h"
#include "presets/catalog.h"
#include "presets/load.h"
#include "schedules/error.h"

namespace stagecraft::cli {
namespace {

struct PresetsOpts {
  bool json = false;
  bool wide = false;  // sources in full, however wide (default: cut to fit 100 columns)
  std::string show;
};

// One catalog GPU field by field: its value, its source and, where it is assumed rather than
// measured, what is assumed (presets/gpus/NAME.json).
void show_gpu(const std::string& name) {
  const nlohmann::json g = costmodel::gpu_entry(name, "--show");
  std::cout << "GPU " << name << " (presets/gpus/" << name << ".json)\n";
  const nlohmann::json none = nlohmann::json::object();
  const nlohmann::json& src = g.contains("sources") ? g.at("sources") : none;
  const nlohmann::json& assumed = g.contains("assumed") ? g.at("assumed") : none;
  for (const std::string& f : costmodel::gpu_fields()) {
    if (!g.contains(f) || f == "compute_source") continue;
    const nlohmann::json& v = g.at(f);
    std::cout << "  " << f << " = " << (v.is_string() ? v.get<std::string>() : v.dump()) << "\n";
    if (src.contains(f)) std::cout << wrap_text("source: " + src.at(f).get<std::string>(), 90, "      ") << "\n";
    if (assumed.contains(f)) std::cout << wrap_text("ASSUMED: " + assumed.at(f).get<std::string>(), 90, "      ") << "\n";
  }
  // The attention-kernel rates per stack (presets/stacks): measured points on this GPU,
  // or the stack's other GPUs' shares of their peak, which the estimate then notes as assumed.
  const std::string gpu_name = g.value("gpu_name", "");
  std::string rates;
  for (const std::string& name : presets::names("stack")) {
    const costmodel::KernelStack& k = costmodel::load_stack(name);
    if (k.flash.empty()) continue;
    long n = 0;
    for (const costmodel::FlashPoint& p : k.flash) n += gpu_name.find(p.gpu) != std::string::npos;
    rates += (rates.empty() ? "" : "; ") + name + " (" + k.flash_kernel + "): " +
             (n > 0 ? std::to_string(n) + " measured points" : "none here, ASSUMED at its other GPUs' share of peak");
  }
  if (!rates.empty()) std::cout << wrap_text("attention-kernel rates per stack: " + rates, 96, "  ") << "\n";
  if (g.contains("compute_source"))
    std::cout << wrap_text("compute_source: " + g.at("compute_source").get<std::string>(), 96, "  ") << "\n";
}

void run(const PresetsOpts& o) {
  using namespace costmodel;
  using namespace presets;
  if (!o.show.empty()) {
    for (const auto& e : entries())
      if (e.name == o.show) {
        if (e.kind == "gpu") return show_gpu(e.name);
        std::cout << e.json;
        return;
      }
    throw InputError("--show " + o.show + ": no such preset (see `stagecraft presets`)");
  }
  if (o.json) {
    nlohmann::json j = {{"models", nlohmann::json::array()}, {"clusters", nlohmann::json::array()},
                        {"gpus", nlohmann::json::array()}};
    for (const auto& n : model_preset_names()) j["models"].push_back(to_json(load_model(n)));
    for (const auto& n : cluster_preset_names()) j["clusters"].push_back(to_json(load_cluster(n)));
    for (const auto& n : gpu_preset_names()) j["gpus"].push_back(gpu_entry(n));
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
  std::vector<std::vector<std::string>> gpus;
  for (const auto& n : gpu_preset_names()) {
    const nlohmann::json g = gpu_entry(n);
    auto num = [&](const char* f) { return g.value(f, 0.0); };
    const double tf = num("gpu_peak_flops_per_s") / 1e12;
    const std::string name = g.value("gpu_name", "");
    gpus.push_back({n, name.size() > 26 ? name.substr(0, 23) + "..." : name, fmt_num(tf, tf < 10 ? 2 : 0),
                    num("gpu_fp8_peak_flops_per_s") > 0 ? fmt_num(num("gpu_fp8_peak_flops_per_s") / 1e12, 0) : "-",
                    fmt_bytes(num("gpu_memory_bytes")), fmt_num(num("gpu_memory_bandwidth_Bps") / 1e12, 2) + " TB/s",
                    num("gpu_sms") > 0 ? fmt_num(num("gpu_sms"), 0) : "flat",
                    std::to_string(g.contains("assumed") ? g.at("assumed").size() : 0)});
  }
  std::cout << "\nGPUs (clusters name one with \"gpu\")\n"
            << format_table({"name", "gpu", "bf16 TF", "fp8 TF", "memory", "bandwidth", "SMs", "assumed"}, gpus);
  std::cout << "\nSources and link names in full: --wide; every field and its source: stagecraft presets --show NAME\n";
}

}  // namespace

void add_presets_command(CLI::App& app) {
  auto o = std::make_shared<PresetsOpts>();
  CLI::App* c = app.add_subcommand("presets", "list the model, cluster and GPU presets with their sources");
  c->add_flag("--json", o->json, "print every preset as JSON");
  c->add_flag("--wide", o->wide, "sources in full, the clusters' links named, however wide (default: cut to fit 100 columns)");
  c->add_option("--show", o->show, "print one preset's JSON file (a GPU: each field with its source)")
      ->check(non_empty("a preset name"));
  c->callback([o] { run(*o); });
}

}  // namespace stagecraft::cli
