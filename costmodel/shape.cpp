#include "costmodel/shape.h"

#include <algorithm>
#include <cmath>

namespace stagecraft::costmodel::shape {
namespace {

double tiles(double x, int tile) { return std::ceil(x / tile); }

// The share of the GPU's tile slots a product uses: tile quantization times wave quantization.
double quantization(const ClusterSpec& c, double m, double n, double batch) {
  const double tm = tiles(m, c.gemm_tile_m), tn = tiles(n, c.gemm_tile_n);
  const double tile_use = m * n / (tm * c.gemm_tile_m * tn * c.gemm_tile_n);
  const double count = tm * tn * batch;
  const double wave_use = count / (std::ceil(count / c.gpu_sms) * c.gpu_sms);
  return tile_use * wave_use;
}

}  // namespace

double memory_s(const ClusterSpec& c, double bytes) {
  return bytes / (c.gpu_memory_bandwidth_Bps * c.memory_efficiency);
}

double gemm_s(const ClusterSpec& c, double m, double n, double k, double batch, double bytes) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
  const double flops = 2 * m * n * k * batch;
  const double compute = flops / (c.gpu_peak_flops_per_s * c.gemm_max_efficiency * quantization(c, m, n, batch));
  const double moved = (m * k + k * n + m * n) * batch * bytes;
  return std::max(compute, memory_s(c, moved));
}

double gemm_efficiency(const ClusterSpec& c, double m, double n, double k, double batch, double bytes) {
  const double t = gemm_s(c, m, n, k, batch, bytes);
  return t > 0 ? 2 * m * n * k * batch / t / c.gpu_peak_flops_per_s : 0;
}

// Shapes, for bb samples of s tokens (T = bb s), hidden h, a heads of d = h/a, FFN f, vocab V,
// on one of t tensor-parallel ranks (Megatron-LM: QKV and the MLP's first matrices split by
// columns, the projections by rows; a/t heads per rank). 16-bit elements (e bytes).
// Forward products (m x k) x (k x n): QKV (T x h) x (h x (h + 2h_kv)/t); scores a/t bb products
// (s x d) x (d x s); context a/t bb (s x s) x (s x d); projection (T x h/t) x (h/t x h); MLP up
// (T x h) x (h x f/t), twice for SwiGLU's gate; down (T x f/t) x (f/t x h). The input gradient
// repeats each product with its output and inner sizes swapped ((T x n) x (n x k)); the core's
// two products need two each (flops.h); the weight gradient is (k x T) x (T x n).
// Memory-bound operations, bytes read and written per element of the tensor: layer norm 2,
// bias + dropout + residual add 3 (plus a 1-byte mask), softmax + scale + mask 2, dropout on the
// scores 2 (plus mask), GeLU 2, SwiGLU 3; in the backward each about twice its forward.
LayerTimes layer_times(const ModelSpec& m, const ClusterSpec& c, int bb, int t, bool selective) {
  const double s = m.seq_length, h = m.hidden_size, f = m.ffn_hidden_size, V = m.vocab_size, e = m.bytes_per_activation;
  const double T = bb * s, heads = static_cast<double>(m.num_heads) / t, d = h / m.num_heads;
  const double qkv = h + 2 * kv_hidden_size(m);  // 3h with multi-head attention
  const bool swiglu = m.kind == ModelKind::Llama;
  auto fwd = [&](double mm, double nn, double kk, double batch = 1) { return gemm_s(c, mm, nn, kk, batch, e); };
  auto in_grad = [&](double mm, double nn, double kk, double batch = 1) { return gemm_s(c, mm, kk, nn, batch, e); };
  auto w_grad = [&](double mm, double nn, double kk) { return gemm_s(c, kk, nn, mm, 1, e); };
  auto mem = [&](double elements, double per_element) { return memory_s(c, elements * per_element * e); };
  const double Th = T * h, scores = bb * heads * s * s;
  // Attention block.
  const double attn_mm_f = fwd(T, qkv / t, h) + fwd(T, h, h / t);
  const double core_f = fwd(s, s, d, bb * heads) + fwd(s, d, s, bb * heads);
  const double core_mem_f = mem(scores, 2) + mem(scores, 2.5);  // softmax; dropout with its mask
  const double attn_mem_f = mem(Th, 2) + mem(Th, 3.5);          // layer norm; bias + dropout + residual
  LayerTimes out;
  out.attn_f_s = attn_mm_f + core_f + core_mem_f + attn_mem_f;
  const double core_i = 2 * (in_grad(s, s, d, bb * heads) + in_grad(s, d, s, bb * heads)) + 2 * core_mem_f;
  out.attn_i_s = in_grad(T, qkv / t, h) + in_grad(T, h, h / t) + core_i + 2 * attn_mem_f +
                 (selective ? core_f + core_mem_f : 0);
  out.attn_w_s = w_grad(T, qkv / t, h) + w_grad(T, h, h / t);
  // MLP block.
  const double up = swiglu ? 2 : 1;
  const double act_mem = mem(T * f / t, swiglu ? 3 : 2);
  const double mlp_mem_f = mem(Th, 2) + mem(Th, 3.5) + act_mem;  // layer norm; residual; activation
  out.mlp_f_s = up * fwd(T, f / t, h) + fwd(T, h, f / t) + mlp_mem_f;
  out.mlp_i_s = up * in_grad(T, f / t, h) + in_grad(T, h, f / t) + 2 * mlp_mem_f;
  out.mlp_w_s = up * w_grad(T, f / t, h) + w_grad(T, h, f / t);
  // Head: logits and the cross-entropy over V/t columns (softmax read, write, gradient).
  const double logits = T * V / t;
  out.head_f_s = fwd(T, V / t, h) + mem(logits, 3) + mem(Th, 2);  // final layer norm
  out.head_i_s = in_grad(T, V / t, h) + mem(logits, 2) + mem(Th, 4);
  out.head_w_s = w_grad(T, V / t, h);
  return out;
}

}  // namespace stagecraft::costmodel::shape
