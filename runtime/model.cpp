#include "runtime/model.h"

#include "runtime/support/rules.h"

#include "runtime/cp.h"
#include "runtime/device.h"
#include "runtime/fsdp.h"
#include "runtime/op_times.h"

#include <cmath>

#include "schedules/error.h"

namespace stagecraft::runtime {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

thread_local DeferredGrads* g_defer = nullptr;
thread_local const WeightGradHook* g_weight_hook = nullptr;

std::uint64_t mix(std::uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Full-size normal(0, 0.02) tensor from a generator seeded by (seed, owner, tensor id).
torch::Tensor draw(std::uint64_t seed, std::uint64_t owner, std::uint64_t id, at::IntArrayRef shape) {
  at::Generator gen = at::detail::createCPUGenerator(mix(mix(seed) ^ mix(owner * 131 + id)));
  return torch::randn(shape, gen, torch::kFloat32) * 0.02;
}

void accumulate_grad(const torch::Tensor& w, const torch::Tensor& g) {
  if (!w.grad().defined()) w.mutable_grad() = g;
  else w.mutable_grad().add_(g);
}

torch::Tensor weight_grad(const torch::Tensor& go, const torch::Tensor& x) {  // (out, in)
  return go.reshape({-1, go.size(-1)}).t().mm(x.reshape({-1, x.size(-1)}));
}

// y = x w^T whose weight gradient can be deferred from I to W.
struct DeferrableLinear : torch::autograd::Function<DeferrableLinear> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w) {
    // Under bf16 autocast the product runs in bf16: x is cast here and w read as its bf16
    // copy (both saved so), since a custom function's backward runs outside autocast;
    // gradients return in the inputs' dtypes (the weight's fp32 gradient accumulates in fp32).
    torch::Tensor xc = autocast_input(x), wc = autocast_weight(w);
    ctx->save_for_backward({xc, wc, w});
    OpScope timed(OpKind::Gemm);
    return torch::matmul(xc, wc.t());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    torch::Tensor x = saved[0], wc = saved[1], w = saved[2];
    torch::Tensor go = grads[0].to(wc.scalar_type());
    OpScope timed(OpKind::Gemm);
    torch::Tensor gx = torch::matmul(go, wc);
    if (g_defer) {
      g_defer->push_back([x, w, go] {
        OpScope timed_w(OpKind::Gemm);
        torch::Tensor g = weight_grad(go, x).to(w.scalar_type());
        if (g_weight_hook) (*g_weight_hook)(w, g);
        accumulate_grad(w, g);
      });
      return {gx, torch::Tensor()};
    }
    return {gx, weight_grad(go, x).to(w.scalar_type())};
  }
};

// One blocking tp collective, counted and timed in the TpContext.
template <class Collective>
void timed_tp_collective(torch::Tensor& t, Collective&& c) {
  TpContext& tp = tp_context();
  auto t0 = std::chrono::steady_clock::now();
  c(*tp.group, t, tp.timeout);
  tp.collectives += 1;
  tp.comm_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void tp_all_reduce(torch::Tensor& t) { timed_tp_collective(t, compat::all_reduce_sum_blocking); }
void tp_all_reduce_max(torch::Tensor& t) { timed_tp_collective(t, compat::all_reduce_max_blocking); }

// Megatron's f: identity forward, all-reduce of the gradient backward.
struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x) { return x.clone(); }
  static variable_list backward(AutogradContext*, variable_list g) {
    torch::Tensor r = g[0].contiguous().clone();
    tp_all_reduce(r);
    return {r};
  }
};

// Megatron's g: all-reduce forward, identity backward.
struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x) {
    torch::Tensor r = x.contiguous().clone();
    tp_all_reduce(r);
    return r;
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0]}; }
};

