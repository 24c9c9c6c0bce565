#include "costmodel/flops.h"

namespace stagecraft::costmodel::flops {
namespace {
double D(int v) { return static_cast<double>(v); }
int mlp_matrices(const ModelSpec& m) { return m.kind == ModelKind::Llama ? 3 : 2; }
}  // namespace

double attention_block_matmul_flops(const ModelSpec& m, int b) {
  double bs = D(b) * D(m.seq_length), h = D(m.hidden_size), hkv = kv_hidden_size(m);
  return 2 * bs * h * (h + 2 * hkv) + 2 * bs * h * h;  // QKV (6bsh^2 when g = a), output projection
}

double mlp_block_forward_flops(const ModelSpec& m, int b) {
  double bs = D(b) * D(m.seq_length), h = D(m.hidden_size), f = D(m.ffn_hidden_size);
  return 2 * bs * h * f * mlp_matrices(m);
}

double layer_matmul_forward_flops(const ModelSpec& m, int b) {
  return attention_block_matmul_flops(m, b) + mlp_block_forward_flops(m, b);
}

double layer_attention_forward_flops(const ModelSpec& m, int b) {
  double s = D(m.seq_length);
  return 4 * D(b) * s * s * D(m.hidden_size);
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

double model_flops_per_iteration(const ModelSpec& m, long global_batch) {
  int b = 1;
  double per_sample = D(m.num_layers) * layer_forward_flops(m, b) + head_forward_flops(m, b);
  return 3 * per_sample * static_cast<double>(global_batch);
}

double hardware_flops_per_iteration(const ModelSpec& m, long global_batch, double recomputed_layer_samples,
                                    bool selective) {
  const double core = selective ? D(m.num_layers) * static_cast<double>(global_batch) * layer_attention_forward_flops(m, 1) : 0;
  return model_flops_per_iteration(m, global_batch) + recomputed_layer_samples * layer_forward_flops(m, 1) + core;
}

double layer_matrix_params(const ModelSpec& m) {
  double h = D(m.hidden_size), f = D(m.ffn_hidden_size), qkv = h + 2 * kv_hidden_size(m);
  return h * qkv + h * h + (m.kind == ModelKind::Llama ? 3 : 2) * h * f;  // QKV, projection, MLP (gate, up, down)
}

double layer_params(const ModelSpec& m) {
  double h = D(m.hidden_size), f = D(m.ffn_hidden_size), qkv = h + 2 * kv_hidden_size(m);
  bool llama = m.kind == ModelKind::Llama;  // no biases, RMSNorm with one vector
  double biases = llama ? 0 : qkv + h + f + h;
  double norms = llama ? 2 * h : 4 * h;
  return layer_matrix_params(m) + biases + norms;  // 12h^2 + 13h for GPT with f = 4h (Megatron-LM SC21, Sec. 5.1)
}

double embedding_params(const ModelSpec& m) {
  double h = D(m.hidden_size);
  return D(m.vocab_size) * h + (m.kind == ModelKind::Llama ? 0 : D(m.seq_length) * h);
}

double model_params(const ModelSpec& m) {
  // GPT and BERT tie the LM head to the token embedding; LLaMA has a separate output matrix.
  double head = m.kind == ModelKind::Llama ? D(m.vocab_size) * D(m.hidden_size) : 0;
  return D(m.num_layers) * layer_params(m) + embedding_params(m) + head;
}

}  // namespace stagecraft::costmodel::flops
