#include "workbench/search.h"

#include "presets/load.h"
#include "graphs/plan.h"
#include "schedules/error.h"
#include "workbench/model.h"
#include "workbench/resolve.h"
#include "workbench/space.h"
#include "workbench/text.h"

namespace stagecraft::workbench {

namespace {

InputError unsupported_with_graph(const std::string& flag, const std::string& model) {
  return InputError(flag + " with a graph model (--model " + model + ") is not supported (allowed: absent)");
}

// --from: the file's model (returned), nodes (unless --nodes) into the cluster and global batch
// (unless --global-batch) into the inputs.
std::optional<costmodel::ModelSpec> search_from(const SearchRequest& q, SearchInputs& in, const WarnFn& warn) {
  PlanRequest r;
  r.from = q.from;
  r.from_format = q.from_format;
  r.hf_config = q.hf_config;
  r.nodes = q.nodes;
  const FromConfig from = import_from(r, &in.cluster, 0, warn);
  in.global_batch = q.global_batch;
  if (in.global_batch == 0 && from.plan) in.global_batch = from.plan->global_batch();
  if (in.global_batch == 0) throw InputError("--global-batch is required (or a --from file that gives one)");
  return from.model;
}

// The model the planner enumerates: a graph's, --model's or --from's, the model flags applied.
costmodel::ModelSpec search_model(const SearchRequest& q, const std::optional<costmodel::ModelSpec>& from_model,
                                  const std::optional<graphs::Graph>& graph) {
  if (graph) refuse_model_request_for_graph(q.model, q.model_request);
  if (q.model.empty() && !from_model) throw InputError("--model is required (a preset, a model JSON file, or give --from FILE)");
  costmodel::ModelSpec m = graph ? graphs::plan_model_of(*graph) : q.model.empty() ? *from_model : presets::load_model(q.model);
  if (!graph) apply_model_request(m, q.model_request);
  return m;
}

// --profile, refused where its measured costs cannot be used.
std::optional<costmodel::Profile> search_profile(const SearchRequest& q, bool graph) {
  if (q.profile.empty()) return std::nullopt;
  if (graph)
    throw InputError("--profile with a graph model (--model " + q.model +
                     ") is not supported (a graph prices its own subgraphs; allowed: absent)");
  if (!q.verify.empty())
    throw InputError("--verify with --profile is not supported (the simulator's check runs the analytic costs; allowed: one of them)");
  if (!q.whatif.empty())
    throw InputError("--whatif with --profile is not supported (the simulator runs the analytic costs; allowed: one of them)");
  return costmodel::load_profile(q.profile);
}

// What reports on one search's top plans, refused with several GPU counts.
void refuse_for_sweep(const SearchRequest& q) {
  if (!q.out.empty()) throw InputError("--out with several --gpus is invalid (one plan file per search: give one count)");
  if (q.layer_tp) throw InputError("--layer-tp with several --gpus is invalid (it reports on one search's top plans: give one count)");
  if (!q.whatif.empty()) throw InputError("--whatif with several --gpus is invalid (it ranks one search's top plans: give one count)");
}

// A search that kept no plan: the constraint that removed the most points, with the flags that
// lift it. A space refused whole by one check is bad input; one too large for memory a run-time
// finding.
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

}  // namespace

SearchInputs resolve_search(const SearchRequest& q, const WarnFn& warn) {
  SearchInputs in;
  in.cluster = presets::load_cluster(q.cluster);
  const std::optional<costmodel::ModelSpec> from_model = search_from(q, in, warn);
  in.graph = graph_arg(q.model);
  if (in.graph && !q.verify.empty()) throw unsupported_with_graph("--verify", q.model);
  if (in.graph && !q.whatif.empty()) throw unsupported_with_graph("--whatif", q.model);
  in.whatif = load_plan_whatif(q.whatif);  // a bad file refused before the search
  if (in.graph && q.layer_tp) throw unsupported_with_graph("--layer-tp", q.model);
  in.model = search_model(q, from_model, in.graph);
  apply_memory_margin(in.cluster, q.memory_margin);
  apply_nodes(in.cluster, q.nodes);
  if (q.gpus_used_per_node) costmodel::set_gpus_used_per_node(in.cluster, *q.gpus_used_per_node, "--gpus-used-per-node");
  in.profile = search_profile(q, in.graph.has_value());
  if (q.tokens < 0) throw InputError("--tokens = " + fmt_num(q.tokens) + " is invalid (must be positive)");
  if (!q.verify.empty() && q.verify != "sim") throw InputError("--verify = '" + q.verify + "' is invalid (allowed: sim)");
  in.counts = gpu_counts(q.gpus, in.cluster);
  if (in.counts.size() > 1) refuse_for_sweep(q);
  return in;
}

planner::SearchResult search_route(const SearchInputs& in, const planner::PlanSpace& space, const planner::SearchOptions& o) {
  planner::SearchOptions with = o;
  if (in.profile) with.profile = &*in.profile;  // priced as `estimate --profile` prices
  return in.graph ? graphs::search_graph(*in.graph, in.cluster, space, with) : planner::search(in.model, in.cluster, space, with);
}

planner::SearchResult search_plans(const SearchInputs& in, const SearchRequest& q, const ProgressFn& progress) {
  const int gpus = in.counts.empty() ? 0 : in.counts.front();
  check_plan_whatif(in.whatif, in.cluster, gpus == 0 ? in.cluster.num_gpus() : gpus);  // before the search
  planner::SearchOptions opt;
  opt.top_k = q.top;
  opt.threads = q.threads;
  opt.progress = progress;
  const planner::SearchResult r = search_route(in, space_of(q, in.global_batch, gpus), opt);
  if (r.stats.considered == 0)  // nothing to search: the flags contradict one another
    throw InputError("no plan satisfies the flags together (" + std::to_string(gpus == 0 ? in.cluster.num_gpus() : gpus) +
                     " GPUs, --global-batch " + std::to_string(in.global_batch) +
                     "): dp must divide the global batch and the microbatch sizes, and each schedule fit a pp degree");
  if (r.best.empty()) refuse_empty(r);
  return r;
}

const planner::Candidate* fastest_fitting(const std::vector<planner::Candidate>& best) {
  for (const planner::Candidate& c : best)
    if (c.fit == costmodel::Fit::Fits) return &c;
  return nullptr;
}

nlohmann::json plan_file_json(const planner::Candidate& best, const costmodel::ModelSpec& m, const costmodel::ClusterSpec& c,
                              const std::string& graph_file) {
  nlohmann::json j = costmodel::to_json(best.plan);
  costmodel::ModelSpec priced = m;
  priced.fp8 = best.fp8;
  j["model"] = graph_file.empty() ? costmodel::to_json(priced) : nlohmann::json(graph_file);
  j["cluster"] = costmodel::to_json(c);
  return j;
}

}  // namespace stagecraft::workbench
