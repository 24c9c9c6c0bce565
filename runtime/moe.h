// Mixture-of-experts MLP blocks of the runtime's decoder (docs/runtime.md "Mixture of experts"):
// a router, top-k routing with the gates renormalised over the k chosen experts (Mixtral's
// convention), E routed experts, optional shared experts every token passes (DeepSeekMoE), and
// expert parallelism: with ep > 1 the experts are split over the ep ranks of an expert-parallel
// group and each token copy travels to its expert's rank and back by two all-to-alls whose
// backward runs the reverse all-to-all. Dropless: every routed copy is computed, so the layer's
// output does not depend on how the experts are placed.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "runtime/compat.h"

namespace stagecraft::runtime {

// Expert-parallel state of one process, as TpContext is for tp: the group (ep consecutive
// data-parallel ranks of one pipeline stage and tp index; size 1 or null: no communication).
// GptPart's MoE layers read it; moe_mlp itself takes the group it is given.
struct EpContext {
  compat::Group* group = nullptr;
  std::chrono::milliseconds timeout{60000};
};
EpContext& ep_context();

// One expert's MLP weights (no biases, as the cost model counts experts: costmodel/flops.cpp).
// GPT: GELU(x fc1^T) fc2^T; LLaMA: (silu(x fc1^T) * x up^T) fc2^T (SwiGLU).
struct ExpertWeights {
  torch::Tensor fc1_w;  // (f_e, h) GPT's first matrix; LLaMA's gate
  torch::Tensor up_w;   // (f_e, h) LLaMA's up matrix; undefined for GPT
  torch::Tensor fc2_w;  // (h, f_e)
};

// One MoE layer's MLP as one rank holds it.
struct MoeParams {
  torch::Tensor router_w;               // (E, h) replicated
  std::vector<ExpertWeights> experts;   // the E/ep routed experts of this ep rank, in expert order
  int first_expert = 0;                 // global index of experts[0]: ep_rank * E/ep
  ExpertWeights shared;                 // num_shared_experts experts as one MLP of width
                                        // num_shared x f_e (the sum of their outputs); undefined: none
};

struct MoeShape {
  int num_experts = 0;  // E
  int top_k = 1;        // k
  bool swiglu = false;  // LLaMA's experts
  int ep_size = 1;      // ranks the experts are split over
  compat::Group* group = nullptr;  // ep_size > 1: the expert-parallel group (ep_size members; member
                                   // r holds experts [r E/ep, (r + 1) E/ep))
  std::chrono::milliseconds timeout{60000};  // limit of each all-to-all
};

// Top-k routing of N tokens: softmax over the E router logits (fp32), the k largest
// probabilities, renormalised to sum to 1 (Mixtral, Jiang et al., arXiv 2401.04088, Sec. 2.1,
// and Hugging Face's MixtralSparseMoeBlock: softmax, topk, divide by the sum of the k).
struct Routing {
  torch::Tensor gates;    // (N, k) fp32 weights of the chosen experts, summing to 1 per token
  torch::Tensor experts;  // (N, k) int64 expert ids, highest probability first
};
Routing route(const torch::Tensor& logits, int k);  // logits: (N, E)

// Where the N k token copies go: sorted by expert (stable, so by token within an expert), the
// experts of ep rank r being [r E/ep, (r + 1) E/ep).
struct DispatchPlan {
  torch::Tensor order;                 // (N k) copy index (token * k + slot) of each sorted position
  torch::Tensor token;                 // (N k) the token of each sorted position
  std::vector<std::int64_t> per_expert;  // (E) copies routed to each expert
  std::vector<std::int64_t> send;      // (ep) copies sent to each ep rank, in rank order
};
DispatchPlan plan_dispatch(const torch::Tensor& experts, int num_experts, int ep_size);  // experts: (N, k)

// Variable-size all-to-all over `g` along the first dimension: rows [sum(send[:r]), +send[r])
// of x go to member r, and the result holds sum(recv) rows, member r's at sum(recv[:r]).
// Autograd: the backward is the reverse all-to-all of the gradient (send and recv swapped).
torch::Tensor all_to_all_rows(compat::Group& g, const torch::Tensor& x, const std::vector<std::int64_t>& send,
                              const std::vector<std::int64_t>& recv, std::chrono::milliseconds timeout);

// Exchanges per-member counts: member r receives counts[r] from every member (counts: (n, c),
// row r for member r) -> (n, c), row q from member q. Not differentiable (integers).
torch::Tensor exchange_counts(compat::Group& g, const torch::Tensor& counts, std::chrono::milliseconds timeout);

// The MoE MLP on the normed input: routed experts (over shape.group when shape.ep_size > 1)
// plus the shared experts. x: (b, s, h) -> (b, s, h).
// `linear` is the runtime's deferrable linear layer (y = x w^T).
using LinearFn = torch::Tensor (*)(const torch::Tensor& x, const torch::Tensor& w);
torch::Tensor moe_mlp(const torch::Tensor& x, const MoeParams& p, const MoeShape& shape, LinearFn linear);

}  // namespace stagecraft::runtime
