// Pieces the subcommands share: the model/cluster/plan flags bound to workbench's requests,
// output files written atomically, table printing, exit codes. The library work (resolution,
// routes, searches, sweeps, the simulator's check) is workbench/'s.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/estimate.h"
#include "costmodel/specs.h"
#include "workbench/request.h"
#include "workbench/resolve.h"
#include "workbench/text.h"

namespace stagecraft::cli {

// The fields of workbench's requests (workbench/request.h), bound to their flags here.
using workbench::ModelRequest;
using workbench::PlanRequest;
using workbench::ScheduleParams;
using workbench::Inputs;
// Text helpers the library's messages and these tables share (workbench/text.h).
using workbench::ends_with;
using workbench::fmt_bytes;
using workbench::fmt_num;
using workbench::fmt_percent;
using workbench::fmt_seconds;
using workbench::fmt_signed_bytes;
using workbench::split_list;
using workbench::to_int;

// --waves, --segments, --alpha1 and --param into a request's schedule parameters.
void add_schedule_param_flags(CLI::App* app, ScheduleParams& f);
// Adds --attention-kernel, --no-dropout, --fp8, --fp8-recipe and --seq-length to a command.
void add_model_flags(CLI::App* app, ModelRequest& f);

// --from, --from-format and --hf-config (a framework config as the model and plan; docs/import.md).
void add_from_flags(CLI::App* app, std::string& from, std::string& format, std::string& hf_config);

// The flags of a configuration (`estimate`, `compare`, `simulate`, `check-run`, `train`) into a
// request; with_cluster = false leaves out --cluster (train: the plan does not depend on a cluster).
void add_plan_flags(CLI::App* app, PlanRequest& f, bool single_schedule, bool with_cluster = true);

// A library warning (workbench::WarnFn) as the program prints it: "stagecraft: warning: TEXT" on
// standard error.
void print_warning(const std::string& text);

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

// --memory-margin: the fraction of GPU memory a plan leaves free (ClusterSpec::memory_margin).
void add_memory_margin_flag(CLI::App* app, std::optional<double>& margin);
// --nodes N: the same cluster with N nodes (a preset scaled out or in, node and network figures
// unchanged; the name says so). InputError naming the flag when N < 1.
void add_nodes_flag(CLI::App* app, std::optional<int>& nodes);

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

// True when `model_arg` names a TorchScript module (a .pt file).
bool is_torchscript(const std::string& model_arg);
// --example-shape values ("4,8,16", one per forward argument) as shapes; InputError naming the
// flag, the value and what is allowed.
std::vector<std::vector<std::int64_t>> example_shapes(const std::vector<std::string>& values);

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
