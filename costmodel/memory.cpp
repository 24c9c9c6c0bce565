#include "costmodel/memory.h"

#include <algorithm>

#include "costmodel/flops.h"

namespace stagecraft::costmodel::memory {
namespace {
double D(int v) { return static_cast<double>(v); }
double sbh(const ModelSpec& m, int b) { return D(m.seq_length) * D(b) * D(m.hidden_size); }
double scale(const ModelSpec& m) { return D(m.bytes_per_activation) / 2.0; }
double mlp_sharded(const ModelSpec& m) {
  double per_h = D(m.ffn_hidden_size) / D(m.hidden_size);
  return (m.kind == ModelKind::Llama ? 6.0 : 4.0) * per_h;  // 16 for GPT with f = 4h
}
}  // namespace

double layer_activation_selective_bytes(const ModelSpec& m, int b, int t, bool sp) {
  // LN inputs 2 x 2sbh, QKV and MLP inputs 2 x 2sbh, and with dropout its two masks 2 x sbh;
  // with FP8 the two inputs kept in one byte (sbh each).
  const double full = (m.dropout ? 10.0 : 8.0) - (m.fp8 ? 2.0 : 0.0);
  double replicated = sp ? full / t : full;
  // Q 2sbh, K and V 2sbh g/a each, the projection's input 2sbh (sbh in FP8): Korthikanti's 8sbh
  // when g = a.
  double attention_sharded = (m.fp8 ? 3.0 : 4.0) + 4.0 * kv_hidden_size(m) / D(m.hidden_size);
  // The down matrix's input, 2f/h of the MLP's, in one byte with FP8.
  const double mlp = mlp_sharded(m) - (m.fp8 ? D(m.ffn_hidden_size) / D(m.hidden_size) : 0.0);
  return sbh(m, b) * (replicated + (attention_sharded + mlp) / t) * scale(m);
}

double attention_core_bytes(const ModelSpec& m, int b, int t) {
  const double a = D(m.num_heads) / t, s = D(m.seq_length);
  if (m.attention_kernel == AttentionKernel::Fused) return 4.0 * a * s * D(b);  // (b, a/t, s) fp32 log-sum-exp
  // Korthikanti's 5as^2b/t at 2 bytes: the softmax output 2as^2b, with dropout its mask as^2b
  // and its output 2as^2b.
  return (m.dropout ? 5.0 : 2.0) * a * s * s * D(b) * scale(m);
}

double layer_activation_bytes(const ModelSpec& m, int b, int t, bool sp) {
  return layer_activation_selective_bytes(m, b, t, sp) + attention_core_bytes(m, b, t);
}

double layer_checkpoint_bytes(const ModelSpec& m, int b, int t, bool sp) {
  return 2.0 * sbh(m, b) * scale(m) / (sp ? t : 1);
}

double layer_backward_working_bytes(const ModelSpec& m, int b, int t, bool sp) {
  const double softmax_pair = m.attention_kernel == AttentionKernel::Fused
                                  ? 0.0  // the fused backward recomputes scores tile by tile
                                  : 2.0 * D(m.num_heads) * D(m.seq_length) * D(m.seq_length) * D(b) / t;
  const double gelu_pair = 2.0 * D(m.ffn_hidden_size) * D(m.seq_length) * D(b) / t;
  const double output_grad = D(m.seq_length) * D(b) * D(m.hidden_size) / (sp ? t : 1);
  return (std::max(softmax_pair, gelu_pair) + output_grad) * D(m.bytes_per_activation);
}

double head_backward_working_bytes(const ModelSpec& m, int b, int t, bool sp) {
  return 4.0 * D(m.seq_length) * D(b) * D(m.vocab_size) / t + sbh(m, b) * scale(m) * 2.0 / (sp ? t : 1);
}

double layer_weight_kept_bytes(const ModelSpec& m, int b, int t, bool sp) {
  const double full = sp ? 4.0 / t : 4.0;  // column inputs and row-parallel output gradients
  // Sharded, per h: the projection's and the down matrix's inputs (h, f), the gradients of the
  // QKV and up outputs (h + 2h_kv, f per up matrix): 12 for GPT with f = 4h and g = a.
  const double h = D(m.hidden_size), f = D(m.ffn_hidden_size), up = m.kind == ModelKind::Llama ? 2.0 : 1.0;
  const double sharded = (h + (h + 2 * kv_hidden_size(m)) + f + up * f) / h;
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

double layer_params_per_rank(const ModelSpec& m, int t) {
  double h = D(m.hidden_size);
  double norms = m.kind == ModelKind::Llama ? 2 * h : 4 * h;
  return (flops::layer_params(m) - norms) / t + norms;
}

double layer_linear_params_per_rank(const ModelSpec& m, int t) { return flops::layer_matrix_params(m) / t; }

double embedding_params_per_rank(const ModelSpec& m, int t) { return flops::embedding_params(m) / t; }

double head_params_per_rank(const ModelSpec& m, int t) {
  double h = D(m.hidden_size);
  return D(m.vocab_size) * h / t + 2 * h;
}

double static_bytes_per_param(const ModelSpec& m, int zero, int dp) {
  const double master = m.bytes_per_param < 4 ? 4.0 : 0.0;
  const double weights = m.bytes_per_param, grads = grad_bytes_per_param(m), states = master + 8.0;
  const double shard = zero >= 1 ? dp : 1;
  // Zero 3 keeps the 16-bit copy only while a unit is gathered (FSDP's param_dtype cast of the
  // gathered 32-bit shard), so what stays is the master shard and the rest.
  if (zero == 3) return (master > 0 ? master : weights) / shard + grads / shard + 8.0 / shard;
  return weights + (zero >= 2 ? grads / dp : grads) + states / shard;
}

double optimizer_traffic_bytes_per_param(const ModelSpec& m) {
  double master = m.bytes_per_param < 4 ? 4.0 : 0.0;
  double in = m.bytes_per_param + grad_bytes_per_param(m) + master + 8.0;
  double out = m.bytes_per_param + master + 8.0;
  return in + out;
}

}  // namespace stagecraft::costmodel::memory
