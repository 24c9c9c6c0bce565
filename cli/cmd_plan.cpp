// `stagecraft plan`: search the plans of a model on a cluster for a global batch (planner/)
// and print the fastest that fit, with what the search considered, pruned and evaluated.
// The search, the sweep and the simulator's check are workbench's (workbench/search.h,
// sweep.h, verify.h); this file binds the flags and prints.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/plan_whatif.h"
#include "cli/progress.h"
#include "configs/emit.h"
#include "presets/load.h"
#include "planner/search.h"
#include "schedules/error.h"
#include "schedules/tp_overlap.h"
#include "stats/stats.h"
#include "workbench/layer_tp.h"
#include "workbench/search.h"
#include "workbench/sweep.h"
#include "workbench/verify.h"

namespace stagecraft::cli {

namespace {

struct PlanCmdFlags {
  workbench::SearchRequest search;  // the search: model, cluster, space, --out, --verify, --whatif, --layer-tp
  std::string emit;                 // megatron | torchtitan | deepspeed: print the best plan as that config
  bool json = false;                // JSON instead of the table
  bool wide = false;                // the table with every column, however wide
  bool quiet = false;               // no progress lines on standard error
};

// What narrows a slow search, printed once when one passes a minute.
const char* const kSlowHint = "fewer values of --tp, --pp, --schedules, --microbatch-sizes, --recompute or --zero make it faster";

std::string fmt_tokens(double v) {  // 3e+11 -> "3e+11", 1.5e12 -> "1.5e+12"
  std::ostringstream o;
  o << std::setprecision(3) << v;
  return o.str();
}

double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(b[i] - a[i]) / a[i]);
  return worst;
}

std::string schedule_label(const costmodel::ParallelPlan& p) {
  std::string out = p.schedule;
  if (p.tp_overlap != schedules::TpOverlap::Blocking) out += " [" + std::string(schedules::tp_overlap_name(p.tp_overlap)) + "]";
  for (auto it = p.schedule_params.begin(); it != p.schedule_params.end(); ++it)
    out += it.key() == "chunks" ? " v" + it.value().dump()
                                : " " + it.key() + "=" + (it.value().is_number_float() ? fmt_num(it.value().get<double>(), 3) : it.value().dump());
  return out;
}

// "dp/tp/pp", with the rank order where it is not Megatron-LM's.
std::string dims_label(const costmodel::ParallelPlan& p) {
  std::string out = std::to_string(p.dp) + "/" + std::to_string(p.tp) + "/" + std::to_string(p.pp);
  if (p.cp > 1) out += " cp" + std::to_string(p.cp);
  if (p.ep > 1) out += " ep" + std::to_string(p.ep) + (p.etp == 1 && p.tp > 1 ? " etp1" : "");
  return p.rank_order == "tp-dp-pp" ? out : out + " " + p.rank_order;
}

std::string layers_label(const costmodel::ParallelPlan& p) {
  if (p.stage_layers.empty()) return "even";
  std::string out;
  for (int k : p.stage_layers) out += (out.empty() ? "" : ",") + std::to_string(k);
  return out;
}

// A plan's headroom for tables: the bytes left in the usable memory, or "X over" for a tight plan
// (over the usable memory, within the GPU's).
std::string headroom_cell(const planner::Candidate& c) {
  return c.fit == costmodel::Fit::Tight ? fmt_bytes(-c.headroom_bytes) + " over" : fmt_signed_bytes(c.headroom_bytes);
}

// The table's last line: which row is the fastest plan that fits, or that none does and what the
// tight rows need. `usable_bytes`: the memory a plan may use (the GPU's less the margin).
std::string fastest_fit_line(const std::vector<planner::Candidate>& best, double usable_bytes) {
  for (size_t i = 0; i < best.size(); ++i)
    if (best[i].fit == costmodel::Fit::Fits)
      return "fastest plan that fits in " + fmt_bytes(usable_bytes) + ": #" + std::to_string(i + 1) + " (" +
             fmt_seconds(best[i].iteration_time_s) + " per iteration, " + dims_label(best[i].plan) + ")";
  return "no plan fits in " + fmt_bytes(usable_bytes) + "; the rows are tight (over the margin, within the GPU): "
         "a lower --memory-margin accepts them";
}