// Sequence parallelism (Korthikanti et al., MLSys 2023, sec. 4.2.2; Megatron-LM's
// gather_from_sequence_parallel_region and reduce_scatter_to_sequence_parallel_region): outside
// the tensor-parallel blocks each tp rank holds s/t of the sequence; a block's input is
// all-gathered along the sequence (backward: reduce-scatter) and its partial output
// reduce-scattered along it (backward: all-gather), replacing Megatron's f and g.
// x: (b, s/t, h) -> (b, s, h).
torch::Tensor seq_all_gather(const torch::Tensor& x) {
  TpContext& tp = tp_context();
  const int64_t t = tp.group->size(), b = x.size(0), sl = x.size(1), h = x.size(2);
  torch::Tensor in = x.contiguous();
  torch::Tensor out = torch::empty({t * in.numel()}, in.options());
  auto t0 = std::chrono::steady_clock::now();
  compat::all_gather(*tp.group, in.view({-1}), out, tp.timeout);
  tp.collectives += 1;
  tp.comm_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out.view({t, b, sl, h}).permute({1, 0, 2, 3}).reshape({b, t * sl, h});
}

// x: (b, s, h) partial sums -> (b, s/t, h) this rank's slice of the sums.
torch::Tensor seq_reduce_scatter(const torch::Tensor& x) {
  TpContext& tp = tp_context();
  const int64_t t = tp.group->size(), b = x.size(0), sl = x.size(1) / t, h = x.size(2);
  torch::Tensor in = x.reshape({b, t, sl, h}).permute({1, 0, 2, 3}).contiguous().view({-1});
  torch::Tensor out = torch::empty({in.numel() / t}, in.options());
  auto t0 = std::chrono::steady_clock::now();
  compat::reduce_scatter_sum(*tp.group, in, out, tp.timeout);
  tp.collectives += 1;
  tp.comm_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out.view({b, sl, h});
}

struct GatherFromSeq : torch::autograd::Function<GatherFromSeq> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x) { return seq_all_gather(x); }
  static variable_list backward(AutogradContext*, variable_list g) { return {seq_reduce_scatter(g[0])}; }
};

struct ScatterToSeq : torch::autograd::Function<ScatterToSeq> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x) { return seq_reduce_scatter(x); }
  static variable_list backward(AutogradContext*, variable_list g) { return {seq_all_gather(g[0])}; }
};

torch::Tensor dlinear(const torch::Tensor& x, const torch::Tensor& w) { return DeferrableLinear::apply(x, w); }

// The generator owner of routed expert e of global layer l: apart from the layers' owners
// (l + 1) and the ends' (2^20), so that expert e's weights are the same numbers on whichever
// ep rank holds it.
std::uint64_t expert_owner(int l, int e) {
  return (std::uint64_t{1} << 21) + static_cast<std::uint64_t>(l) * 4096 + static_cast<std::uint64_t>(e);
}

// Selective activation recomputation (Korthikanti et al., MLSys 2023, sec. 4.2; Megatron-LM's
// checkpointed core attention): the attention core (scores, softmax, weighted values) keeps
// only its inputs q, k, v and runs again inside its backward; the (b, a/t, s, s) tensors it
// would keep, the 5as/h share of eq. 2, are never saved.
// Causal attention of a/t query heads over g/t key/value heads (grouped-query attention,
// Ainslie et al. 2023): query head i reads key/value head i / (a/g), as Megatron-LM groups them.
// q: (b, a/t, s, d); k, v: (b, g/t, s, d) -> (b, a/t, s, d).
// `fused`: one kernel (costmodel::AttentionKernel::Fused), else scores and softmax as tensors.
torch::Tensor grouped_attention(const torch::Tensor& q, torch::Tensor k, torch::Tensor v, bool fused) {
  const int64_t group = q.size(1) / k.size(1);
  if (group > 1) {
    k = k.repeat_interleave(group, 1);
    v = v.repeat_interleave(group, 1);
  }
  return compat::causal_attention(q, k, v, fused);
}

