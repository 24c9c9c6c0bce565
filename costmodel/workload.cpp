#include "costmodel/workload.h"

namespace stagecraft::costmodel {

double BlockWork::flops() const {
  double f = model_flops + other_flops;
  for (const Gemm& g : gemms) f += g.flops();
  return f;
}

void BlockWork::add(const BlockWork& o) {
  gemms.insert(gemms.end(), o.gemms.begin(), o.gemms.end());
  flash_flops += o.flash_flops;
  flash_backward = flash_backward || o.flash_backward;
  model_flops += o.model_flops;
  other_flops += o.other_flops;
  memory_bytes += o.memory_bytes;
}

CoreWork attention_core_work(const KernelStack& k, double bb, double s, double heads, double d, bool fused, bool causal,
                             bool dropout, double e) {
  const MemoryTraffic& tr = k.traffic;
  auto fwd = [](double mm, double nn, double kk, double batch) { return Gemm{mm, nn, kk, batch}; };
  auto in_grad = [](double mm, double nn, double kk, double batch) { return Gemm{mm, kk, nn, batch}; };
  const double scores = bb * heads * s * s;
  const bool flash = fused && !k.flash.empty();  // a fused core without measured throughput: its products
  CoreWork c;
  if (flash) {
    c.f.model_flops = 4 * bb * s * s * heads * d;  // 4bs^2h / t (flops.h)
    c.f.flash_flops = c.f.model_flops * (causal ? 0.5 : 1.0);
    c.i.model_flops = 2 * c.f.model_flops;
    c.i.flash_flops = 2.5 * c.f.flash_flops;
    c.i.flash_backward = true;
    return c;
  }
  c.f.gemms = {fwd(s, s, d, bb * heads), fwd(s, d, s, bb * heads)};
  if (!fused) c.f.memory_bytes = scores * e * (tr.softmax + (dropout ? tr.score_dropout : 0));
  c.i.gemms = {in_grad(s, s, d, bb * heads), in_grad(s, s, d, bb * heads), in_grad(s, d, s, bb * heads),
               in_grad(s, d, s, bb * heads)};
  c.i.memory_bytes = 2 * c.f.memory_bytes;
  return c;
}

CoreWork cp_core_work(const KernelStack& k, double bb, double s_local, double heads, double d, bool causal, int cp) {
  // One fused kernel per key/value chunk the ring brings (cp of them): the rank's s_local
  // queries against s_local keys each, so cp times one chunk's work; causal: the rank's two
  // chunks (load balancing) see half of all the keys on average, half of that, as a whole
  // sequence's causal count over cp.
  CoreWork c = attention_core_work(k, bb, s_local, heads, d, true, false, false, 2);
  for (BlockWork* b : {&c.f, &c.i}) {
    b->model_flops *= cp;
    b->flash_flops *= cp * (causal ? 0.5 : 1.0);
    for (Gemm& g : b->gemms) g.batch *= cp * (causal ? 0.5 : 1.0);
  }
  return c;
}

// Shapes, for bb samples of s tokens (T = bb s), hidden h, a heads of d = h/a, FFN f, vocab V,
// on one of t tensor-parallel ranks (Megatron-LM: QKV and the MLP's first matrices split by
// columns, the projections by rows; a/t heads per rank). Forward products (m x k) x (k x n):
// QKV (T x h) x (h x (h + 2h_kv)/t); scores a/t bb products (s x d) x (d x s); context a/t bb
// (s x s) x (s x d); projection (T x h/t) x (h/t x h); MLP up (T x h) x (h x f/t), twice for
// SwiGLU's gate; down (T x f/t) x (f/t x h). The input gradient repeats each product with its
// output and inner sizes swapped ((T x n) x (n x k)); the core's two products need two each
// (flops.h); the weight gradient is (k x T) x (T x n). Memory-bound operations move the stack's
// bytes per element (stack.h); in the backward about twice their forward.
LayerWork layer_work(const ModelSpec& m, const KernelStack& k, int bb, int t, bool sp, bool selective, int cp) {
  const MemoryTraffic& tr = k.traffic;
  // With context parallelism every token-wise product and operation sees the rank's s / cp
  // tokens; the core attends them to all s keys (cp_core_work).
  const double s = static_cast<double>(m.seq_length) / cp, h = m.hidden_size, f = m.ffn_hidden_size, V = m.vocab_size,
               e = m.bytes_per_activation;
  const double T = static_cast<double>(bb) * s, heads = static_cast<double>(m.num_heads) / t, d = h / m.num_heads;
  const double qkv = h + 2 * kv_hidden_size(m);  // 3h with multi-head attention
  const bool swiglu = m.kind == ModelKind::Llama, fused = m.attention_kernel == AttentionKernel::Fused;
  LayerWork w;
  w.head_dim = static_cast<int>(d);
  w.seq_length = static_cast<int>(s);  // the kernels' length: one chunk's under cp
  w.causal = m.kind != ModelKind::Bert;
  w.element_bytes = m.bytes_per_activation;
  auto fwd = [](double mm, double nn, double kk, double batch = 1) { return Gemm{mm, nn, kk, batch}; };
  auto in_grad = [](double mm, double nn, double kk, double batch = 1) { return Gemm{mm, kk, nn, batch}; };
  auto w_grad = [](double mm, double nn, double kk) { return Gemm{kk, nn, mm, 1}; };
  // The transformer layers' linear products, in FP8 with ModelSpec::fp8 (the attention core's
  // products and the head's stay 16-bit, as Megatron-Core's output layer and TE's attention).
  auto linear = [&](Gemm g) {
    g.fp8 = m.fp8;
    return g;
  };
  const double Th_outside = sp ? T * h / t : T * h;  // norms and residual adds: s/t of the sequence with sp
  const double resid = m.dropout ? tr.bias_dropout_residual : tr.residual;
  // The attention core, forward: two batched products and the score traffic, or one kernel.
  const CoreWork core = cp > 1 ? cp_core_work(k, bb, s, heads, d, w.causal, cp)
                                : attention_core_work(k, bb, s, heads, d, fused, w.causal, m.dropout, e);
  w.core = core;
  const BlockWork& core_f = core.f;
  const BlockWork& core_i = core.i;
  const double attn_mem_f = Th_outside * e * (tr.layer_norm + resid);
  w.attn_f.gemms = {linear(fwd(T, qkv / t, h)), linear(fwd(T, h, h / t))};
  w.attn_f.memory_bytes = attn_mem_f;
  const double cast = m.fp8 ? tr.fp8_cast_transpose : 0;  // bytes per element cast to FP8 (stack.h)
  // FP8 casts, forward: the inputs of QKV (s/t of the sequence with sp: cast before the
  // all-gather) and of the projection; backward: the output gradients of QKV and the projection.
  w.attn_f.memory_bytes += cast * (Th_outside + T * h / t);
  w.attn_f.add(core_f);
  w.attn_i.gemms = {linear(in_grad(T, qkv / t, h)), linear(in_grad(T, h, h / t))};
  w.attn_i.memory_bytes = 2 * attn_mem_f + cast * (T * qkv / t + Th_outside);
  w.attn_i.add(core_i);
  if (selective) w.attn_i.add(core_f);  // the core's forward again, inside the backward
  w.attn_w.gemms = {linear(w_grad(T, qkv / t, h)), linear(w_grad(T, h, h / t))};
  // MLP block.
  const int up = swiglu ? 2 : 1;
  const double mlp_mem_f = Th_outside * e * (tr.layer_norm + resid) + T * f / t * e * (swiglu ? tr.swiglu : tr.gelu);
  for (int i = 0; i < up; ++i) {
    w.mlp_f.gemms.push_back(linear(fwd(T, f / t, h)));
    w.mlp_i.gemms.push_back(linear(in_grad(T, f / t, h)));
    w.mlp_w.gemms.push_back(linear(w_grad(T, f / t, h)));
  }
  w.mlp_f.gemms.push_back(linear(fwd(T, h, f / t)));
  w.mlp_i.gemms.push_back(linear(in_grad(T, h, f / t)));
  w.mlp_w.gemms.push_back(linear(w_grad(T, h, f / t)));
  w.mlp_f.memory_bytes = mlp_mem_f + cast * (Th_outside + T * f / t);   // inputs of up (and gate) and down
  w.mlp_i.memory_bytes = 2 * mlp_mem_f + cast * (up * T * f / t + Th_outside);  // their output gradients

  // Head: the final norm, the logits over V/t columns and the cross-entropy.
  const double logits = T * V / t;
  w.head_f.gemms = {fwd(T, V / t, h)};
  w.head_f.memory_bytes = logits * e * tr.cross_entropy + Th_outside * e * tr.layer_norm;
  w.head_i.gemms = {in_grad(T, V / t, h)};
  w.head_i.memory_bytes = logits * e * tr.cross_entropy_backward + 2 * Th_outside * e * tr.layer_norm;
  w.head_w.gemms = {w_grad(T, V / t, h)};
  return w;
}

}  // namespace stagecraft::costmodel