// The top plans, those that fit first (planner::ranks_before). Within 100 columns unless `wide`:
// tokens/s, the bubble and the peak memory left out (MFU, the iteration and the headroom say
// them), stage layers listed below.
void print_table(const planner::SearchResult& r, const std::vector<double>& simulated, bool wide) {
  std::vector<std::vector<std::string>> rows;
  int rank = 0;
  // A precision column where FP8 was priced (plan --precisions or --fp8).
  const bool precision = std::any_of(r.best.begin(), r.best.end(), [](const planner::Candidate& c) { return c.fp8; });
  std::string stage_lists;  // uneven stage layers, below the table unless --wide
  for (const planner::Candidate& c : r.best) {
    const auto& p = c.plan;
    const size_t i = static_cast<size_t>(rank);
    rows.push_back({std::to_string(++rank), fmt_seconds(c.iteration_time_s)});
    if (!simulated.empty()) rows.back().push_back(fmt_seconds(simulated[i]));
    if (wide) rows.back().push_back(fmt_num(c.tokens_per_s, 0));
    rows.back().push_back(fmt_num(100 * c.mfu, 1) + "%");
    if (wide) rows.back().push_back(fmt_bytes(c.max_memory_bytes));
    rows.back().push_back(headroom_cell(c));
    if (wide) rows.back().push_back(fmt_num(c.bubble_fraction, 3));
    rows.back().insert(rows.back().end(), {dims_label(p), std::to_string(p.microbatch_size) + "x" + std::to_string(p.num_microbatches),
                                           std::string(costmodel::recompute_name(p.recompute)), p.sequence_parallel ? "on" : "off",
                                           zero_label(p), schedule_label(p)});
    if (precision)
      rows.back().push_back(!c.fp8 ? "bf16"
                                   : c.fp8_recipe == costmodel::Fp8Recipe::Delayed
                                       ? "fp8"
                                       : "fp8-" + std::string(costmodel::fp8_recipe_name(c.fp8_recipe)));
    if (wide) rows.back().push_back(layers_label(p));
    else if (!p.stage_layers.empty()) {
      std::string spaced = layers_label(p);  // "3, 5, 5, 3": wraps at the commas
      for (size_t at = spaced.find(','); at != std::string::npos; at = spaced.find(',', at + 2)) spaced.insert(at + 1, " ");
      stage_lists += "  ";
      for (char ch : wrap_text("#" + std::to_string(rank) + ": " + spaced, kHelpWidth - 4))
        stage_lists += ch == '\n' ? std::string("\n    ") : std::string(1, ch);
      stage_lists += "\n";
    }
  }
  std::vector<std::string> header = {"#", "iteration"};
  if (!simulated.empty()) header.push_back("simulated");
  if (wide) header.push_back("tokens/s");
  header.push_back("MFU");
  if (wide) header.push_back("memory");
  header.push_back("headroom");
  if (wide) header.push_back("bubble");
  header.insert(header.end(), {"dp/tp/pp", "b x m", "recompute", "sp", "zero", "schedule"});
  if (precision) header.push_back("precision");
  if (wide) header.push_back("stage layers");
  const size_t schedule_column = static_cast<size_t>(std::find(header.begin(), header.end(), "schedule") - header.begin());
  std::cout << format_table(header, rows, wide ? 0 : kHelpWidth, schedule_column);
  std::cout << fastest_fit_line(r.best, r.cluster.usable_memory_bytes()) << "\n";
  if (!stage_lists.empty()) std::cout << "stage layers (the rest even; --wide: a column):\n" << stage_lists;
}

