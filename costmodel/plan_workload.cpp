#include "costmodel/plan_workload.h"
#include "costmodel/pipeline_split.h"

#include <algorithm>
#include <string>

#include "costmodel/cp.h"
#include "costmodel/fsdp.h"
#include "costmodel/memory.h"
#include "costmodel/stack.h"
#include "costmodel/topology.h"
#include "schedules/error.h"

namespace stagecraft::costmodel {

using schedules::Schedule;

namespace {

void check_schedule(const ParallelPlan& p, const Schedule& s) {
  if (s.num_ranks != p.pp)
    throw InputError("schedule '" + s.name + "' has " + std::to_string(s.num_ranks) + " ranks but plan.pp = " +
                     std::to_string(p.pp));
  const int S = s.stages_per_chain();
  if (!p.stage_tp_overlap.empty() && static_cast<int>(p.stage_tp_overlap.size()) != S)
    throw InputError("plan.stage_tp_overlap has " + std::to_string(p.stage_tp_overlap.size()) +
                     " entries; the schedule has " + std::to_string(S) + " stages per pipeline");
  if (p.zero >= 1 && s.num_chains > 1)
    throw InputError("plan.zero = " + std::to_string(p.zero) + " is not supported with schedule '" + s.name +
                     "' (its " + std::to_string(s.num_chains) + " chains reduce copies of a stage jointly); use zero 0");
}

// What the stage's layers keep per microbatch, from the formulas (memory.h): every sub-batch
// keeps its share (Korthikanti's formulas are linear in b, so the sub-batches add up to the
// microbatch); Oases' fine-grained recomputation keeps each block's input (layer_saved_bytes).
// A backward's working set comes on top of everything held: the head's first on the last stage,
// then one layer's at a time (the layers behind it already freed), so the larger.
void set_activation_bytes(StageWorkload& w, const ModelSpec& ms, const ParallelPlan& p, int et) {
  const int bb = w.sub_batch_samples, t = p.tp, sb = w.sub_batches;
  const RecomputeModules modules = recompute_modules_of(p);
  const bool sp = p.sequence_parallel, selective = modules.core_attn;
  const double nd = w.dense_layers, nm = w.moe_layers;
  const LayerSavedBytes layer = layer_saved_bytes(ms, bb, t, sp, selective, w.mode, 0, modules);
  const LayerSavedBytes moe = nm > 0 ? layer_saved_bytes(ms, bb, t, sp, selective, w.mode, et, modules) : LayerSavedBytes{};
  const double ends = (w.first ? memory::embedding_activation_bytes(ms, bb, t, sp) : 0) +
                      w.head_passes * memory::head_activation_bytes(ms, bb, t, sp);
  w.act_bytes = sb * (nd * layer.act_bytes + nm * moe.act_bytes + ends);
  w.ckpt_bytes = sb * (nd * layer.ckpt_bytes + nm * moe.ckpt_bytes + ends);
  w.work_bytes = sb * std::max({nd > 0 ? memory::layer_backward_working_bytes(ms, bb, t, sp) : 0.0,
                                nm > 0 ? memory::layer_backward_working_bytes(ms, bb, t, sp, et) : 0.0,
                                w.head ? memory::head_backward_working_bytes(ms, bb, t, sp) : 0.0});
  // Offloaded layers: their kept bytes (the mean layer's) leave the GPU between the passes. More
  // than the stage holds is refused, never silently clamped (Megatron-Core also requires fewer
  // offloaded layers than the model chunk has).
  if (p.offload_layers > w.layers)
    throw InputError("plan.offload_layers = " + std::to_string(p.offload_layers) + " is invalid (stage " +
                     std::to_string(w.stage) + " holds " + std::to_string(w.layers) +
                     " layers; allowed: at most the layers of the smallest stage)");
  w.offloaded_layers = p.offload_layers;
  if (w.offloaded_layers > 0) {
    const double mean_layer = sb * (nd * layer.act_bytes + nm * moe.act_bytes) / (nd + nm);
    w.offloaded_bytes = w.offloaded_layers * mean_layer;
    w.act_bytes -= w.offloaded_bytes;
    w.ckpt_bytes = std::min(w.ckpt_bytes, w.act_bytes);
  }
  w.w_kept_bytes = sb * (nd * memory::layer_weight_kept_bytes(ms, bb, t, sp) +
                         nm * memory::layer_weight_kept_bytes(ms, bb, t, sp, et) +
                         (w.head ? memory::head_weight_kept_bytes(ms, bb, t, sp) : 0));
}

// The parameters the stage's layers (and ends) put on one GPU, and the gradients it reduces.
void set_parameters(StageWorkload& w, const ModelSpec& m, const ParallelPlan& p, int et) {
  memory::MoeLayerParams lp = memory::layers_params_per_rank(m, w.first_layer, w.layers - w.mtp_layers, p.tp, p.ep, et);
  if (w.mtp_layers > 0) {  // each module: a layer of the last layer's kind, its (2h -> h) projection (/t) and two norms
    const memory::MoeLayerParams last = memory::layers_params_per_rank(m, m.num_layers - 1, 1, p.tp, p.ep, et);
    const double h = m.hidden_size, projection = 2 * h * h / p.tp;
    lp.dense += w.mtp_layers * (last.dense + projection + 2 * h);
    lp.experts += w.mtp_layers * last.experts;
    lp.linear += w.mtp_layers * (last.linear + projection);
  }
  w.params = lp.dense + (w.first ? memory::embedding_params_per_rank(m, p.tp) : 0) +
             (w.head ? memory::head_params_per_rank(m, p.tp) : 0);
  w.expert_params = lp.experts;
  w.linear_params = m.fp8 ? lp.linear : 0;
  w.grad_bytes = w.params * grad_bytes_per_param(m);  // (params) one GPU's gradients
  w.expert_grad_bytes = w.expert_params * grad_bytes_per_param(m);
}

StageWorkload stage_workload(const PlanWorkload& pw, const Schedule& s, int st, const std::vector<int>& layers,
                             int mtp_part, const KernelStack& stack, const AllReducePath& ep_path) {
  const ModelSpec &m = pw.model, &ms = pw.rank_model;
  const ParallelPlan& p = pw.plan;
  StageWorkload w;
  w.stage = st;
  w.part = s.model_part(st);
  for (int q = 0; q < w.part; ++q) w.first_layer += layers[static_cast<size_t>(q)];
  w.layers = layers[static_cast<size_t>(w.part)];
  w.moe_layers = moe_layers_in(m, w.first_layer, w.layers);
  w.dense_layers = w.layers - w.moe_layers;
  w.first = s.is_first(st);
  w.last = s.is_last(st);
  w.head_passes = w.last ? 1 : 0;
  if (m.mtp_layers > 0 && w.part == mtp_part) {  // the modules after the last layer, each with its head
    w.mtp_layers = m.mtp_layers;
    w.head_passes += m.mtp_layers;
    w.layers += m.mtp_layers;
    (is_moe_layer(m, m.num_layers - 1) ? w.moe_layers : w.dense_layers) += m.mtp_layers;
  }
  w.head = w.head_passes > 0;
  w.mode = p.overlap_of(w.part);
  const int t = p.tp, et = expert_tp(p);
  w.sub_batches = t > 1 ? schedules::tp_overlap_sub_batches(w.mode) : 1;
  w.sub_batch_samples = p.microbatch_size / w.sub_batches;  // check_tp_overlap: b is even when split
  const int bb = w.sub_batch_samples;
  const RecomputeModules modules = recompute_modules_of(p);
  w.layer = layer_work(m, stack, bb, t, p.sequence_parallel, modules.core_attn, p.cp, p.ep, et, modules, pw.fp8_any_layout);
  w.tp_collective_bytes = t > 1 ? memory::tp_allreduce_bytes(ms, 1) * bb : 0;
  w.tp_collectives_per_pass = t > 1 ? 2 * w.layers * w.sub_batches : 0;
  w.boundary_bytes = memory::boundary_message_bytes(ms, p.microbatch_size, t, p.sequence_parallel);
  if (w.moe_layers > 0) w.moe = moe_dispatch_work(ms, bb, t, p.ep, et, ep_path, p.moe_dispatcher);
  w.cp_ring = cp_ring_work(m, bb, t, p.cp);
  set_parameters(w, m, p, et);
  set_activation_bytes(w, ms, p, et);
  return w;
}

}  // namespace

PlanWorkload build_plan_workload(const ModelSpec& m, const ClusterSpec& c, const ParallelPlan& p, const Schedule& s) {
  check_fit(m, c, p);
  check_schedule(p, s);
  PlanWorkload pw;
  pw.model = m;
  pw.rank_model = cp_rank_model(m, p.cp);
  pw.plan = p;
  pw.fp8_any_layout = c.fp8_gemm_any_layout();
  const std::vector<int> layers = partition_layers(m, p, s.stages_per_chain());
  const Topology topo(c, p);
  const KernelStack& stack = load_stack(p.stack);
  const AllReducePath ep_path = topo.allreduce_path(expert_axis(p), p.ep, 1);  // the expert-parallel groups (moe.h)
  pw.stages.reserve(static_cast<size_t>(s.num_stages));
  const int mtp_part = mtp_model_part(m, p, s.stages_per_chain());
  for (int st = 0; st < s.num_stages; ++st) pw.stages.push_back(stage_workload(pw, s, st, layers, mtp_part, stack, ep_path));
  return pw;
}

namespace {

nlohmann::json block_json(const BlockWork& b) {
  nlohmann::json gemms = nlohmann::json::array();
  for (const Gemm& g : b.gemms)
    gemms.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"batch", g.batch}, {"fp8", g.fp8}, {"concurrent", g.concurrent}});
  return {{"gemms", gemms},        {"flash_flops", b.flash_flops},   {"flash_backward", b.flash_backward},
          {"model_flops", b.model_flops}, {"other_flops", b.other_flops}, {"memory_bytes", b.memory_bytes}};
}

