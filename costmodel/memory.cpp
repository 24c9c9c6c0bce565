#include "costmodel/memory.h"

#include <algorithm>

#include "costmodel/flops.h"
#include "costmodel/fsdp.h"
#include "costmodel/moe.h"

namespace stagecraft::costmodel::memory {
namespace {
double D(int v) { return static_cast<double>(v); }
double sbh(const ModelSpec& m, int b) { return D(m.seq_length) * D(b) * D(m.hidden_size); }
double scale(const ModelSpec& m) { return D(m.bytes_per_activation) / 2.0; }
// Bytes per element of a linear product's input kept for its backward, per sbh at 16 bits: 2, or 1
// where FP8 keeps it cast (Transformer Engine saves its GEMM inputs quantised).
double kept_input(const ModelSpec& m) { return m.fp8 ? 1.0 : 2.0; }
double up_matrices(const ModelSpec& m) { return m.kind == ModelKind::Llama ? 2.0 : 1.0; }
// An MLP of width f kept per token, in bytes per h at 16 bits: GELU input and output 4f/h, SwiGLU's
// gate, up and activation outputs 6f/h (16 for GPT with f = 4h); the down matrix's input in one
// byte with FP8.
double mlp_kept(const ModelSpec& m, double f) {
  const double per_h = f / D(m.hidden_size);
  return (m.kind == ModelKind::Llama ? 6.0 : 4.0) * per_h - (m.fp8 ? per_h : 0.0);
}
// The attention block's tensor-parallel part, bytes per sbh at 16 bits: Q 2sbh, K and V 2sbh g/a
// each, the projection's input 2sbh (sbh in FP8): Korthikanti's 8sbh when g = a. Other head
// shapes (MLA) by their widths: Q and K a d_qk, V and the projection's input a d_v.
double attention_sharded(const ModelSpec& m) {
  const double h = D(m.hidden_size), a = D(m.num_heads);
  const double q = a * qk_head_dim(m);
  const double k = m.kv_lora_rank > 0 ? a * qk_head_dim(m) : kv_hidden_size(m);
  const double v = m.kv_lora_rank > 0 ? a * v_head_dim(m) : kv_hidden_size(m) * v_head_dim(m) / head_dim(m);
  const double o = a * v_head_dim(m);
  return (2 * (q + k + v) + kept_input(m) * o) / h;
}
// MLA's latents, the inputs of its up projections (replicated on the tp ranks): 2(q_lora + kv_lora)/h.
double mla_latents(const ModelSpec& m) {
  return m.kv_lora_rank > 0 ? 2.0 * (D(m.q_lora_rank) + D(m.kv_lora_rank)) / D(m.hidden_size) : 0.0;
}
// What the MLP block of an MoE layer keeps beyond its input, bytes per sbh at 16 bits, split into
// what every tp rank keeps whole and its share. The router's probabilities (sbE fp32; /t with sp);
// per routed copy (k load of them a token): the expert's input as gathered over the tp ranks, 2h
// (whole; h in FP8: Transformer Engine's GroupedLinear saves its inputs quantised,
// grouped_linear.py) and the expert's intermediates (mlp_kept of f_e, /t). Not its output:
// Megatron-Core applies the routing probabilities inside the activation (weighted SwiGLU, MCore
// 0.13's memory-efficient permutation; experts.py), so the combine's backward needs no saved
// output. The shared experts as a dense MLP of width shared x f_e.
struct MoeKept {
  double whole = 0, sharded = 0, router = 0;
};
MoeKept moe_kept(const ModelSpec& m, int moe_tp) {
  const double h = D(m.hidden_size), copies = D(m.experts_per_token) * moe_load_factor(m);
  const double input = kept_input(m);
  MoeKept k;
  k.router = 4.0 * D(m.num_experts) / h;
  k.whole = moe_tp > 1 ? copies * input : 0.0;  // gathered over tp; with expert tp 1 the rank's own copies, /t
  k.sharded = copies * (mlp_kept(m, m.expert_ffn_hidden_size) + (moe_tp > 1 ? 0.0 : input)) +
              mlp_kept(m, D(m.num_shared_experts) * m.expert_ffn_hidden_size);
  return k;
}
}  // namespace

double recomputed_module_bytes(const ModelSpec& m, int b, int t, bool sp, int moe_tp, const RecomputeModules& r) {
  const double h = D(m.hidden_size), in = kept_input(m);
  double replicated = 0, sharded = 0, whole = 0;  // per sbh at 16 bits: on each tp rank (/t with sp), split
                                                  // t ways, whole on each tp rank (the experts' gathered copies)
  if (r.layernorm) replicated += 2 * in;  // the norms' outputs: the QKV's and the MLP's inputs
  if (r.mla_up_proj && m.kv_lora_rank > 0) {  // the up projections' outputs: Q, K and V of every head
    const double a = D(m.num_heads);
    sharded += 2 * (a * qk_head_dim(m) + a * qk_head_dim(m) + a * v_head_dim(m)) / h;
  }
  if (moe_tp == 0) {
    if (r.mlp) sharded += mlp_kept(m, m.ffn_hidden_size);
  } else if (r.moe) {  // the whole MoE block: router, copies, experts; its input (the norm's output) stays
    const MoeKept k = moe_kept(m, moe_tp);
    whole += k.whole;
    replicated += k.router;
    sharded += k.sharded;
  } else {
    const double copies = D(m.experts_per_token) * moe_load_factor(m), fe = D(m.expert_ffn_hidden_size);
    if (r.moe_act) sharded += copies * kept_input(m) * fe / h;  // the activation's output (the down product's input)
    if (r.shared_experts) sharded += mlp_kept(m, D(m.num_shared_experts) * fe);
  }
  return sbh(m, b) * ((sp ? replicated / t : replicated) + whole + sharded / t) * scale(m);
}

double layer_activation_selective_bytes(const ModelSpec& m, int b, int t, bool sp, int moe_tp) {
  // LN inputs 2 x 2sbh, QKV and MLP inputs 2 x 2sbh, and with dropout its two masks 2 x sbh;
  // with FP8 the two inputs kept in one byte (sbh each).
  const double full = (m.dropout ? 10.0 : 8.0) - (m.fp8 ? 2.0 : 0.0) + mla_latents(m);
  double replicated = sp ? full / t : full;
  double mlp = mlp_kept(m, m.ffn_hidden_size);
  if (moe_tp > 0) {
    const MoeKept k = moe_kept(m, moe_tp);
    replicated += k.whole + (sp ? k.router / t : k.router);
    mlp = k.sharded;
  }
  return sbh(m, b) * (replicated + (attention_sharded(m) + mlp) / t) * scale(m);
}

double attention_core_bytes(const ModelSpec& m, int b, int t) {
  const double a = D(m.num_heads) / t, s = D(m.seq_length);
  if (m.attention_kernel == AttentionKernel::Fused) return 4.0 * a * s * D(b);  // (b, a/t, s) fp32 log-sum-exp
  // Korthikanti's 5as^2b/t at 2 bytes: the softmax output 2as^2b, with dropout its mask as^2b
  // and its output 2as^2b.
  return (m.dropout ? 5.0 : 2.0) * a * s * s * D(b) * scale(m);
}

double layer_activation_bytes(const ModelSpec& m, int b, int t, bool sp, int moe_tp) {
  return layer_activation_selective_bytes(m, b, t, sp, moe_tp) + attention_core_bytes(m, b, t);
}

double layer_checkpoint_bytes(const ModelSpec& m, int b, int t, bool sp) {
  return 2.0 * sbh(m, b) * scale(m) / (sp ? t : 1);
}

double layer_backward_working_bytes(const ModelSpec& m, int b, int t, bool sp, int moe_tp) {
  const double softmax_pair = m.attention_kernel == AttentionKernel::Fused
                                  ? 0.0  // the fused backward recomputes scores tile by tile
                                  : 2.0 * D(m.num_heads) * D(m.seq_length) * D(m.seq_length) * D(b) / t;
  // MoE: the pair over every routed copy (k load a token) at the expert's width.
  const double width = moe_tp > 0 ? D(m.experts_per_token) * moe_load_factor(m) * D(m.expert_ffn_hidden_size) : D(m.ffn_hidden_size);
  const double gelu_pair = 2.0 * width * D(m.seq_length) * D(b) / t;
  const double output_grad = D(m.seq_length) * D(b) * D(m.hidden_size) / (sp ? t : 1);
  return (std::max(softmax_pair, gelu_pair) + output_grad) * D(m.bytes_per_activation);
}

double head_backward_working_bytes(const ModelSpec& m, int b, int t, bool sp) {
  return 4.0 * D(m.seq_length) * D(b) * D(m.vocab_size) / t + sbh(m, b) * scale(m) * 2.0 / (sp ? t : 1);
}

double layer_weight_kept_bytes(const ModelSpec& m, int b, int t, bool sp, int moe_tp) {
  double full = sp ? 4.0 / t : 4.0;  // column inputs and row-parallel output gradients
  // Sharded, per h: the projection's and the down matrix's inputs (h, f), the gradients of the
  // QKV and up outputs (h + 2h_kv, f per up matrix): 12 for GPT with f = 4h and g = a. Other
  // projections (MLA) by their widths: split ones' output gradients (column) or inputs (row),
  // replicated ones' output gradients kept whole.
  const double h = D(m.hidden_size), up = up_matrices(m);
  double sharded = 0;
  for (const Projection& pr : attention_projections(m)) {
    if (!pr.split) full += pr.out / h;
    else sharded += (pr.row ? pr.in : pr.out) / h;
  }
  double f = D(m.ffn_hidden_size);
  if (moe_tp > 0) {  // every routed copy's input (gathered, whole; the rank's own with expert tp 1) and its expert's; the shared experts
    const double copies = D(m.experts_per_token) * moe_load_factor(m);
    (moe_tp > 1 ? full : sharded) += copies;
    sharded += copies * (1 + up) * D(m.expert_ffn_hidden_size) / h;
    f = D(m.num_shared_experts) * D(m.expert_ffn_hidden_size);
  }
  sharded += (f + up * f) / h;
  return sbh(m, b) * (full + sharded / t) * D(m.bytes_per_activation);
}

double head_weight_kept_bytes(const ModelSpec& m, int b, int t, bool sp) {
  return sbh(m, b) * D(m.bytes_per_activation) / (sp ? t : 1) + 4.0 * D(m.seq_length) * D(b) * D(m.vocab_size) / t;
}

double embedding_activation_bytes(const ModelSpec& m, int b, int t, bool sp) {
  return m.dropout ? sbh(m, b) / (sp ? t : 1) : 0.0;  // the dropout mask, one byte per element
}

double head_activation_bytes(const ModelSpec& m, int b, int t, bool sp) {
  return 2.0 * sbh(m, b) * scale(m) / (sp ? t : 1) + 4.0 * D(m.seq_length) * D(b) * D(m.vocab_size) / t;
}

double boundary_message_bytes(const ModelSpec& m, int b, int t, bool sp) {
  return sbh(m, b) * D(m.bytes_per_activation) / (sp ? t : 1);
}

double tp_allreduce_bytes(const ModelSpec& m, int b) { return sbh(m, b) * D(m.bytes_per_activation); }

namespace {
// The attention block's matrices every tp rank holds whole (MLA's down projections).
double replicated_attention_params(const ModelSpec& m) {
  double n = 0;
  for (const Projection& pr : attention_projections(m))
    if (!pr.split) n += pr.in * pr.out;
  return n;
}
}  // namespace

double layer_params_per_rank(const ModelSpec& m, int t) {
  const double whole = flops::layer_norm_params(m) + replicated_attention_params(m);
  return (flops::layer_params(m) - whole) / t + whole;
}

double layer_linear_params_per_rank(const ModelSpec& m, int t) {
  const double whole = replicated_attention_params(m);
  return (flops::layer_matrix_params(m) - whole) / t + whole;
}

MoeLayerParams moe_layer_params_per_rank(const ModelSpec& m, int t, int ep, int et) {
  const double whole = flops::layer_norm_params(m) + replicated_attention_params(m) + D(m.hidden_size) * D(m.num_experts);
  const double attention = flops::attention_matrix_params(m) - replicated_attention_params(m);
  MoeLayerParams p;
  p.dense = whole + (attention + D(m.num_shared_experts) * flops::expert_params(m)) / t;
  p.experts = D(m.num_experts) / ep * flops::expert_params(m) / et;
  p.linear = replicated_attention_params(m) + (attention + D(m.num_shared_experts) * flops::expert_params(m)) / t + p.experts;
  return p;
}

MoeLayerParams layers_params_per_rank(const ModelSpec& m, int first, int n, int t, int ep, int et) {
  const double nm = moe_layers_in(m, first, n), nd = n - nm;
  const MoeLayerParams moe = nm > 0 ? moe_layer_params_per_rank(m, t, ep, et) : MoeLayerParams{};
  MoeLayerParams p;
  p.experts = nm * moe.experts;
  p.dense = nd * layer_params_per_rank(m, t) + nm * (moe.dense + moe.experts);
  p.linear = nd * layer_linear_params_per_rank(m, t) + nm * moe.linear;
  return p;
}

double embedding_params_per_rank(const ModelSpec& m, int t) { return flops::embedding_params(m) / t; }

double head_params_per_rank(const ModelSpec& m, int t) {
  double h = D(m.hidden_size);
  return D(m.vocab_size) * h / t + 2 * h;
}

double static_bytes_per_param(const ModelSpec& m, int zero, int dp) {
  const double master = master_bytes_per_param(m), moments = moment_bytes_per_param(m);
  const double weights = m.bytes_per_param, grads = grad_bytes_per_param(m), states = master + moments;
  const double shard = zero >= 1 ? dp : 1;
  // Zero 3 keeps the 16-bit copy only while a unit is gathered (FSDP's param_dtype cast of the
  // gathered 32-bit shard), so what stays is the master shard and the rest; a master of the
  // 16 low bits (2) or none keeps the weights' shard beside it.
  if (zero == 3) return (master >= 4 ? master : weights + master) / shard + grads / shard + moments / shard;
  return weights + (zero >= 2 ? grads / dp : grads) + states / shard;
}

double static_lower_bound_bytes(const ModelSpec& m, const ParallelPlan& p) {
  const MoeLayerParams layers = layers_params_per_rank(m, 0, m.num_layers, p.tp, p.ep, expert_tp(p));
  const double params = layers.dense + embedding_params_per_rank(m, p.tp) +
                        head_params_per_rank(m, p.tp);  // one tp (and ep) rank's share of one model copy
  const double experts = layers.experts;  // the routed experts among them, sharded over their own group
  const int expert_shard = p.zero >= 1 ? expert_data_parallel(p) : 1;
  return ((params - experts) * static_bytes_per_param(m, p.zero, shard_degree(p)) +
          experts * static_bytes_per_param(m, p.zero, expert_shard)) /
         p.pp;
}

double optimizer_traffic_bytes_per_param(const ModelSpec& m) {
  const double master = master_bytes_per_param(m), moments = moment_bytes_per_param(m);
  const double in = m.bytes_per_param + grad_bytes_per_param(m) + master + moments;
  const double out = m.bytes_per_param + master + moments;
  return in + out;
}

}  // namespace stagecraft::costmodel::memory