// Each value of the choices the space varied (zero, shard group, cp, precision): its fastest plan
// that fits against the best, or why none does.
void print_choices(const planner::SearchResult& r) {
  if (r.choices.empty() || r.best.empty()) return;
  const planner::Candidate& top = r.best.front();
  std::vector<std::vector<std::string>> rows;
  std::string refusals;  // the reason of each choice whose points a check refused, below the table
  for (const planner::ChoiceBest& c : r.choices) {
    std::string fastest = "no plan fits", gap = "-";
    if (c.best) {
      const bool tight = c.best->fit == costmodel::Fit::Tight;
      fastest = (tight ? "tight, " : "") + fmt_seconds(c.best->iteration_time_s) + " (" + dims_label(c.best->plan) + ")";
      if (!planner::ranks_before(top, *c.best)) gap = "the best";
      else if (!tight) gap = "+" + fmt_num(100 * (c.best->iteration_time_s / top.iteration_time_s - 1), 1) + "%";
      else gap = fmt_bytes(-c.best->headroom_bytes) + " over";
    }
    if (!c.best && c.evaluated == 0 && c.rejected > 0) {
      fastest = "every point refused";
      refusals += wrap_text(c.choice + ": " + c.rejection, kHelpWidth) + "\n";
    }
    rows.push_back({c.choice, fastest, gap, std::to_string(c.fitting) + (c.tight ? " (+" + std::to_string(c.tight) + " tight)" : "") +
                                                " of " + std::to_string(c.evaluated) +
                                                (c.rejected ? ", " + std::to_string(c.rejected) + " refused" : ""),
                    std::to_string(c.pruned)});
  }
  std::cout << "\nby choice, the fastest plan that fits with it (a tight one where none fits):\n"
            << format_table({"choice", "fastest", "against the best", "fit of evaluated", "pruned"}, rows) << refusals;
  std::cout << fastest_fit_line(r.best, r.cluster.usable_memory_bytes()) << "\n";
}

nlohmann::json result_json(const planner::SearchResult& r, const std::vector<double>& simulated) {
  nlohmann::json best = nlohmann::json::array();
  for (const planner::Candidate& c : r.best) {
    best.push_back({{"plan", costmodel::to_json(c.plan)},
                    {"fp8", c.fp8},
                    {"fp8_recipe", c.fp8 ? std::string(costmodel::fp8_recipe_name(c.fp8_recipe)) : std::string()},
                    {"iteration_time_s", c.iteration_time_s},
                    {"tokens_per_s", c.tokens_per_s},
                    {"mfu", c.mfu},
                    {"hfu", c.hfu},
                    {"max_memory_bytes", c.max_memory_bytes},
                    {"headroom_bytes", c.headroom_bytes},
                    {"fit", std::string(costmodel::fit_name(c.fit))},
                    {"bubble_fraction", c.bubble_fraction}});
    if (!simulated.empty()) best.back()["simulated_iteration_time_s"] = simulated[best.size() - 1];
  }
  nlohmann::json choices = nlohmann::json::array();
  for (const planner::ChoiceBest& c : r.choices)
    choices.push_back({{"choice", c.choice},
                       {"pruned", c.pruned},
                       {"bounded", c.bounded},
                       {"evaluated", c.evaluated},
                       {"fitting", c.fitting},
                       {"best_iteration_time_s", c.best ? nlohmann::json(c.best->iteration_time_s) : nlohmann::json(nullptr)},
                       {"best_plan", c.best ? costmodel::to_json(c.best->plan) : nlohmann::json(nullptr)}});
  const auto& s = r.stats;
  return {{"cluster", r.cluster.name},
          {"choices", choices},
          {"gpus", r.best.empty() ? r.cluster.num_gpus() : r.best.front().plan.num_gpus()},
          {"best", best},
          {"stats",
           {{"considered", s.considered},
            {"pruned", s.pruned},
            {"bounded", s.bounded},
            {"rejected", s.rejected},
            {"evaluated", s.evaluated},
            {"balanced", s.balanced},
            {"infeasible", s.infeasible},
            {"untimed", s.untimed},
            {"schedules_compiled", s.schedules_compiled},
            {"seconds", s.seconds}}}};
}

