#include "cli/common.h"

#include <cstring>
#include <cerrno>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "costmodel/stack.h"
#include "schedules/error.h"

namespace stagecraft::cli {

std::string wrap_text(const std::string& text, std::size_t width) {
  std::string out, line, word;
  std::istringstream in(text);
  while (in >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line;
}

std::string wrap_text(const std::string& text, std::size_t width, const std::string& indent) {
  const std::string w = wrap_text(text, width > indent.size() + 20 ? width - indent.size() : 20);
  std::string out = indent;
  for (char ch : w) out += ch == '\n' ? "\n" + indent : std::string(1, ch);
  return out;
}

std::string note_line(const std::string& text) {
  std::string out = "  ";
  for (char ch : wrap_text("note: " + text, kHelpWidth - 4)) out += ch == '\n' ? std::string("\n    ") : std::string(1, ch);
  return out;
}

std::string WrappingFormatter::make_option_desc(const CLI::Option* opt) const {
  return wrap_text(CLI::Formatter::make_option_desc(opt), kHelpWidth - get_column_width());
}

std::string WrappingFormatter::make_description(const CLI::App* app) const {
  std::istringstream in(CLI::Formatter::make_description(app));
  std::string out;
  for (std::string line; std::getline(in, line);) out += wrap_text(line, kHelpWidth) + "\n";
  return out;
}

std::string WrappingFormatter::make_subcommand(const CLI::App* sub) const {
  std::stringstream out;
  CLI::detail::format_help(out, sub->get_display_name(true), wrap_text(sub->get_description(), kHelpWidth - get_column_width()),
                           get_column_width());
  return out.str();
}

std::string utilization_cell(const costmodel::Estimate& e) {
  const std::string mfu = e.mfu_fp8 > 0 ? "MFU " + fmt_num(100 * e.mfu, 1) + "% of the bf16 peak, " + fmt_num(100 * e.mfu_fp8, 1) +
                                              "% of the FP8 peak; HFU "
                                        : "MFU " + fmt_num(100 * e.mfu, 1) + "%, HFU ";
  return fmt_num(e.tflops_per_gpu, 1) + " (" + mfu + fmt_num(100 * e.hfu, 1) + "%)";
}

std::string stack_flag_help(const std::string& lead) {
  std::string names;
  for (const std::string& n : costmodel::stack_preset_names())
    names += (names.empty() ? "" : ", ") + n + (n == costmodel::kDefaultStack ? " (default)" : "");
  return lead + ": " + names + ", or a stack JSON file (docs/costmodel.md)";
}

void add_from_flags(CLI::App* app, std::string& from, std::string& format, std::string& hf_config) {
  CLI::Option* from_opt = app->add_option("--from", from,
                  "a training framework's config: Megatron-LM launch script or arguments, Megatron-Bridge/NeMo YAML, "
                  "torchtitan TOML, DeepSpeed JSON or Hugging Face config.json (docs/import.md); the flags given override it");
  // Both describe the --from file: without it they would be ignored (issue 52), so CLI11 refuses them.
  app->add_option("--from-format", format, "--from's format: megatron, bridge, torchtitan, deepspeed or hf (default: guessed)")
      ->needs(from_opt);
  app->add_option("--hf-config", hf_config, "a Hugging Face config.json: the model of a --from file without one (DeepSpeed)")
      ->needs(from_opt);
}

void add_plan_flags(CLI::App* app, PlanRequest& f, bool single_schedule, bool with_cluster) {
  add_from_flags(app, f.from, f.from_format, f.hf_config);
  app->add_option("--model", f.model,
                  "model preset name (see `stagecraft presets`) or a model JSON file (default: the one the --plan or --from file "
                  "names)");
  add_model_flags(app, f.model_request);
  app->add_option("--stack", f.stack, stack_flag_help("kernel set that runs the plan"));
  if (with_cluster)
    app->add_option("--cluster", f.cluster, "cluster preset name or a cluster JSON file (default: the one the --plan file names)");
  app->add_option("--plan", f.plan_file, "plan JSON file; the flags below override its fields");
  app->add_option("--dp", f.dp, "data-parallel degree (default: GPUs / (tp * pp * cp))");
  app->add_option("--tp", f.tp, "tensor-parallel degree (default 1)");
  app->add_option("--pp", f.pp, "pipeline-parallel degree: pipeline ranks (default 1)");
  app->add_option("--cp", f.cp,
                  "context-parallel degree: each sequence split over cp ranks, attention as a ring of key/value "
                  "chunks (Megatron-Core's; needs fused attention; default 1)");
  app->add_option("--ep", f.ep,
                  "expert-parallel degree: each MoE layer's experts split over ep of the dp x cp ranks, tokens sent "
                  "to them by all-to-all (Megatron-Core's; models with experts; default 1)");
  app->add_option("--etp", f.etp,
                  "experts' tensor-parallel degree: 0 the attention's tp (default), 1 whole experts, the expert-parallel "
                  "ranks then taken from tp x dp x cp (Megatron-Core --expert-tensor-parallel-size 1)");
  app->add_option("--moe-dispatcher", f.moe_dispatcher,
                  "how MoE layers move tokens: alltoall (default), allgather, flex (DeepEP); Megatron-Core "
                  "--moe-token-dispatcher-type (docs/costmodel.md)");
  app->add_option("--microbatch-size", f.microbatch_size, "samples per microbatch (default 1)");
  app->add_option("--microbatches", f.microbatches, "microbatches per iteration (default: 4 * pp)");
  if (single_schedule) app->add_option("--schedule", f.schedule, "schedule name (default 1f1b; see `stagecraft schedule --list`)");
  app->add_option("--chunks", f.chunks, "stages per rank, for schedules that take it (interleaved-1f1b, looped-bfs)");
  app->add_option("--recompute", f.recompute, "activation recomputation: none, full or selective (default none)");
  app->add_option("--recompute-modules", f.recompute_modules,
                  "with --recompute selective, what is recomputed, comma-separated: core_attn (default), layernorm, "
                  "mla_up_proj, mlp, moe_act, shared_experts, moe (Megatron-Core --recompute-modules)")
      ->delimiter(',');
  app->add_option("--cuda-graph-scope", f.cuda_graph_scope,
                  "what runs as CUDA graphs, one host launch each, comma-separated: attn, mlp, moe, moe_router, "
                  "moe_preprocess, or full_iteration (Megatron-Core --cuda-graph-scope; default none)")
      ->delimiter(',');
  app->add_option("--offload-layers", f.offload_layers,
                  "activations of this many of each stage's layers kept in host memory between the forward "
                  "and the backward, copied beside the compute (Megatron-Core --cpu-offloading-num-layers)");
  app->add_option("--rank-order", f.rank_order, "rank numbering, fastest axis first (default tp-dp-pp)");
  app->add_option("--stage-layers", f.stage_layers, "layers per stage of one pipeline, comma-separated (default balanced)");
  app->add_option("--pipeline-layout", f.pipeline_layout,
                  "Megatron-Core's layout of the layers on the stages, e.g. 'Et*3|(tt|)*29m|L' "
                  "(--pipeline-model-parallel-layout; docs/cli.md)");
  app->add_flag("--account-for-embedding-in-pipeline-split", f.account_for_embedding,
                "the embedding counts as one layer when the layers are split over the stages (Megatron-Core)");
  app->add_flag("--account-for-loss-in-pipeline-split", f.account_for_loss,
                "the loss counts as one layer when the layers are split over the stages (Megatron-Core)");
  app->add_flag("--sequence-parallel", f.sequence_parallel, "Megatron sequence parallelism (activations split t ways)");
  app->add_option("--tp-overlap", f.tp_overlap,
                  "tensor-parallel overlap: blocking, merak (sub-pipelined), cross-pass, oases, or te (Transformer Engine's chunked collectives, with --sequence-parallel; docs/tp-overlap.md)");
  app->add_flag("--overlap-grad-reduce", f.overlap_grad_reduce,
                "reduce gradients in buckets while the backward runs (PyTorch DDP, Megatron-LM --overlap-grad-reduce)");
  app->add_flag("--overlap-param-gather", f.overlap_param_gather,
                "with --zero 1 or 2: all-gather the updated parameters bucket by bucket behind the next forward "
                "(Megatron-Core --overlap-param-gather)");
  app->add_flag("--fp8-param-gather", f.fp8_param_gather,
                "with --fp8 and --zero 1 or 2: keep the compute weights in FP8 only and all-gather them in FP8 "
                "(Megatron-Core --fp8-param-gather)");
  app->add_option("--grad-reduce-at", f.grad_reduce_at,
                  "without --overlap-grad-reduce, where each stage's gradient reduction starts: rank-end (after the "
                  "rank's whole backward, Megatron-LM), stage-end (after the stage's own, eager) or auto (the "
                  "schedule's system: eager for chimera, chimera-wave, hanayo, looped-bfs; default)");
  app->add_flag("--preemptive-comm", f.preemptive_comm,
                "pipeline transfers preempt gradient reductions on a node's network (FOLD3D Sec. V-A): the "
                "simulator suspends the reduction flows, the runtime reduces in chunks that wait for the sends; "
                "estimate notes that its evaluator, one link per transfer, cannot show it");
  app->add_option("--grad-bucket-mb", f.grad_bucket_mb, "gradient bucket size in MiB (default 25, as PyTorch DDP): the runtime's buckets, and the estimate's with --overlap-grad-reduce");
  app->add_option("--zero", f.zero,
                  "distributed optimizer over the dp group: 0 none, 1 optimizer states sharded (Megatron's), 2 and "
                  "gradients, 3 and parameters, each layer gathered for its passes (FSDP; default 0)");
  app->add_option("--shard-group", f.shard_group,
                  "with --zero 3: dp ranks each parameter is sharded over, a divisor of dp; the copies all-reduce "
                  "their shards once per iteration (hybrid sharding, HSDP; default 0: the whole dp group)");
  app->add_flag("--no-reshard-after-forward", f.no_reshard_after_forward,
                "with --zero 3: keep each layer gathered from its forward to its backward (one all-gather per "
                "layer and microbatch instead of two; FSDP's SHARD_GRAD_OP)");
  if (with_cluster) add_memory_margin_flag(app, f.memory_margin);
  if (with_cluster) add_nodes_flag(app, f.nodes);
  if (with_cluster)
    app->add_option("--profile", f.profile, "profile JSON from `stagecraft profile`: measured costs instead of the analytic model");
  if (with_cluster)
    app->add_option("--gpus-used-per-node", f.gpus_used_per_node,
                    "GPUs a job uses of each node, with their share of its NICs (e.g. 64 of an NVL72 rack's 72; 0: all)");
  if (with_cluster)
    app->add_option("--gpu-calibration", f.gpu_calibration,
                    "GPU calibration JSON (a sustained GEMM sweep, scripts/gpu-measure.sh): its measured efficiency in "
                    "place of the catalog's efficiency and clock ratio (docs/costmodel.md \"GPU calibration\")");
  add_schedule_param_flags(app, f.params);
}

void add_schedule_param_flags(CLI::App* app, ScheduleParams& f) {
  app->add_option("--waves", f.waves, "hanayo: waves W (2*W*P stages; default 2)");
  app->add_option("--segments", f.segments, "fold3d-aiao: segments ns, or auto (default: auto in estimate/compare, 2 in schedule)");
  app->add_option("--alpha1", f.alpha1, "merak: un-recomputed share of the first stage in [0, 1], or auto (the largest that fits)");
  app->add_option("--param", f.extra, "any generator parameter as KEY=VALUE, e.g. --param offload=false (repeatable)");
}

void print_warning(const std::string& text) { std::cerr << "stagecraft: warning: " << text << "\n"; }

bool is_torchscript(const std::string& model_arg) { return ends_with(model_arg, ".pt"); }

std::vector<std::vector<std::int64_t>> example_shapes(const std::vector<std::string>& values) {
  std::vector<std::vector<std::int64_t>> out;
  for (const std::string& v : values) {
    std::vector<std::int64_t> shape;
    for (const std::string& d : split_list(v)) {
      std::optional<int> n = to_int(d);
      if (!n || *n < 1)
        throw InputError("--example-shape '" + v + "': dimension '" + d + "' is invalid (positive integers, comma-separated, e.g. 4,128,1024)");
      shape.push_back(*n);
    }
    if (shape.empty()) throw InputError("--example-shape '" + v + "' has no dimensions (e.g. 4,128,1024)");
    out.push_back(shape);
  }
  return out;
}

void add_memory_margin_flag(CLI::App* app, std::optional<double>& margin) {
  app->add_option("--memory-margin", margin,
                  "fraction of GPU memory a plan must leave free for allocator fragmentation and workspaces, in [0, 1) "
                  "(default: the cluster's, else 0.15; docs/memory.md)");
}

void add_nodes_flag(CLI::App* app, std::optional<int>& nodes) {
  app->add_option("--nodes", nodes,
                  "nodes of the cluster, overriding its preset or file (e.g. 32 nodes of h100-nvl-ib-64: 256 GPUs); "
                  "each node and the network keep their figures");
}

void add_model_flags(CLI::App* app, ModelRequest& f) {
  app->add_option("--attention-kernel", f.attention_kernel,
                  "the model's attention core: materialized (scores kept, Korthikanti; the presets') or fused (flash attention: "
                  "no s x s tensor kept; the runtime needs LibTorch 2.x)");
  app->add_flag("--no-dropout", f.no_dropout, "the model trains without dropout (no masks kept or written)");
  app->add_flag("--fp8", f.fp8,
                "the transformer layers' linear products in FP8 as Transformer Engine runs them (a GPU with FP8 and a "
                "16-bit model; docs/costmodel.md \"FP8\")");
  app->add_option("--fp8-recipe", f.fp8_recipe,
                  "FP8 (as --fp8) with this scaling recipe: delayed (TE's default), current (tensor-wise), blockwise "
                  "(1x128 and 128x128 blocks) or mxfp8 (block 32; Blackwell); docs/costmodel.md \"FP8 recipes\"");
  app->add_option("--seq-length", f.seq_length, "tokens per sample, in place of the model's seq_length (e.g. 32768)");
}

void write_file_atomic(const std::string& path, const std::string& content) {
  namespace fs = std::filesystem;
  fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  if (ec) throw Error("cannot create directory '" + target.parent_path().string() + "': " + ec.message());
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("cannot write '" + tmp + "'");
    out << content;
    out.flush();
    if (!out) {
      out.close();
      fs::remove(tmp, ec);
      throw Error("failed writing '" + tmp + "'");
    }
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error("cannot rename '" + tmp + "' to '" + path + "'");
  }
}

std::string format_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w(header.size(), 0);
  for (size_t i = 0; i < header.size(); ++i) w[i] = header[i].size();
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& r) {
    for (size_t i = 0; i < w.size(); ++i) {
      std::string c = i < r.size() ? r[i] : "";
      if (i == 0) out << c << std::string(w[i] - c.size(), ' ');
      else out << "  " << std::string(w[i] - c.size(), ' ') << c;
    }
    out << "\n";
  };
  line(header);
  size_t total = 0;
  for (size_t x : w) total += x + 2;
  out << std::string(total - 2, '-') << "\n";
  for (const auto& r : rows) line(r);
  return out.str();
}

