// `stagecraft estimate` (one configuration) and `stagecraft compare` (several schedules on
// the same configuration): the analytic cost model and the fast evaluator.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "configs/emit.h"
#include "costmodel/estimate.h"
#include "costmodel/flops.h"
#include "costmodel/fold3d_model.h"
#include "costmodel/gpus.h"
#include "runtime/support/rules.h"
#include "drawing/svg.h"
#include "drawing/trace.h"
#include "schedules/error.h"
#include "schedules/tp_overlap.h"
#include "workbench/compare.h"
#include "workbench/route.h"

namespace stagecraft::cli {
namespace {

// The fit verdict with what it rests on (costmodel::fit_verdict, ClusterSpec::memory_margin).
std::string fit_verdict_line(const costmodel::Estimate& e) {
  switch (e.fit) {
    case costmodel::Fit::Fits: return "fits";
    case costmodel::Fit::Tight:
      return "TIGHT: over the usable memory, within the GPU's " + fmt_bytes(e.cluster.gpu_memory_bytes) +
             "; runs only if fragmentation and workspaces take less than the margin (GMLake, arXiv 2401.08156, measured 15% on average)";
    case costmodel::Fit::DoesNotFit: return "DOES NOT FIT: over the GPU's memory";
  }
  return "?";
}

struct EstimateOpts {
  PlanRequest plan;
  bool json = false;
  bool wide = false;  // tables however wide (default: within 100 columns)
  bool workload = false;  // --json also prints the plan's workload (costmodel/plan_workload.h)
  std::string trace;
  std::string emit;  // megatron | torchtitan | deepspeed: print the plan as that framework's config
};

struct CompareOpts {
  PlanRequest plan;
  bool wide = false;  // every column (default: the table within 100 columns)
  std::string schedules = "gpipe,1f1b,interleaved-1f1b,looped-bfs";
  bool json = false;
  std::string trace_dir;
  std::string svg;
  std::string engine = "eval";  // eval (the fast evaluator) or sim (the SimGrid simulator)
  std::string tp_overlaps;      // comma-separated tp overlap modes, one row each per schedule
                                // (empty: the plan's --tp-overlap only)
};

// The GPU behind the prices: its catalog entry, the clock calibration and the figures it used
// that are assumed rather than measured (issue 49), each wrapped to the 100 columns.
void print_gpu_lines(const costmodel::Estimate& e) {
  const costmodel::ClusterSpec& c = e.cluster;
  auto put = [](const std::string& head, const std::string& text) {
    const std::string w = wrap_text(text, 98, std::string(head.size() + 2, ' '));
    std::cout << "  " << head << w.substr(head.size() + 2) << "\n";
  };
  put("gpu: ", c.gpu.empty() ? c.gpu_name + ", every figure stated by cluster '" + c.name + "' (no catalog GPU)"
                             : c.gpu + " (catalog; `stagecraft presets --show " + c.gpu + "` has the sources)");
  put("clock: ", costmodel::clock_line(c));
  const auto assumed = costmodel::used_assumptions(c, e.model);
  if (assumed.empty()) return;
  const nlohmann::json values = costmodel::to_json(c);
  std::string list;
  for (const auto& a : assumed)
    list += (list.empty() ? "" : ", ") + a.first + (values.contains(a.first) ? " " + values.at(a.first).dump() : "");
  put("assumed, not measured: ", list);
}

void print_estimate(const costmodel::Estimate& e, const std::string& runtime_note, bool wide) {
  const size_t width = wide ? 0 : kHelpWidth;
  const auto& p = e.plan;
  const bool fused = e.model.attention_kernel == costmodel::AttentionKernel::Fused;
  std::ostringstream head;
  head << "model " << e.model.name << (fused ? " (fused attention)" : "") << " on cluster " << e.cluster.name << " (" << e.cluster.num_gpus() << " x "
            << e.cluster.gpu_name << ")";
  std::cout << wrap_text(head.str(), kHelpWidth) << "\n";
  head.str("");
  head << "plan: dp " << p.dp << ", tp " << p.tp << ", pp " << p.pp << (p.cp > 1 ? ", cp " + std::to_string(p.cp) : "")
            << (p.ep > 1 ? ", ep " + std::to_string(p.ep) : "") << (p.etp == 1 && p.tp > 1 ? ", whole experts (etp 1)" : "")
            << ", microbatch size " << p.microbatch_size
            << ", " << p.num_microbatches << " microbatches, schedule " << e.schedule.name << " ("
            << e.schedule.num_stages << " stages), recompute " << costmodel::recompute_name(p.recompute)
            << (p.zero ? ", zero " + zero_label(p) : "") << (p.overlap_param_gather ? " (gather overlapped)" : "")
            << (p.sequence_parallel ? ", sequence parallel" : "") << (p.overlap_grad_reduce ? ", bucketed gradient reduction" : "")
            << ", stack " << p.stack << ", attention " << costmodel::attention_kernel_name(e.model.attention_kernel)
            << (e.model.dropout ? "" : ", no dropout") << (e.model.fp8 ? ", fp8" : "")
            << (e.model.fp8 && e.model.fp8_recipe != costmodel::Fp8Recipe::Delayed
                    ? " " + std::string(costmodel::fp8_recipe_name(e.model.fp8_recipe)) + " scaling"
                    : "");
  std::cout << wrap_text(head.str(), kHelpWidth) << "\n"
            << "costs: " << (e.profile_source.empty() ? "analytic" : "measured, profile " + e.profile_source) << "\n";
  print_gpu_lines(e);
  for (const std::string& n : e.costs.notes) std::cout << note_line(n) << "\n";
  if (!runtime_note.empty()) std::cout << note_line("`train` does not run this plan: " + runtime_note) << "\n";
  std::cout << "\n";
  std::vector<std::vector<std::string>> rows = {
      {"iteration time", fmt_seconds(e.eval.iteration_time_s)},
      {"throughput", fmt_num(e.tokens_per_s, 0) + " tokens/s"},
      {"model TFLOP/s per GPU", utilization_cell(e)},
      {"bubble / compute", fmt_num(e.eval.bubble_over_compute, 4)},
      {"bubble fraction", fmt_num(e.eval.bubble_fraction, 4)},
      {"mean idle fraction", fmt_num(e.eval.mean_idle_fraction, 4)},
      {"peak memory (largest rank)", fmt_bytes(e.max_memory_bytes)},
      {"usable GPU memory", fmt_bytes(e.usable_memory_bytes) + " (" + fmt_bytes(e.cluster.gpu_memory_bytes) + " less a margin of " +
                                fmt_percent(e.cluster.memory_margin) + ")"},
      {"headroom (fullest rank)", fmt_signed_bytes(e.usable_memory_bytes - e.max_memory_bytes) + " (" + std::string(fit_verdict_line(e)) + ")"},
  };
  if (const auto kinds = costmodel::compute_by_kind(e); !kinds.empty()) {  // --json has every rank's
    const costmodel::ComputeByKind& k = kinds.front();
    rows.push_back({"rank 0 compute by kind", "products " + fmt_seconds(k.passes.products_s) + ", attention core " +
                                                 fmt_seconds(k.passes.attention_core_s) + ", memory-bound " +
                                                 fmt_seconds(k.passes.memory_s) + ", communication inside " +
                                                 fmt_seconds(k.passes.comm_s) +
                                                 (k.passes.host_s > 0 ? ", waiting for the host " + fmt_seconds(k.passes.host_s) : "") +
                                                 ", optimizer " + fmt_seconds(k.optimizer_s) +
                                                 (std::abs(k.other_s) > 1e-9 ? ", other " + fmt_seconds(k.other_s) : "")});
  }
  if (p.cp > 1) {  // one layer's ring (costmodel/cp.h); --json has every stage's
    const costmodel::CpLayer& cl = e.costs.stages.front().cp;
    rows.push_back({"context parallel, per layer", std::to_string(cl.exchanges_f) + " key/value chunks of " +
                                                      fmt_bytes(cl.chunk_bytes) + " forward, " +
                                                      std::to_string(cl.exchanges_b) + " backward (with gradients)"});
    rows.push_back({"context parallel, exposed", "forward " + fmt_seconds(cl.exposed_f_s) + ", backward " +
                                                    fmt_seconds(cl.exposed_b_s) + " per layer and sub-batch"});
  }
  if (costmodel::is_moe(e.model)) {  // experts (costmodel/moe.h); --json has every stage's
    const costmodel::ModelSpec& m = e.model;
    rows.push_back({"experts", std::to_string(m.num_experts) + " routed, top " + std::to_string(m.experts_per_token) +
                                   (m.num_shared_experts ? ", " + std::to_string(m.num_shared_experts) + " shared" : "")});
    rows.push_back({"parameters (FLOPs count active)", fmt_num(costmodel::flops::model_params(m) / 1e9, 1) + "B, " +
                                                          fmt_num(costmodel::flops::active_params(m) / 1e9, 1) + "B active"});
    for (const costmodel::StageCost& sc : e.costs.stages) {
      if (sc.moe.moe_layers == 0) continue;
      const costmodel::MoeLayer& l = sc.moe.layer;
      if (l.all_to_alls_f > 0)
        rows.push_back({"all-to-all, per MoE layer", std::to_string(l.all_to_alls_f + l.all_to_alls_b) + " x " +
                                                         fmt_bytes(l.bytes.total_bytes) + ", " + fmt_seconds(l.all_to_all_s) +
                                                         " each (" + fmt_bytes(l.bytes.cross_node_bytes) + " across nodes)"});
      if (l.tp_s > 0) rows.push_back({"experts' tp gather + scatter", fmt_seconds(l.tp_s) + " per pass"});
      rows.push_back({"experts exposed, stage " + std::to_string(&sc - e.costs.stages.data()),
                      fmt_seconds(sc.moe.exposed_f_s) + " F, " + fmt_seconds(sc.moe.exposed_b_s) + " B a microbatch"});
      break;
    }
  }
  if (p.zero == 3) {  // the first stage's collectives (costmodel/fsdp.h); --json has every stage's
    const costmodel::FsdpStage& fs = e.costs.stages.front().fsdp;
    rows.push_back({"FSDP, stage 0, per microbatch",
                    std::to_string(fs.gathers_f + fs.gathers_b) + " all-gathers (" + fmt_bytes(fs.gather_bytes) + " a pass), " +
                        std::to_string(fs.reduce_scatters) + " reduce-scatters (" + fmt_bytes(fs.scatter_bytes) + ")"});
    rows.push_back({"FSDP, stage 0, exposed", "forward " + fmt_seconds(fs.exposed_f_s) + ", backward " + fmt_seconds(fs.exposed_b_s)});
  }
  std::cout << format_table({"metric", "value"}, rows, width, 1) << "\n";
  std::vector<std::vector<std::string>> ranks;
  for (int r = 0; r < e.schedule.num_ranks; ++r) {
    size_t i = static_cast<size_t>(r);
    int layers = 0;
    for (int st : e.schedule.stages_of(r)) layers += e.costs.stages[static_cast<size_t>(st)].layers;
    ranks.push_back({std::to_string(r), std::to_string(layers), fmt_seconds(e.eval.compute_s[i]), fmt_seconds(e.eval.idle_s[i]),
                     fmt_seconds(e.eval.exposed_dp_comm_s[i]), fmt_num(e.eval.peak_activations[i], 2),
                     fmt_bytes(e.costs.static_bytes[i]), fmt_bytes(e.eval.peak_memory_bytes[i]), fmt_signed_bytes(e.headroom_bytes[i])});
  }
  std::cout << format_table({"rank", "layers", "compute", "idle", "exposed dp", "mb held", "static mem", "peak mem", "headroom"},
                            ranks, width, 0);
}

// FOLD3D's closed forms (Sec. III-C) beside the evaluated iteration, and its segment rule.
void print_fold3d_model(const costmodel::fold3d::Model& f, int paper_ns, double evaluated_s) {
  const double closed = f.iteration_s + f.optimizer_s;
  std::cout << "\nFOLD3D performance model (Sec. III-C), pipeline rank " << f.rank << ": T_comp " << fmt_seconds(f.comp_s)
            << ", T_tp " << fmt_seconds(f.tp_comm_s) << ", T_dp " << fmt_seconds(f.dp_comm_s) << " (" << fmt_bytes(f.host_grad_bytes)
            << " per host over " << f.d_inter << " hosts), T_pp " << fmt_seconds(f.pp_comm_s) << " (" << f.transfers << " transfers)\n"
            << "  eq. (2), AIAO: " << fmt_seconds(f.iteration_s) << " + optimizer step " << fmt_seconds(f.optimizer_s) << " = "
            << fmt_seconds(closed) << ", evaluated " << fmt_seconds(evaluated_s) << " (" << fmt_num(100 * (evaluated_s / closed - 1), 1)
            << "%); eq. (1), the same plan as 1F1B: " << fmt_seconds(f.megatron_iteration_s + f.optimizer_s) << "\n"
            << "  segments: " << f.ns << "; the paper's rule (Sec. IV) would pick " << paper_ns << "\n";
}

void run_estimate(const EstimateOpts& o) {
  if (!o.trace.empty()) check_output_file("--trace", o.trace);
  Inputs in = workbench::resolve(o.plan, print_warning);
  if (!o.emit.empty()) {
    std::cout << configs::emit(o.emit, in.model, in.plan, in.cluster.gpus_per_node, "--emit");
    return;
  }
  costmodel::EstimateOptions eo;
  eo.eval.record = !o.trace.empty();
  eo.profile = in.profile_ptr();
  costmodel::Estimate e = workbench::estimate_inputs(in, in.plan, eo);
  if (!o.trace.empty()) {
    drawing::TraceOptions to;
    to.title = e.model.name + " on " + e.cluster.name + ", " + e.schedule.name;
    write_file_atomic(o.trace, drawing::chrome_trace(e.schedule, e.eval, to).dump() + "\n");
  }
  // What `train` says of this plan (runtime/support/rules.h); a graph model is not the runtime's.
  const std::string runtime_note = in.graph ? "" : runtime::runtime_refusal(e.model, e.plan, e.schedule);
  const bool aiao = e.schedule.name == "fold3d-aiao" && !in.graph;  // the closed forms need the model's layers
  const costmodel::fold3d::Model f = aiao ? costmodel::fold3d::model_of(e) : costmodel::fold3d::Model{};
  const int paper_ns = aiao ? costmodel::fold3d::paper_segments(f, costmodel::fold3d_max_segments(e.model, e.plan)) : 0;
  if (o.json) {
    nlohmann::json j = costmodel::to_json(e);
    j["runtime_refusal"] = runtime_note.empty() ? nlohmann::json(nullptr) : nlohmann::json(runtime_note);
    if (aiao) j["fold3d_model"] = costmodel::fold3d::to_json(f, paper_ns);
    j["gpu"] = e.cluster.gpu;  // the catalog GPU ("" when the cluster states every figure; costmodel/gpus.h)
    j["clock"] = costmodel::clock_line(e.cluster);
    nlohmann::json assumed = nlohmann::json::object();
    for (const auto& [field, why] : costmodel::used_assumptions(e.cluster, e.model)) assumed[field] = why;
    j["gpu_assumed"] = assumed;
    if (o.workload && e.workload) j["workload"] = costmodel::to_json(*e.workload);
    std::cout << j.dump(2) << "\n";
    return;
  }
  print_estimate(e, runtime_note, o.wide);
  if (aiao) print_fold3d_model(f, paper_ns, e.eval.iteration_time_s);
}

// compare's last line: the fastest row that fits in the usable memory, or that none does.
struct RowFit {
  std::string label;          // the row's schedule (and tp overlap mode)
  double iteration_time_s = 0;
  costmodel::Fit fit = costmodel::Fit::DoesNotFit;
};
std::string fastest_fit_line(const std::vector<RowFit>& rows) {
  const RowFit* best = nullptr;
  for (const RowFit& r : rows)
    if (r.fit == costmodel::Fit::Fits && (!best || r.iteration_time_s < best->iteration_time_s)) best = &r;
  if (!best) return "no schedule fits in the usable memory (no row with headroom of 0 or more)";
  return "fastest that fits in the usable memory: " + best->label + ", " + fmt_seconds(best->iteration_time_s);
}

// compare's table: within 100 columns unless `wide`, leaving out the tp overlap mode where every
// row has the plan's blocking one, bubble over compute, and host memory where nothing offloads.
// (TFLOP/s: model FLOPs per GPU; peak mem: the fullest GPU's peak.)
void print_compare_table(const std::vector<std::vector<std::string>>& rows, bool wide, bool modes, bool host) {
  const std::vector<std::string> header = {"schedule", "tp overlap", "stages", "iteration", "tokens/s", "TFLOP/s",
                                           "bubble/compute", "bubble", "peak mem", "headroom", "host mem", "fits"};
  std::vector<size_t> keep;
  for (size_t i = 0; i < header.size(); ++i)
    if (wide || ((i != 1 || modes) && i != 6 && (i != 10 || host))) keep.push_back(i);
  std::vector<std::string> h;
  for (size_t i : keep) h.push_back(header[i]);
  std::vector<std::vector<std::string>> t;
  for (const auto& r : rows) {
    t.emplace_back();
    for (size_t i : keep) t.back().push_back(i < r.size() ? r[i] : "");
  }
  std::cout << format_table(h, t, wide ? 0 : kHelpWidth, 0);
}

void run_compare(const CompareOpts& o) {
  workbench::check_engine(o.engine);
  if (!o.trace_dir.empty()) check_output_dir("--trace-dir", o.trace_dir);
  if (!o.svg.empty()) check_output_file("--svg", o.svg);
  Inputs in = workbench::resolve(o.plan, print_warning);
  const std::vector<workbench::CompareRow> cases = workbench::compare_rows(o.schedules, o.tp_overlaps, in.plan);
  nlohmann::json all = nlohmann::json::array();
  std::vector<std::vector<std::string>> rows;
  std::vector<costmodel::Estimate> kept;  // for the SVG
  kept.reserve(cases.size());
  // A table row's rank: those that fit first, then tight, then those over the GPU's memory, then
  // the rejected ones; by iteration time within each.
  std::vector<std::pair<int, double>> rank_key;
  std::string rejections;  // each rejected row's reason, below the table
  std::vector<std::string> reasons;  // the same, one line each
  std::vector<RowFit> fitted;  // the rows priced
  bool host_memory = false;    // some row offloads to host memory
  int ok = 0;
  for (const workbench::CompareRow& row : cases) {
    const std::string& name = row.label;
    const costmodel::ParallelPlan& p = row.plan;
    const std::string mode_name(schedules::tp_overlap_name(row.mode));
    try {
      costmodel::EstimateOptions eo;
      eo.eval.record = !o.trace_dir.empty() || !o.svg.empty();
      eo.profile = in.profile_ptr();
      costmodel::Estimate e = workbench::with_engine(workbench::estimate_inputs(in, p, eo), o.engine);
      ++ok;
      if (!o.trace_dir.empty()) {
        drawing::TraceOptions to;
        to.title = e.model.name + " on " + e.cluster.name + ", " + name;
        write_file_atomic(o.trace_dir + "/" + name + ".trace.json", drawing::chrome_trace(e.schedule, e.eval, to).dump() + "\n");
      }
      all.push_back(costmodel::to_json(e));
      all.back()["engine"] = o.engine;
      fitted.push_back({name, e.eval.iteration_time_s, e.fit});
      double host = *std::max_element(e.eval.peak_host_bytes.begin(), e.eval.peak_host_bytes.end());
      host_memory = host_memory || host > 0;
      rows.push_back({name, mode_name, std::to_string(e.schedule.num_stages), fmt_seconds(e.eval.iteration_time_s),
                      fmt_num(e.tokens_per_s, 0), fmt_num(e.tflops_per_gpu, 1), fmt_num(e.eval.bubble_over_compute, 4),
                      fmt_num(e.eval.bubble_fraction, 4), fmt_bytes(e.max_memory_bytes), fmt_signed_bytes(e.usable_memory_bytes - e.max_memory_bytes),
                      host > 0 ? fmt_bytes(host) : "-",
                      e.fit == costmodel::Fit::Fits ? "yes" : e.fit == costmodel::Fit::Tight ? "tight" : "NO"});
      rank_key.push_back({static_cast<int>(e.fit), e.eval.iteration_time_s});
      if (!o.svg.empty()) kept.push_back(std::move(e));
    } catch (const InputError& err) {
      std::string why = err.what();
      why = why.substr(0, why.find('\n'));
      all.push_back({{"schedule", row.schedule}, {"tp_overlap", mode_name}, {"rejected", why}});
      rows.push_back({name, mode_name, "-", "rejected"});
      rejections += wrap_text(name + " rejected: " + why, kHelpWidth) + "\n";
      reasons.push_back(why);
      rank_key.push_back({3, 0.0});
    }
  }
  // The table ranks the rows by iteration time (rejected ones last, in the order asked); the JSON
  // keeps the order asked.
  std::vector<size_t> order(rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rank_key[a] < rank_key[b]; });
  std::vector<std::vector<std::string>> ranked;
  for (size_t i : order) ranked.push_back(rows[i]);
  rows = std::move(ranked);
  if (o.json) {
    std::cout << all.dump(2) << "\n";
  } else {
    const auto& p = in.plan;
    std::ostringstream head;
    head << "model " << in.model.name << " on cluster " << in.cluster.name << ": dp " << p.dp << ", tp " << p.tp
              << ", pp " << p.pp << ", microbatch size " << p.microbatch_size << ", " << p.num_microbatches
              << " microbatches, recompute " << costmodel::recompute_name(p.recompute)
              << (p.zero ? ", zero " + zero_label(p) : "") << (p.overlap_param_gather ? " (gather overlapped)" : "")
            << (p.sequence_parallel ? ", sequence parallel" : "") << (p.overlap_grad_reduce ? ", bucketed gradient reduction" : "")
            << ", stack " << p.stack << ", attention " << costmodel::attention_kernel_name(in.model.attention_kernel)
            << (in.model.dropout ? "" : ", no dropout");
    std::cout << wrap_text(head.str(), kHelpWidth) << "\n";
    head.str("");
    head << "costs: " << (in.profile ? "measured, profile " + o.plan.profile : std::string("analytic"))
              << "; rows that fit first, then tight, then those that do not (NO), each by iteration time";
    std::cout << wrap_text(head.str(), kHelpWidth) << "\n\n";
    print_compare_table(rows, o.wide, !o.tp_overlaps.empty() || p.tp_overlap != schedules::TpOverlap::Blocking, host_memory);
    std::cout << rejections << fastest_fit_line(fitted) << "\n";
    if (!o.trace_dir.empty())
      std::cout << "\ntraces written to " << o.trace_dir << (o.tp_overlaps.empty() ? "/<schedule>" : "/<schedule>.<tp overlap>")
                << ".trace.json\n";
  }
  if (!o.svg.empty() && !kept.empty()) {
    std::vector<drawing::SvgPanel> panels;
    for (const auto& e : kept)
      panels.push_back({e.schedule.name + ": " + fmt_seconds(e.eval.iteration_time_s) + ", bubble fraction " +
                            fmt_num(e.eval.bubble_fraction, 3),
                        &e.schedule, &e.eval});
    write_file_atomic(o.svg, drawing::schedule_svg(panels));
    if (!o.json) std::cout << "timelines drawn in " << o.svg << "\n";
  }
  if (ok == 0 && std::all_of(reasons.begin(), reasons.end(), [&](const std::string& r) { return r == reasons.front(); }))
    throw InputError(reasons.front());  // one reason for every row: the reason itself, naming its field
  if (ok == 0) throw InputError("no schedule accepts this configuration (see the reasons above)");
}

}  // namespace