// Rotary position embedding (Su et al., RoFormer, 2021; LLaMA applies it to q and k), rotating
// the two halves of each head's d channels (GPT-NeoX's layout), base 10,000.
// x: (b, heads, s, d), positions: (s) int64 of its tokens in the sequence -> (b, heads, s, d).
torch::Tensor rotary(const torch::Tensor& x, const torch::Tensor& positions) {
  const int64_t d = x.size(3), half = d / 2;
  auto opt = torch::TensorOptions().dtype(torch::kFloat32).device(x.device());
  torch::Tensor inv = torch::pow(10000.0, -torch::arange(0, half, opt) * 2.0 / static_cast<double>(d));  // (d/2)
  torch::Tensor angle = torch::outer(positions.to(torch::kFloat32), inv);                                  // (s, d/2)
  torch::Tensor cos = angle.cos().to(x.scalar_type()), sin = angle.sin().to(x.scalar_type());
  torch::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

struct RecomputedCore : torch::autograd::Function<RecomputedCore> {
  // q: (b, a/t, s, d); k, v: (b, g/t, s, d) -> (b, a/t, s, d)
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               bool fused) {
    ctx->save_for_backward({q, k, v});
    ctx->saved_data["fused"] = fused;
    return grouped_attention(q, k, v, fused);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    torch::AutoGradMode enable(true);
    variable_list in;
    for (const torch::Tensor& t : saved) in.push_back(t.detach().requires_grad_(true));
    torch::Tensor out = grouped_attention(in[0], in[1], in[2], ctx->saved_data["fused"].toBool());
    variable_list g = torch::autograd::grad({out}, in, {grads[0]});
    g.emplace_back();  // `fused` has no gradient
    return g;
  }
};

// Cross-entropy over logits split by vocabulary across the tp group (Megatron-LM's
// vocab_parallel_cross_entropy; Shoeybi et al. 2019, sec. 3): each rank holds the logits of its
// vocabulary slice; the row maxima are all-reduced (max), then the exponent sums and the
// target's logit (held by one rank) in one all-reduce (sum). Saves the local softmax, (N, V/t)
// fp32, the only activation of the size of the vocabulary, as the fused cross-entropy does.
struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  // logits: (N, V/t) this rank's slice; targets: (N) global ids; start: the slice's first id.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets,
                               int64_t start) {
    const int64_t n = logits.size(0), v = logits.size(1);
    torch::Tensor z = logits.to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true);  // (N, V/t)
    torch::Tensor row_max = std::get<0>(z.max(1)).contiguous();                         // (N)
    tp_all_reduce_max(row_max);
    z.sub_(row_max.unsqueeze(1));
    torch::Tensor outside = (targets < start).logical_or(targets >= start + v);  // (N) target held elsewhere
    torch::Tensor local = (targets - start).masked_fill(outside, 0);             // (N) index into the slice
    torch::Tensor target_logit = z.gather(1, local.unsqueeze(1)).squeeze(1).masked_fill(outside, 0.0);  // (N)
    z.exp_();
    torch::Tensor sums = torch::stack({z.sum(1), target_logit}, 1);  // (N, 2) exponent sum, target logit
    tp_all_reduce(sums);
    torch::Tensor exp_sum = sums.select(1, 0);
    z.div_(exp_sum.unsqueeze(1));  // softmax of the slice
    ctx->save_for_backward({z, local, outside});
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return (exp_sum.log() - sums.select(1, 1)).sum() / static_cast<double>(n);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    torch::Tensor g = saved[0], local = saved[1], outside = saved[2];  // g: the softmax, reused in place
    const int64_t n = g.size(0);
    g.scatter_add_(1, local.unsqueeze(1), outside.logical_not().to(g.scalar_type()).neg().unsqueeze(1));
    g.mul_(grads[0].to(torch::kFloat32) / static_cast<double>(n));
    const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {g.to(dtype), torch::Tensor(), torch::Tensor()};
  }
};

torch::Tensor shard_rows(const torch::Tensor& full, int rank, int size) {
  int64_t n = full.size(0) / size;
  return full.narrow(0, rank * n, n).clone();
}

torch::Tensor shard_cols(const torch::Tensor& full, int rank, int size) {
  int64_t n = full.size(1) / size;
  return full.narrow(1, rank * n, n).contiguous();
}

}  // namespace

void check_attention_kernel(const costmodel::ModelSpec& m, int cp) {
  // With cp > 1 attention is the ring's (runtime/cp.h): block by block, keeping only its output
  // and row statistics, as a fused kernel does, in any LibTorch.
  if (cp == 1 && m.attention_kernel == costmodel::AttentionKernel::Fused && !compat::fused_attention_available())
    throw InputError("model.attention_kernel = 'fused' needs LibTorch 2.x's scaled_dot_product_attention; this build has "
                     "LibTorch " TORCH_VERSION " (allowed here: materialized)");
}


