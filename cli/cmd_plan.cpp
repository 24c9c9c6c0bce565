// `stagecraft plan`: search the plans of a model on a cluster for a global batch (planner/)
// and print the fastest that fit, with what the search considered, pruned and evaluated.
#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/plan_whatif.h"
#include "cli/progress.h"
#include "configs/emit.h"
#include "presets/load.h"
#include "costmodel/profile.h"
#include "stats/stats.h"
#include "graphs/plan.h"
#include "planner/layer_tp.h"
#include "planner/search.h"
#include "schedules/error.h"
#include "schedules/tp_overlap.h"
#ifdef STAGECRAFT_HAVE_SIM
#include "sim/simulate.h"
#endif

namespace stagecraft::cli {

namespace {

struct PlanCmdFlags {
  std::string from, from_format, hf_config;  // a framework's config: model, nodes, global batch (docs/import.md)
  std::string emit;                   // megatron | torchtitan | deepspeed: print the best plan as that config
  std::string model;                  // preset name or JSON file
  std::string cluster;                // preset name or JSON file
  std::string gpus;                   // GPUs the plans use, whole nodes; several: one search each; empty = the whole cluster
  double tokens = 0;                  // tokens to train, for the time to train and GPU-hours
  long global_batch = 0;              // sequences per iteration
  std::string schedules = "1f1b,interleaved-1f1b:2,interleaved-1f1b:4,zb-h1";  // NAME or NAME:CHUNKS
  std::string microbatch_sizes = "1,2,4,8";
  std::string recompute = "none,selective,full";
  std::string zero = "0,1,3";
  std::string shard_groups = "0";     // zero 3: shard groups tried (0: the whole dp group)
  bool no_reshard_after_forward = false;  // zero 3: keep layers gathered from forward to backward
  std::string sequence_parallel = "off,on";
  std::string tp_overlaps = "blocking";  // tensor-parallel overlap modes tried where tp > 1
  bool no_overlap = false;            // reduce gradients after the backward instead of in buckets
  bool no_overlap_param_gather = false;  // gather parameters after the step instead of behind the forward
  std::string stack;                  // kernel set (default megatron-lm)
  std::vector<std::string> cuda_graph_scope;  // every plan's CUDA graphs (plan.cuda_graph_scope)
  ModelFlags model_flags;             // --attention-kernel, --no-dropout, --fp8, --seq-length
  int max_tp = 0;                     // largest tp tried; 0 = one node's GPUs
  std::string tp;                     // tp values tried; empty = every divisor up to max_tp
  std::string pp;                     // pp values tried; empty = every divisor
  std::string cp = "1";               // context-parallel degrees tried
  std::string ep;                     // expert-parallel degrees tried; empty = the planner's (expert_degrees)
  std::string etp = "0";              // experts' tensor-parallel degrees tried (0: tp, 1: whole experts)
  std::string precisions = "bf16";    // precisions tried: bf16, fp8
  std::string rank_orders = "tp-dp-pp";  // rank orders tried
  int top = 10;                       // plans printed
  int threads = 0;                    // threads the search runs on; 0: every core
  bool json = false;                  // JSON instead of the table
  bool wide = false;                  // the table with every column, however wide
  std::string out;                    // write the best plan here (a plan file estimate --plan reads)
  std::string verify;                 // "sim": re-run the top plans on the simulator
  std::string whatif;                 // what-if file: the top plans ranked again under it (docs/whatif.md)
  bool layer_tp = false;              // Oases' per-layer tp degrees (ILP) for the top plans with pp = 1
  bool quiet = false;                 // no progress lines on standard error
  bool for_runtime = false;           // only plans `stagecraft train` runs
  std::optional<double> grad_bucket_mb;  // every plan's gradient bucket size in MiB (default 25)
  std::string grad_reduce_at;         // every plan's reduction start without overlap (default auto)
  bool preemptive_comm = false;       // every plan's pipeline transfers preempt its reductions
  std::string profile;                // measured costs instead of the analytic ones
  std::optional<double> memory_margin;  // overrides the cluster's memory_margin
  std::optional<int> nodes;           // overrides the cluster's node count
  std::optional<int> gpus_used_per_node;  // GPUs a job uses of each node (an NVL72 rack's 64 of 72)
};

int parse_int(const std::string& flag, const std::string& v) {
  if (const std::optional<int> x = to_int(v)) return *x;
  throw InputError(flag + " = \"" + v + "\" is invalid (expected an integer)");
}

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

planner::PlanSpace space_of(const PlanCmdFlags& f, int gpus) {
  planner::PlanSpace s;
  s.gpus = gpus;
  s.global_batch = f.global_batch;
  s.overlap_grad_reduce = !f.no_overlap;
  s.overlap_param_gather = !f.no_overlap_param_gather;
  if (!f.stack.empty()) s.stack = f.stack;
  s.cuda_graph_scope = f.cuda_graph_scope;
  s.max_tp = f.max_tp;
  s.schedules.clear();
  for (const std::string& item : split_list(f.schedules)) {
    // NAME, NAME:CHUNKS or NAME:KEY=VALUE[:KEY=VALUE...]
    const std::vector<std::string> parts = split_list(item, ':');
    planner::ScheduleChoice c;
    c.name = schedules::find_generator(parts.front()).name;  // throws InputError listing the names
    for (size_t i = 1; i < parts.size(); ++i) {
      const size_t eq = parts[i].find('=');
      if (eq == std::string::npos) {
        c.chunks = parse_int("--schedules " + item + " chunks", parts[i]);
        if (c.chunks < 1) throw InputError("--schedules " + item + " is invalid (chunks must be at least 1)");
        continue;
      }
      const std::string key = parts[i].substr(0, eq), value = parts[i].substr(eq + 1);
      try {
        c.params[key] = nlohmann::json::parse(value);
      } catch (const std::exception&) {
        c.params[key] = value;  // a word, e.g. auto
      }
    }
    s.schedules.push_back(c);
  }
  s.microbatch_sizes.clear();
  for (const std::string& v : split_list(f.microbatch_sizes)) s.microbatch_sizes.push_back(parse_int("--microbatch-sizes", v));
  s.recompute.clear();
  for (const std::string& v : split_list(f.recompute)) s.recompute.push_back(costmodel::parse_recompute(v));
  s.zero.clear();
  for (const std::string& v : split_list(f.zero)) s.zero.push_back(parse_int("--zero", v));
  s.shard_groups.clear();
  for (const std::string& v : split_list(f.shard_groups)) s.shard_groups.push_back(parse_int("--shard-groups", v));
  s.reshard_after_forward = !f.no_reshard_after_forward;
  for (const std::string& v : split_list(f.tp)) s.tp_degrees.push_back(parse_int("--tp", v));
  for (const std::string& v : split_list(f.pp)) s.pp_degrees.push_back(parse_int("--pp", v));
  s.cp_degrees.clear();
  for (const std::string& v : split_list(f.cp)) s.cp_degrees.push_back(parse_int("--cp", v));
  for (const std::string& v : split_list(f.ep)) s.ep_degrees.push_back(parse_int("--ep", v));
  s.expert_tp.clear();
  for (const std::string& v : split_list(f.etp)) {
    const int x = parse_int("--etp", v);
    if (x != 0 && x != 1) throw InputError("--etp \"" + v + "\" is invalid (allowed: 0, the attention's tp; 1, whole experts)");
    s.expert_tp.push_back(x);
  }
  s.fp8.clear();
  s.fp8_recipes.clear();
  for (const std::string& v : split_list(f.precisions)) {  // bf16, fp8 (delayed scaling) or fp8-RECIPE
    const bool fp8 = v != "bf16";
    if (fp8 && v != "fp8" && v.rfind("fp8-", 0) != 0)
      throw InputError("--precisions \"" + v + "\" is invalid (allowed: bf16, fp8, fp8-current, fp8-blockwise, fp8-mxfp8)");
    const costmodel::Fp8Recipe r = v == "fp8" || !fp8 ? costmodel::Fp8Recipe::Delayed
                                                      : costmodel::parse_fp8_recipe(v.substr(4), "--precisions " + v + ":");
    if (std::find(s.fp8.begin(), s.fp8.end(), fp8) == s.fp8.end()) s.fp8.push_back(fp8);
    if (fp8 && std::find(s.fp8_recipes.begin(), s.fp8_recipes.end(), r) == s.fp8_recipes.end()) s.fp8_recipes.push_back(r);
  }
  if (s.fp8_recipes.empty()) s.fp8_recipes.push_back(costmodel::Fp8Recipe::Delayed);
  s.rank_orders = split_list(f.rank_orders);
  s.for_runtime = f.for_runtime;
  if (f.grad_bucket_mb) s.grad_bucket_bytes = grad_bucket_bytes_of(*f.grad_bucket_mb);
  if (!f.grad_reduce_at.empty()) s.grad_reduce_at = schedules::parse_grad_reduce_at(f.grad_reduce_at, "--grad-reduce-at");
  s.preemptive_comm = f.preemptive_comm;
  s.tp_overlap.clear();
  for (const std::string& v : split_list(f.tp_overlaps)) s.tp_overlap.push_back(schedules::parse_tp_overlap(v, "--tp-overlaps"));
  s.sequence_parallel.clear();
  for (const std::string& v : split_list(f.sequence_parallel)) {
    if (v != "on" && v != "off") throw InputError("--sequence-parallel \"" + v + "\" is invalid (allowed: on, off)");
    s.sequence_parallel.push_back(v == "on");
  }
  return s;
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

// --verify sim: each top plan's iteration time on the SimGrid simulator (contention, the
// collectives as flows), beside the evaluator's; empty when not asked.
std::vector<double> verify_on_sim(const PlanCmdFlags& f, const costmodel::ModelSpec& m, const planner::SearchResult& r) {
  if (f.verify.empty()) return {};
  if (f.verify != "sim") throw InputError("--verify = '" + f.verify + "' is invalid (allowed: sim)");
#ifdef STAGECRAFT_HAVE_SIM
  std::vector<double> out;
  for (const planner::Candidate& c : r.best)
    out.push_back(sim::simulated_estimate(planner::estimate_candidate(m, r.cluster, c)).eval.iteration_time_s);
  return out;
#else
  (void)m;
  (void)r;
  throw InputError("--verify sim needs a build with the simulator (STAGECRAFT_BUILD_SIM)");
#endif
}

// --layer-tp: Oases' per-layer degrees for each top plan its formulation covers (pp = 1,
// tp >= 2), with the uniform degree's value under the same model beside it.
struct LayerTpRow {
  size_t rank = 0;                     // index in the top plans
  planner::LayerTpBreakdown uniform;   // every layer at the plan's tp
  planner::LayerTpSolution best;       // the ILP's choice
};
std::vector<LayerTpRow> plan_layer_tp(const PlanCmdFlags& f, const costmodel::ModelSpec& m, const planner::SearchResult& r,
                                      const costmodel::Profile* profile) {
  std::vector<LayerTpRow> out;
  if (!f.layer_tp) return out;
  for (size_t i = 0; i < r.best.size(); ++i) {
    const costmodel::ParallelPlan& p = r.best[i].plan;
    if (p.pp != 1 || p.tp < 2 || p.zero == 3 || p.cp > 1) continue;  // what layer_tp_problem plans (planner/layer_tp.h)
    const planner::LayerTpProblem pr = planner::layer_tp_problem(m, r.cluster, p, profile);
    LayerTpRow row;
    row.rank = i;
    row.uniform = planner::evaluate_layer_tp(pr, std::vector<int>(static_cast<size_t>(pr.layers), static_cast<int>(pr.options.size()) - 1));
    row.best = planner::solve_layer_tp(pr);
    out.push_back(row);
  }
  return out;
}

void print_layer_tp(const std::vector<LayerTpRow>& rows, const planner::SearchResult& r) {
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
  for (const LayerTpRow& x : rows) {
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

nlohmann::json layer_tp_json(const LayerTpRow& x) {
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

// A plan file that carries its inputs (issue 52): the plan's fields, the model (as priced: FP8
// when the plan was priced in FP8; a graph model by its file, `graph_file`) and the cluster (as
// searched: the --gpus of it, the margin and --nodes applied), so that `estimate --plan` and
// `train --plan` need no --model or --cluster.
nlohmann::json plan_file_json(const planner::Candidate& best, const costmodel::ModelSpec& m, const costmodel::ClusterSpec& c,
                              const std::string& graph_file) {
  nlohmann::json j = costmodel::to_json(best.plan);
  costmodel::ModelSpec priced = m;
  priced.fp8 = best.fp8;
  j["model"] = graph_file.empty() ? costmodel::to_json(priced) : nlohmann::json(graph_file);
  j["cluster"] = costmodel::to_json(c);
  return j;
}

// The fastest plan that fits in the usable memory among the ranked plans; null when none does.
const planner::Candidate* fastest_fitting(const std::vector<planner::Candidate>& best) {
  for (const planner::Candidate& c : best)
    if (c.fit == costmodel::Fit::Fits) return &c;
  return nullptr;
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

// A search that kept no plan: the constraint that removed the most points, with the flags that
// lift it. A space refused whole by one check is bad input (exit 2); one too large for memory a
// run-time finding (exit 1).
[[noreturn]] void refuse_empty(const planner::SearchResult& r) {
  const auto& s = r.stats;
  const auto [why, refused] = planner::main_rejection(s);
  const long memory = s.pruned + s.infeasible;
  const std::string counts = " (" + std::to_string(s.considered) + " points: " + std::to_string(s.pruned) +
                             " pruned by the memory bound, " + std::to_string(s.infeasible) + " evaluated over the GPU's memory, " +
                             std::to_string(s.rejected) + " refused by a check)";
  if (refused > memory)
    throw InputError("no plan of the space passes its checks; " + std::to_string(refused) + " points refused: " + why + counts);
  throw Error("no plan of the space fits in the GPU's " + fmt_bytes(r.cluster.gpu_memory_bytes) + counts +
              "; plans that need less memory: --zero 3, --recompute full, larger --pp, more --nodes" +
              (refused > 0 ? "; the most common refusal: " + why : ""));
}

// --gpus: "" (the whole cluster), counts "64,128", doubling ranges "64-512" (64, 128, 256, 512),
// or "auto": the whole cluster and its halvings down to one node, whole nodes each, so the
// sweep shows whether fewer GPUs train more tokens per GPU-hour.
std::vector<int> gpu_counts(const std::string& text, const costmodel::ClusterSpec& c) {
  std::vector<int> out;
  if (text == "auto") {
    for (int nodes = c.nodes; nodes >= 1; nodes /= 2) out.insert(out.begin(), nodes * c.gpus_per_node);
    return out;
  }
  for (const std::string& item : split_list(text)) {
    const size_t dash = item.find('-');
    if (dash == std::string::npos) {
      const int n = parse_int("--gpus", item);
      if (n < 1) throw InputError("--gpus = '" + item + "' is invalid (allowed: a count of at least 1; leave the flag out for all GPUs)");
      out.push_back(n);
      continue;
    }
    const int lo = parse_int("--gpus", item.substr(0, dash)), hi = parse_int("--gpus", item.substr(dash + 1));
    if (lo < 1 || hi < lo)
      throw InputError("--gpus range '" + item + "' is invalid (LOW-HIGH with 1 <= LOW <= HIGH; doubles from LOW)");
    for (long n = lo; n <= hi; n *= 2) out.push_back(static_cast<int>(n));
  }
  return out;
}

// One row per GPU count: the best plan of each, its time per iteration and, with --tokens, the
// time and GPU-hours to train them.
// The planner's search on the model: the analytic cost table, or a graph's (graphs/plan.h).
using SearchFn = std::function<planner::SearchResult(const planner::PlanSpace&, const planner::SearchOptions&)>;

void run_sweep(const PlanCmdFlags& f, const costmodel::ModelSpec& m, const costmodel::ClusterSpec& c,
               const std::vector<int>& counts, const SearchFn& search) {
  std::vector<std::vector<std::string>> rows;
  nlohmann::json out = nlohmann::json::array();
  planner::SearchOptions opt;
  opt.top_k = 1;
  opt.threads = f.threads;
  for (int n : counts) {
    Progress progress(f.quiet);  // one per search: its rate and time left are that search's
    progress.slow_hint = "fewer values of --tp, --pp, --schedules, --microbatch-sizes, --recompute or --zero make it faster";
    opt.progress = [&](long done, long total) {
      progress.report("plan: " + std::to_string(n) + " GPUs, points", done, total);
    };
    const planner::SearchResult r = search(space_of(f, n), opt);
    if (r.best.empty()) {
      rows.push_back({std::to_string(n), "no plan fits", "", "", "", "", "", "", ""});
      out.push_back({{"gpus", n}, {"best", nullptr}});
      continue;
    }
    const planner::Candidate& b = r.best.front();
    const double train_s = f.tokens > 0 ? f.tokens / b.tokens_per_s : 0;
    const auto& p = b.plan;
    rows.push_back({std::to_string(n),
                    dims_label(p) + " b" +
                        std::to_string(p.microbatch_size) + " " + schedule_label(p) + " " +
                        std::string(costmodel::recompute_name(p.recompute)) + (p.sequence_parallel ? " sp" : "") +
                        (p.zero ? " zero" + zero_label(p) : "") + (b.fp8 ? " fp8" : "") +
                        (b.fit == costmodel::Fit::Tight ? " (tight: " + fmt_bytes(-b.headroom_bytes) + " over)" : ""),
                    fmt_seconds(b.iteration_time_s), fmt_num(b.tokens_per_s, 0), fmt_tokens(b.tokens_per_s * 3600 / n),
                    fmt_num(100 * b.mfu, 1) + "%",
                    f.tokens > 0 ? fmt_num(train_s / 86400, 2) + " days" : "-",
                    f.tokens > 0 ? fmt_num(n * train_s / 3600, 0) : "-", fmt_seconds(r.stats.seconds)});
    out.push_back({{"gpus", n},
                   {"best", costmodel::to_json(p)},
                   {"iteration_time_s", b.iteration_time_s},
                   {"tokens_per_s", b.tokens_per_s},
                   {"mfu", b.mfu},
                   {"tokens_per_gpu_hour", b.tokens_per_s * 3600 / n},
                   {"train_s", train_s},
                   {"gpu_hours", n * train_s / 3600}});
  }
  if (f.json) {
    std::cout << out.dump(2) << "\n";
    return;
  }
  std::cout << wrap_text("model " + m.name + (m.fp8 ? " (fp8)" : "") + " on cluster " + c.name + ", global batch " +
                             std::to_string(f.global_batch) + " sequences" +
                             (f.tokens > 0 ? ", " + fmt_tokens(f.tokens) + " tokens to train" : ""),
                         kHelpWidth)
            << "\n\n";
  std::cout << format_table({"GPUs", "best plan (dp/tp/pp)", "iteration", "tokens/s", "tok/GPU-h", "MFU", "to train", "GPU-hours",
                             "search"},
                            rows, f.wide ? 0 : kHelpWidth, 1);
  // Where scaling stops paying: the count with the most tokens per GPU-hour against the fastest.
  int cheapest = -1, fastest = -1;
  double best_per_gpu = 0, best_tps = 0;
  for (const auto& row : out) {
    if (row["best"].is_null()) continue;
    const double tps = row["tokens_per_s"], per_gpu = row["tokens_per_gpu_hour"];
    if (per_gpu > best_per_gpu) best_per_gpu = per_gpu, cheapest = row["gpus"];
    if (tps > best_tps) best_tps = tps, fastest = row["gpus"];
  }
  if (cheapest > 0)
    std::cout << "\nmost tokens per GPU-hour: " << cheapest << " GPUs (" << fmt_tokens(best_per_gpu) << "); fastest: " << fastest
              << " GPUs (" << fmt_num(best_tps, 0) << " tokens/s)\n";
}

// --from: the file's model (unless --model), nodes (unless --nodes) and global batch (unless
// --global-batch) into the flags and the cluster; the model it gives.
std::optional<costmodel::ModelSpec> plan_from(PlanCmdFlags& f, costmodel::ClusterSpec& c) {
  PlanFlags pf;
  pf.from = f.from;
  pf.from_format = f.from_format;
  pf.hf_config = f.hf_config;
  pf.nodes = f.nodes;
  std::optional<costmodel::ModelSpec> m = apply_from(pf, &c);
  if (f.global_batch == 0 && pf.from_plan) f.global_batch = pf.from_plan->global_batch();
  if (f.global_batch == 0) throw InputError("--global-batch is required (or a --from file that gives one)");
  return m;
}

void run(const PlanCmdFlags& flags) {
  PlanCmdFlags f = flags;
  if (!f.out.empty()) check_output_file("--out", f.out);
  costmodel::ClusterSpec c = presets::load_cluster(f.cluster);
  const std::optional<costmodel::ModelSpec> from_model = plan_from(f, c);
  const std::optional<graphs::Graph> graph = graph_arg(f.model);
  if (graph && !f.verify.empty()) throw InputError("--verify with a graph model (--model " + f.model + ") is not supported (allowed: absent)");
  if (graph && !f.whatif.empty()) throw InputError("--whatif with a graph model (--model " + f.model + ") is not supported (allowed: absent)");
  PlanWhatIf whatif = load_plan_whatif(f.whatif);  // a bad file refused before the search
  if (graph && f.layer_tp) throw InputError("--layer-tp with a graph model (--model " + f.model + ") is not supported (allowed: absent)");
  if (graph) refuse_model_flags_for_graph(f.model, f.model_flags);
  if (f.model.empty() && !from_model) throw InputError("--model is required (a preset, a model JSON file, or give --from FILE)");
  costmodel::ModelSpec m = graph ? graphs::plan_model_of(*graph) : f.model.empty() ? *from_model : presets::load_model(f.model);
  if (!graph) apply_model_flags(m, f.model_flags);
  apply_memory_margin(c, f.memory_margin);
  apply_nodes(c, f.nodes);
  if (f.gpus_used_per_node) costmodel::set_gpus_used_per_node(c, *f.gpus_used_per_node, "--gpus-used-per-node");
  if (graph && !f.profile.empty())
    throw InputError("--profile with a graph model (--model " + f.model + ") is not supported (a graph prices its own subgraphs; allowed: absent)");
  if (!f.profile.empty() && !f.verify.empty())
    throw InputError("--verify with --profile is not supported (the simulator's check runs the analytic costs; allowed: one of them)");
  if (!f.profile.empty() && !f.whatif.empty())
    throw InputError("--whatif with --profile is not supported (the simulator runs the analytic costs; allowed: one of them)");
  const std::optional<costmodel::Profile> profile =
      f.profile.empty() ? std::nullopt : std::optional<costmodel::Profile>(costmodel::load_profile(f.profile));
  const SearchFn search = [&](const planner::PlanSpace& space, const planner::SearchOptions& o) {
    planner::SearchOptions with = o;
    if (profile) with.profile = &*profile;  // priced as `estimate --profile` prices
    return graph ? graphs::search_graph(*graph, c, space, with) : planner::search(m, c, space, with);
  };
  if (f.tokens < 0) throw InputError("--tokens = " + fmt_num(f.tokens) + " is invalid (must be positive)");
  if (!f.verify.empty() && f.verify != "sim") throw InputError("--verify = '" + f.verify + "' is invalid (allowed: sim)");
  const std::vector<int> counts = gpu_counts(f.gpus, c);
  if (counts.size() > 1) {
    if (!f.out.empty()) throw InputError("--out with several --gpus is invalid (one plan file per search: give one count)");
    if (f.layer_tp) throw InputError("--layer-tp with several --gpus is invalid (it reports on one search's top plans: give one count)");
    if (!f.whatif.empty()) throw InputError("--whatif with several --gpus is invalid (it ranks one search's top plans: give one count)");
    run_sweep(f, m, c, counts, search);
    return;
  }
  check_plan_whatif(whatif, c, counts.empty() ? c.num_gpus() : counts.front());  // before the search
  planner::SearchOptions opt;
  opt.top_k = f.top;
  opt.threads = f.threads;
  Progress progress(f.quiet);
  progress.slow_hint = "fewer values of --tp, --pp, --schedules, --microbatch-sizes, --recompute or --zero make it faster";
  opt.progress = [&](long done, long total) { progress.report("plan: points", done, total); };
  const planner::SearchResult r = search(space_of(f, counts.empty() ? 0 : counts.front()), opt);
  if (r.stats.considered == 0)  // nothing to search: the flags contradict one another
    throw InputError("no plan satisfies the flags together (" + std::to_string(counts.empty() ? c.num_gpus() : counts.front()) +
                     " GPUs, --global-batch " + std::to_string(f.global_batch) +
                     "): dp must divide the global batch and the microbatch sizes, and each schedule fit a pp degree");
  if (r.best.empty()) refuse_empty(r);
  const std::vector<double> simulated = verify_on_sim(f, m, r);
  rank_plan_whatif(whatif, m, r);
  const std::vector<LayerTpRow> layer_tp = plan_layer_tp(f, m, r, profile ? &*profile : nullptr);
  const planner::Candidate* fitting = fastest_fitting(r.best);
  if (!f.out.empty() && fitting) write_file_atomic(f.out, plan_file_json(*fitting, m, r.cluster, graph ? f.model : "").dump(2) + "\n");
  if (!f.emit.empty()) {  // the best plan as the framework's config, nothing else on standard output
    if (!fitting) throw Error("no plan of the space fits in memory: nothing to --emit");
    std::cout << configs::emit(f.emit, m, fitting->plan, c.gpus_per_node, "--emit");
    return;
  }
  if (f.json) {
    nlohmann::json j = result_json(r, simulated);
    for (const LayerTpRow& x : layer_tp) j["best"][x.rank]["layer_tp"] = layer_tp_json(x);
    if (!whatif.file.empty()) j["whatif"] = plan_whatif_json(whatif);
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << wrap_text("model " + m.name + (m.fp8 ? " (fp8)" : "") + " on " + std::to_string(r.best.front().plan.num_gpus()) +
                             " GPUs of cluster " + c.name + ", global batch " + std::to_string(f.global_batch) +
                             " sequences; a plan fits in " + fmt_bytes(c.usable_memory_bytes()) + " per GPU (" +
                             fmt_bytes(c.gpu_memory_bytes) + " less a margin of " + fmt_percent(c.memory_margin) + ")",
                         kHelpWidth)
            << "\n\n";
  print_table(r, simulated, f.wide);
  print_choices(r);
  const auto& s = r.stats;
  std::cout << "\n" << wrap_text(search_summary(s), kHelpWidth) << "\n";
  if (f.tokens > 0 && fitting) {
    const double train_s = f.tokens / fitting->tokens_per_s;
    std::cout << "time to train " << fmt_tokens(f.tokens) << " tokens with the best plan: " << fmt_num(train_s / 86400, 2)
              << " days, " << fmt_num(r.cluster.num_gpus() * train_s / 3600, 0) << " GPU-hours\n";
  }
  if (!simulated.empty()) {
    std::vector<double> evaluated;
    for (const planner::Candidate& c : r.best) evaluated.push_back(c.iteration_time_s);
    std::cout << "simulator against evaluator over the top " << evaluated.size() << ": Spearman "
              << fmt_num(stats::spearman(evaluated, simulated), 3) << ", largest difference "
              << fmt_num(100 * max_relative_difference(evaluated, simulated), 2) << "%\n";
  }
  if (f.layer_tp) print_layer_tp(layer_tp, r);
  print_plan_whatif(whatif, r, [](const planner::Candidate& c) { return dims_label(c.plan) + " " + schedule_label(c.plan); });
  if (!f.out.empty() && fitting)
    std::cout << wrap_text("the fastest plan that fits written to " + f.out + ", with its model and cluster (estimate --plan " +
                               f.out + " and train --plan " + f.out + " need nothing else)",
                           kHelpWidth)
              << "\n";
  if (!f.out.empty() && !fitting)
    throw Error("--out " + f.out + " not written: no plan fits in " + fmt_bytes(r.cluster.usable_memory_bytes()) +
                " (the plans above are tight; a lower --memory-margin accepts them)");
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto f = std::make_shared<PlanCmdFlags>();
  CLI::App* c = app.add_subcommand("plan", "search dp, tp, pp, microbatching, schedule, recomputation, sp and ZeRO for the fastest plans that fit");
  add_from_flags(c, f->from, f->from_format, f->hf_config);
  CLI::Option* emit = c->add_option("--emit", f->emit, "print the best plan as megatron (launch command), torchtitan (job TOML) or deepspeed (JSON)")
                          ->check(CLI::IsMember({"megatron", "torchtitan", "deepspeed"}));
  c->add_option("--model", f->model, "model preset name, model JSON or graph JSON (its own microbatch size; docs/graphs.md; default: --from's)");
  c->add_option("--cluster", f->cluster, "cluster preset name or JSON file")->required();
  add_memory_margin_flag(c, f->memory_margin);
  add_nodes_flag(c, f->nodes);
  c->add_option("--gpus-used-per-node", f->gpus_used_per_node,
                "GPUs a job uses of each node, with their share of its NICs (e.g. 64 of an NVL72 rack's 72; "
                "0: all): expert, tensor and context groups then fit a rack");
  c->add_option("--gpus", f->gpus, "GPUs the plans use, the cluster's first ones (default: all); several (64,128,256), a doubling range (64-512) or auto (the cluster and its halvings): the best plan of each");
  c->add_option("--tokens", f->tokens, "tokens to train: prints the time to train and GPU-hours of the best plan");
  c->add_option("--global-batch", f->global_batch, "sequences per iteration (required without a --from file giving it)");
  c->add_option("--schedules", f->schedules, "schedules tried, comma-separated: NAME, NAME:CHUNKS or NAME:KEY=VALUE[:KEY=VALUE] (e.g. hanayo:waves=2)")->capture_default_str();
  c->add_option("--microbatch-sizes", f->microbatch_sizes, "microbatch sizes tried")->capture_default_str();
  c->add_option("--recompute", f->recompute, "recomputation policies tried (none, selective, full)")->capture_default_str();
  c->add_option("--zero", f->zero, "ZeRO stages tried where dp > 1 (0, 1, 2, 3: FSDP)")->capture_default_str();
  c->add_option("--shard-groups", f->shard_groups,
                "with zero 3: shard groups tried, 0 the whole dp group (FSDP) or a size dividing dp (HSDP, e.g. 0,8)")
      ->capture_default_str();
  c->add_flag("--no-reshard-after-forward", f->no_reshard_after_forward,
              "with zero 3: keep each layer gathered from its forward to its backward");
  c->add_option("--sequence-parallel", f->sequence_parallel, "sequence parallelism tried where tp > 1 (off, on)")->capture_default_str();
  c->add_option("--tp-overlaps", f->tp_overlaps, "tensor-parallel overlap modes tried where tp > 1 (blocking, merak, cross-pass, oases, te)")->capture_default_str();
  c->add_option("--max-tp", f->max_tp, "largest tensor-parallel degree tried (default: one node's GPUs)");
  c->add_option("--tp", f->tp, "tensor-parallel degrees tried, comma-separated (default: every divisor up to --max-tp)");
  c->add_option("--pp", f->pp, "pipeline degrees tried, comma-separated (default: every divisor)");
  c->add_option("--precisions", f->precisions,
                "precisions tried, comma-separated: bf16, fp8 (the layers' linear products in FP8 with delayed scaling; a GPU with FP8), "
                "fp8-current, fp8-blockwise, fp8-mxfp8 (the other FP8 recipes, docs/costmodel.md \"FP8 recipes\"). "
                "--fp8 prices every plan in FP8")
      ->capture_default_str();
  c->add_option("--cp", f->cp,
                "context-parallel degrees tried, comma-separated, e.g. 1,2,4 (where 2 cp divides the sequence; needs "
                "--attention-kernel fused)")
      ->capture_default_str();
  c->add_option("--ep", f->ep,
                "expert-parallel degrees tried, comma-separated, e.g. 8,16,32 (each dividing the experts and dp x cp; "
                "default: 1 for a dense model, 1 and every power of two dividing a model's experts)");
  c->add_option("--etp", f->etp, "experts' tensor-parallel degrees tried where tp > 1: 0 (the attention's tp), 1 (whole experts)")
      ->capture_default_str();
  c->add_option("--rank-orders", f->rank_orders, "rank orders tried, fastest axis first (tp-dp-pp, tp-pp-dp, dp-tp-pp, ...)")->capture_default_str();
  c->add_flag("--no-overlap-grad-reduce", f->no_overlap, "reduce gradients after the backward (default: in buckets during it)");
  c->add_flag("--no-overlap-param-gather", f->no_overlap_param_gather,
              "with ZeRO, gather the updated parameters after the step (default: bucket by bucket behind the next forward)");
  c->add_option("--stack", f->stack, stack_flag_help("kernel set every plan runs on"));
  c->add_option("--cuda-graph-scope", f->cuda_graph_scope,
                "what every plan runs as CUDA graphs, comma-separated: attn, mlp, moe, moe_router, moe_preprocess, "
                "or full_iteration (Megatron-Core --cuda-graph-scope; default none)")
      ->delimiter(',');
  add_model_flags(c, f->model_flags);
  c->add_option("--top", f->top, "plans printed, fastest first")->capture_default_str();
  c->add_option("--threads", f->threads, "threads the search runs on (default: every core); the plans and counts do not depend on it");
  c->add_flag("--json", f->json, "print JSON instead of the table")->excludes(emit);
  c->add_flag("--wide", f->wide, "the table with every column (stage layers), however wide");
  c->add_option("--out", f->out,
                "write the fastest plan that fits to this JSON file, with its model and cluster (estimate --plan FILE and "
                "train --plan FILE need nothing else)");
  c->add_option("--verify", f->verify, "sim: re-run the top plans on the SimGrid simulator and print both times");
  c->add_option("--whatif", f->whatif, "what-if JSON file (docs/whatif.md): the top plans simulated under it and ranked again "
                                       "(a slow node, a degraded NIC, jitter: the most robust plan)");
  c->add_option("--grad-bucket-mb", f->grad_bucket_mb, "every plan's gradient bucket size in MiB (default 25; as estimate)");
  c->add_option("--grad-reduce-at", f->grad_reduce_at,
                "every plan's reduction start without overlap: rank-end, stage-end or auto (default; as estimate)");
  c->add_flag("--preemptive-comm", f->preemptive_comm, "every plan's pipeline transfers preempt its reductions (as estimate)");
  c->add_option("--profile", f->profile, "profile JSON from `stagecraft profile`: every plan priced with measured costs (as estimate)");
  c->add_flag("--for-runtime", f->for_runtime,
              "search only plans `stagecraft train` runs (no FP8 or te overlap; FSDP without a split backward, "
              "context parallelism without experts; runtime/support/rules.h), for `train --plan`");
  c->add_flag("--quiet", f->quiet, "no progress lines (elapsed, estimated remaining) on standard error");
  c->add_flag("--layer-tp", f->layer_tp, "Oases' per-layer tensor-parallel degrees (ILP, CBC) for the top plans with pp = 1 and tp >= 2");
  c->callback([f] { run(*f); });
}

}  // namespace stagecraft::cli
