#include "costmodel/workload.h"

#include "costmodel/cp.h"

#include <functional>

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

double weight_gradient_share(ParameterUse use) {
  switch (use) {
    case ParameterUse::Product: return 0.5;
    case ParameterUse::Table: return 1.0;
    case ParameterUse::NoParameters: return 0.0;
  }
  return 0.0;
}

CoreWork attention_core_work(const KernelStack& k, double bb, double s, double heads, double d, bool fused, bool causal,
                             bool dropout, double e, double dv) {
  if (dv <= 0) dv = d;
  const MemoryTraffic& tr = k.traffic;
  auto fwd = [](double mm, double nn, double kk, double batch) { return Gemm{mm, nn, kk, batch}; };
  auto in_grad = [](double mm, double nn, double kk, double batch) { return Gemm{mm, kk, nn, batch}; };
  const double scores = bb * heads * s * s;
  const bool flash = fused && !k.flash.empty();  // a fused core without measured throughput: its products
  CoreWork c;
  if (flash) {
    c.f.model_flops = 2 * bb * s * s * heads * (d + dv);  // 4bs^2h / t when d = d_v = h/a (flops.h)
    c.f.flash_flops = c.f.model_flops * (causal ? 0.5 : 1.0);
    c.i.model_flops = 2 * c.f.model_flops;
    c.i.flash_flops = 2.5 * c.f.flash_flops;
    c.i.flash_backward = true;
    return c;
  }
  c.f.gemms = {fwd(s, s, d, bb * heads), fwd(s, dv, s, bb * heads)};
  if (!fused) c.f.memory_bytes = scores * e * (tr.softmax + (dropout ? tr.score_dropout : 0));
  c.i.gemms = {in_grad(s, s, d, bb * heads), in_grad(s, s, d, bb * heads), in_grad(s, dv, s, bb * heads),
               in_grad(s, dv, s, bb * heads)};
  c.i.memory_bytes = backward_traffic_bytes(c.f.memory_bytes);  // the core has no W (ParameterUse::NoParameters)
  return c;
}

CoreWork cp_core_work(const KernelStack& k, double bb, double s_local, double heads, double d, bool causal, int cp, double dv) {
  // One fused kernel per key/value chunk the ring brings (cp of them): the rank's s_local
  // queries against s_local keys each, so cp times one chunk's work; causal: the rank's two
  // chunks (load balancing) see half of all the keys on average, half of that, as a whole
  // sequence's causal count over cp.
  CoreWork c = attention_core_work(k, bb, s_local, heads, d, true, false, false, 2, dv);
  for (BlockWork* b : {&c.f, &c.i}) {
    b->model_flops *= cp;
    b->flash_flops *= cp * (causal ? 0.5 : 1.0);
    for (Gemm& g : b->gemms) g.batch *= cp * (causal ? 0.5 : 1.0);
  }
  return c;
}

// Bytes of an MoE layer's token permutations (workload.h).
double moe_permute_bytes(double copies, double h, double e, double local_experts, int sources) {
  // Permutation 1 (the rank's tokens into per-destination order before the dispatch) and its
  // inverse after the combine: (copies, h) read and written, each.
  double bytes = 2 * 2 * copies * h * e;
  // Permutation 2: the received copies arrive grouped by source rank; with several local experts
  // they are sorted into per-expert order before the experts and back before the combine
  // (Megatron-Core MoEAlltoAllTokenDispatcher: dispatch_postprocess and combine_preprocess,
  // sort_chunks_by_idxs when num_local_experts > 1), two more passes over (copies, h).
  if (sources > 1 && local_experts > 1) bytes += 2 * 2 * copies * h * e;
  return bytes;
}