torch::Tensor deferrable_linear(const torch::Tensor& x, const torch::Tensor& w) { return dlinear(x, w); }

bool is_routed_expert_parameter(const std::string& name) { return name.find(".expert") != std::string::npos; }

TpContext& tp_context() {
  static TpContext ctx;
  return ctx;
}

DeferWeightGrads::DeferWeightGrads(DeferredGrads* q) : prev_(g_defer) { g_defer = q; }
DeferWeightGrads::~DeferWeightGrads() { g_defer = prev_; }

HookDeferredGrads::HookDeferredGrads(const WeightGradHook* hook) : prev_(g_weight_hook) { g_weight_hook = hook; }
HookDeferredGrads::~HookDeferredGrads() { g_weight_hook = prev_; }

GptPart::GptPart(const costmodel::ModelSpec& m, const PartShape& shape, int tp_rank, int tp_size, std::uint64_t seed,
                 torch::Device device, ExpertPlacement experts, ContextShard context)
    : m_(m), shape_(shape), tp_rank_(tp_rank), tp_size_(tp_size), experts_(experts), context_(context), device_(device) {
  if (!costmodel::tp_divides(m, tp_size))
    throw InputError("runtime: tp = " + std::to_string(tp_size) + " must divide num_heads, num_kv_heads and ffn_hidden_size");
  if (costmodel::is_moe(m) && (m.expert_ffn_hidden_size % tp_size != 0 || (m.num_shared_experts * m.expert_ffn_hidden_size) % tp_size != 0))
    throw InputError("runtime: tp = " + std::to_string(tp_size) + " must divide expert_ffn_hidden_size = " +
                     std::to_string(m.expert_ffn_hidden_size) + " (expert tensor parallelism = tp)");
  if (experts.size < 1 || experts.rank < 0 || experts.rank >= experts.size || (costmodel::is_moe(m) && m.num_experts % experts.size != 0))
    throw InputError("runtime: expert placement rank " + std::to_string(experts.rank) + " of " + std::to_string(experts.size) +
                     " does not split the model's " + std::to_string(m.num_experts) + " experts evenly");
  runtime::check_vocab_parallel(m, tp_size);
  check_attention_kernel(m, context.size);
  if (context.size < 1 || context.rank < 0 || context.rank >= context.size || m.seq_length % (2 * context.size) != 0)
    throw InputError("runtime: context shard rank " + std::to_string(context.rank) + " of " + std::to_string(context.size) +
                     " does not split seq_length = " + std::to_string(m.seq_length) + " into 2 cp chunks");
  positions_ = context.size > 1 ? cp_positions(m.seq_length, context.rank, context.size, device)
                                : torch::arange(m.seq_length, torch::TensorOptions().dtype(torch::kInt64).device(device));
  if (shape.embedding) init_ends(seed);
  for (int l = 0; l < shape.num_layers; ++l) init_layer(shape.first_layer + l, seed);
  if (m.kind == costmodel::ModelKind::Llama && (m.hidden_size / m.num_heads) % 2 != 0)
    throw InputError("runtime: rotary positions need an even head size; hidden_size / num_heads = " +
                     std::to_string(m.hidden_size / m.num_heads));
  if (shape.head) {
    lnf_w_ = add("final.ln_w", torch::ones({m.hidden_size}));
    if (!llama()) lnf_b_ = add("final.ln_b", torch::zeros({m.hidden_size}));
    head_w_ = add("head.w", shard_rows(draw(seed, 1u << 20, 3, {m.vocab_size, m.hidden_size}), tp_rank, tp_size));
  }
}

torch::Tensor GptPart::add(const std::string& name, torch::Tensor t) {
  t = t.to(device_).contiguous().set_requires_grad(true);  // drawn on the CPU, then placed
  params_.emplace_back(name, t);
  return t;
}

void GptPart::init_ends(std::uint64_t seed) {
  tok_emb_ = add("embed.tok", shard_rows(draw(seed, 1u << 20, 1, {m_.vocab_size, m_.hidden_size}), tp_rank_, tp_size_));
  if (!llama()) pos_emb_ = add("embed.pos", draw(seed, 1u << 20, 2, {m_.seq_length, m_.hidden_size}));
}