CLI::Validator non_empty(const std::string& allowed) {
  return CLI::Validator([allowed](std::string& v) { return v.empty() ? "the value is empty (allowed: " + allowed + ")" : std::string(); },
                        "", "non-empty");
}

namespace {
// The nearest existing folder at or above `dir` ("" is the working directory); InputError when
// it is not a writable directory.
void check_writable_ancestor(const std::string& flag, const std::string& path, std::filesystem::path dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (dir.empty()) dir = ".";
  while (!fs::exists(dir, ec) && dir.has_parent_path() && dir.parent_path() != dir) dir = dir.parent_path();
  if (!fs::exists(dir, ec)) dir = ".";
  if (!fs::is_directory(dir, ec))
    throw InputError(flag + " = '" + path + "': '" + dir.string() + "' is not a directory (allowed: a path under a writable folder)");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw InputError(flag + " = '" + path + "': folder '" + dir.string() + "' is not writable (allowed: a path under a writable folder)");
}
}  // namespace

void check_output_file(const std::string& flag, const std::string& path) {
  std::error_code ec;
  if (path.empty()) throw InputError(flag + " is empty (allowed: a file path)");
  if (std::filesystem::is_directory(path, ec)) throw InputError(flag + " = '" + path + "' is a directory (allowed: a file path)");
  check_writable_ancestor(flag, path, std::filesystem::path(path).parent_path());
}

