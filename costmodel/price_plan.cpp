// price(PlanWorkload): the one pricer of a plan's workload into the engines' cost table.
#include <algorithm>
#include <array>
#include <tuple>
#include <initializer_list>
#include <map>

#include "costmodel/comm.h"
#include "costmodel/cp.h"
#include "costmodel/flops.h"
#include "costmodel/host.h"
#include "costmodel/memory.h"
#include "costmodel/plan_workload.h"
#include "costmodel/price.h"
#include "costmodel/profile.h"
#include "costmodel/stack.h"
#include "costmodel/topology.h"
#include "schedules/error.h"

namespace stagecraft::costmodel {

using schedules::Schedule;

namespace {

// What every stage's pricing reads: the workload, the links and the measured layers.
struct Pricing {
  const PlanWorkload& w;
  const ClusterSpec& c;
  const Schedule& s;
  const Profile* prof;
  Topology topo;
  const KernelStack& stack;
  Link tp_link;
  AllReducePath ep_path;
  std::vector<std::string> notes;
  std::map<int, std::array<LayerCost, 3>> measured;  // sub-batch samples -> transformer, head, embedding

  Pricing(const PlanWorkload& w_, const ClusterSpec& c_, const Schedule& s_, const Profile* p_)
      : w(w_), c(c_), s(s_), prof(p_), topo(c_, w_.plan), stack(load_stack(w_.plan.stack)),
        tp_link(topo.group_link(kTp)), ep_path(topo.allreduce_path(expert_axis(w_.plan), w_.plan.ep, 1)) {}