void GptPart::init_layer(int l, std::uint64_t seed) {
  const int64_t h = m_.hidden_size;
  const std::string n = "L" + std::to_string(l) + ".";
  const auto owner = static_cast<std::uint64_t>(l) + 1;
  LayerParams p;
  const bool biases = !llama();
  auto zeros = [&](int64_t size) { return torch::zeros({size}, torch::TensorOptions().device(device_)); };  // a constant
  p.ln1_w = add(n + "ln1_w", torch::ones({h}));
  if (biases) p.ln1_b = add(n + "ln1_b", torch::zeros({h}));
  const int64_t hkv = static_cast<int64_t>(costmodel::kv_hidden_size(m_));
  torch::Tensor qkv = draw(seed, owner, 1, {h + 2 * hkv, h});  // rows: q (h), k and v (h_kv each), heads contiguous
  std::vector<torch::Tensor> parts;
  for (auto [from, rows] : {std::pair{int64_t{0}, h}, std::pair{h, hkv}, std::pair{h + hkv, hkv}})
    parts.push_back(shard_rows(qkv.narrow(0, from, rows), tp_rank_, tp_size_));
  p.qkv_w = add(n + "qkv_w", torch::cat(parts, 0));
  if (biases) p.qkv_b = add(n + "qkv_b", torch::zeros({(h + 2 * hkv) / tp_size_}));
  p.proj_w = add(n + "proj_w", shard_cols(draw(seed, owner, 2, {h, h}), tp_rank_, tp_size_));
  p.proj_b = biases ? add(n + "proj_b", torch::zeros({h})) : zeros(h);
  p.ln2_w = add(n + "ln2_w", torch::ones({h}));
  if (biases) p.ln2_b = add(n + "ln2_b", torch::zeros({h}));
  if (costmodel::is_moe_layer(m_, l)) init_moe(p, l, seed);
  else init_dense_mlp(p, l, seed);
  layers_.push_back(p);
}

void GptPart::init_dense_mlp(LayerParams& p, int l, std::uint64_t seed) {
  const int64_t h = m_.hidden_size, f = m_.ffn_hidden_size;
  const std::string n = "L" + std::to_string(l) + ".";
  const auto owner = static_cast<std::uint64_t>(l) + 1;
  const bool biases = !llama();
  p.fc1_w = add(n + "fc1_w", shard_rows(draw(seed, owner, 3, {f, h}), tp_rank_, tp_size_));
  if (biases) p.fc1_b = add(n + "fc1_b", torch::zeros({f / tp_size_}));
  if (!biases) p.up_w = add(n + "up_w", shard_rows(draw(seed, owner, 5, {f, h}), tp_rank_, tp_size_));
  p.fc2_w = add(n + "fc2_w", shard_cols(draw(seed, owner, 4, {h, f}), tp_rank_, tp_size_));
  p.fc2_b = biases ? add(n + "fc2_b", torch::zeros({h})) : torch::zeros({h}, torch::TensorOptions().device(device_));
}

// An MLP of `width` without biases (an expert): fc1 (and LLaMA's up) (width, h), fc2 (h, width),
// drawn full size from (seed, owner, first_id + 0, 1, 2).
ExpertWeights GptPart::init_expert(const std::string& name, std::uint64_t owner, std::uint64_t first_id, int64_t width,
                                   std::uint64_t seed) {
  const int64_t h = m_.hidden_size;
  ExpertWeights w;
  // Expert tensor parallelism = tp (Megatron-Core's default): each tp rank holds width/t of the
  // expert's first matrices' rows and of its second's columns, drawn whole and sliced.
  w.fc1_w = add(name + "fc1_w", shard_rows(draw(seed, owner, first_id, {width, h}), tp_rank_, tp_size_));
  if (llama()) w.up_w = add(name + "up_w", shard_rows(draw(seed, owner, first_id + 1, {width, h}), tp_rank_, tp_size_));
  w.fc2_w = add(name + "fc2_w", shard_cols(draw(seed, owner, first_id + 2, {h, width}), tp_rank_, tp_size_));
  return w;
}