void print_layer_tp(const std::vector<workbench::LayerTpRow>& rows, const planner::SearchResult& r) {
  std::cout << "\n"
            << wrap_text("per-layer tensor-parallel degrees (Oases Sec. V: eqs. (3)-(6) as an ILP, solved with CBC), the layers' "
                         "time per iteration under that model:",
                         kHelpWidth)
            << "\n";
  if (rows.empty()) {
    std::cout << "none of the top plans has pp = 1 and tp >= 2 (Oases' formulation runs without pipelining)\n";
    return;
  }
  std::vector<std::vector<std::string>> t;
  for (const workbench::LayerTpRow& x : rows) {
    const int tp = r.best[x.rank].plan.tp;
    if (x.best.degrees.empty()) {
      t.push_back({std::to_string(x.rank + 1), "no choice fits", "", "", "", "", "", ""});
      continue;
    }
    t.push_back({std::to_string(x.rank + 1),
                 planner::format_degrees(std::vector<int>(x.best.degrees.size(), tp)) + " " + fmt_seconds(x.uniform.time_s),
                 planner::format_degrees(x.best.degrees) + " " + fmt_seconds(x.best.value.time_s),
                 fmt_num(x.uniform.time_s / x.best.value.time_s, 3) + "x", fmt_seconds(x.best.value.reshard_s),
                 fmt_seconds(x.uniform.tp_comm_s) + " -> " + fmt_seconds(x.best.value.tp_comm_s),
                 fmt_bytes(x.best.value.memory_bytes), fmt_seconds(x.best.solve_s)});
  }
  std::cout << format_table({"#", "uniform", "per-layer", "speedup", "reshard", "tp collectives", "memory", "solve"}, t);
}

nlohmann::json layer_tp_json(const workbench::LayerTpRow& x) {
  return {{"degrees", x.best.degrees},
          {"time_s", x.best.value.time_s},
          {"uniform_time_s", x.uniform.time_s},
          {"reshard_s", x.best.value.reshard_s},
          {"tp_comm_s", x.best.value.tp_comm_s},
          {"uniform_tp_comm_s", x.uniform.tp_comm_s},
          {"memory_bytes", x.best.value.memory_bytes},
          {"solve_s", x.best.solve_s},
          {"ilp_variables", x.best.variables},
          {"ilp_rows", x.best.rows}};
}

// What the search did, in counts that add up: every point pruned, refused or evaluated, the
// balanced variants on top (planner::SearchStats).
std::string search_summary(const planner::SearchStats& s) {
  return "searched " + std::to_string(s.considered) + " points: " + std::to_string(s.pruned) + " pruned by the memory bound + " +
         std::to_string(s.bounded) + " cut by the time bound + " + std::to_string(s.rejected) + " refused by a check + " + std::to_string(s.evaluated - s.balanced) + " evaluated; " +
         std::to_string(s.balanced) + " more evaluated with balanced stage layers; of the " + std::to_string(s.evaluated) +
         " evaluated, " + std::to_string(s.evaluated - s.infeasible - s.tight) + " fit, " + std::to_string(s.tight) + " tight, " +
         std::to_string(s.infeasible) + " over the GPU's memory (" + std::to_string(s.untimed) +
         " of them by their memory alone, untimed); " + std::to_string(s.schedules_compiled) +
         " evaluators compiled, in " + fmt_seconds(s.seconds);
}

// A progress line per search of a sweep (each its own rate and time left).
workbench::ProgressFor sweep_progress(bool quiet) {
  return [quiet](int gpus) {
    auto progress = std::make_shared<Progress>(quiet);
    progress->slow_hint = kSlowHint;
    return workbench::ProgressFn([progress, gpus](long done, long total) {
      progress->report("plan: " + std::to_string(gpus) + " GPUs, points", done, total);
    });
  };
}

