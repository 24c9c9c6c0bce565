// `stagecraft import FILE`: a training framework's config as a stagecraft model, plan and cluster
// guess, with what was mapped, assumed, not modelled, ignored and not understood (configs/).
#include <iostream>

#include "cli/commands.h"
#include "cli/common.h"
#include "configs/import.h"
#include "presets/load.h"
#include "schedules/error.h"

namespace stagecraft::cli {
namespace {

struct ImportOpts {
  std::string file;         // the framework's config
  std::string format;       // megatron | bridge | torchtitan | deepspeed | hf ("": guessed)
  std::string hf_config;    // the model for a file without one
  int gpus = 0;             // world size when the file leaves it open (torchtitan, DeepSpeed)
  std::string cluster;      // a cluster preset for the cluster guess (--out-cluster)
  std::string out_model;    // model JSON written here
  std::string out_plan;     // plan JSON written here
  std::string out_cluster;  // cluster JSON ({"extends": cluster, "nodes": n}) written here
  bool json = false;        // everything as one JSON object
};

std::string plan_line(const configs::Imported& in) {
  const costmodel::ParallelPlan& p = in.plan;
  return "plan: dp " + std::to_string(p.dp) + ", tp " + std::to_string(p.tp) + ", pp " + std::to_string(p.pp) + ", cp " + std::to_string(p.cp) +
         ", ep " + std::to_string(p.ep) + ", microbatch size " + std::to_string(p.microbatch_size) + ", " + std::to_string(p.num_microbatches) +
         " microbatches, schedule " + p.schedule + ", recompute " + std::string(costmodel::recompute_name(p.recompute)) + ", zero " +
         zero_label(p) + " (" + std::to_string(p.num_gpus()) + " GPUs)";
}

// {"extends": preset, "nodes": n} for the file's world on `preset`'s nodes; InputError when the
// world does not fill whole nodes.
nlohmann::json cluster_guess(const configs::Imported& in, const std::string& preset) {
  costmodel::ClusterSpec c = presets::load_cluster(preset);
  const int world = in.has_plan ? in.plan.num_gpus() : in.world_size;
  if (world < 1) throw InputError("--out-cluster: the file implies no world size (give --gpus)");
  if (world > c.gpus_per_node && world % c.gpus_per_node != 0)
    throw InputError("--cluster " + preset + ": " + std::to_string(world) + " GPUs do not fill whole nodes of " + std::to_string(c.gpus_per_node));
  return {{"extends", preset}, {"nodes", world > c.gpus_per_node ? world / c.gpus_per_node : 1}};
}

void print_text(const ImportOpts& o, const configs::Imported& in) {
  std::cout << wrap_text("imported " + o.file + " as " + std::string(configs::format_name(in.format)), kHelpWidth) << "\n";
  if (in.model) {
    const costmodel::ModelSpec& m = *in.model;
    std::cout << wrap_text("model: " + m.name + ", " + std::string(costmodel::kind_name(m.kind)) + ", " + std::to_string(m.num_layers) +
                               " layers, hidden " + std::to_string(m.hidden_size) + ", " + std::to_string(m.num_heads) + " heads, seq " +
                               std::to_string(m.seq_length) + ", vocab " + std::to_string(m.vocab_size) +
                               (m.num_experts ? ", " + std::to_string(m.num_experts) + " experts" : ""),
                           kHelpWidth)
              << "\n";
  }
  if (in.has_plan) std::cout << wrap_text(plan_line(in), kHelpWidth) << "\n";
  if (in.nodes > 0 || in.gpus_per_node > 0)
    std::cout << "cluster: " << in.nodes << " nodes x " << in.gpus_per_node << " GPUs (the launcher's; give --cluster to name the GPU)\n";
  std::string report = configs::report_text(in.report);
  std::string warnings;
  for (const configs::ReportEntry& u : in.report.unknown)
    warnings += "stagecraft: warning: unknown field " + u.field + (u.value.empty() ? "" : " = " + u.value.substr(0, 30)) +
                " (not understood; left out)\n";
  const size_t w = report.find("warning: unknown field");
  std::cout << (w == std::string::npos ? report : report.substr(0, w));
  std::cerr << warnings;
}

void run_import(const ImportOpts& o) {
  configs::ImportOptions io;
  io.hf_config = o.hf_config;
  io.gpus = o.gpus;
  std::optional<configs::Format> fmt;
  if (!o.format.empty()) fmt = configs::parse_format(o.format, "--format");
  for (const auto& [flag, path] : {std::pair{"--out-model", o.out_model}, {"--out-plan", o.out_plan}, {"--out-cluster", o.out_cluster}})
    if (!path.empty()) check_output_file(flag, path);
  configs::Imported in = configs::import_file(o.file, fmt, io);
  if (in.has_plan && in.world_size == 0)
    throw InputError(o.file + ": the file leaves the world size open (its data-parallel degree is the rest); give --gpus");
  nlohmann::json guess;
  if (!o.cluster.empty()) guess = cluster_guess(in, o.cluster);
  if (!o.out_model.empty()) {
    if (!in.model) throw InputError("--out-model: " + o.file + " defines no model (give --hf-config)");
    write_file_atomic(o.out_model, costmodel::to_json(*in.model).dump(1) + "\n");
  }
  if (!o.out_plan.empty()) {
    if (!in.has_plan) throw InputError("--out-plan: " + o.file + " is a model only (" + std::string(configs::format_name(in.format)) + ")");
    write_file_atomic(o.out_plan, costmodel::to_json(in.plan).dump(1) + "\n");
  }
  if (!o.out_cluster.empty()) {
    if (guess.is_null()) throw InputError("--out-cluster needs --cluster (the preset whose GPU and nodes the run used)");
    write_file_atomic(o.out_cluster, guess.dump(1) + "\n");
  }
  if (!o.json) return print_text(o, in);
  nlohmann::json j = {{"format", configs::format_name(in.format)}, {"report", configs::report_json(in.report)}};
  if (in.model) j["model"] = costmodel::to_json(*in.model);
  if (in.has_plan) j["plan"] = costmodel::to_json(in.plan);
  if (!guess.is_null()) j["cluster"] = guess;
  j["world_size"] = in.world_size;
  std::cout << j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";  // the file's bytes, not always UTF-8
}

}  // namespace

void add_import_command(CLI::App& app) {
  auto o = std::make_shared<ImportOpts>();
  CLI::App* c = app.add_subcommand("import", "a training framework's config (Megatron-LM, Megatron-Bridge/NeMo, torchtitan, DeepSpeed, "
                                               "Hugging Face) as a stagecraft model and plan, with every field accounted for");
  c->add_option("file", o->file, "the config: launch script or argument list, YAML, TOML or JSON")->required();
  c->add_option("--format", o->format, "megatron, bridge, torchtitan, deepspeed or hf (default: guessed from the content)");
  c->add_option("--hf-config", o->hf_config, "a Hugging Face config.json: the model (DeepSpeed; torchtitan flavors without a preset)");
  c->add_option("--gpus", o->gpus, "GPUs of the run, where the file leaves its data-parallel degree to the rest (torchtitan, DeepSpeed)");
  c->add_option("--cluster", o->cluster, "cluster preset the run used: --out-cluster scales it to the file's nodes");
  c->add_option("--out-model", o->out_model, "write the model JSON here");
  c->add_option("--out-plan", o->out_plan, "write the plan JSON here");
  c->add_option("--out-cluster", o->out_cluster, "write the cluster JSON here (with --cluster)");
  c->add_flag("--json", o->json, "print the model, plan and report as JSON");
  c->callback([o] { run_import(*o); });
}

}  // namespace stagecraft::cli