void add_estimate_command(CLI::App& app) {
  auto o = std::make_shared<EstimateOpts>();
  CLI::App* c = app.add_subcommand("estimate", "predict iteration time, throughput, bubble and memory of one configuration");
  add_plan_flags(c, o->plan, true);
  CLI::Option* json = c->add_flag("--json", o->json, "print one JSON object instead of the table");
  c->add_flag("--workload", o->workload, "with --json: add the plan's workload (per stage: blocks, bytes, parameters)");
  c->add_option("--trace", o->trace, "write a Chrome trace (Perfetto) of the evaluated iterations to this file");
  c->add_option("--emit", o->emit, "print the plan as megatron (launch command), torchtitan (job TOML) or deepspeed (JSON) instead")
      ->check(CLI::IsMember({"megatron", "torchtitan", "deepspeed"}))
      ->excludes(json);
  c->add_flag("--wide", o->wide, "tables however wide (default: long cells wrapped within 100 columns)");
  c->callback([o] {
    if (o->workload && !o->json) throw InputError("--workload prints into the JSON object (allowed: with --json)");
    run_estimate(*o);
  });
}

void add_compare_command(CLI::App& app) {
  auto o = std::make_shared<CompareOpts>();
  CLI::App* c = app.add_subcommand("compare", "estimate several schedules on the same configuration, one row each");
  add_plan_flags(c, o->plan, false);
  c->add_option("--schedules", o->schedules, "comma-separated schedule names, or 'all' (default: the baseline four)");
  c->add_flag("--json", o->json, "print a JSON array, one object per schedule");
  c->add_option("--trace-dir", o->trace_dir, "write a Chrome trace per schedule into this directory");
  c->add_option("--engine", o->engine, "eval (the fast evaluator, default) or sim (the SimGrid simulator)");
  c->add_option("--tp-overlaps", o->tp_overlaps,
                 "comma-separated tp overlap modes (blocking, merak, cross-pass, oases, te): one row per schedule and mode");
  c->add_option("--svg", o->svg, "draw every schedule's last iteration, stacked on one time axis, into this SVG file");
  c->add_flag("--wide", o->wide, "every column (tp overlap, bubble over compute, host memory; default: within 100 columns)");
  c->callback([o] { run_compare(*o); });
}

}  // namespace stagecraft::cli