// Router (E, h) and shared experts drawn from the layer's generators (ids 6, 7-9), replicated;
// routed expert e from its own owner (expert_owner), only on the ep rank that holds it, so
// expert e has the same weights wherever it lives and whatever ep is.
void GptPart::init_moe(LayerParams& p, int l, std::uint64_t seed) {
  const int64_t h = m_.hidden_size, fe = m_.expert_ffn_hidden_size;
  const std::string n = "L" + std::to_string(l) + ".";
  const auto owner = static_cast<std::uint64_t>(l) + 1;
  p.is_moe = true;
  p.moe.router_w = add(n + "router_w", draw(seed, owner, 6, {m_.num_experts, h}));
  const int local = m_.num_experts / experts_.size;
  p.moe.first_expert = experts_.rank * local;
  for (int e = p.moe.first_expert; e < p.moe.first_expert + local; ++e)
    p.moe.experts.push_back(init_expert(n + "expert" + std::to_string(e) + ".", expert_owner(l, e), 1, fe, seed));
  if (m_.num_shared_experts > 0)
    p.moe.shared = init_expert(n + "shared.", owner, 7, static_cast<int64_t>(m_.num_shared_experts) * fe, seed);
}

void GptPart::set_sequence_parallel(bool on) {
  sp_ = on && tp_size_ > 1;
  if (sp_ && positions_.size(0) % tp_size_ != 0)
    throw InputError("runtime: sequence parallelism: tp = " + std::to_string(tp_size_) + " must divide the rank's " +
                     std::to_string(positions_.size(0)) + " tokens (seq_length / cp)");
}

int64_t GptPart::vocab_start() const { return static_cast<int64_t>(tp_rank_) * (m_.vocab_size / tp_size_); }

torch::Tensor GptPart::embed(const torch::Tensor& tokens) const {
  ShardedParams* fsdp = fsdp_params();
  if (!fsdp) return embed_whole(tokens);
  // zero 3: a unit whose backward reads no weight (the lookups' gradient scatters into rows).
  fsdp->before_forward(kEmbedUnit);
  return fsdp->after_forward(kEmbedUnit, embed_whole(tokens), false);
}

torch::Tensor GptPart::embed_whole(const torch::Tensor& tokens) const {
  auto with_pos = [&](const torch::Tensor& e) {  // LLaMA: positions enter as rotations of q and k instead
    if (!pos_emb_.defined()) return e;
    if (sp_) return e + replicated(pos_emb_).index_select(0, local_positions()).unsqueeze(0);  // (1, s/(cp t), h)
    if (context_.size > 1) return e + pos_emb_.index_select(0, positions_).unsqueeze(0);  // (1, s/cp, h) this rank's positions
    return e + pos_emb_.narrow(0, 0, tokens.size(1)).unsqueeze(0);                          // (1, s, h)
  };
  if (tp_size_ == 1) return with_pos(torch::embedding(tok_emb_, tokens));
  // Vocabulary-parallel (Megatron-LM's VocabParallelEmbedding): rows of other ranks' ids are
  // zero here; the all-reduce (g: identity backward) assembles the full lookup.
  const int64_t start = vocab_start(), end = start + tok_emb_.size(0);
  torch::Tensor outside = (tokens < start).logical_or(tokens >= end);                          // (b, s)
  torch::Tensor e = torch::embedding(tok_emb_, (tokens - start).masked_fill(outside, 0));      // (b, s, h)
  e = e.masked_fill(outside.unsqueeze(-1), 0.0);
  return with_pos(sp_ ? ScatterToSeq::apply(e) : ReduceFromTp::apply(e));  // sequence parallel: this rank's s/t tokens
}

torch::Tensor GptPart::norm(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) const {
  if (!llama()) return torch::layer_norm(x, {m_.hidden_size}, w, b);
  // RMSNorm (Zhang and Sennrich, 2019; LLaMA): x / rms(x) * w, eps 1e-5.
  return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + 1e-5) * w;
}

torch::Tensor GptPart::layers(const torch::Tensor& x, int from, int to) const {
  torch::Tensor y = x;
  ShardedParams* fsdp = fsdp_params();  // zero 3: each layer a unit, gathered for its passes
  for (int l = from; l < to; ++l) {
    if (!fsdp) {
      y = layer(y, layers_[static_cast<size_t>(l)]);
      continue;
    }
    const int unit = shape_.first_layer + l;
    fsdp->before_forward(unit);
    y = fsdp->after_forward(unit, layer(fsdp->wrap_input(unit, y), layers_[static_cast<size_t>(l)]), true);
  }
  return y;
}

