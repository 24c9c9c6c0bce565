// The run's outputs, assembled on rank 0 from every rank's records: the JSON summary and the
// Chrome trace in the evaluator's layout (pid = rank, tid 0 compute, 1 p2p, 2 collective,
// 3 copy; one complete event per executed action, in list order), plus, for stages run with
// tensor-parallel overlap, tid 4 (each tp collective, launch to wait) and tid 5 (each compute
// piece of the inner schedule). No torch here.
#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>

#include "costmodel/estimate.h"
#include "costmodel/flops.h"
#include "costmodel/specs.h"
#include "runtime/train.h"
#include "schedules/schedule.h"

namespace stagecraft::runtime {

using nlohmann::json;
using schedules::Action;
using schedules::Op;

namespace {

const char* kStreamNames[6] = {"compute", "p2p send", "dp collective", "host copy", "tp collective", "tp compute piece"};
constexpr int kTpCommTid = 4, kTpPieceTid = 5;

// Mean of a per-step field over the steps after the first (warm-up), or the only step.
double steady_mean(const json& steps, const char* field) {
  size_t from = steps.size() > 1 ? 1 : 0;
  double sum = 0;
  for (size_t i = from; i < steps.size(); ++i) sum += steps[i][field].get<double>();
  return steps.size() > from ? sum / static_cast<double>(steps.size() - from) : 0;
}

// One event per tp piece of an overlapped stage action: [position, comm, pass, block,
// sub-batch, start, end] (runtime/train.cpp), named like "all-reduce B b3 sb1" or "F b3 sb1".
void add_piece_events(json& events, const std::vector<Action>& list, const json& step, int pid) {
  for (const json& p : step["tp_pieces"]) {
    const bool comm = p[1].get<int>() == 1;
    const std::string pass = p[2], piece = pass + " b" + std::to_string(p[3].get<int>()) + " sb" + std::to_string(p[4].get<int>());
    const Action& a = list[p[0].get<size_t>()];
    json args = {{"iteration", step["step"]}, {"step", p[0]}, {"action", schedules::to_text(a)}, {"pass", pass},
                 {"block", p[3]}, {"sub_batch", p[4]}};
    const double t0 = p[5], t1 = p[6];
    events.push_back({{"name", comm ? "all-reduce " + piece : piece}, {"cat", comm ? "tp collective" : "tp piece"},
                      {"ph", "X"}, {"pid", pid}, {"tid", comm ? kTpCommTid : kTpPieceTid}, {"ts", t0 * 1e6},
                      {"dur", (t1 - t0) * 1e6}, {"args", args}});
  }
}

}  // namespace

json summary_json(const TrainOptions& opt, const schedules::Schedule& s, const std::vector<json>& ranks) {
  json steps = json::array();
  const json& first = ranks.front()["steps"];
  for (size_t i = 0; i < first.size(); ++i) {
    double t = 0, loss = 0;
    bool have = false;
    long collectives = 0;  // tp collectives issued by every rank in this step
    long early = 0;        // gradient buckets every rank launched inside its backward
    long gathers = 0;      // parameter all-gathers every rank finished inside a compute action
    double grad_sq = 0;    // squared gradients summed over every rank's parameters
    for (const json& r : ranks) {
      t = std::max(t, r["steps"][i]["time_s"].get<double>());
      collectives += r["steps"][i].value("tp_collectives", 0L);
      early += r["steps"][i].value("buckets_in_backward", 0L);
      gathers += r["steps"][i].value("gathers_overlapped", 0L);
      grad_sq += r["steps"][i].value("grad_sq", 0.0);
      if (!have && r["steps"][i].contains("loss")) loss = r["steps"][i]["loss"].get<double>(), have = true;
    }
    steps.push_back({{"step", first[i]["step"]}, {"loss", loss}, {"iteration_time_s", t}, {"tp_collectives", collectives},
                     {"grad_sq_sum", grad_sq}, {"buckets_in_backward", early}});
    if (opt.plan.zero > 0) steps.back()["gathers_overlapped"] = gathers;
  }
  json per_rank = json::array();
  for (const json& r : ranks) {
    double T = steady_mean(r["steps"], "time_s"), C = steady_mean(r["steps"], "compute_s");
    double M = steady_mean(r["steps"], "comm_s"), W = steady_mean(r["steps"], "wait_s");
    per_rank.push_back({{"rank", r["rank"]}, {"tp", r["tp"]}, {"dp", r["dp"]}, {"cp", r.value("cp", 0)}, {"pp", r["pp"]},
                        {"iteration_time_s", T}, {"compute_s", C}, {"communication_s", M}, {"wait_s", W},
                        {"idle_s", std::max(0.0, T - C - M)}, {"device", r.value("device", "cpu")},
                        {"peak_memory_bytes", r["peak_memory_bytes"]},
                        {"peak_memory_kind", r.value("peak_memory_kind", "process resident set")},
                        {"param_bytes", r.value("param_bytes", std::int64_t{0})},
                        {"optimizer_state_bytes", r.value("optimizer_state_bytes", std::int64_t{0})},
                        {"peak_rss_bytes", r.value("peak_rss_bytes", std::int64_t{0})},
                        {"p2p_groups_per_step", r["steps"].empty() ? 0L : r["steps"][0].value("p2p_groups", 0L)}});
    if (r.contains("peak_breakdown_bytes")) per_rank.back()["peak_breakdown_bytes"] = r["peak_breakdown_bytes"];
    if (!r["steps"].empty() && r["steps"][0].contains("op_s")) {  // --op-times: the iteration by kind (runtime/op_times.h)
      json ops = json::array();
      for (const json& st : r["steps"]) ops.push_back(st["op_s"]);
      const double G = steady_mean(ops, "gemm"), A = steady_mean(ops, "attention_core"), O = steady_mean(ops, "optimizer");
      per_rank.back()["breakdown_s"] = {{"gemm_s", G}, {"attention_core_s", A}, {"other_compute_s", std::max(0.0, C - G - A - O)},
                                        {"optimizer_s", O}, {"communication_s", M},
                                        {"idle_s", std::max(0.0, T - C - M)}};  // waits inside compute actions included
    }
    if (!r["steps"].empty() && r["steps"][0].contains("cp_sends"))  // ring attention's chunk sends (runtime/cp.h)
      per_rank.back()["cp_sends_per_step"] = r["steps"][0]["cp_sends"];
    if (!r["steps"].empty() && r["steps"][0].contains("weight_casts"))  // bf16: weights cast in the last step (--bf16-weights)
      per_rank.back()["weight_casts_per_step"] = r["steps"].back()["weight_casts"];
    if (!r["steps"].empty() && r["steps"][0].contains("unit_gathers"))  // zero 3's all-gathers of units (runtime/fsdp.h)
      per_rank.back()["unit_gathers_per_step"] = r["steps"].back()["unit_gathers"];
    if (!r["steps"].empty() && r["steps"][0].contains("preempt")) {  // preemptive_comm: summed over the steps
      long chunks = 0, yields = 0, expired = 0;
      double yield_s = 0;
      for (const json& st : r["steps"]) {
        chunks += st["preempt"]["chunks"].get<long>();
        yields += st["preempt"]["yields"].get<long>();
        expired += st["preempt"]["expired"].get<long>();
        yield_s += st["preempt"]["yield_s"].get<double>();
      }
      per_rank.back()["preempt"] = {{"chunks", chunks}, {"yields", yields}, {"expired", expired}, {"yield_s", yield_s}};
    }
  }
  // Throughput with the model FLOPs of costmodel/flops.h (Narayanan et al., SC'21: the work of
  // the model, recomputation not counted; MFU = model_flops_per_s / the device's peak) and the
  // hardware FLOPs, recomputation counted (Korthikanti et al., MLSys 2023; HFU likewise).
  const double T = steady_mean(steps, "iteration_time_s");
  const double tokens = static_cast<double>(opt.plan.global_batch()) * opt.model.seq_length;
  const bool gpu = ranks.front().value("device", "cpu") != "cpu";
  // A TorchScript model: its graph's FLOPs (runtime/torchscript_graph.h), per microbatch of the batch.
  const bool script = !opt.script_path.empty();
  const double script_flops = opt.script_flops_per_microbatch * opt.plan.num_microbatches * opt.plan.dp;
  const double model_flops = script ? script_flops : costmodel::flops::model_flops_per_iteration(opt.model, opt.plan.global_batch());
  const double hardware_flops = script ? script_flops : costmodel::hardware_flops(s, opt.model, opt.plan);
  return {{"format", "stagecraft-train"}, {"model", opt.model.name}, {"schedule", s.name},
          {"plan", costmodel::to_json(opt.plan)}, {"world", static_cast<int>(ranks.size())},
          {"precision", opt.precision},
          {"attention_kernel", script ? "torchscript" : std::string(costmodel::attention_kernel_name(opt.model.attention_kernel))},
          {"mean_iteration_time_s", T},
          {"tokens_per_s", T > 0 ? tokens / T : 0.0},
          {"model_flops_per_s", T > 0 ? model_flops / T : 0.0},
          {"hardware_flops_per_s", T > 0 ? hardware_flops / T : 0.0},
          {"steps", steps}, {"ranks", per_rank},
          {"notes", std::string(gpu ? "times from CUDA events; compute spans include stream-ordered waits; peak memory is the "
                                      "caching allocator's peak"
                                    : "times from the host clock; compute excludes waits and tp all-reduces; peak memory is the "
                                      "largest step peak of live tensor bytes (counting allocator, CPU)") +
                        (!script && opt.model.dropout ? "; the runtime has no dropout: model '" + opt.model.name +
                                                           "' says dropout, so its masks are in a prediction and not here"
                                                      : std::string())}};
}

json trace_json(const schedules::Schedule& s, const std::vector<json>& ranks, int, int, int,
                const std::function<int(int, int, int, int)>& global_of) {
  json events = json::array();
  for (const json& r : ranks) {
    int g = r["rank"];
    const int cp = r.value("cp", 0);
    std::string label = "rank " + std::to_string(g) + " (pp " + std::to_string(r["pp"].get<int>()) + ", dp " +
                        std::to_string(r["dp"].get<int>()) + (cp > 0 ? ", cp " + std::to_string(cp) : std::string()) + ", tp " +
                        std::to_string(r["tp"].get<int>()) + ")";
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", g}, {"tid", 0}, {"args", {{"name", label}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", g}, {"tid", 0}, {"args", {{"sort_index", g}}}});
    bool pieces = false;  // the tp tracks only where a stage ran with tp overlap
    for (const json& st : r["steps"]) pieces = pieces || st.contains("tp_pieces");
    for (int t = 0; t < (pieces ? 6 : 4); ++t)
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", g}, {"tid", t}, {"args", {{"name", kStreamNames[t]}}}});
  }
  for (const json& r : ranks) {
    const int g = r["rank"], pp = r["pp"];
    const auto& list = s.actions[static_cast<size_t>(pp)];
    for (const json& st : r["steps"]) {
      for (const json& sp : st["spans"]) {
        const Action& a = list[sp[0].get<size_t>()];
        std::string name = schedules::to_text(a);
        if (a.op == Op::SEND_F || a.op == Op::SEND_B) {
          int peer = a.op == Op::SEND_F ? s.next_stage(a.stage) : s.prev_stage(a.stage);
          name += " -> rank " + std::to_string(global_of(r["tp"], r["dp"], r.value("cp", 0), s.rank_of(peer)));
        }
        json args = {{"iteration", st["step"]}, {"op", std::string(schedules::op_name(a.op))}, {"step", sp[0]}};
        if (a.stage >= 0) args["stage"] = a.stage;
        if (a.microbatch >= 0) args["microbatch"] = a.microbatch;
        double t0 = sp[2], t1 = sp[3];
        events.push_back({{"name", name}, {"cat", std::string(schedules::op_name(a.op))}, {"ph", "X"}, {"pid", g},
                          {"tid", sp[1]}, {"ts", t0 * 1e6}, {"dur", (t1 - t0) * 1e6}, {"args", args}});
        // The memory counter track: bytes in tensors just after the action was issued.
        if (sp.size() > 4 && sp[4].get<std::int64_t>() >= 0)
          events.push_back({{"name", "memory"}, {"ph", "C"}, {"pid", g}, {"ts", t1 * 1e6},
                            {"args", {{"live tensors (MiB)", sp[4].get<double>() / (1024.0 * 1024.0)}}}});
      }
      if (st.contains("tp_pieces")) add_piece_events(events, list, st, g);
    }
  }
  json meta = {{"schedule", s.name}, {"title", "stagecraft train (measured)"},
               {"time_unit", "microseconds (host clock, measured)"}};
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"metadata", meta}};
}

}  // namespace stagecraft::runtime