double activation_traffic(const ModelSpec& m, const MemoryTraffic& tr) {
  const bool swiglu = m.kind == ModelKind::Llama;
  return (swiglu ? tr.swiglu : tr.gelu) + (m.activation_clamp > 0 ? tr.glu_clamp : 0.0);
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
namespace {
// The MLP block of an MoE layer (ModelSpec::num_experts) on one rank of tp t and ep `ep`, for T
// tokens: the router (T x h) x (h x E), replicated on the tp ranks (on the rank's T/t tokens with
// sequence parallelism); the routed experts as one grouped product per matrix: E/ep local
// experts, each taking ep T k / E copies times the load factor (the busiest rank's), its matrices
// split t ways (expert tensor parallelism = tp); the shared experts as a dense MLP of width
// shared x f_e. Memory-bound: the router's softmax and top-k over (T, E) and the permutation of
// the copies before the experts and back after them (read and write, (T k, h)); backward twice.
void moe_block_work(LayerWork& w, const ModelSpec& m, const KernelStack& k, double T, int t, bool sp, int ep, int et,
                    const std::function<Gemm(Gemm)>& linear, double cast) {
  const MemoryTraffic& tr = k.traffic;
  const double h = m.hidden_size, fe = m.expert_ffn_hidden_size, E = m.num_experts, e = m.bytes_per_activation;
  // (T k) rows the rank's experts take: every token's copies gathered over the tp ranks (et > 1),
  // or with whole experts (et 1) the rank's own s/t tokens' (sequence parallelism).
  const double copies = (et > 1 ? T : T / t) * m.experts_per_token * moe_load_factor(m);
  const double local = E / ep, rows = copies / local;                  // local experts, rows of each
  const bool swiglu = m.kind == ModelKind::Llama;
  const int up = swiglu ? 2 : 1;
  const double T_router = sp ? T / t : T;
  // `fused_up`: the first matrix of a gated MLP as one product of 2 f_e columns (gate and up
  // together), as Megatron-Core's grouped experts hold it (megatron/core/transformer/moe/
  // experts.py, TEGroupedMLP: linear_fc1 of ffn_hidden_size * 2 outputs with a gated linear
  // unit); `streams`: how many experts' products run at once (Gemm::concurrent).
  auto add = [&](BlockWork& f, BlockWork& i, BlockWork& wg, double mm, double width, double batch, int split, bool fused_up,
                 double streams) {
    auto push = [&](BlockWork& b, Gemm g) {
      g = linear(g);
      g.concurrent = streams;
      b.gemms.push_back(g);
    };
    const int products = fused_up ? 1 : up;
    const double w_up = width / split * (fused_up ? up : 1);
    for (int u = 0; u < products; ++u) {
      push(f, Gemm{mm, w_up, h, batch});
      push(i, Gemm{mm, h, w_up, batch});
      push(wg, Gemm{h, w_up, mm, batch});
    }
    push(f, Gemm{mm, h, width / split, batch});
    push(i, Gemm{mm, width / split, h, batch});
    push(wg, Gemm{width / split, h, mm, batch});
  };
  BlockWork &f = w.moe_f, &i = w.moe_i, &wg = w.moe_w;
  f.gemms.push_back(Gemm{T_router, E, h, 1});  // the router, 16-bit (Megatron-Core keeps it in fp32 or bf16)
  i.gemms.push_back(Gemm{T_router, h, E, 1});
  wg.gemms.push_back(Gemm{h, E, T_router, 1});
  add(f, i, wg, rows, fe, local, et, true, k.grouped_gemm_streams);
  if (m.num_shared_experts > 0) add(f, i, wg, T, m.num_shared_experts * fe, 1, t, false, 0);
  const double Th_outside = sp ? T * h / t : T * h;
  const double resid = m.dropout ? tr.bias_dropout_residual : tr.residual;
  const double routed_act = k.fused_grouped_mlp ? 0.0 : copies * fe / et;  // in the products' epilogue when fused
  const double act = activation_traffic(m, tr) * e * (routed_act + T * m.num_shared_experts * fe / t);
  const double route = T_router * E * 4 * 3;            // logits, softmax and top-k over (T, E) in fp32
  const double permute = moe_permute_bytes(copies, h, e, local, ep * et);
  f.memory_bytes = Th_outside * e * (tr.layer_norm + resid) + act + route + permute;
  i.memory_bytes = backward_traffic_bytes(f.memory_bytes);
  if (m.linear_bias && !k.fused_grouped_mlp) {  // the routed experts' second bias, outside their products
    f.memory_bytes += copies * h * e * tr.expert_bias;
    i.memory_bytes += copies * h * e * tr.expert_bias_backward;
  }
  if (m.fp8) {  // the experts' inputs and output gradients cast to FP8 (`cast` bytes each), as the dense MLP's
    f.memory_bytes += cast * (copies * h + copies * fe / et);
    i.memory_bytes += cast * (up * copies * fe / et + copies * h);
  }
}
}  // namespace

namespace {
// Selective recomputation's modules beyond the core (RecomputeModules): each one's forward work
// again in the input gradient of its block. T tokens of the rank, `Th_outside` the norms' elements.
void add_module_recompute(LayerWork& w, const ModelSpec& m, const KernelStack& k, double T, double Th_outside, int t,
                          int et, const RecomputeModules& r) {
  const double e = m.bytes_per_activation, h = m.hidden_size, fe = m.expert_ffn_hidden_size;
  if (r.layernorm) {  // the block's norm again before its first product's input gradient
    const double norm = Th_outside * e * k.traffic.layer_norm;
    for (BlockWork* b : {&w.attn_i, &w.mlp_i, &w.moe_i}) b->memory_bytes += norm;
  }
  if (r.mla_up_proj && m.kv_lora_rank > 0)
    for (const Projection& pr : attention_projections(m))
      if (pr.split && !pr.row && pr.in != h) w.attn_i.gemms.push_back(Gemm{T, pr.out / t, pr.in, 1, m.fp8});
  if (r.mlp) w.mlp_i.add(w.mlp_f);
  if (!is_moe(m)) return;
  if (r.moe) {  // the whole block, router, permutations and experts (the exchanges: price_plan)
    w.moe_i.add(w.moe_f);
    return;
  }
  const bool swiglu = m.kind == ModelKind::Llama;
  if (r.moe_act && !k.fused_grouped_mlp) {
    const double copies = (et > 1 ? T : T / t) * m.experts_per_token * moe_load_factor(m);
    w.moe_i.memory_bytes += activation_traffic(m, k.traffic) * e * copies * fe / et;
  }
  if (r.shared_experts && m.num_shared_experts > 0) {
    const double width = m.num_shared_experts * fe / t;
    w.moe_i.gemms.push_back(Gemm{T, width * (swiglu ? 2 : 1), h, 1, m.fp8});
    w.moe_i.gemms.push_back(Gemm{T, h, width, 1, m.fp8});
  }
}
}  // namespace

LayerWork layer_work(const ModelSpec& m, const KernelStack& k, int bb, int t, bool sp, bool selective, int cp, int ep, int et,
                     const RecomputeModules& modules, bool fp8_any_layout) {
  const MemoryTraffic& tr = k.traffic;
  // With context parallelism every token-wise product and operation sees the rank's s / cp
  // tokens; the core attends them to all s keys (cp_core_work).
  const double s = cp_rank_tokens(m, cp), h = m.hidden_size, f = m.ffn_hidden_size, V = m.vocab_size,
               e = m.bytes_per_activation;
  const double T = static_cast<double>(bb) * s, heads = static_cast<double>(m.num_heads) / t, d = qk_head_dim(m),
               dv = v_head_dim(m);
  const std::vector<Projection> projections = attention_projections(m);
  const bool swiglu = m.kind == ModelKind::Llama, fused = m.attention_kernel == AttentionKernel::Fused;
  LayerWork w;
  w.head_dim = static_cast<int>(d);
  w.seq_length = static_cast<int>(s);  // the kernels' length: one chunk's under cp
  w.causal = m.kind != ModelKind::Bert;
  w.element_bytes = m.bytes_per_activation;
  w.mxfp8 = m.fp8 && m.fp8_recipe == Fp8Recipe::Mxfp8;
  auto fwd = [](double mm, double nn, double kk, double batch = 1) { return Gemm{mm, nn, kk, batch}; };
  auto in_grad = [](double mm, double nn, double kk, double batch = 1) { return Gemm{mm, kk, nn, batch}; };
  auto w_grad = [](double mm, double nn, double kk) { return Gemm{kk, nn, mm, 1}; };
  // The transformer layers' linear products, in FP8 with ModelSpec::fp8 (the attention core's
  // products and the head's stay 16-bit, as Megatron-Core's output layer and TE's attention).
  std::function<Gemm(Gemm)> linear = [&](Gemm g) {
    g.fp8 = m.fp8;
    return g;
  };
  const double Th_outside = sp ? T * h / t : T * h;  // norms and residual adds: s/t of the sequence with sp
  const double resid = m.dropout ? tr.bias_dropout_residual : tr.residual;
  // The attention core, forward: two batched products and the score traffic, or one kernel.
  CoreWork core = cp > 1 ? cp_core_work(k, bb, s, heads, d, w.causal, cp, dv)
                          : attention_core_work(k, bb, s, heads, d, fused, w.causal, m.dropout, e, dv);
  if (fused) {  // sliding windows: a fused kernel skips the tiles outside the window (the mean layer's share)
    const double share = attention_pair_share(m);
    for (BlockWork* b : {&core.f, &core.i}) {
      b->flash_flops *= share;
      b->model_flops *= share;
    }
  }
  w.core = core;
  const BlockWork& core_f = core.f;
  const BlockWork& core_i = core.i;
  const double attn_mem_f = Th_outside * e * (tr.layer_norm + resid);
  // The projections (attention_projections: QKV and the output projection, or MLA's five), each
  // split by columns, by rows or whole on every tp rank.
  const double cast = m.fp8 ? fp8_cast_bytes(m, fp8_any_layout, tr.fp8_cast_transpose) : 0;  // per element cast to FP8 (stack.h, the recipe)
  w.attn_f.memory_bytes = attn_mem_f;
  w.attn_i.memory_bytes = backward_traffic_bytes(attn_mem_f);
  for (const Projection& pr : projections) {
    const double in = pr.split && pr.row ? pr.in / t : pr.in, out = pr.split && !pr.row ? pr.out / t : pr.out;
    w.attn_f.gemms.push_back(linear(fwd(T, out, in)));
    w.attn_i.gemms.push_back(linear(in_grad(T, out, in)));
    w.attn_w.gemms.push_back(linear(w_grad(T, out, in)));
    // FP8 casts, forward: each product's input (a projection of the layer's input: s/t of the
    // sequence with sp, cast before the all-gather); backward: its output gradient.
    const bool from_input = pr.in == h && !pr.row;
    w.attn_f.memory_bytes += cast * (from_input ? Th_outside : T * in);
    w.attn_i.memory_bytes += cast * (pr.row ? Th_outside : T * out);
  }
  if (m.rope_mscale != 1) {  // RoPE unfused on this rank's queries and keys (MemoryTraffic::rope_unfused)
    const double rotary = T * (heads + std::max(1.0, static_cast<double>(kv_heads(m)) / t)) * d;
    w.attn_f.memory_bytes += rotary * e * tr.rope_unfused;
    w.attn_i.memory_bytes += rotary * e * tr.rope_unfused_backward;
  }
  w.attn_f.add(core_f);
  w.attn_i.add(core_i);
  if (selective) w.attn_i.add(core_f);  // the core's forward again, inside the backward
  // MLP block.
  const int up = swiglu ? 2 : 1;
  const double mlp_mem_f = Th_outside * e * (tr.layer_norm + resid) + T * f / t * e * activation_traffic(m, tr);
  for (int i = 0; i < up; ++i) {
    w.mlp_f.gemms.push_back(linear(fwd(T, f / t, h)));
    w.mlp_i.gemms.push_back(linear(in_grad(T, f / t, h)));
    w.mlp_w.gemms.push_back(linear(w_grad(T, f / t, h)));
  }
  w.mlp_f.gemms.push_back(linear(fwd(T, h, f / t)));
  w.mlp_i.gemms.push_back(linear(in_grad(T, h, f / t)));
  w.mlp_w.gemms.push_back(linear(w_grad(T, h, f / t)));
  w.mlp_f.memory_bytes = mlp_mem_f + cast * (Th_outside + T * f / t);   // inputs of up (and gate) and down
  w.mlp_i.memory_bytes = backward_traffic_bytes(mlp_mem_f) + cast * (up * T * f / t + Th_outside);  // their output gradients

  // Head: the final norm, the logits over V/t columns and the cross-entropy.
  const double logits = T * V / t;
  w.head_f.gemms = {fwd(T, V / t, h)};
  w.head_f.memory_bytes = logits * e * tr.cross_entropy + Th_outside * e * tr.layer_norm;
  w.head_i.gemms = {in_grad(T, V / t, h)};
  w.head_i.memory_bytes = logits * e * tr.cross_entropy_backward + backward_traffic_bytes(Th_outside * e * tr.layer_norm);
  w.head_w.gemms = {w_grad(T, V / t, h)};
  if (is_moe(m)) moe_block_work(w, m, k, T, t, sp, ep, et > 0 ? et : t, linear, cast);
  if (modules.any_beyond_core()) add_module_recompute(w, m, k, T, Th_outside, t, et > 0 ? et : t, modules);
  return w;
}

}  // namespace stagecraft::costmodel
