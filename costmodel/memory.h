// Memory accounting, in one place, each formula with its source. Activation formulas are for
// 16-bit activations (Korthikanti et al., "Reducing Activation Recomputation in Large
// Transformer Models", MLSys 2023) and are scaled by bytes_per_activation / 2.
#pragma once

#include "costmodel/specs.h"

namespace stagecraft::costmodel::memory {

// `moe_tp` > 0 (an MoE layer, ModelSpec::num_experts, whose experts run at that tensor-parallel
// degree; the layer functions below take it too; 0 a dense layer): the MLP's terms become the
// router's probabilities (sbE fp32, /t with sp), per routed copy (k x moe_load_factor a token,
// the busiest rank's) the expert's input 2sbh (gathered over the tp ranks and kept whole on each
// when moe_tp > 1; with moe_tp 1 each rank's s/t tokens' copies, /t), its intermediates as an MLP
// of width f_e and its output 2sbh, /t; the shared experts as an MLP of width shared x f_e. Multi-head latent attention keeps Q and K at a d_qk,
// V and the projection's input at a d_v, and its two latents whole (2(q_lora + kv_lora) sb).
// Activations one transformer layer keeps for its backward, one microbatch of b samples,
// tensor parallel t, no sequence parallelism: sbh(10 + 24/t + 5as/(ht)) for f = 4h
// (Korthikanti Sec. 4.2, eq. 2). The 24 splits into 8 (attention: Q, K, V, output-projection
// input; 4 + 4g/a with g key/value heads, grouped-query attention keeping K and V g/a as wide)
// and 4f/h (MLP: GELU input and output); a gated MLP (LLaMA) keeps 6f/h (assumption: gate, up
// and activation outputs).
// With sequence parallelism (sp) every term is split t ways: sbh/t (34 + 5as/h) (Korthikanti
// Sec. 4.2.2, eq. 4).
// FP8 (ModelSpec::fp8): the four linear products keep their inputs as the FP8 copies their casts
// made (one byte, Transformer Engine's saved tensors) instead of 16-bit: the QKV and the first
// MLP inputs (2sbh -> sbh each, replicated), the projection's (2sbh/t -> sbh/t) and the down
// matrix's (2fsb/t -> fsb/t): sbh(8 + (19 + ...)/t) in place of sbh(10 + 24/t) for GPT, f = 4h.
double layer_activation_bytes(const ModelSpec& m, int b, int t, bool sp = false, int moe_tp = 0);
// The attention core's share of it: 5as^2b/t at 2 bytes when materialised; with a fused kernel
// (AttentionKernel::Fused) only the softmax's per-row log-sum-exp, 4as b/t bytes in fp32
// (FlashAttention, Dao et al., NeurIPS 2022, Algorithm 1: the backward recomputes the scores
// from Q, K, V, the output and the log-sum-exp, which the other terms already keep).
double attention_core_bytes(const ModelSpec& m, int b, int t);
// With selective recomputation the attention core's 5as/(ht) term is recomputed, not kept
// (Korthikanti Sec. 5).
double layer_activation_selective_bytes(const ModelSpec& m, int b, int t, bool sp = false, int moe_tp = 0);
// What selective recomputation's modules beyond the core (specs.h RecomputeModules) leave out of
// a layer's kept bytes, with the formulas above: layernorm the QKV's and the MLP's inputs (the
// norms' outputs, 2 x 2sbh; sbh each in FP8), mla_up_proj MLA's Q, K and V, mlp a dense layer's
// MLP intermediates, moe_act each routed copy's activation output (2 f_e per token and copy; f_e
// in FP8), shared_experts the shared experts' intermediates, moe everything the MoE block keeps
// beyond its input. `moe_tp` as layer_activation_bytes (0: a dense layer).
double recomputed_module_bytes(const ModelSpec& m, int b, int t, bool sp, int moe_tp, const RecomputeModules& r);
// With full recomputation only the layer input stays: 2sbh, 2sbh/t with sp (Korthikanti
// Sec. 4.3).
double layer_checkpoint_bytes(const ModelSpec& m, int b, int t = 1, bool sp = false);
// Without dropout (ModelSpec::dropout false) the masks go: 8sbh replicated instead of 10sbh,
// and of the core 2as^2b/t (the softmax output) instead of 5as^2b/t.
// First stage: the embedding's dropout mask, sbh (one byte per element); /t with sp; none
// without dropout.
double embedding_activation_bytes(const ModelSpec& m, int b, int t = 1, bool sp = false);
// Last stage: the final norm's input 2sbh (/t with sp) and the logits kept in 32-bit for the
// cross-entropy, 4sbV/t (Korthikanti Sec. 4.3).
double head_activation_bytes(const ModelSpec& m, int b, int t, bool sp = false);

// Working memory of one layer's backward (transient, on top of what the forwards keep): the
// largest pair of same-shaped gradients alive together, the softmax's output and input
// gradients (2as^2b/t elements) or the GELU's (2fsb/t), plus the gradient of the layer's output
// (sbh, /t with sp). An estimate from the backward's data flow (no paper gives this term; with
// flash attention the softmax pair is never materialised, so the GELU pair rules); `stagecraft
// profile` measures it (docs/memory.md).
double layer_backward_working_bytes(const ModelSpec& m, int b, int t, bool sp = false, int moe_tp = 0);

// Working memory of the head's backward: the logits' gradient in 32-bit (4sbV/t) and the final
// norm's input gradient (sbh, /t with sp). Same estimate as above.
double head_backward_working_bytes(const ModelSpec& m, int b, int t, bool sp = false);

// What a split backward's I leaves for its W (zero bubble; Qi et al., ICLR 2024): each linear
// layer's weight gradient reads its input and its output's gradient. Per layer: the inputs of
// QKV and of the first MLP matrix (sbh each, /t with sp: the all-gather is redone), of the
// projection and of the second MLP matrix (sbh/t, fsb/t), and the output gradients of QKV and
// of the first MLP matrices ((h + 2h_kv)sb/t, fsb/t per matrix: two with SwiGLU) and of the two
// row-parallel products (sbh each, /t with sp): (4 + 12/t) sbh elements for GPT (f = 4h, g = a),
// 16 sbh/t with sp. From the data flow, as the working set.
double layer_weight_kept_bytes(const ModelSpec& m, int b, int t, bool sp = false, int moe_tp = 0);
// The head's: its input (sbh, /t with sp) and the logits' gradient (sbV/t, 32-bit as the loss
// computes it).
double head_weight_kept_bytes(const ModelSpec& m, int b, int t, bool sp = false);

// Bytes of one point-to-point activation or gradient message between stages: sbh elements,
// a 1/t slice of them with sequence parallelism (each tp rank sends its part).
double boundary_message_bytes(const ModelSpec& m, int b, int t = 1, bool sp = false);
// Bytes of one tensor-parallel all-reduce (Megatron: two per layer forward, two backward):
// sbh elements (Megatron-LM, Shoeybi et al. 2019, Sec. 3).
double tp_allreduce_bytes(const ModelSpec& m, int b);

// Parameters of one layer held by one tensor-parallel rank: weight matrices split t ways (MLA's
// down projections replicated, as Megatron-Core's MLA), norms (and, for simplicity, biases) replicated.
double layer_params_per_rank(const ModelSpec& m, int t);
// An MoE layer's on one rank of tp t, ep ep and expert tp et: `dense` reduced over dp x cp
// (attention, norms, router h E whole, shared experts / t), `experts` its E / ep routed experts
// / et (et = t, Megatron-Core's default, or 1), reduced over the expert-data-parallel group;
// `linear` the matrices among them (what FP8 copies).
struct MoeLayerParams {
  double dense = 0, experts = 0, linear = 0;
};
MoeLayerParams moe_layer_params_per_rank(const ModelSpec& m, int t, int ep, int et);
// Transformer layers [first, first + n) on one rank, dense and MoE alike: every parameter (`dense`
// here counts them all), the routed experts' among them, and the matrices (FP8's copies). The one
// rule for the cost table and the planner's bound.
MoeLayerParams layers_params_per_rank(const ModelSpec& m, int first, int n, int t, int ep, int et);
// Embedding (vocabulary-parallel, Megatron) held by one tensor-parallel rank.
double embedding_params_per_rank(const ModelSpec& m, int t);
// LM head on the last stage (a copy of the tied embedding) plus the final norm.
double head_params_per_rank(const ModelSpec& m, int t);

// Bytes per parameter for weights, gradients and Adam states: weight in bytes_per_param, gradient
// in grad_bytes_per_param (specs.h), the master copy and the two moments in master_bytes_per_param
// and moment_bytes_per_param (by default a 32-bit master when weights are narrower, two 32-bit
// moments; narrower states as the recipes set them). 16 bytes for mixed-precision Adam (ZeRO paper, Rajbhandari et al. SC20);
// 18 for bf16 as Megatron-LM trains it (fp32 gradients).
// With a distributed optimizer over dp ranks (ZeRO, Rajbhandari et al. SC20, Sec. 5.1; Megatron's
// distributed optimizer for zero = 1): zero = 1 divides the master copy and the moments by dp
// (2 + 2 + 12/dp bytes for 16-bit weights), zero = 2 the gradients as well (2 + 14/dp), zero = 3
// the weights too, whose 16-bit copy exists only while gathered (PyTorch FSDP's mixed precision
// casts the gathered 32-bit shard to param_dtype): (4 + g + 8)/dp, 16/dp for fp32 gradients
// (ZeRO-3, Rajbhandari et al. Sec. 5.3, counts (2 + 2 + 12)/N_d, keeping a 16-bit shard as
// well). `dp` is the shard group under hybrid sharding (fsdp.h shard_degree).
double static_bytes_per_param(const ModelSpec& m, int zero = 0, int dp = 1);
// A lower bound on the largest per-GPU memory of plan p from its static memory alone: the rank
// holding the most parameters holds at least the average over the pp ranks of one pipeline (every
// layer, the embedding and the head, tp-split as above) times the static bytes per parameter of
// the plan's ZeRO stage (static_bytes_per_param), exactly as the cost table counts static memory.
// Activations only add to it. The planner prunes by it; `train` refuses by it (runtime/support/rules.h).
double static_lower_bound_bytes(const ModelSpec& m, const ParallelPlan& p);
// FP8 (ModelSpec::fp8): each linear weight of the transformer layers also has its FP8 copies,
// made once per step and kept across the microbatches (Transformer Engine's weight cache,
// `is_first_microbatch`): specs.h fp8_weight_copy_bytes and fp8_weight_cast_bytes, by recipe
// and GPU.
// FP8 with zero 3 (FP8 parameter all-gather, costmodel/fsdp.h): each rank keeps its shard of the
// linear weights in FP8 (Megatron-Core --fp8-param-gather; torchao's float8 all-gather casts the
// shard before gathering it) and, after the step, casts its updated shard from the fp32 master:
// read 4 bytes, write 1.
inline constexpr double kFp8ShardCastTrafficBytes = 5;
// The matrices' parameters of one layer on one of t ranks (layer_params_per_rank less norms and
// biases): what FP8 copies.
double layer_linear_params_per_rank(const ModelSpec& m, int t);

// Bytes an Adam step reads and writes per parameter (weight, gradient, master, moments in;
// weight, master, moments out): the optimizer step is memory-bound.
double optimizer_traffic_bytes_per_param(const ModelSpec& m);

}  // namespace stagecraft::costmodel::memory
