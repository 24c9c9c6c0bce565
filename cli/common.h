// Pieces the subcommands share: the model/cluster/plan flags, output files written
// atomically, table printing, number formatting.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/specs.h"

namespace stagecraft::cli {

// Flags of `estimate`, `compare` (and later `simulate`, `train`) that define a configuration.
struct PlanFlags {
  std::string model;              // preset name or JSON file
  std::string cluster;            // preset name or JSON file
  std::string plan_file;          // optional JSON plan; flags given override its fields
  std::optional<int> dp, tp, pp;  // dp defaults to GPUs / (tp * pp)
  std::optional<int> microbatch_size, microbatches;
  std::string schedule;           // empty: the plan file's, else 1f1b
  std::optional<int> chunks;      // stages per rank, for schedules that take it
  std::string recompute;          // none | full | selective (default: the plan's, else none)
  std::string rank_order;         // e.g. tp-dp-pp
  std::string stage_layers;       // comma-separated layers per stage
};

void add_plan_flags(CLI::App* app, PlanFlags& f, bool single_schedule);

struct Inputs {
  costmodel::ModelSpec model;
  costmodel::ClusterSpec cluster;
  costmodel::ParallelPlan plan;
};
// Loads presets or files and builds the plan; throws InputError naming the flag.
Inputs resolve(const PlanFlags& f);

// Writes to PATH.tmp then renames, so a failure never leaves a half-written file; creates
// missing parent directories. Throws Error on failure.
void write_file_atomic(const std::string& path, const std::string& content);

std::vector<std::string> split_list(const std::string& s, char sep = ',');
std::string fmt_seconds(double s);  // "1.234 s", "12.3 ms", "45.6 us"
std::string fmt_bytes(double b);    // "12.3 GiB"
std::string fmt_num(double v, int precision = 3);

// Plain text table with a header row; columns right-aligned except the first.
std::string format_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

}  // namespace stagecraft::cli