// A sweep's row of the table: the best plan's layout and rates, or that no plan fits.
std::vector<std::string> sweep_cells(const workbench::SweepRow& row, double tokens) {
  const std::string n = std::to_string(row.gpus);
  if (!row.best) return {n, "no plan fits", "", "", "", "", "", "", ""};
  const planner::Candidate& b = *row.best;
  const auto& p = b.plan;
  return {n,
          dims_label(p) + " b" + std::to_string(p.microbatch_size) + " " + schedule_label(p) + " " +
              std::string(costmodel::recompute_name(p.recompute)) + (p.sequence_parallel ? " sp" : "") +
              (p.zero ? " zero" + zero_label(p) : "") + (b.fp8 ? " fp8" : "") +
              (b.fit == costmodel::Fit::Tight ? " (tight: " + fmt_bytes(-b.headroom_bytes) + " over)" : ""),
          fmt_seconds(b.iteration_time_s), fmt_num(b.tokens_per_s, 0), fmt_tokens(row.tokens_per_gpu_hour),
          fmt_num(100 * b.mfu, 1) + "%", tokens > 0 ? fmt_num(row.train_s / 86400, 2) + " days" : "-",
          tokens > 0 ? fmt_num(row.gpu_hours, 0) : "-", fmt_seconds(row.search_s)};
}

nlohmann::json sweep_json(const std::vector<workbench::SweepRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const workbench::SweepRow& row : rows) {
    if (!row.best) {
      out.push_back({{"gpus", row.gpus}, {"best", nullptr}});
      continue;
    }
    out.push_back({{"gpus", row.gpus},
                   {"best", costmodel::to_json(row.best->plan)},
                   {"iteration_time_s", row.best->iteration_time_s},
                   {"tokens_per_s", row.best->tokens_per_s},
                   {"mfu", row.best->mfu},
                   {"tokens_per_gpu_hour", row.tokens_per_gpu_hour},
                   {"train_s", row.train_s},
                   {"gpu_hours", row.gpu_hours}});
  }
  return out;
}

// One row per GPU count: the best plan of each, its time per iteration and, with --tokens, the
// time and GPU-hours to train them; then where scaling stops paying.
void print_sweep(const PlanCmdFlags& f, const workbench::SearchInputs& in, const std::vector<workbench::SweepRow>& sweep) {
  if (f.json) {
    std::cout << sweep_json(sweep).dump(2) << "\n";
    return;
  }
  const double tokens = f.search.tokens;
  std::vector<std::vector<std::string>> rows;
  for (const workbench::SweepRow& row : sweep) rows.push_back(sweep_cells(row, tokens));
  std::cout << wrap_text("model " + in.model.name + (in.model.fp8 ? " (fp8)" : "") + " on cluster " + in.cluster.name +
                             ", global batch " + std::to_string(in.global_batch) + " sequences" +
                             (tokens > 0 ? ", " + fmt_tokens(tokens) + " tokens to train" : ""),
                         kHelpWidth)
            << "\n\n";
  std::cout << format_table({"GPUs", "best plan (dp/tp/pp)", "iteration", "tokens/s", "tok/GPU-h", "MFU", "to train", "GPU-hours",
                             "search"},
                            rows, f.wide ? 0 : kHelpWidth, 1);
  const workbench::SweepChoice c = workbench::sweep_choice(sweep);
  if (c.cheapest_gpus > 0)
    std::cout << "\nmost tokens per GPU-hour: " << c.cheapest_gpus << " GPUs (" << fmt_tokens(c.tokens_per_gpu_hour)
              << "); fastest: " << c.fastest_gpus << " GPUs (" << fmt_num(c.tokens_per_s, 0) << " tokens/s)\n";
}

