#include "costmodel/estimate.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "costmodel/flops.h"
#include "costmodel/profile.h"
#include "schedules/buckets.h"
#include "schedules/error.h"
#include "schedules/memory_events.h"
#include "schedules/io.h"
#include "schedules/json_read.h"

namespace stagecraft::costmodel {

schedules::GeneratorOptions generator_options(const ParallelPlan& p) {
  const schedules::GeneratorInfo& g = schedules::find_generator(p.schedule);
  schedules::GeneratorOptions o;
  o.ranks = p.pp;
  o.microbatches = p.num_microbatches;
  for (auto it = p.schedule_params.begin(); it != p.schedule_params.end(); ++it) {
    if (std::find(g.params.begin(), g.params.end(), it.key()) == g.params.end() || it.key() == "ranks" ||
        it.key() == "microbatches") {
      std::string allowed;
      for (const auto& k : g.params)
        if (k != "ranks" && k != "microbatches") allowed += (allowed.empty() ? "" : ", ") + k;
      throw InputError("plan.schedule_params." + it.key() + " is not a parameter of schedule '" + g.name +
                       "' (its parameters: " + (allowed.empty() ? "none" : allowed) + ")");
    }
  }
  if (p.schedule_params.contains("chunks")) {
    o.chunks = schedules::json_int(p.schedule_params["chunks"], "plan.schedule_params.chunks");
  }
  o.extra = p.schedule_params;
  return o;
}

bool is_schedule_file(const std::string& schedule) {
  auto ends = [&](const std::string& x) {
    return schedule.size() > x.size() && schedule.compare(schedule.size() - x.size(), x.size(), x) == 0;
  };
  return ends(".csv") || ends(".json");
}

namespace {
// A schedule file (PyTorch's CSV or stagecraft's JSON, schedules/io.h) as the plan's schedule:
// its compute actions, checked against the plan's pipeline ranks and microbatches; lowering adds
// the communication as for a generated one.
schedules::Schedule imported_schedule(const ParallelPlan& p) {
  if (!p.schedule_params.empty())
    throw InputError("plan.schedule_params " + p.schedule_params.dump() + " with plan.schedule = " + p.schedule +
                     ": parameters belong to generators; a schedule file takes none (allowed: {})");
  schedules::Schedule s = schedules::load_schedule_file(p.schedule);
  if (s.num_ranks != p.pp)
    throw InputError("plan.schedule = " + p.schedule + " has " + std::to_string(s.num_ranks) + " ranks but plan.pp = " +
                     std::to_string(p.pp) + " (allowed: pp equal to the file's ranks)");
  if (s.num_microbatches != p.num_microbatches)
    throw InputError("plan.schedule = " + p.schedule + " has " + std::to_string(s.num_microbatches) +
                     " microbatches but plan.num_microbatches = " + std::to_string(p.num_microbatches) +
                     " (allowed: --microbatches equal to the file's)");
  // FSDP's UNSHARD/RESHARD (torchtitan's and PyTorch's lowered files) say the stages are fully
  // sharded: priced by the plan's zero 3 model (costmodel/fsdp.h: per-layer gathers and
  // reduce-scatters), which the plan has to say rather than have it assumed.
  for (const auto& list : s.actions)
    for (const schedules::Action& a : list)
      if (schedules::is_fsdp(a.op) && p.zero != 3)
        throw InputError("plan.schedule = " + p.schedule + " holds FSDP actions (" + schedules::to_text(a) +
                         "): its stages' parameters are sharded, so plan.zero = " + std::to_string(p.zero) +
                         " contradicts it (allowed: --zero 3, which prices the gathers and reduce-scatters)");
  for (auto& list : s.actions)
    list.erase(std::remove_if(list.begin(), list.end(),
                              [](const schedules::Action& a) { return !schedules::is_compute(a.op) || a.op == schedules::Op::OPTIMIZER; }),
               list.end());
  return s;
}
}  // namespace

schedules::Schedule plan_schedule(const ParallelPlan& p, const schedules::LowerOptions& lower) {
  schedules::Schedule s = is_schedule_file(p.schedule) ? imported_schedule(p) : schedules::generate(p.schedule, generator_options(p));
  schedules::LowerOptions lo = lower;
  // Bucketed overlap spreads each stage's reduction over that stage's own backward
  // (bucket_reductions), so it starts from the stage's end; otherwise the plan says.
  lo.reduce_at = p.overlap_grad_reduce ? schedules::GradReduceAt::StageEnd : p.grad_reduce_at;
  s = schedules::lower(s, lo);
  // A generator that places recomputation itself decides it for every stage (Merak's
  // stage-aware shares, recompute_fractions, where a stage with alpha_i = 1 has no R at all;
  // FOLD3D's recompute parameter): full recomputation adds R only to the other schedules.
  const bool generator_recomputes = s.params.contains("recompute_fractions") || s.params.contains("recompute");
  if (p.recompute == RecomputePolicy::Full && !generator_recomputes)
    s = schedules::insert_recompute(s, std::vector<double>(static_cast<size_t>(s.num_stages), 1.0));
  return s;
}

std::vector<int> grad_buckets(const CostTable& costs, const ParallelPlan& p) {
  std::vector<int> out;
  constexpr double kMaxBuckets = 100000;  // per stage: far above any bucket size DDP or Megatron runs
  for (const StageCost& sc : costs.stages) {
    const double n = std::ceil(sc.grad_bytes / p.grad_bucket_bytes - 1e-9);
    if (n > kMaxBuckets)
      throw InputError("plan.grad_bucket_bytes = " + std::to_string(p.grad_bucket_bytes) + " cuts a stage's " +
                       std::to_string(sc.grad_bytes) + " gradient bytes into " + std::to_string(n) +
                       " buckets (allowed: at most 100000 per stage; raise --grad-bucket-mb)");
    out.push_back(std::max(1, static_cast<int>(n)));
  }
  return out;
}

double recomputed_layer_samples(const schedules::Schedule& s, const ModelSpec& m, const ParallelPlan& p) {
  const std::vector<int> per_part = partition_layers(m, p, s.stages_per_chain());
  double layers = 0;
  for (const auto& list : s.actions)
    for (const schedules::Action& a : list)
      if (a.op == schedules::Op::R) {
        layers += schedules::recomputed_layers(a.fraction, per_part[static_cast<size_t>(s.model_part(a.stage))]);
      }
  return layers * p.dp * p.microbatch_size;
}

double hardware_flops(const schedules::Schedule& s, const ModelSpec& m, const ParallelPlan& p) {
  return flops::hardware_flops_per_iteration(m, p.global_batch(), recomputed_layer_samples(s, m, p),
                                             p.recompute == RecomputePolicy::Selective);
}

void set_rates(Estimate& e) {
  const double T = e.eval.iteration_time_s, gpus = e.plan.num_gpus(), peak = e.cluster.gpu_peak_flops_per_s;
  e.tokens_per_s = T > 0 ? static_cast<double>(e.plan.global_batch()) * e.model.seq_length / T : 0;
  e.tflops_per_gpu = T > 0 ? e.model_flops / T / gpus / 1e12 : 0;
  e.mfu = e.tflops_per_gpu * 1e12 / peak;
  e.mfu_fp8 = e.model.fp8 && e.cluster.gpu_fp8_peak_flops_per_s > 0 ? e.tflops_per_gpu * 1e12 / e.cluster.gpu_fp8_peak_flops_per_s : 0;
  e.hfu = T > 0 ? e.hardware_flops / T / gpus / peak : 0;
}

Fit fit_verdict(double peak_bytes, const ClusterSpec& c) {
  if (peak_bytes <= c.usable_memory_bytes()) return Fit::Fits;
  return peak_bytes <= c.gpu_memory_bytes ? Fit::Tight : Fit::DoesNotFit;
}

std::string_view fit_name(Fit f) {
  switch (f) {
    case Fit::Fits: return "fits";
    case Fit::Tight: return "tight";
    case Fit::DoesNotFit: return "does not fit";
  }
  return "?";
}

void set_fit(Estimate& e) {
  const auto& peaks = e.eval.peak_memory_bytes;
  e.max_memory_bytes = peaks.empty() ? 0 : *std::max_element(peaks.begin(), peaks.end());
  e.usable_memory_bytes = e.cluster.usable_memory_bytes();
  e.headroom_bytes.clear();
  for (double b : peaks) e.headroom_bytes.push_back(e.usable_memory_bytes - b);
  e.fits = e.max_memory_bytes <= e.usable_memory_bytes;
  e.fit = fit_verdict(e.max_memory_bytes, e.cluster);
}

Estimate assemble_estimate(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, schedules::Schedule lowered,
                           const Profile* profile, const EvaluatorFor& evaluator_for) {
  Estimate e = price_estimate(m, c, p, lowered, profile);
  return evaluate_estimate(std::move(e), std::move(lowered), evaluator_for);
}

Estimate price_estimate(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, const schedules::Schedule& lowered,
                        const Profile* profile) {
  Estimate e;
  e.model = m;
  e.cluster = c;
  e.plan = p;
  e.workload = std::make_shared<const PlanWorkload>(build_plan_workload(m, c, p, lowered));
  e.costs = price(*e.workload, c, lowered, profile);
  if (p.preemptive_comm)  // a shared-link effect the evaluator cannot show: say so rather than ignore it silently
    e.costs.notes.push_back("plan.preemptive_comm: the evaluator gives every transfer its own link, so preemption (FOLD3D "
                            "Sec. V-A) changes nothing here; `simulate` models it where links are shared (docs/sim.md)");
  if (c.ranks_share_cores() && p.num_gpus() > c.cores_per_node)  // the same: a shared resource only the simulator shares
    e.costs.notes.push_back("cluster.cores_per_node = " + std::to_string(c.cores_per_node) + " < " +
                            std::to_string(c.gpus_per_node) + " ranks a node: the evaluator gives every rank a core of its "
                            "own; `simulate` shares the cores (docs/sim.md)");
  return e;
}

void evaluate_costs(Estimate& e, schedules::Schedule lowered, const EvaluatorFor& evaluator_for) {
  std::string buckets;
  if (e.plan.overlap_grad_reduce) {
    const std::vector<int> n = grad_buckets(e.costs, e.plan);
    for (int x : n) buckets += "," + std::to_string(x);
    lowered = schedules::bucket_reductions(lowered, n);
  }
  e.schedule = std::move(lowered);
  e.eval = evaluator_for(e.schedule, buckets).evaluate(e.costs);
}

Estimate evaluate_estimate(Estimate e, schedules::Schedule lowered, const EvaluatorFor& evaluator_for) {
  evaluate_costs(e, std::move(lowered), evaluator_for);
  e.model_flops = flops::model_flops_per_iteration(e.model, e.plan.global_batch());
  e.hardware_flops = hardware_flops(e.schedule, e.model, e.plan);
  set_rates(e);
  set_fit(e);
  return e;
}

namespace {

Estimate estimate_as_given(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, const EstimateOptions& opt) {
  std::vector<std::string> calibration;
  const ClusterSpec cluster = opt.profile ? calibrated_cluster(c, *opt.profile, &calibration) : c;
  std::unique_ptr<Evaluator> ev;
  Estimate e = assemble_estimate(m, cluster, p, plan_schedule(p, opt.lower), opt.profile,
                                 [&](const schedules::Schedule& s, const std::string&) -> const Evaluator& {
                                   ev = std::make_unique<Evaluator>(s, opt.eval);
                                   return *ev;
                                 });
  e.costs.notes.insert(e.costs.notes.end(), calibration.begin(), calibration.end());
  if (opt.profile) e.profile_source = opt.profile->source.empty() ? "(in memory)" : opt.profile->source;
  return e;
}

bool is_auto(const nlohmann::json& params, const char* key) {
  return !params.contains(key) || (params[key].is_string() && params[key].get<std::string>() == "auto");
}

EstimateOptions quick(const EstimateOptions& opt) {
  EstimateOptions q = opt;
  q.eval.record = false;
  return q;
}

// Largest alpha_1 in [0, 1] whose plan fits memory (peak memory grows with alpha_1).
double fit_alpha1(const ModelSpec& m, const ClusterSpec& c, ParallelPlan p, const EstimateOptions& opt) {
  auto fits = [&](double a) {
    p.schedule_params["alpha1"] = a;
    return estimate_as_given(m, c, p, quick(opt)).fits;
  };
  if (fits(1.0)) return 1.0;
  if (!fits(0.0)) return 0.0;
  double lo = 0, hi = 1;
  for (int i = 0; i < 20; ++i) {
    double mid = 0.5 * (lo + hi);
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

// Forward over backward time of the stages, from the cost table of the plan as it stands.
double fwd_bwd_ratio(const ModelSpec& m, const ClusterSpec& c, ParallelPlan p, const EstimateOptions& opt) {
  if (!p.schedule_params.contains("fwd_bwd_ratio")) p.schedule_params["fwd_bwd_ratio"] = 0.5;
  Estimate e = estimate_as_given(m, c, p, quick(opt));
  double f = 0, b = 0;
  for (const StageCost& sc : e.costs.stages) {
    f += sc.f_s;
    b += sc.b_s;
  }
  return b > 0 ? f / b : 0.5;
}

// fold3d-aiao's offload "auto": the fewest segments (from the first) whose checkpoints go to host
// memory for the plan to fit; all of them when none fits. Offloading costs host-link time and
// pays only in memory, so a plan that fits keeps its checkpoints on the GPU.
ParallelPlan fit_offload(const ModelSpec& m, const ClusterSpec& c, ParallelPlan p, const EstimateOptions& opt) {
  const auto& segments = p.schedule_params["segments"];
  if (!segments.is_number_integer()) return p;  // the generator names the bad value
  const int ns = segments.get<int>();
  for (int k = 0; k <= ns; ++k) {
    p.schedule_params["offload"] = k > 0;
    p.schedule_params["offload_segments"] = k;
    if (k == ns || estimate_as_given(m, c, p, quick(opt)).fits) break;
  }
  return p;
}

}  // namespace

int fold3d_max_segments(const ModelSpec& m, const ParallelPlan& p) { return std::min(16, std::max(1, m.num_layers / p.pp)); }

ParallelPlan resolve_schedule_params(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& in, const EstimateOptions& opt) {
  ParallelPlan p = in;
  if (is_schedule_file(p.schedule)) return p;  // a file's schedule has no parameters to settle
  const std::string name = schedules::find_generator(p.schedule).name;
  auto& sp = p.schedule_params;
  if (name == "merak" && is_auto(sp, "alpha1")) sp["alpha1"] = fit_alpha1(m, c, p, opt);
  if (name == "merak-early-recompute" && sp.contains("alpha1") && is_auto(sp, "alpha1")) sp["alpha1"] = fit_alpha1(m, c, p, opt);
  if (name == "fold3d-aiao") {
    bool auto_segments = is_auto(sp, "segments");
    bool auto_ratio = !sp.contains("fwd_bwd_ratio");
    bool auto_offload = is_auto(sp, "offload") && !sp.contains("offload_segments");
    auto settle = [&](ParallelPlan q) {
      if (auto_offload) q.schedule_params.erase("offload");
      if (auto_ratio) q.schedule_params["fwd_bwd_ratio"] = fwd_bwd_ratio(m, c, q, opt);
      if (auto_offload) q = fit_offload(m, c, q, opt);
      return q;
    };
    if (auto_segments) {
      ParallelPlan best;
      double best_s = 0;
      // Given offload_segments = K, the search starts at K segments (fewer cannot hold K).
      const int first = sp.contains("offload_segments") && sp["offload_segments"].is_number_integer()
                            ? std::max(1, sp["offload_segments"].get<int>())
                            : 1;
      for (int ns = first; ns <= std::max(first, fold3d_max_segments(m, p)); ++ns) {
        ParallelPlan q = p;
        q.schedule_params["segments"] = ns;
        q = settle(q);
        double t = estimate_as_given(m, c, q, quick(opt)).eval.iteration_time_s;
        if (ns > first && t >= best_s) break;
        best = q;
        best_s = t;
      }
      p = best;
    } else {
      p = settle(p);
    }
  }
  return p;
}

Estimate estimate(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, const EstimateOptions& opt) {
  check(m);
  check(c);
  check(p);
  check_fit(m, c, p);
  return estimate_as_given(m, c, resolve_schedule_params(m, c, p, opt), opt);
}

std::vector<ComputeByKind> compute_by_kind(const Estimate& e) {
  std::vector<ComputeByKind> out;
  if (!e.profile_source.empty() || e.costs.stages.empty() || e.costs.stages.front().kinds_f.total_s() <= 0) return out;
  auto share = [](double part, double whole) { return whole > 0 ? part / whole : 0.0; };
  auto add = [](PassKinds& into, const PassKinds& k, double times) {
    into.products_s += times * k.products_s, into.attention_core_s += times * k.attention_core_s;
    into.memory_s += times * k.memory_s, into.comm_s += times * k.comm_s, into.host_s += times * k.host_s;
  };
  for (int r = 0; r < e.schedule.num_ranks; ++r) {
    ComputeByKind c;
    for (const schedules::Action& a : e.schedule.actions[static_cast<size_t>(r)]) {
      if (a.op == schedules::Op::OPTIMIZER) {
        c.optimizer_s += e.costs.optimizer_s.empty() ? 0.0 : e.costs.optimizer_s[static_cast<size_t>(r)];
        continue;
      }
      if (!schedules::is_compute(a.op)) continue;
      const StageCost& sc = e.costs.stages[static_cast<size_t>(a.stage)];
      switch (a.op) {
        case schedules::Op::F: add(c.passes, sc.kinds_f, 1); break;
        case schedules::Op::B: add(c.passes, sc.kinds_b, 1); break;
        case schedules::Op::I: add(c.passes, sc.kinds_b, share(sc.i_s, sc.b_s)); break;
        case schedules::Op::W: add(c.passes, sc.kinds_b, share(sc.w_s, sc.b_s)); break;
        case schedules::Op::R: add(c.passes, sc.kinds_f, a.fraction * share(sc.r_s, sc.f_s)); break;
        case schedules::Op::OVERLAP_F_B: {
          // Both halves' compute kinds; the communication is what the pair's time (costs.h
          // overlapped_backward_s) leaves beyond them, not the halves' own exposed all-to-alls.
          const StageCost& sb = e.costs.stages[static_cast<size_t>(a.b_stage)];
          PassKinds pair;
          add(pair, sc.kinds_f, 1);
          add(pair, sb.kinds_b, a.b_op == schedules::Op::I ? share(sb.i_s, sb.b_s) : 1.0);
          const double pair_s = sc.f_s + overlapped_backward_s(sb, a.b_op);
          pair.comm_s = std::max(0.0, pair_s - (pair.total_s() - pair.comm_s));
          add(c.passes, pair, 1);
          break;
        }
        default: break;
      }
    }
    const double busy = static_cast<size_t>(r) < e.eval.compute_s.size() ? e.eval.compute_s[static_cast<size_t>(r)] : 0.0;
    c.other_s = busy - c.passes.total_s() - c.optimizer_s;
    if (std::abs(c.other_s) <= 1e-12 * busy) c.other_s = 0;  // rounding of the same sums
    out.push_back(c);
  }
  return out;
}

namespace {
// (ranks) compute_by_kind as JSON objects; [] when the costs are not analytic.
nlohmann::json compute_by_kind_json(const Estimate& e) {
  nlohmann::json out = nlohmann::json::array();
  for (const ComputeByKind& c : compute_by_kind(e))
    out.push_back({{"products_s", c.passes.products_s}, {"attention_core_s", c.passes.attention_core_s},
                   {"memory_bound_s", c.passes.memory_s}, {"communication_in_compute_s", c.passes.comm_s},
                   {"host_wait_s", c.passes.host_s},
                   {"optimizer_s", c.optimizer_s}, {"other_s", c.other_s}});
  return out;
}
}  // namespace

nlohmann::json to_json(const Estimate& e) {
  nlohmann::json j = {{"model", e.model.name},
          {"attention_kernel", attention_kernel_name(e.model.attention_kernel)},
          {"cluster", e.cluster.name},
          {"plan", to_json(e.plan)},
          {"schedule", e.schedule.name},
          {"iteration_time_s", e.eval.iteration_time_s},
          {"tokens_per_s", e.tokens_per_s},
          {"samples_per_s", e.eval.iteration_time_s > 0 ? static_cast<double>(e.plan.global_batch()) / e.eval.iteration_time_s : 0.0},
          {"tflops_per_gpu", e.tflops_per_gpu},
          {"mfu", e.mfu},
          {"mfu_fp8_peak", e.mfu_fp8},
          {"hfu", e.hfu},
          {"model_flops_per_iteration", e.model_flops},
          {"hardware_flops_per_iteration", e.hardware_flops},
          {"bubble_over_compute", e.eval.bubble_over_compute},
          {"bubble_fraction", e.eval.bubble_fraction},
          {"mean_idle_fraction", e.eval.mean_idle_fraction},
          {"compute_s", e.eval.compute_s},
          {"compute_by_kind_s", compute_by_kind_json(e)},
          {"idle_s", e.eval.idle_s},
          {"dp_comm_s", e.eval.dp_comm_s},
          {"exposed_dp_comm_s", e.eval.exposed_dp_comm_s},
          {"peak_activations", e.eval.peak_activations},
          {"peak_activation_bytes", e.eval.peak_activation_bytes},
          {"peak_memory_bytes", e.eval.peak_memory_bytes},
          {"peak_host_bytes", e.eval.peak_host_bytes},
          {"max_memory_bytes", e.max_memory_bytes},
          {"max_host_bytes", e.eval.peak_host_bytes.empty() ? 0.0 : *std::max_element(e.eval.peak_host_bytes.begin(), e.eval.peak_host_bytes.end())},
          {"static_memory_bytes", e.costs.static_bytes},
          {"gpu_memory_bytes", e.cluster.gpu_memory_bytes},
          {"memory_margin", e.cluster.memory_margin},
          {"usable_memory_bytes", e.usable_memory_bytes},
          {"headroom_bytes", e.headroom_bytes},
          {"fits", e.fits},
          {"fit", std::string(fit_name(e.fit))},
          {"stack", e.plan.stack},
          {"cost_model", e.profile_source.empty() ? std::string("analytic") : "profiled: " + e.profile_source},
          {"cost_notes", e.costs.notes}};
  if (e.plan.cp > 1) {  // each stage's ring of key/value chunks, one layer and sub-batch (cp.h)
    nlohmann::json stages = nlohmann::json::array();
    for (const StageCost& sc : e.costs.stages) stages.push_back(to_json(sc.cp));
    j["cp_stages"] = stages;
  }
  if (is_moe(e.model)) {  // each stage's MoE layers: all-to-alls, tp collectives, expert parameters (moe.h)
    nlohmann::json stages = nlohmann::json::array();
    for (const StageCost& sc : e.costs.stages) stages.push_back(to_json(sc.moe));
    j["moe_stages"] = stages;
    j["model_params"] = flops::model_params(e.model);
    j["active_params"] = flops::active_params(e.model);
  }
  if (e.plan.zero == 3) {  // what fully sharded data parallelism adds to each stage (fsdp.h)
    nlohmann::json stages = nlohmann::json::array();
    for (const StageCost& sc : e.costs.stages) stages.push_back(to_json(sc.fsdp, e.plan.num_microbatches));
    j["fsdp_stages"] = stages;
  }
  return j;
}

}  // namespace stagecraft::costmodel