void check_output_dir(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) throw InputError(flag + " is empty (allowed: a folder path)");
  if (fs::exists(path, ec) && !fs::is_directory(path, ec))
    throw InputError(flag + " = '" + path + "' is a file, not a folder (allowed: a folder, existing or to create)");
  check_writable_ancestor(flag, path, fs::path(path));
}

void check_input_file(const std::string& flag, const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(flag + " = '" + path + "' is a directory (allowed: a file)");
  if (!std::filesystem::exists(path, ec)) throw InputError(flag + " = '" + path + "' does not exist (allowed: a readable file)");
  if (::access(path.c_str(), R_OK) != 0) throw InputError(flag + " = '" + path + "' cannot be read (allowed: a readable file)");
}

std::string format_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                         std::size_t max_width, std::size_t wrap_column, bool cut) {
  std::vector<size_t> w(header.size(), 0);
  for (size_t i = 0; i < header.size(); ++i) w[i] = header[i].size();
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  size_t total = 0;
  for (size_t x : w) total += x + 2;
  total -= 2;
  if (max_width == 0 || total <= max_width || wrap_column >= w.size()) return format_table(header, rows);
  const size_t room = std::max<size_t>(12, w[wrap_column] - std::min(w[wrap_column], total - max_width));
  w[wrap_column] = std::max(room, header[wrap_column].size());
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& r) {
    std::string text;
    for (size_t i = 0; i < w.size(); ++i) {
      std::string c = i < r.size() ? r[i] : "";
      if (i == 0 || i == wrap_column) c += std::string(w[i] - std::min(w[i], c.size()), ' ');
      else c = std::string(w[i] - std::min(w[i], c.size()), ' ') + c;
      text += (i ? "  " : "") + c;
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out << text << "\n";
  };
  line(header);
  out << std::string(std::min(total, max_width), '-') << "\n";
  for (const auto& r : rows) {
    std::vector<std::string> pieces;  // the wrapped cell, each piece at most the column's width
    const std::string cell = wrap_column < r.size() ? r[wrap_column] : "";
    if (cut) {
      std::vector<std::string> one = r;
      if (wrap_column < one.size() && cell.size() > w[wrap_column]) one[wrap_column] = cell.substr(0, w[wrap_column] - 3) + "...";
      line(one);
      continue;
    }
    std::istringstream in(wrap_text(cell, w[wrap_column]));
    for (std::string piece; std::getline(in, piece);)
      for (size_t at = 0; at < piece.size() || at == 0; at += w[wrap_column]) pieces.push_back(piece.substr(at, w[wrap_column]));
    std::vector<std::string> first = r;
    if (wrap_column < first.size()) first[wrap_column] = pieces.empty() ? "" : pieces.front();
    line(first);
    for (size_t k = 1; k < pieces.size(); ++k) {
      std::vector<std::string> more(w.size());
      more[wrap_column] = pieces[k];
      line(more);
    }
  }
  return out.str();
}

