// FLOP accounting, in one place, each formula with its source. b = microbatch size,
// s = sequence length, h = hidden size, f = FFN hidden size, V = vocabulary, l = layers.
#pragma once

#include "costmodel/specs.h"

namespace stagecraft::costmodel::flops {

// Forward FLOPs of the weight matrix products of one transformer layer for one microbatch:
// QKV 2bsh(h + 2h_kv) (6bsh^2 with multi-head attention; h_kv = g h/a, grouped-query attention
// shares g key/value heads among the a query heads: Ainslie et al., EMNLP 2023), attention
// output 2bsh^2, MLP 4bshf (GELU, two matrices) or 6bshf (SwiGLU, three). With f = 4h and g = a
// this is Megatron-LM's 24bsh^2 (Narayanan et al., SC 2021, Sec. 5.1).
double layer_matmul_forward_flops(const ModelSpec& m, int b);
// Forward FLOPs of the attention core (QK^T and attention x V): 4bs^2h (same source); with
// other head shapes 2bs^2 a (d_qk + d_v).
double layer_attention_forward_flops(const ModelSpec& m, int b);
// The same split by tensor-parallel block (Megatron-LM: each ends in a tp collective):
// attention block QKV + output projection 8bsh^2 (plus the core above), MLP block 4bshf
// (GELU) or 6bshf (SwiGLU). Attention block matmuls + core + MLP = layer_forward_flops.
double attention_block_matmul_flops(const ModelSpec& m, int b);
double mlp_block_forward_flops(const ModelSpec& m, int b);
// The MLP block of an MoE layer, on active parameters: each token through k routed and the shared
// experts, 2bs h f_e x (2 or 3 matrices) x (k + shared), and the router's 2bshE (Switch
// Transformer, Fedus et al., JMLR 2022; DeepSeek-V3 counts its 37B active parameters so).
double moe_block_forward_flops(const ModelSpec& m, int b);
// Both: 24bsh^2 + 4bs^2h for f = 4h (Megatron-LM SC21). A dense layer.
double layer_forward_flops(const ModelSpec& m, int b);
// An MoE layer's: attention as above, the MLP as moe_block_forward_flops.
double moe_layer_forward_flops(const ModelSpec& m, int b);
// Every transformer layer's forward: the dense layers' and the MoE layers'.
double layers_forward_flops(const ModelSpec& m, int b);
// Backward is twice the forward (Megatron-LM SC21). Split as zero-bubble runtimes split it
// (Qi et al., ICLR 2024): the input-gradient part I repeats every product once (matrix
// products and the attention core), the weight-gradient part W repeats only the matrix
// products: B = I + W = 2F.
double layer_backward_input_flops(const ModelSpec& m, int b);
double layer_backward_weight_flops(const ModelSpec& m, int b);
// Logits of the LM head, forward: 2bshV (Megatron-LM SC21). Its backward splits into
// 2bshV for the input and 2bshV for the weight.
double head_forward_flops(const ModelSpec& m, int b);

// Model FLOPs of one iteration (global batch B samples) without recomputation, as MFU counts
// them: 3 x (forward of every layer and the head) = 72Bslh^2(1 + s/(6h) + V/(12lh)) for
// f = 4h; the same count as Megatron-LM SC21's formula without its recomputation term and as
// llm.c's 6N + 6LCT per token.
double model_flops_per_iteration(const ModelSpec& m, long global_batch);
// The multi-token prediction modules' forward per b samples (ModelSpec::mtp_layers): each a layer
// of the last layer's kind, its (2h -> h) projection and the head's logits again.
double mtp_forward_flops(const ModelSpec& m, int b);
// Hardware FLOPs of one iteration, what the GPUs execute with recomputation counted, as HFU
// counts them (Korthikanti et al., MLSys 2023, Sec. 6, defining MFU and HFU): the model FLOPs,
// plus one layer forward for every (layer, sample) that a recompute action repeats
// (`recomputed_layer_samples`), plus with selective recomputation the attention core once more
// for every layer and sample. Full recomputation of every layer gives Megatron-LM SC21's
// 96Bslh^2(1 + s/(6h) + V/(16lh)) for f = 4h.
double hardware_flops_per_iteration(const ModelSpec& m, long global_batch, double recomputed_layer_samples,
                                    bool selective);
// The matrices of one layer alone (QKV, projection, MLP), no biases or norms; of its attention
// block alone (attention_projections, MLA's included).
double layer_matrix_params(const ModelSpec& m);
double attention_matrix_params(const ModelSpec& m);
// The norms' vectors of one layer: 4h (LayerNorm) or 2h (RMSNorm), plus MLA's latent norms.
double layer_norm_params(const ModelSpec& m);
// One expert's matrices: (2 or 3) h f_e.
double expert_params(const ModelSpec& m);
// An MoE layer: attention, norms, router h E, shared and routed experts; its active share (k
// routed experts of E).
double moe_layer_params(const ModelSpec& m);
double moe_layer_active_params(const ModelSpec& m);
// Parameters of one transformer layer: 12h^2 + 13h for GPT/BERT with f = 4h (Megatron-LM SC21, Sec. 5.1);
// LLaMA: 2h^2 + 2h h_kv + 3hf + 2h (no biases, RMSNorm; 4h^2 for the attention when g = a).
double layer_params(const ModelSpec& m);
// Token embedding V*h, plus learned positions s*h for GPT and BERT.
double embedding_params(const ModelSpec& m);
// Parameter count of the whole model (GPT and BERT: head tied to the embedding, counted once;
// LLaMA: separate output matrix).
double model_params(const ModelSpec& m);
// The multi-token prediction modules' parameters (ModelSpec::mtp_layers; the head shared).
double mtp_params(const ModelSpec& m);
// The parameters one token passes: model_params less the routed experts it does not take.
double active_params(const ModelSpec& m);

}  // namespace stagecraft::costmodel::flops