// The search's answer as text: the header, the table, the choices, the counts, then what was
// asked besides (time to train, the simulator's check, per-layer tp, the what-if, the plan file).
void print_search(const PlanCmdFlags& f, const workbench::SearchInputs& in, const planner::SearchResult& r,
                  const std::vector<double>& simulated, const std::vector<workbench::LayerTpRow>& layer_tp,
                  const planner::Candidate* fitting) {
  const workbench::SearchRequest& q = f.search;
  const costmodel::ClusterSpec& c = in.cluster;
  std::cout << wrap_text("model " + in.model.name + (in.model.fp8 ? " (fp8)" : "") + " on " +
                             std::to_string(r.best.front().plan.num_gpus()) + " GPUs of cluster " + c.name + ", global batch " +
                             std::to_string(in.global_batch) + " sequences; a plan fits in " + fmt_bytes(c.usable_memory_bytes()) +
                             " per GPU (" + fmt_bytes(c.gpu_memory_bytes) + " less a margin of " + fmt_percent(c.memory_margin) + ")",
                         kHelpWidth)
            << "\n\n";
  print_table(r, simulated, f.wide);
  print_choices(r);
  std::cout << "\n" << wrap_text(search_summary(r.stats), kHelpWidth) << "\n";
  if (q.tokens > 0 && fitting) {
    const double train_s = q.tokens / fitting->tokens_per_s;
    std::cout << "time to train " << fmt_tokens(q.tokens) << " tokens with the best plan: " << fmt_num(train_s / 86400, 2)
              << " days, " << fmt_num(r.cluster.num_gpus() * train_s / 3600, 0) << " GPU-hours\n";
  }
  if (!simulated.empty()) {
    std::vector<double> evaluated;
    for (const planner::Candidate& b : r.best) evaluated.push_back(b.iteration_time_s);
    // A rank correlation needs two plans at least (`--top 1`: the difference alone).
    const std::string rank = evaluated.size() < 2 ? "" : "Spearman " + fmt_num(stats::spearman(evaluated, simulated), 3) + ", ";
    std::cout << "simulator against evaluator over the top " << evaluated.size() << ": " << rank << "largest difference "
              << fmt_num(100 * max_relative_difference(evaluated, simulated), 2) << "%\n";
  }
  if (q.layer_tp) print_layer_tp(layer_tp, r);
  print_plan_whatif(in.whatif, r, [](const planner::Candidate& b) { return dims_label(b.plan) + " " + schedule_label(b.plan); });
  if (!q.out.empty() && fitting)
    std::cout << wrap_text("the fastest plan that fits written to " + q.out + ", with its model and cluster (estimate --plan " +
                               q.out + " and train --plan " + q.out + " need nothing else)",
                           kHelpWidth)
              << "\n";
}