std::string program_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Error("cannot find this program's path (/proc/self/exe): " + std::string(std::strerror(errno)));
  buf[n] = '\0';
  return buf;
}

int report_exception(const std::exception& e) {
  const bool input = dynamic_cast<const InputError*>(&e) != nullptr;
  // A message of several lines (a schedule's rule and its marked grid, a deadlock's transfers):
  // the details first, then the message's own line last, so that the error is one line and the
  // last one on standard error (issue 52).
  const std::string what = e.what();
  const size_t nl = what.find('\n');
  if (nl != std::string::npos) {
    std::string details = what.substr(nl + 1);
    while (!details.empty() && details.back() == '\n') details.pop_back();
    if (!details.empty()) std::cerr << details << "\n";
  }
  std::cerr << (input ? "stagecraft: error: " : "stagecraft: failed: ") << what.substr(0, nl) << "\n";
  return input ? 2 : 1;
}

int exit_code_of(const std::function<int()>& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return report_exception(e);
  }
}

std::string zero_label(const costmodel::ParallelPlan& p) {
  std::string z = std::to_string(p.zero);
  if (p.zero == 3 && p.shard_group > 0) z += " hsdp" + std::to_string(p.shard_group);
  if (p.zero == 3 && !p.reshard_after_forward) z += " kept";
  return z;
}

}  // namespace stagecraft::cli
