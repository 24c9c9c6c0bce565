#include "costmodel/estimate.h"

#include <algorithm>

#include "costmodel/flops.h"
#include "schedules/error.h"

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
    if (!p.schedule_params["chunks"].is_number_integer())
      throw InputError("plan.schedule_params.chunks = " + p.schedule_params["chunks"].dump() + " is invalid (expected an integer)");
    o.chunks = p.schedule_params["chunks"].get<int>();
  }
  o.extra = p.schedule_params;
  return o;
}

schedules::Schedule plan_schedule(const ParallelPlan& p, const schedules::LowerOptions& lower) {
  schedules::Schedule s = schedules::generate(p.schedule, generator_options(p));
  s = schedules::lower(s, lower);
  if (p.recompute == RecomputePolicy::Full)
    s = schedules::insert_recompute(s, std::vector<double>(static_cast<size_t>(s.num_stages), 1.0));
  return s;
}

Estimate estimate(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, const EstimateOptions& opt) {
  check(m);
  check(c);
  check(p);
  check_fit(m, c, p);
  Estimate e;
  e.model = m;
  e.cluster = c;
  e.plan = p;
  e.schedule = plan_schedule(p, opt.lower);
  e.costs = analytic_cost_table(m, c, p, e.schedule);
  Evaluator ev(e.schedule, opt.eval);
  e.eval = ev.evaluate(e.costs);
  const double T = e.eval.iteration_time_s;
  const double tokens = static_cast<double>(p.global_batch()) * m.seq_length;
  e.model_flops = flops::model_flops_per_iteration(m, p.global_batch());
  e.tokens_per_s = T > 0 ? tokens / T : 0;
  e.tflops_per_gpu = T > 0 ? e.model_flops / T / p.num_gpus() / 1e12 : 0;
  e.mfu = e.tflops_per_gpu * 1e12 / c.gpu_peak_flops_per_s;
  e.max_memory_bytes = *std::max_element(e.eval.peak_memory_bytes.begin(), e.eval.peak_memory_bytes.end());
  e.fits = e.max_memory_bytes <= c.gpu_memory_bytes;
  return e;
}

nlohmann::json to_json(const Estimate& e) {
  return {{"model", e.model.name},
          {"cluster", e.cluster.name},
          {"plan", to_json(e.plan)},
          {"schedule", e.schedule.name},
          {"iteration_time_s", e.eval.iteration_time_s},
          {"tokens_per_s", e.tokens_per_s},
          {"tflops_per_gpu", e.tflops_per_gpu},
          {"mfu", e.mfu},
          {"model_flops_per_iteration", e.model_flops},
          {"bubble_over_compute", e.eval.bubble_over_compute},
          {"bubble_fraction", e.eval.bubble_fraction},
          {"mean_idle_fraction", e.eval.mean_idle_fraction},
          {"compute_s", e.eval.compute_s},
          {"idle_s", e.eval.idle_s},
          {"dp_comm_s", e.eval.dp_comm_s},
          {"exposed_dp_comm_s", e.eval.exposed_dp_comm_s},
          {"peak_activations", e.eval.peak_activations},
          {"peak_activation_bytes", e.eval.peak_activation_bytes},
          {"peak_memory_bytes", e.eval.peak_memory_bytes},
          {"peak_host_bytes", e.eval.peak_host_bytes},
          {"static_memory_bytes", e.costs.static_bytes},
          {"gpu_memory_bytes", e.cluster.gpu_memory_bytes},
          {"fits", e.fits}};
}

}  // namespace stagecraft::costmodel