nlohmann::json layer_json(const LayerWork& l) {
  return {{"attention", {{"f", block_json(l.attn_f)}, {"i", block_json(l.attn_i)}, {"w", block_json(l.attn_w)}}},
          {"mlp", {{"f", block_json(l.mlp_f)}, {"i", block_json(l.mlp_i)}, {"w", block_json(l.mlp_w)}}},
          {"moe", {{"f", block_json(l.moe_f)}, {"i", block_json(l.moe_i)}, {"w", block_json(l.moe_w)}}},
          {"head", {{"f", block_json(l.head_f)}, {"i", block_json(l.head_i)}, {"w", block_json(l.head_w)}}}};
}

nlohmann::json stage_json(const StageWorkload& w) {
  return {{"stage", w.stage},
          {"part", w.part},
          {"first_layer", w.first_layer},
          {"layers", w.layers},
          {"dense_layers", w.dense_layers},
          {"moe_layers", w.moe_layers},
          {"mtp_layers", w.mtp_layers},
          {"sub_batches", w.sub_batches},
          {"sub_batch_samples", w.sub_batch_samples},
          {"layer", layer_json(w.layer)},
          {"tp_collective_bytes", w.tp_collective_bytes},
          {"tp_collectives_per_pass", w.tp_collectives_per_pass},
          {"boundary_bytes", w.boundary_bytes},
          {"moe_all_to_all_bytes", w.moe.bytes.total_bytes},
          {"moe_all_to_all_intra_node_bytes", w.moe.bytes.intra_node_bytes},
          {"moe_all_to_all_cross_node_bytes", w.moe.bytes.cross_node_bytes},
          {"moe_probs_all_to_all_bytes", w.moe.probs_bytes.total_bytes},
          {"moe_counts_all_gather_bytes", w.moe.counts_bytes},
          {"moe_allgather_bytes", w.moe.gather_bytes},
          {"moe_collectives_forward", w.moe.collectives_f},
          {"moe_collectives_backward", w.moe.collectives_b},
          {"moe_tp_gather_bytes", w.moe.tp_gather_bytes},
          {"cp_ring_chunk_bytes", w.cp_ring.chunk_bytes},
          {"cp_ring_exchanges_forward", w.cp_ring.exchanges_f},
          {"cp_ring_exchanges_backward", w.cp_ring.exchanges_b},
          {"params", w.params},
          {"expert_params", w.expert_params},
          {"grad_bytes", w.grad_bytes},
          {"expert_grad_bytes", w.expert_grad_bytes},
          {"act_bytes", w.act_bytes},
          {"ckpt_bytes", w.ckpt_bytes},
          {"work_bytes", w.work_bytes},
          {"w_kept_bytes", w.w_kept_bytes},
          {"offloaded_layers", w.offloaded_layers},
          {"offloaded_bytes", w.offloaded_bytes}};
}

}  // namespace

nlohmann::json to_json(const PlanWorkload& w) {
  nlohmann::json stages = nlohmann::json::array();
  for (const StageWorkload& s : w.stages) stages.push_back(stage_json(s));
  return {{"stages", stages}};
}

}  // namespace stagecraft::costmodel