torch::Tensor GptPart::layer(const torch::Tensor& x, const LayerParams& p) const {
  torch::Tensor a = x + attention(norm(x, replicated(p.ln1_w), replicated(p.ln1_b)), p);
  return a + mlp(norm(a, replicated(p.ln2_w), replicated(p.ln2_b)), p);
}

torch::Tensor GptPart::enter_tp(const torch::Tensor& x) const {
  if (tp_size_ == 1) return x;
  return sp_ ? GatherFromSeq::apply(x) : CopyToTp::apply(x);
}

torch::Tensor GptPart::leave_tp(const torch::Tensor& y) const {
  if (tp_size_ == 1) return y;
  return sp_ ? ScatterToSeq::apply(y) : ReduceFromTp::apply(y);
}

torch::Tensor GptPart::replicated(const torch::Tensor& w) const {
  // Megatron-LM all-reduces these gradients over tp once a step (allreduce_layernorm_grads /
  // the sequence-parallel parameters); here each use sums its own, the same sums.
  return sp_ && w.defined() && w.requires_grad() ? CopyToTp::apply(w) : w;
}

torch::Tensor GptPart::local_positions() const {
  const int64_t n = positions_.size(0) / tp_size_;
  return positions_.narrow(0, tp_rank_ * n, n);
}

torch::Tensor GptPart::attention(const torch::Tensor& x, const LayerParams& p) const {
  torch::Tensor out = leave_tp(attention_core(enter_tp(x), p));  // (b, s, h) partial sums over tp reduced
  return out + replicated(p.proj_b);
}

torch::Tensor GptPart::attention_core(const torch::Tensor& in, const LayerParams& p) const {
  const int64_t b = in.size(0), s = in.size(1), heads = m_.num_heads / tp_size_, kv = costmodel::kv_heads(m_) / tp_size_;
  const int64_t d = m_.hidden_size / m_.num_heads;
  torch::Tensor qkv = dlinear(in, p.qkv_w);  // (b, s, (h + 2h_kv)/t)
  // The column biases join the product in its dtype, as autocast's addmm would (an fp32 bias
  // would promote the (b, s, 3h/t) output, and the GELU's input below, to fp32).
  if (p.qkv_b.defined()) qkv = qkv + autocast_input(p.qkv_b);
  auto split = qkv.split_with_sizes({heads * d, kv * d, kv * d}, -1);
  auto heads_of = [&](const torch::Tensor& t) { return t.reshape({b, s, t.size(-1) / d, d}).transpose(1, 2); };  // (b, heads, s, d)
  torch::Tensor q = heads_of(split[0]), k = heads_of(split[1]), v = heads_of(split[2]);
  const torch::Tensor pos = positions_.narrow(0, 0, s);  // (s) the tokens' positions in the sequence
  if (llama()) q = rotary(q, pos), k = rotary(k, pos);
  const bool fused = m_.attention_kernel == costmodel::AttentionKernel::Fused;
  torch::Tensor ctx;
  q = mark_backward_end(q, OpKind::AttentionCore);  // `train --op-times`: the core's backward ends with q's gradient
  {
    OpScope timed(OpKind::AttentionCore);
    if (context_.size > 1)  // a ring over the cp group; it keeps only q, k, v, its output and the row statistics
      ctx = ring_attention(q, k, v, positions_, cp_context());
    else
      ctx = recompute_core_ ? RecomputedCore::apply(q, k, v, fused) : grouped_attention(q, k, v, fused);
  }
  ctx = mark_backward_begin(ctx, OpKind::AttentionCore);
  ctx = ctx.transpose(1, 2).reshape({b, s, heads * d});  // (b, s, h/t)
  return dlinear(ctx, p.proj_w);                         // (b, s, h) partial sum over tp ranks
}

