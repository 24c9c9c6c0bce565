#include "workbench/space.h"

#include <algorithm>

#include "presets/load.h"
#include "schedules/error.h"
#include "schedules/registry.h"
#include "schedules/tp_overlap.h"
#include "workbench/plan.h"
#include "workbench/text.h"

namespace stagecraft::workbench {

namespace {

// --schedules: NAME, NAME:CHUNKS or NAME:KEY=VALUE[:KEY=VALUE...] each.
std::vector<planner::ScheduleChoice> schedule_choices(const std::string& text) {
  std::vector<planner::ScheduleChoice> out;
  for (const std::string& item : split_list(text)) {
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
    out.push_back(c);
  }
  return out;
}

// A comma-separated list of integers, each read as `flag`'s.
std::vector<int> ints(const std::string& flag, const std::string& text) {
  std::vector<int> out;
  for (const std::string& v : split_list(text)) out.push_back(parse_int(flag, v));
  return out;
}

// --precisions: bf16, fp8 (delayed scaling) or fp8-RECIPE, into the space's fp8 and recipes.
void set_precisions(planner::PlanSpace& s, const std::string& text) {
  s.fp8.clear();
  s.fp8_recipes.clear();
  for (const std::string& v : split_list(text)) {
    const bool fp8 = v != "bf16";
    if (fp8 && v != "fp8" && v.rfind("fp8-", 0) != 0)
      throw InputError("--precisions \"" + v + "\" is invalid (allowed: bf16, fp8, fp8-current, fp8-blockwise, fp8-mxfp8)");
    const costmodel::Fp8Recipe r = v == "fp8" || !fp8 ? costmodel::Fp8Recipe::Delayed
                                                      : costmodel::parse_fp8_recipe(v.substr(4), "--precisions " + v + ":");
    if (std::find(s.fp8.begin(), s.fp8.end(), fp8) == s.fp8.end()) s.fp8.push_back(fp8);
    if (fp8 && std::find(s.fp8_recipes.begin(), s.fp8_recipes.end(), r) == s.fp8_recipes.end()) s.fp8_recipes.push_back(r);
  }
  if (s.fp8_recipes.empty()) s.fp8_recipes.push_back(costmodel::Fp8Recipe::Delayed);
}

// The knobs tried on every plan's layout: degrees, experts, recomputation, ZeRO, sp.
void set_layout(planner::PlanSpace& s, const SearchRequest& q) {
  s.microbatch_sizes = ints("--microbatch-sizes", q.microbatch_sizes);
  s.recompute.clear();
  for (const std::string& v : split_list(q.recompute)) s.recompute.push_back(costmodel::parse_recompute(v));
  s.zero = ints("--zero", q.zero);
  s.shard_groups = ints("--shard-groups", q.shard_groups);
  s.reshard_after_forward = !q.no_reshard_after_forward;
  s.tp_degrees = ints("--tp", q.tp);
  s.pp_degrees = ints("--pp", q.pp);
  s.cp_degrees = ints("--cp", q.cp);
  s.ep_degrees = ints("--ep", q.ep);
  s.expert_tp.clear();
  for (const std::string& v : split_list(q.etp)) {
    const int x = parse_int("--etp", v);
    if (x != 0 && x != 1) throw InputError("--etp \"" + v + "\" is invalid (allowed: 0, the attention's tp; 1, whole experts)");
    s.expert_tp.push_back(x);
  }
}

// What every plan runs with: buckets, reduction start, preemption, tp overlap modes, sp.
void set_communication(planner::PlanSpace& s, const SearchRequest& q) {
  if (q.grad_bucket_mb) s.grad_bucket_bytes = grad_bucket_bytes_of(*q.grad_bucket_mb);
  if (!q.grad_reduce_at.empty()) s.grad_reduce_at = schedules::parse_grad_reduce_at(q.grad_reduce_at, "--grad-reduce-at");
  s.preemptive_comm = q.preemptive_comm;
  s.tp_overlap.clear();
  for (const std::string& v : split_list(q.tp_overlaps)) s.tp_overlap.push_back(schedules::parse_tp_overlap(v, "--tp-overlaps"));
  s.sequence_parallel.clear();
  for (const std::string& v : split_list(q.sequence_parallel)) {
    if (v != "on" && v != "off") throw InputError("--sequence-parallel \"" + v + "\" is invalid (allowed: on, off)");
    s.sequence_parallel.push_back(v == "on");
  }
}

}  // namespace

planner::PlanSpace space_of(const SearchRequest& q, long global_batch, int gpus) {
  planner::PlanSpace s;
  s.gpus = gpus;
  s.global_batch = global_batch;
  s.overlap_grad_reduce = !q.no_overlap;
  s.overlap_param_gather = !q.no_overlap_param_gather;
  if (!q.stack.empty()) s.stack = q.stack;
  s.cuda_graph_scope = q.cuda_graph_scope;
  s.max_tp = q.max_tp;
  s.schedules = schedule_choices(q.schedules);
  set_layout(s, q);
  set_precisions(s, q.precisions);
  s.rank_orders = split_list(q.rank_orders);
  s.for_runtime = q.for_runtime;
  set_communication(s, q);
  return s;
}

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

}  // namespace stagecraft::workbench
