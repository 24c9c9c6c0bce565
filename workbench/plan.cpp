#include "workbench/plan.h"

#include <algorithm>

#include "presets/load.h"
#include "schedules/error.h"
#include "schedules/registry.h"
#include "workbench/text.h"

namespace stagecraft::workbench {

namespace {

nlohmann::json scalar(const std::string& flag, const std::string& v) {
  try {
    nlohmann::json j = nlohmann::json::parse(v);
    if (j.is_primitive()) return j;
  } catch (const nlohmann::json::exception&) {
  }
  if (v.empty()) throw InputError(flag + " needs a value");
  return v;  // a plain word such as auto
}

// --from's global batch over dp * microbatch size (after the request's overrides).
int microbatches_of_batch(const PlanRequest& r, const FromConfig& from, const costmodel::ParallelPlan& p) {
  const long per = static_cast<long>(p.dp) * p.microbatch_size;
  if (per < 1 || from.global_batch % per != 0)
    throw InputError("the global batch of --from " + r.from + " = " + std::to_string(from.global_batch) + " is not a multiple of dp * " +
                     "microbatch size = " + std::to_string(per) + " (contradictory values; give --microbatches)");
  return static_cast<int>(from.global_batch / per);
}

// The degrees, dp's default, the microbatches and the schedule over the starting plan `p`.
void set_shape(costmodel::ParallelPlan& p, const PlanRequest& r, const FromConfig& from, int gpus, const std::string& gpus_from) {
  if (r.tp) p.tp = *r.tp;
  if (r.pp) p.pp = *r.pp;
  if (r.cp) p.cp = *r.cp;
  if (r.ep) p.ep = *r.ep;
  if (r.etp) p.etp = *r.etp;
  if (r.moe_dispatcher) p.moe_dispatcher = *r.moe_dispatcher;
  if (r.dp) {
    p.dp = *r.dp;
  } else if (r.plan_file.empty() || from.plan) {
    const int other = p.tp * p.pp * p.cp;
    if (p.tp < 1 || p.pp < 1 || p.cp < 1 || gpus % other != 0)
      throw InputError("--dp not given and tp*pp" + std::string(p.cp > 1 ? "*cp" : "") + " = " + std::to_string(other) +
                       " does not divide the " + std::to_string(gpus) + " " + gpus_from + "; give --dp");
    p.dp = gpus / other;
  }
  if (r.microbatch_size) p.microbatch_size = *r.microbatch_size;
  if (r.microbatches) p.num_microbatches = *r.microbatches;
  else if (from.plan && from.global_batch > 0) p.num_microbatches = microbatches_of_batch(r, from, p);
  if (p.num_microbatches == 0) p.num_microbatches = 4 * p.pp;
  if (!r.schedule.empty()) p.schedule = r.schedule;
  if (r.chunks) p.schedule_params["chunks"] = *r.chunks;
  nlohmann::json given = schedule_params_json(r.params);
  for (auto it = given.begin(); it != given.end(); ++it) p.schedule_params[it.key()] = it.value();
}

// Recomputation, sharding, overlap, reduction and stage fields over `p`.
void set_options(costmodel::ParallelPlan& p, const PlanRequest& r) {
  if (r.sequence_parallel) p.sequence_parallel = true;
  if (!r.recompute.empty()) p.recompute = costmodel::parse_recompute(r.recompute);
  if (!r.recompute_modules.empty()) p.recompute_modules = r.recompute_modules;
  if (!r.cuda_graph_scope.empty()) p.cuda_graph_scope = r.cuda_graph_scope;
  if (r.offload_layers) p.offload_layers = *r.offload_layers;
  if (!r.rank_order.empty()) p.rank_order = r.rank_order;
  if (!r.tp_overlap.empty()) p.tp_overlap = schedules::parse_tp_overlap(r.tp_overlap, "--tp-overlap");
  if (r.zero) p.zero = *r.zero;
  if (r.shard_group) p.shard_group = *r.shard_group;
  if (r.no_reshard_after_forward) p.reshard_after_forward = false;
  if (r.overlap_grad_reduce) p.overlap_grad_reduce = true;
  if (r.overlap_param_gather) p.overlap_param_gather = true;
  if (r.fp8_param_gather) p.fp8_param_gather = true;
  if (!r.stack.empty()) p.stack = r.stack;
  if (r.preemptive_comm) p.preemptive_comm = true;
  if (!r.grad_reduce_at.empty()) p.grad_reduce_at = schedules::parse_grad_reduce_at(r.grad_reduce_at, "--grad-reduce-at");
  if (r.grad_bucket_mb) p.grad_bucket_bytes = grad_bucket_bytes_of(*r.grad_bucket_mb);
  if (!r.pipeline_layout.empty()) p.pipeline_layout = r.pipeline_layout;
  if (r.account_for_embedding) p.account_for_embedding = true;
  if (r.account_for_loss) p.account_for_loss = true;
  if (!r.stage_layers.empty()) {
    p.stage_layers.clear();
    for (const std::string& tok : split_list(r.stage_layers)) {
      const std::optional<int> v = to_int(tok);
      if (!v) throw InputError("--stage-layers entry '" + tok + "' is invalid (expected comma-separated integers, e.g. 10,11,11,10)");
      p.stage_layers.push_back(*v);
    }
  }
}

}  // namespace

costmodel::ParallelPlan resolve_plan(const PlanRequest& r, const FromConfig& from, int gpus, const std::string& gpus_from) {
  for (const auto& [name, v] : {std::pair{"dp", r.dp}, {"tp", r.tp}, {"pp", r.pp}, {"cp", r.cp}, {"ep", r.ep},
                                {"microbatch-size", r.microbatch_size}, {"microbatches", r.microbatches}, {"chunks", r.chunks}})
    if (v && *v < 1)
      throw InputError(std::string("--") + name + " = " + std::to_string(*v) + " is invalid (" + name + " must be at least 1)");
  costmodel::ParallelPlan p;
  p.num_microbatches = 0;
  if (from.plan) p = *from.plan;
  else if (!r.plan_file.empty()) p = presets::load_plan_file(r.plan_file);
  set_shape(p, r, from, gpus, gpus_from);
  set_options(p, r);
  costmodel::check(p);
  costmodel::check_tp_overlap(p);
  costmodel::check_tp_overlap_applies(p);
  costmodel::check_sequence_parallel_applies(p);
  return p;
}

nlohmann::json schedule_params_json(const ScheduleParams& p) {
  nlohmann::json j = nlohmann::json::object();
  if (p.waves) j["waves"] = *p.waves;
  if (!p.segments.empty()) j["segments"] = scalar("--segments", p.segments);
  if (!p.alpha1.empty()) j["alpha1"] = scalar("--alpha1", p.alpha1);
  for (const std::string& kv : p.extra) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw InputError("--param '" + kv + "' is invalid (expected KEY=VALUE, e.g. --param offload=false)");
    j[kv.substr(0, eq)] = scalar("--param " + kv.substr(0, eq), kv.substr(eq + 1));
  }
  return j;
}

nlohmann::json params_for(const std::string& schedule, const nlohmann::json& params) {
  const auto& g = schedules::find_generator(schedule);
  nlohmann::json out = nlohmann::json::object();
  for (auto it = params.begin(); it != params.end(); ++it)
    if (std::find(g.params.begin(), g.params.end(), it.key()) != g.params.end()) out[it.key()] = it.value();
  return out;
}

double grad_bucket_bytes_of(double mb) {
  if (!(mb > 0)) throw InputError("--grad-bucket-mb = " + std::to_string(mb) + " is invalid (must be greater than 0)");
  return mb * 1024 * 1024;
}

}  // namespace stagecraft::workbench
