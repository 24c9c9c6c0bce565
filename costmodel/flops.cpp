#include "costmodel/flops.h"

namespace stagecraft::costmodel::flops {
namespace {
double D(int v) { return static_cast<double>(v); }
int mlp_matrices(const ModelSpec& m) { return m.kind == ModelKind::Llama ? 3 : 2; }
}  // namespace

double attention_block_matmul_flops(const ModelSpec& m, int b) {
  double bs = D(b) * D(m.seq_length), f = 0;
  for (const Projection& pr : attention_projections(m)) f += 2 * bs * pr.in * pr.out;  // QKV and projection: 8bsh^2 when g = a
  return f;
}

double mlp_block_forward_flops(const ModelSpec& m, int b) {
  double bs = D(b) * D(m.seq_length), h = D(m.hidden_size), f = D(m.ffn_hidden_size);
  return 2 * bs * h * f * mlp_matrices(m);
}

double moe_block_forward_flops(const ModelSpec& m, int b) {
  const double bs = D(b) * D(m.seq_length), h = D(m.hidden_size), fe = D(m.expert_ffn_hidden_size);
  const double experts = D(m.experts_per_token) + D(m.num_shared_experts);  // the experts one token passes
  return 2 * bs * h * fe * mlp_matrices(m) * experts + 2 * bs * h * D(m.num_experts);  // experts, router
}

double layer_matmul_forward_flops(const ModelSpec& m, int b) {
  return attention_block_matmul_flops(m, b) + mlp_block_forward_flops(m, b);
}

double layer_attention_forward_flops(const ModelSpec& m, int b) {
  double s = D(m.seq_length);
  // 4bs^2h when d_qk = d_v = h/a; sliding windows: the mean layer's share (attention_pair_share).
  return 2 * D(b) * s * s * D(m.num_heads) * (qk_head_dim(m) + v_head_dim(m)) * attention_pair_share(m);
}

double moe_layer_forward_flops(const ModelSpec& m, int b) {
  return attention_block_matmul_flops(m, b) + layer_attention_forward_flops(m, b) + moe_block_forward_flops(m, b);
}

double layers_forward_flops(const ModelSpec& m, int b) {
  const double moe = moe_layers_in(m, 0, m.num_layers);
  return (D(m.num_layers) - moe) * layer_forward_flops(m, b) + moe * moe_layer_forward_flops(m, b);
}

double layer_forward_flops(const ModelSpec& m, int b) {
  return layer_matmul_forward_flops(m, b) + layer_attention_forward_flops(m, b);
}

double layer_backward_input_flops(const ModelSpec& m, int b) {
  return layer_matmul_forward_flops(m, b) + 2 * layer_attention_forward_flops(m, b);
}

double layer_backward_weight_flops(const ModelSpec& m, int b) { return layer_matmul_forward_flops(m, b); }

double head_forward_flops(const ModelSpec& m, int b) {
  return 2 * D(b) * D(m.seq_length) * D(m.hidden_size) * D(m.vocab_size);
}

double mtp_forward_flops(const ModelSpec& m, int b) {
  if (m.mtp_layers <= 0) return 0;
  const double layer = is_moe_layer(m, m.num_layers - 1) ? moe_layer_forward_flops(m, b) : layer_forward_flops(m, b);
  const double projection = 2 * D(b) * D(m.seq_length) * 2 * D(m.hidden_size) * D(m.hidden_size);  // (2h -> h)
  return D(m.mtp_layers) * (layer + projection + head_forward_flops(m, b));
}

double model_flops_per_iteration(const ModelSpec& m, long global_batch) {
  int b = 1;
  double per_sample = layers_forward_flops(m, b) + head_forward_flops(m, b) + mtp_forward_flops(m, b);
  return 3 * per_sample * static_cast<double>(global_batch);
}

double hardware_flops_per_iteration(const ModelSpec& m, long global_batch, double recomputed_layer_samples,
                                    bool selective) {
  const double core = selective ? D(m.num_layers) * static_cast<double>(global_batch) * layer_attention_forward_flops(m, 1) : 0;
  // A recomputed layer repeats the mean layer's forward (MoE models: dense and MoE layers alike in
  // proportion).
  const double mean_layer = layers_forward_flops(m, 1) / D(m.num_layers);
  return model_flops_per_iteration(m, global_batch) + recomputed_layer_samples * mean_layer + core;
}

double attention_matrix_params(const ModelSpec& m) {
  double n = 0;
  for (const Projection& pr : attention_projections(m)) n += pr.in * pr.out;
  return n;
}

double layer_matrix_params(const ModelSpec& m) {
  double h = D(m.hidden_size), f = D(m.ffn_hidden_size);
  return attention_matrix_params(m) + mlp_matrices(m) * h * f;  // QKV, projection, MLP (gate, up, down)
}

double layer_params(const ModelSpec& m) {
  double h = D(m.hidden_size), f = D(m.ffn_hidden_size), qkv = h + 2 * kv_hidden_size(m);
  bool llama = m.kind == ModelKind::Llama;  // no biases, RMSNorm with one vector
  double biases = llama ? 0 : qkv + h + f + h;
  return layer_matrix_params(m) + biases + layer_norm_params(m);  // 12h^2 + 13h for GPT with f = 4h (Megatron-LM SC21, Sec. 5.1)
}

double layer_norm_params(const ModelSpec& m) {
  const double h = D(m.hidden_size);
  // Two norms per layer (one vector with RMSNorm, two with LayerNorm); MLA normalises its two latents too.
  const double mla = m.kv_lora_rank > 0 ? D(m.q_lora_rank) + D(m.kv_lora_rank) : 0;
  return (m.kind == ModelKind::Llama ? 2 * h : 4 * h) + mla;
}

double expert_params(const ModelSpec& m) {
  return mlp_matrices(m) * D(m.hidden_size) * D(m.expert_ffn_hidden_size);
}

double moe_layer_params(const ModelSpec& m) {
  // Attention as a dense layer's, the router (h x E), the shared and the routed experts; MoE
  // models here are Llama-like (no biases).
  return attention_matrix_params(m) + layer_norm_params(m) + D(m.hidden_size) * D(m.num_experts) +
         (D(m.num_shared_experts) + D(m.num_experts)) * expert_params(m);
}

double moe_layer_active_params(const ModelSpec& m) {
  return moe_layer_params(m) - (D(m.num_experts) - D(m.experts_per_token)) * expert_params(m);
}

double embedding_params(const ModelSpec& m) {
  double h = D(m.hidden_size);
  return D(m.vocab_size) * h + (m.kind == ModelKind::Llama ? 0 : D(m.seq_length) * h);
}

double mtp_params(const ModelSpec& m) {
  if (m.mtp_layers <= 0) return 0;
  const double h = D(m.hidden_size);
  const double layer = is_moe_layer(m, m.num_layers - 1) ? moe_layer_params(m) : layer_params(m);
  return D(m.mtp_layers) * (layer + 2 * h * h + 2 * h);  // the layer, its projection, its two norms
}

double model_params(const ModelSpec& m) {
  // GPT and BERT tie the LM head to the token embedding; LLaMA has a separate output matrix.
  double head = m.kind == ModelKind::Llama ? D(m.vocab_size) * D(m.hidden_size) : 0;
  const double moe = moe_layers_in(m, 0, m.num_layers);
  return (D(m.num_layers) - moe) * layer_params(m) + moe * moe_layer_params(m) + embedding_params(m) + head +
         mtp_params(m);
}

double active_params(const ModelSpec& m) {
  const double moe = moe_layers_in(m, 0, m.num_layers) + (is_moe_layer(m, m.num_layers - 1) ? m.mtp_layers : 0);
  return model_params(m) - moe * (moe_layer_params(m) - moe_layer_active_params(m));
}

}  // namespace stagecraft::costmodel::flops