void run(const PlanCmdFlags& f) {
  const workbench::SearchRequest& q = f.search;
  if (!q.out.empty()) check_output_file("--out", q.out);
  workbench::SearchInputs in = workbench::resolve_search(q, print_warning);
  if (in.counts.size() > 1) {
    print_sweep(f, in, workbench::sweep(in, q, sweep_progress(f.quiet)));
    return;
  }
  Progress progress(f.quiet);
  progress.slow_hint = kSlowHint;
  const planner::SearchResult r =
      workbench::search_plans(in, q, [&](long done, long total) { progress.report("plan: points", done, total); });
  const std::vector<double> simulated = workbench::verify_on_sim(q, in.model, r);
  workbench::rank_plan_whatif(in.whatif, in.model, r);
  const std::vector<workbench::LayerTpRow> layer_tp = workbench::plan_layer_tp(q, in.model, r, in.profile ? &*in.profile : nullptr);
  const planner::Candidate* fitting = workbench::fastest_fitting(r.best);
  if (!q.out.empty() && fitting)
    write_file_atomic(q.out, workbench::plan_file_json(*fitting, in.model, r.cluster, in.graph ? q.model : "").dump(2) + "\n");
  if (!f.emit.empty()) {  // the best plan as the framework's config, nothing else on standard output
    if (!fitting) throw Error("no plan of the space fits in memory: nothing to --emit");
    std::cout << configs::emit(f.emit, in.model, fitting->plan, in.cluster.gpus_per_node, "--emit");
    return;
  }
  if (f.json) {
    nlohmann::json j = result_json(r, simulated);
    for (const workbench::LayerTpRow& x : layer_tp) j["best"][x.rank]["layer_tp"] = layer_tp_json(x);
    if (!in.whatif.file.empty()) j["whatif"] = plan_whatif_json(in.whatif);
    std::cout << j.dump(2) << "\n";
    return;
  }
  print_search(f, in, r, simulated, layer_tp, fitting);
  if (!q.out.empty() && !fitting)
    throw Error("--out " + q.out + " not written: no plan fits in " + fmt_bytes(r.cluster.usable_memory_bytes()) +
                " (the plans above are tight; a lower --memory-margin accepts them)");
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto f = std::make_shared<PlanCmdFlags>();
  workbench::SearchRequest& q = f->search;
  CLI::App* c = app.add_subcommand("plan", "search dp, tp, pp, microbatching, schedule, recomputation, sp and ZeRO for the fastest plans that fit");
  add_from_flags(c, q.from, q.from_format, q.hf_config);
  CLI::Option* emit = c->add_option("--emit", f->emit, "print the best plan as megatron (launch command), torchtitan (job TOML) or deepspeed (JSON)")
                          ->check(CLI::IsMember({"megatron", "torchtitan", "deepspeed"}));
  c->add_option("--model", q.model, "model preset name, model JSON or graph JSON (its own microbatch size; docs/graphs.md; default: --from's)");
  c->add_option("--cluster", q.cluster, "cluster preset name or JSON file")->required();
  add_memory_margin_flag(c, q.memory_margin);
  add_nodes_flag(c, q.nodes);
  c->add_option("--gpus-used-per-node", q.gpus_used_per_node,
                "GPUs a job uses of each node, with their share of its NICs (e.g. 64 of an NVL72 rack's 72; "
                "0: all): expert, tensor and context groups then fit a rack");
  c->add_option("--gpus", q.gpus, "GPUs the plans use, the cluster's first ones (default: all); several (64,128,256), a doubling range (64-512) or auto (the cluster and its halvings): the best plan of each");
  c->add_option("--tokens", q.tokens, "tokens to train: prints the time to train and GPU-hours of the best plan");
  c->add_option("--global-batch", q.global_batch, "sequences per iteration (required without a --from file giving it)");
  c->add_option("--schedules", q.schedules, "schedules tried, comma-separated: NAME, NAME:CHUNKS or NAME:KEY=VALUE[:KEY=VALUE] (e.g. hanayo:waves=2)")->capture_default_str();
  c->add_option("--microbatch-sizes", q.microbatch_sizes, "microbatch sizes tried")->capture_default_str();
  c->add_option("--recompute", q.recompute, "recomputation policies tried (none, selective, full)")->capture_default_str();
  c->add_option("--zero", q.zero, "ZeRO stages tried where dp > 1 (0, 1, 2, 3: FSDP)")->capture_default_str();
  c->add_option("--shard-groups", q.shard_groups,
                "with zero 3: shard groups tried, 0 the whole dp group (FSDP) or a size dividing dp (HSDP, e.g. 0,8)")
      ->capture_default_str();
  c->add_flag("--no-reshard-after-forward", q.no_reshard_after_forward,
              "with zero 3: keep each layer gathered from its forward to its backward");
  c->add_option("--sequence-parallel", q.sequence_parallel, "sequence parallelism tried where tp > 1 (off, on)")->capture_default_str();
  c->add_option("--tp-overlaps", q.tp_overlaps, "tensor-parallel overlap modes tried where tp > 1 (blocking, merak, cross-pass, oases, te)")->capture_default_str();
  c->add_option("--max-tp", q.max_tp, "largest tensor-parallel degree tried (default: one node's GPUs)");
  c->add_option("--tp", q.tp, "tensor-parallel degrees tried, comma-separated (default: every divisor up to --max-tp)");
  c->add_option("--pp", q.pp, "pipeline degrees tried, comma-separated (default: every divisor)");
  c->add_option("--precisions", q.precisions,
                "precisions tried, comma-separated: bf16, fp8 (the layers' linear products in FP8 with delayed scaling; a GPU with FP8), "
                "fp8-current, fp8-blockwise, fp8-mxfp8 (the other FP8 recipes, docs/costmodel.md \"FP8 recipes\"). "
                "--fp8 prices every plan in FP8")
      ->capture_default_str();
  c->add_option("--cp", q.cp,
                "context-parallel degrees tried, comma-separated, e.g. 1,2,4 (where 2 cp divides the sequence; needs "
                "--attention-kernel fused)")
      ->capture_default_str();
  c->add_option("--ep", q.ep,
                "expert-parallel degrees tried, comma-separated, e.g. 8,16,32 (each dividing the experts and dp x cp; "
                "default: 1 for a dense model, 1 and every power of two dividing a model's experts)");
  c->add_option("--etp", q.etp, "experts' tensor-parallel degrees tried where tp > 1: 0 (the attention's tp), 1 (whole experts)")
      ->capture_default_str();
  c->add_option("--rank-orders", q.rank_orders, "rank orders tried, fastest axis first (tp-dp-pp, tp-pp-dp, dp-tp-pp, ...)")->capture_default_str();
  c->add_flag("--no-overlap-grad-reduce", q.no_overlap, "reduce gradients after the backward (default: in buckets during it)");
  c->add_flag("--no-overlap-param-gather", q.no_overlap_param_gather,
              "with ZeRO, gather the updated parameters after the step (default: bucket by bucket behind the next forward)");
  c->add_option("--stack", q.stack, stack_flag_help("kernel set every plan runs on"));
  c->add_option("--cuda-graph-scope", q.cuda_graph_scope,
                "what every plan runs as CUDA graphs, comma-separated: attn, mlp, moe, moe_router, moe_preprocess, "
                "or full_iteration (Megatron-Core --cuda-graph-scope; default none)")
      ->delimiter(',');
  add_model_flags(c, q.model_request);
  c->add_option("--top", q.top, "plans printed, fastest first")->capture_default_str();
  c->add_option("--threads", q.threads, "threads the search runs on (default: every core); the plans and counts do not depend on it");
  c->add_flag("--json", f->json, "print JSON instead of the table")->excludes(emit);
  c->add_flag("--wide", f->wide, "the table with every column (stage layers), however wide");
  c->add_option("--out", q.out,
                "write the fastest plan that fits to this JSON file, with its model and cluster (estimate --plan FILE and "
                "train --plan FILE need nothing else)");
  c->add_option("--verify", q.verify, "sim: re-run the top plans on the SimGrid simulator and print both times");
  c->add_option("--whatif", q.whatif, "what-if JSON file (docs/whatif.md): the top plans simulated under it and ranked again "
                                       "(a slow node, a degraded NIC, jitter: the most robust plan)");
  c->add_option("--grad-bucket-mb", q.grad_bucket_mb, "every plan's gradient bucket size in MiB (default 25; as estimate)");
  c->add_option("--grad-reduce-at", q.grad_reduce_at,
                "every plan's reduction start without overlap: rank-end, stage-end or auto (default; as estimate)");
  c->add_flag("--preemptive-comm", q.preemptive_comm, "every plan's pipeline transfers preempt its reductions (as estimate)");
  c->add_option("--profile", q.profile, "profile JSON from `stagecraft profile`: every plan priced with measured costs (as estimate)");
  c->add_flag("--for-runtime", q.for_runtime,
              "search only plans `stagecraft train` runs (no FP8 or te overlap; FSDP without a split backward, "
              "context parallelism without experts; runtime/support/rules.h), for `train --plan`");
  c->add_flag("--quiet", f->quiet, "no progress lines (elapsed, estimated remaining) on standard error");
  c->add_flag("--layer-tp", q.layer_tp, "Oases' per-layer tensor-parallel degrees (ILP, CBC) for the top plans with pp = 1 and tp >= 2");
  c->callback([f] { run(*f); });
}

}  // namespace stagecraft::cli
