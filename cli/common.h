// Pieces the subcommands share: the model/cluster/plan flags, output files written
// atomically, table printing, number formatting.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/estimate.h"
#include "costmodel/profile.h"
#include "costmodel/specs.h"
#include "graphs/graph.h"

namespace stagecraft::cli {

// Schedule parameters given on the command line: named ones and generic KEY=VALUE pairs.
struct ScheduleParamFlags {
  std::optional<int> waves;        // hanayo: waves W
  std::string segments;            // fold3d-aiao: segment count, or "auto"
  std::string alpha1;              // merak: non-recomputed share of the first stage, or "auto"
  std::vector<std::string> extra;  // --param KEY=VALUE (VALUE read as JSON when it parses)
};
void add_schedule_param_flags(CLI::App* app, ScheduleParamFlags& f);
// The flags as a JSON object of generator parameters; throws InputError on a malformed pair.
nlohmann::json schedule_params_json(const ScheduleParamFlags& f);
// Only the keys a generator reads (compare passes one set of flags to every schedule).
nlohmann::json params_for(const std::string& schedule, const nlohmann::json& params);

// What the model flags change in the model: every command that takes a model preset applies
// them through apply_model_flags.
struct ModelFlags {
  std::string attention_kernel;    // overrides the model's: materialized | fused ("" keeps it)
  bool no_dropout = false;         // the model trains without dropout (overrides its dropout)
  bool fp8 = false;                // the layers' linear products in FP8 (sets the model's fp8)
  std::string fp8_recipe;          // delayed | current | blockwise | mxfp8: FP8 with that recipe ("" keeps it)
  std::optional<int> seq_length;   // tokens per sample (overrides the model's seq_length)
  bool any() const { return !attention_kernel.empty() || no_dropout || fp8 || !fp8_recipe.empty() || seq_length.has_value(); }
};
// Adds --attention-kernel, --no-dropout, --fp8 and --seq-length to a command.
void add_model_flags(CLI::App* app, ModelFlags& f);

// Flags of `estimate`, `compare` (and later `simulate`, `train`) that define a configuration.
struct PlanFlags {
  std::string from;               // a framework's config (configs/import.h); the flags below override it
  std::string from_format;        // its format: megatron | bridge | torchtitan | deepspeed | hf (default: guessed)
  std::string hf_config;          // a Hugging Face config.json: the model of a --from file that has none
  std::string model;              // preset name or JSON file (default with --from: the file's model)
  ModelFlags model_flags;         // --attention-kernel, --no-dropout, --fp8, --seq-length
  std::string stack;              // kernel set (presets/stacks; default: the plan's, else megatron-lm)
  bool overlap_param_gather = false;  // the distributed optimizer's gather behind the next forward
  bool fp8_param_gather = false;      // FP8 compute weights only, gathered in FP8 (plan.fp8_param_gather)
  std::string cluster;            // preset name or JSON file
  std::string plan_file;          // optional JSON plan; flags given override its fields
  std::optional<int> dp, tp, pp;  // dp defaults to GPUs / (tp * pp * cp)
  std::optional<int> cp;          // context-parallel degree (default: the plan's, else 1)
  std::optional<int> ep;          // expert-parallel degree (default: the plan's, else 1)
  std::optional<int> etp;         // experts' tensor-parallel degree (0: tp; 1: whole experts)
  std::optional<std::string> moe_dispatcher;  // alltoall, allgather or flex (plan.moe_dispatcher)
  std::vector<std::string> recompute_modules;  // selective recomputation's modules (plan.recompute_modules)
  std::vector<std::string> cuda_graph_scope;   // what runs as CUDA graphs (plan.cuda_graph_scope)
  std::optional<int> offload_layers;           // layers a stage offloads to host memory (plan.offload_layers)
  std::optional<int> microbatch_size, microbatches;
  std::string schedule;           // empty: the plan file's, else 1f1b
  std::optional<int> chunks;      // stages per rank, for schedules that take it
  std::string recompute;          // none | full | selective (default: the plan's, else none)
  std::string rank_order;         // e.g. tp-dp-pp
  std::string stage_layers;       // comma-separated layers per stage
  bool sequence_parallel = false; // Megatron sequence parallelism
  std::string tp_overlap;         // blocking | merak | cross-pass | oases (default: the plan's, else blocking)
  std::optional<int> zero;        // distributed optimizer stage 0 | 1 | 2 | 3 (default: the plan's, else 0)
  std::optional<int> shard_group; // zero 3: dp ranks a parameter is sharded over (HSDP); 0 = all dp
  bool no_reshard_after_forward = false;  // zero 3: keep each layer gathered from forward to backward
  bool overlap_grad_reduce = false;       // bucketed gradient reduction during the backward
  std::string grad_reduce_at;             // auto | rank-end | stage-end (default: the plan's, else auto)
  bool preemptive_comm = false;           // pipeline transfers preempt gradient reductions (FOLD3D)
  std::optional<double> grad_bucket_mb;   // bucket size in MiB (default: the plan's, else 25)
  ScheduleParamFlags params;      // --waves, --segments, --alpha1, --param
  std::string profile;            // measured costs (stagecraft profile) instead of the analytic model
  std::optional<int> gpus_used_per_node;  // GPUs a job uses of each node (an NVL72 rack's 64 of 72)
  std::string gpu_calibration;    // a GPU calibration file: measured GEMM efficiency in place of the
                                  // catalog's efficiency and clock (costmodel/gpus.h)
  std::optional<double> memory_margin;  // overrides the cluster's memory_margin
  std::optional<int> nodes;             // overrides the cluster's node count
  // Set by resolve() from --from, not flags: the imported plan under the flags, and its global
  // batch (0: none), from which dp and the microbatches follow unless --dp/--microbatches say.
  std::optional<costmodel::ParallelPlan> from_plan;
  long from_global_batch = 0;
  int from_world = 0;             // the imported plan's GPUs
};

// --from, --from-format and --hf-config (a framework config as the model and plan; docs/import.md).
void add_from_flags(CLI::App* app, std::string& from, std::string& format, std::string& hf_config);

// with_cluster = false leaves out --cluster (train: the plan does not depend on a cluster).
void add_plan_flags(CLI::App* app, PlanFlags& f, bool single_schedule, bool with_cluster = true);

// "412.3 (MFU 41.7%, HFU 41.7%)": model TFLOP/s per GPU and the utilisations; with FP8 the MFU
// against both peaks, named.
std::string utilization_cell(const costmodel::Estimate& e);

// Help within kHelpWidth columns: option and subcommand descriptions wrapped at spaces into the
// right column (CLI11 indents the lines after a newline), set on the root app before its
// subcommands so that they inherit it.
inline constexpr std::size_t kHelpWidth = 100;
class WrappingFormatter : public CLI::Formatter {
 public:
  std::string make_option_desc(const CLI::Option* opt) const override;
  std::string make_subcommand(const CLI::App* sub) const override;
  std::string make_description(const CLI::App* app) const override;  // the command's own line
};
// `text` broken at spaces into lines of at most `width` characters (a longer word stays whole).
std::string wrap_text(const std::string& text, std::size_t width);
// The same with every line led by `indent` (counted in the width).
std::string wrap_text(const std::string& text, std::size_t width, const std::string& indent);

// "  note: TEXT" wrapped within kHelpWidth columns, continuation lines indented by four, no
// trailing newline.
std::string note_line(const std::string& text);

// --stack's help: `lead`, then the stack presets by name (the default marked) or a stack JSON.
std::string stack_flag_help(const std::string& lead);

// The model flags (--attention-kernel, --no-dropout, --fp8, --seq-length) applied to a model, checked; every
// command that takes them goes through here. With a graph model they are refused (its nodes say
// what they compute and keep), naming the flag.
void apply_model_flags(costmodel::ModelSpec& m, const ModelFlags& f);
void refuse_model_flags_for_graph(const std::string& model, const ModelFlags& f);

// The model as --model names it, with --attention-kernel applied (InputError naming the flag).
costmodel::ModelSpec load_model_flags(const PlanFlags& f);

// --memory-margin: the fraction of GPU memory a plan leaves free (ClusterSpec::memory_margin).
void add_memory_margin_flag(CLI::App* app, std::optional<double>& margin);
// Sets the cluster's margin when given; InputError naming the flag when outside [0, 1).
void apply_memory_margin(costmodel::ClusterSpec& c, const std::optional<double>& margin);
// --nodes N: the same cluster with N nodes (a preset scaled out or in, node and network figures
// unchanged; the name says so). InputError naming the flag when N < 1.
void add_nodes_flag(CLI::App* app, std::optional<int>& nodes);
void apply_nodes(costmodel::ClusterSpec& c, const std::optional<int>& nodes);

struct Inputs {
  costmodel::ModelSpec model;          // the graph's stand-in (graphs::model_of) with a graph
  std::optional<graphs::Graph> graph;  // --model FILE.json with "format": "stagecraft-graph"
  costmodel::ClusterSpec cluster;
  costmodel::ParallelPlan plan;
  std::optional<costmodel::Profile> profile;  // from --profile
  const costmodel::Profile* profile_ptr() const { return profile ? &*profile : nullptr; }
};
// Loads presets or files and builds the plan; throws InputError naming the flag. With --from,
// the imported model (unless --model), nodes (unless --nodes) and plan (under the flags).
Inputs resolve(const PlanFlags& f);
// --from: imports the file (its unknown fields as warnings on standard error), sets the cluster's
// nodes from the file's world size unless --nodes is given (cluster may be null: train), completes
// a plan whose file leaves the world open on `gpus` (the cluster's when 0), and fills f.from_plan,
// f.from_global_batch and f.from_world. Returns the file's model (none: it has none); nothing
// without --from.
std::optional<costmodel::ModelSpec> apply_from(PlanFlags& f, costmodel::ClusterSpec* cluster, int gpus = 0);
// The model as --model names it, else --from's; InputError when neither gives one.
costmodel::ModelSpec model_of(const PlanFlags& f, const std::optional<costmodel::ModelSpec>& from_model);
// The graph in `model_arg` when it names a graph JSON file (docs/graphs.md), else none.
std::optional<graphs::Graph> graph_arg(const std::string& model_arg);
// costmodel::estimate, or the graph route (graphs/estimate.h) when the model is a graph.
costmodel::Estimate estimate_inputs(const Inputs& in, const costmodel::ParallelPlan& p, const costmodel::EstimateOptions& eo);
// The plan alone, from the plan file and flags; dp defaults to gpus / (tp * pp). Checks the
// plan's own fields (costmodel::check) but nothing that needs a model or a cluster.
costmodel::ParallelPlan resolve_plan(const PlanFlags& f, int gpus, const std::string& gpus_from);
// --grad-bucket-mb in bytes (MiB), refusing a size not above 0; estimate's and plan's one reading.
double grad_bucket_bytes_of(double mb);

// Writes to PATH.tmp then renames, so a failure never leaves a half-written file; creates
// missing parent directories. Throws Error on failure.
void write_file_atomic(const std::string& path, const std::string& content);

// A validator refusing an empty value ("--show ''" printed every preset): CLI11's parse error,
// exit 2, naming the flag and `allowed`.
CLI::Validator non_empty(const std::string& allowed);

// Output paths checked before any long work (issue 52), each an InputError naming the flag, the
// path and what is allowed. A file: not a directory, and its folder (or the nearest existing one
// above, as write_file_atomic creates the rest) a writable directory. A folder: a directory or
// absent, the nearest existing one above writable.
void check_output_file(const std::string& flag, const std::string& path);
void check_output_dir(const std::string& flag, const std::string& path);
// An input file: exists, is not a directory, can be read.
void check_input_file(const std::string& flag, const std::string& path);

// This program's path (/proc/self/exe); Error when it cannot be read. Children of validate run
// it, and the runtime plugin is found beside it.
std::string program_path();

// The program's exit code for an exception, its one line printed on standard error: 2 for bad
// input (InputError), 1 for any other failure. main and the forked training ranks share it.
int report_exception(const std::exception& e);
// Runs f, returning its exit code, or report_exception's when it throws.
int exit_code_of(const std::function<int()>& f);

std::vector<std::string> split_list(const std::string& s, char sep = ',');
// True when `s` ends with `tail` and is longer than it (a file name with that extension).
bool ends_with(const std::string& s, const std::string& tail);
// True when `model_arg` names a TorchScript module (a .pt file).
bool is_torchscript(const std::string& model_arg);
// --example-shape values ("4,8,16", one per forward argument) as shapes; InputError naming the
// flag, the value and what is allowed.
std::vector<std::vector<std::int64_t>> example_shapes(const std::vector<std::string>& values);
// The whole of `text` as an integer; nothing when it is not one (the caller names the flag).
std::optional<int> to_int(const std::string& text);
std::string fmt_seconds(double s);  // "1.234 s", "12.3 ms", "45.6 us"
std::string fmt_bytes(double b);    // "12.3 GiB"
std::string fmt_signed_bytes(double b);
std::string fmt_percent(double fraction);  // 0.15 -> "15%", 0.125 -> "12.5%"  // fmt_bytes, with "-" ahead when negative (memory over a limit)
std::string fmt_num(double v, int precision = 3);

// Plain text table with a header row; columns right-aligned except the first.
std::string format_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);
// The same table within `max_width` columns (issue 52: text output for a terminal): when wider,
// column `wrap_column`'s cells are wrapped at spaces onto continuation lines (left-aligned; a word
// longer than the column is cut), or with `cut` shortened to the column, ending in "...".
// max_width 0: no limit (the commands' --wide).
std::string format_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                         std::size_t max_width, std::size_t wrap_column, bool cut = false);

// A plan's ZeRO stage for tables: "1", "3", "3 hsdp8" under hybrid sharding, "3 kept" without
// resharding after the forward.
std::string zero_label(const costmodel::ParallelPlan& p);

}  // namespace stagecraft::cli