  // Measured costs, when profiled, at the microbatch size of a sub-batch of each mode.
  const std::array<LayerCost, 3>& measured_at(int bb) {
    auto it = measured.find(bb);
    if (it != measured.end()) return it->second;
    const ModelSpec& m = w.model;
    const int t = w.plan.tp;
    std::array<LayerCost, 3> lc{profiled_layer(*prof, "transformer", m, bb, t), profiled_layer(*prof, "head", m, bb, t),
                                profiled_layer(*prof, "embedding", m, bb, t)};
    for (const LayerCost& x : lc)
      if (x.extrapolated) notes.push_back(x.note);
    return measured.emplace(bb, lc).first->second;
  }
};

// One sub-batch's pass of a stage's layers by kind (price.h block_kinds): `forward` f, else the
// full backward (i and w); nd dense and nm MoE layers, `heads` passes of the head (the last
// stage's: 1 + its multi-token prediction modules); the attention
// core's kernels (in the attention blocks already, the recomputed forward with selective
// recomputation) counted as attention, the rest as products and memory-bound work. The
// communication the pass waits for is the caller's (scaled_kinds).
PassKinds layer_pass_kinds(const LayerWork& lw, bool forward, bool selective, double nd, double nm, double heads,
                           const ClusterSpec& c, const KernelStack& k) {
  auto kinds = [&](const BlockWork& b) { return block_kinds(b, lw, c, k); };
  BlockKinds all, core;
  auto add = [&](BlockKinds& into, std::initializer_list<const BlockWork*> blocks, double times) {
    for (const BlockWork* b : blocks) into.add(kinds(*b), times);
  };
  if (forward) {
    add(all, {&lw.attn_f, &lw.mlp_f}, nd);
    add(all, {&lw.attn_f, &lw.moe_f}, nm);
    if (heads > 0) add(all, {&lw.head_f}, heads);
    add(core, {&lw.core.f}, nd + nm);
  } else {
    add(all, {&lw.attn_i, &lw.attn_w, &lw.mlp_i, &lw.mlp_w}, nd);
    add(all, {&lw.attn_i, &lw.attn_w, &lw.moe_i, &lw.moe_w}, nm);
    if (heads > 0) add(all, {&lw.head_i, &lw.head_w}, heads);
    add(core, {&lw.core.i}, nd + nm);
    if (selective) add(core, {&lw.core.f}, nd + nm);
  }
  PassKinds out;
  out.attention_core_s = core.total_s() + std::max(0.0, all.flash_s - core.flash_s);
  out.products_s = std::max(0.0, all.products_s - core.products_s);
  out.memory_s = std::max(0.0, all.memory_s - core.memory_s);
  return out;
}

// A pass of `duration_s`, of which `comm_s` waits for communication and `host_s` for the host to
// issue kernels, the rest split in the shares of `shape` (its compute by kind).
PassKinds scaled_kinds(const PassKinds& shape, double duration_s, double comm_s, double host_s) {
  PassKinds out;
  out.comm_s = std::min(std::max(0.0, comm_s), duration_s);
  out.host_s = std::min(std::max(0.0, host_s), duration_s - out.comm_s);
  const double compute = shape.products_s + shape.attention_core_s + shape.memory_s;
  const double rest = duration_s - out.comm_s - out.host_s;
  if (compute <= 0) return out;
  out.products_s = rest * shape.products_s / compute;
  out.attention_core_s = rest * shape.attention_core_s / compute;
  out.memory_s = rest * shape.memory_s / compute;
  return out;
}

// One tp collective of the stage's sub-batch: a ring all-reduce of (bb, s, h); with sequence
// parallelism an all-gather and a reduce-scatter of the same buffer in its place (Korthikanti et
// al., MLSys 2023), measured ones where the profile has both.
double tp_collective_s(Pricing& pr, double bytes) {
  const int t = pr.w.plan.tp;
  const double ar = measured_comm_s(pr.prof, "all_reduce", t, bytes, pr.tp_link, ring_allreduce_s(bytes, t, pr.tp_link), pr.notes);
  if (!pr.w.plan.sequence_parallel) return ar;
  std::vector<std::string> sp_notes;
  const double ag = measured_comm_s(pr.prof, "all_gather", t, bytes, pr.tp_link, -1, sp_notes);
  const double rs = measured_comm_s(pr.prof, "reduce_scatter", t, bytes, pr.tp_link, -1, sp_notes);
  if (ag < 0 || rs < 0) return ar;
  pr.notes.insert(pr.notes.end(), sp_notes.begin(), sp_notes.end());
  return ag + rs;
}

// The vocabulary-parallel ends' collectives (Megatron-LM's VocabParallelEmbedding and
// vocab-parallel cross-entropy; runtime/model.cpp), blocking inside the end pieces as both run
// them: the embedding's all-reduce of (bb, s, h) in its forward (with sequence parallelism a
// reduce-scatter, half of comm_s); the head input's gradient all-reduce in its backward (with
// sequence parallelism an all-gather forward and a reduce-scatter backward); the loss's two
// all-reduces of its row maxima, (bb s) fp32, and exponent sums with target logits, (bb s, 2).
// Not in tp_comm_f_s / tp_allreduces_f, which count the blocks' collectives of one size.
void add_vocab_parallel_ends(Pricing& pr, InnerCosts& ic, int bb) {
  const int t = pr.w.plan.tp;
  const bool sp = pr.w.plan.sequence_parallel;
  const double rows_bytes = 4.0 * bb * pr.w.rank_model.seq_length;  // (bb s) fp32
  const double loss_s =
      measured_comm_s(pr.prof, "all_reduce", t, rows_bytes, pr.tp_link, ring_allreduce_s(rows_bytes, t, pr.tp_link), pr.notes) +
      measured_comm_s(pr.prof, "all_reduce", t, 2 * rows_bytes, pr.tp_link, ring_allreduce_s(2 * rows_bytes, t, pr.tp_link), pr.notes);
  const double part = sp ? ic.comm_s / 2 : ic.comm_s;
  if (ic.embedding) ic.embed_f_s += part;
  if (ic.head) {
    ic.head_f_s += loss_s + (sp ? part : 0);
    ic.head_i_s += part;
  }
}

// Where issuing a layer's kernels takes the host longer than the GPU takes to run them (host.h),
// the pass waits: dense layers' waits go into their MLP pieces, MoE layers' into their MoE
// blocks (the forward's priced in its two segments around the dispatch's synchronisation).
// The GPU side is the layer's compute, its exposed expert exchanges and, with tp > 1, its two
// tensor-parallel collectives a pass. Records the stage's waits for its compute by kind.
void add_host_wait(Pricing& pr, StageCost& sc, const StageWorkload& w, LayerTimes& lt) {
  const ParallelPlan& p = pr.w.plan;
  const ModelSpec& m = pr.w.model;
  const double local_experts = is_moe(m) ? static_cast<double>(m.num_experts) / p.ep : 0.0;
  const HostLayer h = host_layer(pr.stack.host, cuda_graph_scopes_of(p), local_experts,
                                 m.fp8 && m.fp8_recipe != Fp8Recipe::Delayed);
  const double tp_s = p.tp > 1 ? tp_collective_s(pr, w.tp_collective_bytes) : 0.0;
  GpuLayer g;
  g.attn_f_s = lt.attn_f_s + tp_s, g.mlp_f_s = lt.mlp_f_s + tp_s;
  g.moe_f_s = lt.moe_f_s + tp_s + sc.moe.layer.exposed_f_s;
  g.attn_b_s = lt.attn_i_s + lt.attn_w_s + tp_s, g.mlp_b_s = lt.mlp_i_s + lt.mlp_w_s + tp_s;
  g.moe_b_s = lt.moe_i_s + lt.moe_w_s + tp_s + sc.moe.layer.exposed_b_s;
  const HostWait hw = host_wait(h, g);
  lt.mlp_f_s += hw.dense_f_s, lt.mlp_i_s += hw.dense_b_s;
  lt.moe_f_s += hw.moe_f_s, lt.moe_i_s += hw.moe_b_s;
  sc.host_wait_f_s = w.sub_batches * (w.dense_layers * hw.dense_f_s + w.moe_layers * hw.moe_f_s);
  sc.host_wait_b_s = w.sub_batches * (w.dense_layers * hw.dense_b_s + w.moe_layers * hw.moe_b_s);
}

// The stage's blocks priced by shape (price.h); an MoE layer's MLP block waits for its
// all-to-alls and tp collectives (moe.h): the stage's MLP pieces take the mean of its dense and
// MoE layers (the inner schedules of experts run blocking, so the sums are exact). With cp > 1
// the ring of key/value chunks beside the core's kernels (cp.h). Returns the passes by kind.
std::array<PassKinds, 2> price_analytic_compute(Pricing& pr, StageCost& sc, const StageWorkload& w) {
  const ParallelPlan& p = pr.w.plan;
  const LayerWork& lw = w.layer;
  const RecomputeModules modules = recompute_modules_of(p);
  const bool selective = modules.core_attn;
  const double nd = w.dense_layers, nm = w.moe_layers, n = w.layers;
  InnerCosts& ic = sc.inner;
  const double heads = w.head_passes;
  const std::array<PassKinds, 2> shapes{layer_pass_kinds(lw, true, selective, nd, nm, heads, pr.c, pr.stack),
                                        layer_pass_kinds(lw, false, selective, nd, nm, heads, pr.c, pr.stack)};
  LayerTimes lt = price_layer(lw, pr.c, pr.stack, &pr.notes);
  if (nm > 0) {
    sc.moe.moe_layers = w.moe_layers;
    sc.moe.layer = price_moe_layer(w.moe, pr.ep_path, pr.tp_link);
    // Recomputing the whole MoE block (module moe) runs its forward exchanges again in the backward.
    if (modules.moe) sc.moe.layer.exposed_b_s += sc.moe.layer.exposed_f_s;
  }
  add_host_wait(pr, sc, w, lt);
  if (nm > 0) {
    auto mean = [&](double dense_s, double moe_s) { return (nd * dense_s + nm * moe_s) / n; };
    lt.mlp_f_s = mean(lt.mlp_f_s, lt.moe_f_s + sc.moe.layer.exposed_f_s);
    lt.mlp_i_s = mean(lt.mlp_i_s, lt.moe_i_s + sc.moe.layer.exposed_b_s);
    lt.mlp_w_s = mean(lt.mlp_w_s, lt.moe_w_s);
    sc.moe.exposed_f_s = w.sub_batches * nm * sc.moe.layer.exposed_f_s;
    sc.moe.exposed_b_s = w.sub_batches * nm * sc.moe.layer.exposed_b_s;
  }
  // The blocks' passes (a recomputation is its forward again), the head's for each head pass.
  std::tie(ic.attn_f_s, ic.attn_i_s, ic.attn_w_s, ic.attn_r_s) = std::tie(lt.attn_f_s, lt.attn_i_s, lt.attn_w_s, lt.attn_f_s);
  std::tie(ic.mlp_f_s, ic.mlp_i_s, ic.mlp_w_s, ic.mlp_r_s) = std::tie(lt.mlp_f_s, lt.mlp_i_s, lt.mlp_w_s, lt.mlp_f_s);
  std::tie(ic.head_f_s, ic.head_i_s, ic.head_w_s) = std::make_tuple(heads * lt.head_f_s, heads * lt.head_i_s, heads * lt.head_w_s);
  if (p.cp > 1) {
    sc.cp = cp_layer(w.cp_ring, p.cp, block_s(lw.core.f, lw, pr.c, pr.stack, &pr.notes),
                     block_s(lw.core.i, lw, pr.c, pr.stack, &pr.notes), pr.topo.group_link(kCp));
    ic.attn_f_s += sc.cp.exposed_f_s;
    ic.attn_r_s += sc.cp.exposed_f_s;
    ic.attn_i_s += sc.cp.exposed_b_s;
  }
  return shapes;
}

// Measured shards at this tp and sub-batch size (profiler/layers.h), split into the two blocks by
// their FLOP shares; the collectives come from tp_collective_s.
void price_measured_compute(Pricing& pr, StageCost& sc, const StageWorkload& w) {
  const ModelSpec& m = pr.w.model;
  if (is_moe(m))
    throw InputError("model '" + m.name + "' has experts and a measured profile: the profiler measures dense layers "
                     "(allowed: the analytic costs for MoE models)");
  const int bb = w.sub_batch_samples;
  const bool selective = pr.w.plan.recompute == RecomputePolicy::Selective;
  const double attn_mm = flops::attention_block_matmul_flops(m, bb), core = flops::layer_attention_forward_flops(m, bb);
  const double mlp = flops::mlp_block_forward_flops(m, bb);
  const auto& [layer_m, head_m, embed_m] = pr.measured_at(bb);
  const double fa = (attn_mm + core) / (attn_mm + core + mlp), wa = attn_mm / (attn_mm + mlp);
  const double ia = (attn_mm + 2 * core) / (attn_mm + 2 * core + mlp);  // I repeats the core twice (flops.h)
  InnerCosts& ic = sc.inner;
  ic.attn_f_s = layer_m.f_s * fa;
  ic.mlp_f_s = layer_m.f_s * (1 - fa);
  ic.attn_i_s = layer_m.i_s * ia + (selective ? ic.attn_f_s * core / (attn_mm + core) : 0);
  ic.mlp_i_s = layer_m.i_s * (1 - ia);
  ic.attn_w_s = layer_m.w_s * wa;
  ic.mlp_w_s = layer_m.w_s * (1 - wa);
  ic.attn_r_s = layer_m.r_s * fa;
  ic.mlp_r_s = layer_m.r_s * (1 - fa);
  const double heads = w.head_passes;
  ic.head_f_s = heads * head_m.f_s;
  ic.head_i_s = heads * head_m.i_s;
  ic.head_w_s = heads * head_m.w_s;
  ic.embed_f_s = w.first ? embed_m.f_s : 0;
  ic.embed_b_s = w.first ? embed_m.b_s : 0;
}

// The tp collectives of the stage's pieces (inner.h) and, with Transformer Engine's userbuffers,
// each collective in t chunks (one per ring step), its kernels holding the stack's SMs while they
// run beside a GEMM (stack.h).
void set_tp_pieces(Pricing& pr, StageCost& sc, const StageWorkload& w) {
  const int t = pr.w.plan.tp;
  InnerCosts& ic = sc.inner;
  ic.comm_bytes = w.tp_collective_bytes;
  ic.comm_s = t > 1 ? tp_collective_s(pr, w.tp_collective_bytes) : 0;
  // The simulator's ring carries a ring all-reduce's bytes (with sequence parallelism an all-gather
  // and a reduce-scatter move the same) and pays its 2(t - 1) steps' latency apart.
  if (t > 1)
    sc.tp_scale = flow_scale(ic.comm_s, ring_allreduce_s(w.tp_collective_bytes, t, pr.tp_link),
                             2.0 * (t - 1) * pr.tp_link.latency_s);
  if (w.mode == schedules::TpOverlap::Te) {
    ic.comm_chunks = t;
    const int k = pr.stack.tp_overlap_comm_sms;
    if (k < 1)
      throw InputError("plan.tp_overlap = te needs a stack that runs Transformer Engine's overlap; stack '" +
                       pr.stack.name + "' has tp_overlap_comm_sms = 0 (allowed: a stack with it, e.g. megatron-core-te)");
    ic.comm_sm_slowdown = pr.c.gpu_sms > k && k > 0 ? static_cast<double>(k) / (pr.c.gpu_sms - k) : 0;
  }
  if (t > 1) add_vocab_parallel_ends(pr, ic, w.sub_batch_samples);
  sc.tp_allreduces_f = w.tp_collectives_per_pass;
  sc.tp_allreduces_i = w.tp_collectives_per_pass;
  sc.tp_allreduce_bytes = ic.comm_bytes;
  sc.tp_comm_f_s = w.tp_collectives_per_pass * ic.comm_s;
  sc.tp_comm_i_s = sc.tp_comm_f_s;
}

// The stage's durations from its pieces, and by kind: what the pass waits for, and its compute
// in the work's shares.
void set_durations(StageCost& sc, const StageWorkload& w, const std::array<PassKinds, 2>& shapes) {
  if (sc.layers <= 0) return;
  const InnerDurations d = inner_durations(sc.inner);
  std::tie(sc.f_s, sc.b_s, sc.i_s, sc.w_s, sc.r_s) = std::tie(d.f_s, d.b_s, d.i_s, d.w_s, d.r_s);
  std::tie(sc.tp_exposed_f_s, sc.tp_exposed_b_s) = std::tie(d.exposed_comm_f_s, d.exposed_comm_b_s);
  const double ring = static_cast<double>(w.layers) * w.sub_batches;
  sc.kinds_f = scaled_kinds(shapes[0], sc.f_s, sc.tp_exposed_f_s + ring * sc.cp.exposed_f_s + sc.moe.exposed_f_s,
                            sc.host_wait_f_s);
  sc.kinds_b = scaled_kinds(shapes[1], sc.b_s, sc.tp_exposed_b_s + ring * sc.cp.exposed_b_s + sc.moe.exposed_b_s,
                            sc.host_wait_b_s);
}

// Activation offloading (plan.offload_layers, Megatron-Core's cpu_offload.py): each offloaded
// layer's kept bytes go to host memory while the next layer computes and come back while the
// layer after it in the backward computes; what a copy takes beyond that layer's pass shows. One
// layer's bytes more are in use, the copy in flight.
void set_offload(StageCost& sc, const StageWorkload& w, const ClusterSpec& c) {
  if (w.offloaded_layers <= 0 || w.layers <= 0) return;
  const double layer_bytes = w.offloaded_bytes / w.offloaded_layers;
  const double copy_s = layer_bytes / c.host_link_bandwidth_Bps;
  const double f_exposed = w.offloaded_layers * std::max(0.0, copy_s - sc.f_s / w.layers);
  const double b_exposed = w.offloaded_layers * std::max(0.0, copy_s - sc.b_s / w.layers);
  const double i_exposed = w.offloaded_layers * std::max(0.0, copy_s - sc.i_s / w.layers);
  sc.f_s += f_exposed;
  sc.r_s += f_exposed;
  sc.b_s += b_exposed;
  sc.i_s += i_exposed;
  sc.work_bytes += layer_bytes;
}

// Activations: the workload's formulas, or the profile's measured bytes where it has them.
void set_memory(Pricing& pr, StageCost& sc, const StageWorkload& w) {
  const ParallelPlan& p = pr.w.plan;
  const bool selective = p.recompute == RecomputePolicy::Selective;
  sc.act_bytes = w.act_bytes;
  sc.ckpt_bytes = w.ckpt_bytes;
  sc.work_bytes = w.work_bytes + w.sub_batches * 8 * sc.cp.chunk_bytes;  // the ring's K, V and, backward, dK, dV
  sc.w_kept_bytes = w.w_kept_bytes;
  const int bb = w.sub_batch_samples, sb = w.sub_batches;
  const bool measured_bytes = pr.prof && !p.sequence_parallel && (!selective || pr.measured_at(bb)[0].selective_activation_bytes > 0);
  if (measured_bytes) {
    const auto& [layer_m, head_m, embed_m] = pr.measured_at(bb);
    const double n = w.layers;
    // Selective recomputation: the layer's bytes with its attention core recomputed.
    const double layer_x = selective ? layer_m.selective_activation_bytes : layer_m.activation_bytes;
    const double layer_work = selective ? layer_m.selective_backward_working_bytes : layer_m.backward_working_bytes;
    const double head_x = w.head_passes * head_m.activation_bytes, embed_x = w.first ? embed_m.activation_bytes : 0;
    // A layer's measured bytes hold its output, not its input (the profiler's input existed
    // before): a stage's first layer reads the embedding's output, or else the received input,
    // one checkpoint's bytes, kept as well.
    const double input_x = w.first ? 0 : layer_m.checkpoint_bytes;
    sc.act_bytes = sb * (n * layer_x + head_x + embed_x + input_x);
    sc.ckpt_bytes = sb * (n * checkpoints_per_layer(w.mode, p.tp) * layer_m.checkpoint_bytes + head_x + embed_x);
    if (layer_work > 0 && (!w.head || head_m.backward_working_bytes > 0))
      sc.work_bytes = sb * std::max(n > 0 ? layer_work : 0.0, w.head ? head_m.backward_working_bytes : 0.0);
    if (layer_m.weight_kept_bytes > 0 && (!w.head || head_m.weight_kept_bytes > 0))
      sc.w_kept_bytes = sb * (n * layer_m.weight_kept_bytes + (w.head ? head_m.weight_kept_bytes : 0));
  }
  sc.offload_s = sc.act_bytes / pr.c.host_link_bandwidth_Bps;
  sc.reload_s = sc.offload_s;
}

void price_stage(Pricing& pr, CostTable& table, const StageWorkload& w) {
  StageCost& sc = table.stages[static_cast<size_t>(w.stage)];
  const ParallelPlan& p = pr.w.plan;
  sc.layers = w.layers;
  sc.weight = static_cast<double>(w.layers) * pr.s.num_ranks / pr.w.model.num_layers;
  InnerCosts& ic = sc.inner;
  ic.mode = w.mode;
  ic.sub_batches = w.sub_batches;
  ic.layers = sc.layers;
  ic.embedding = w.first;
  ic.head = w.head;
  std::array<PassKinds, 2> shapes{};
  if (!pr.prof) shapes = price_analytic_compute(pr, sc, w);
  else price_measured_compute(pr, sc, w);
  set_tp_pieces(pr, sc, w);
  set_durations(sc, w, shapes);
  // Point-to-point at the stage's boundaries, and the parameters' data-parallel reduction.
  set_boundary_transfers(sc, pr.s, w.stage, pr.topo, w.boundary_bytes, w.boundary_bytes, pr.prof, table.notes);
  const size_t rank = static_cast<size_t>(pr.s.rank_of(w.stage));
  table.params[rank] += w.params;
  table.expert_params[rank] += w.expert_params;
  table.fp8_params[rank] += w.linear_params;
  sc.moe.expert_params = w.expert_params;
  sc.grad_bytes = w.grad_bytes;
  sc.expert_grad_bytes = w.expert_grad_bytes;
  set_grad_reduction(sc, pr.s, w.stage, pr.topo, p, pr.prof, table.notes);
  set_memory(pr, sc, w);
  set_offload(sc, w, pr.c);
  if (p.zero == 3) set_fsdp(sc, pr.w.model, pr.c, p, pr.topo, w.first, w.head, pr.prof, table.notes);
  set_overlapped_pair(sc, pr.c.gpu_sms);
}

}  // namespace

CostTable price(const PlanWorkload& w, const ClusterSpec& c, const Schedule& s, const Profile* prof) {
  const ParallelPlan& p = w.plan;
  if (p.cp > 1 && prof)
    throw InputError("plan.cp = " + std::to_string(p.cp) + " with a measured profile: the profile's layers ran whole "
                     "sequences, not a ring of chunks (allowed: cp = 1 with --profile, or the analytic costs)");
  if (prof && p.offload_layers > 0)
    throw InputError("plan.offload_layers = " + std::to_string(p.offload_layers) + " with a measured profile: the "
                     "profiler's bytes are whole layers' (allowed: offload_layers 0 with --profile, or the analytic costs)");
  if (prof && recompute_modules_of(p).any_beyond_core())
    throw InputError("plan.recompute_modules beyond core_attn with a measured profile: the profiler measures whole layers "
                     "and the core's selective recomputation (allowed: core_attn with --profile, or the analytic costs)");
  Pricing pr(w, c, s, prof);
  CostTable table;
  table.stages.resize(static_cast<size_t>(s.num_stages));
  const size_t R = static_cast<size_t>(s.num_ranks);
  table.params.assign(R, 0.0);
  table.fp8_params.assign(R, 0.0);
  table.expert_params.assign(R, 0.0);
  for (const StageWorkload& sw : w.stages) price_stage(pr, table, sw);
  set_rank_costs(table, w.model, c, p, pr.topo, prof);
  table.notes.insert(table.notes.end(), pr.notes.begin(), pr.notes.end());
  std::sort(table.notes.begin(), table.notes.end());
  table.notes.erase(std::unique(table.notes.begin(), table.notes.end()), table.notes.end());
  return table;
}

}  // namespace stagecraft::costmodel