torch::Tensor GptPart::mlp(const torch::Tensor& x, const LayerParams& p) const {
  if (p.is_moe) {
    if (tp_size_ > 1 && !sp_)
      throw Error("runtime: experts with tp = " + std::to_string(tp_size_) + " need sequence parallelism (Megatron-Core's rule)");
    // tp > 1: every tp rank routes the whole (gathered) sequence alike and computes its slice of
    // each expert (expert tp = tp); the gated sum is partial, reduce-scattered like a dense MLP's.
    // The router's gradient, from partial expert outputs, is summed over tp (replicated).
    MoeShape shape{m_.num_experts, m_.experts_per_token, llama(), experts_.size, ep_context().group, ep_context().timeout};
    if (tp_size_ == 1) return moe_mlp(x, p.moe, shape, &deferrable_linear);
    MoeParams q = p.moe;
    q.router_w = CopyToTp::apply(p.moe.router_w);
    return leave_tp(moe_mlp(enter_tp(x), q, shape, &deferrable_linear));
  }
  torch::Tensor out = leave_tp(mlp_core(enter_tp(x), p));  // (b, s, h) partial sums over tp reduced
  return out + replicated(p.fc2_b);
}

torch::Tensor GptPart::mlp_core(const torch::Tensor& in, const LayerParams& p) const {
  torch::Tensor u = llama() ? torch::silu(dlinear(in, p.fc1_w)) * dlinear(in, p.up_w)  // (b, s, f/t) SwiGLU
                            : torch::gelu(dlinear(in, p.fc1_w) + autocast_input(p.fc1_b));  // (b, s, f/t)
  return dlinear(u, p.fc2_w);                                                        // (b, s, h) partial sum
}

const LayerParams& GptPart::block_layer(int block) const {
  if (block < 0 || block >= blocks())
    throw Error("runtime: block " + std::to_string(block) + " is outside the part's " + std::to_string(blocks()) + " blocks");
  return layers_[static_cast<size_t>(block / 2)];
}

torch::Tensor GptPart::block_norm(const torch::Tensor& x, int block) const {
  const LayerParams& p = block_layer(block);
  return block % 2 == 0 ? norm(x, p.ln1_w, p.ln1_b) : norm(x, p.ln2_w, p.ln2_b);
}

torch::Tensor GptPart::block_core(const torch::Tensor& q, int block) const {
  const LayerParams& p = block_layer(block);
  if (block % 2 == 1 && p.is_moe)
    throw Error("runtime: block " + std::to_string(block) + " is a mixture of experts; tensor-parallel pieces run dense MLPs only");
  return block % 2 == 0 ? attention_core(q, p) : mlp_core(q, p);
}

const torch::Tensor& GptPart::block_bias(int block) const {
  const LayerParams& p = block_layer(block);
  return block % 2 == 0 ? p.proj_b : p.fc2_b;
}

torch::Tensor GptPart::loss(const torch::Tensor& x, const torch::Tensor& targets) const {
  ShardedParams* fsdp = fsdp_params();
  if (!fsdp) return loss_whole(x, targets);
  fsdp->before_forward(kHeadUnit);  // zero 3: the final norm and the LM head, one unit
  return fsdp->after_forward(kHeadUnit, loss_whole(fsdp->wrap_input(kHeadUnit, x), targets), true);
}

torch::Tensor GptPart::loss_whole(const torch::Tensor& x, const torch::Tensor& targets) const {
  torch::Tensor y = norm(x, replicated(lnf_w_), replicated(lnf_b_));
  if (tp_size_ > 1) {  // column-parallel over the vocabulary: f (or the sequence's all-gather) before, the loss's own all-reduces after
    torch::Tensor logits = dlinear(enter_tp(y), head_w_);  // (b, s, V/t)
    return VocabParallelCrossEntropy::apply(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}), vocab_start());
  }
  torch::Tensor logits = dlinear(y, head_w_);  // (b, s, V)
  return torch::nn::functional::cross_entropy(logits.reshape({-1, m_.vocab_size}), targets.reshape({-1}));
}

std::vector<std::int64_t> GptPart::boundary_shape(bool /*input*/, std::int64_t b) const {
  const int split = context_.size * (sp_ ? tp_size_ : 1);  // cp, and tp with sequence parallelism
  return {b, static_cast<std::int64_t>(m_.seq_length / split), static_cast<std::int64_t>(m_.hidden_size)};
}

}  // namespace stagecraft::runtime
