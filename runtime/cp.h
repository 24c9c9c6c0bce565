// Context parallelism in the runtime's decoder (docs/runtime.md "Context parallelism"): every
// sequence is split over the cp ranks of a context-parallel group, each rank holding two of the
// sequence's 2cp chunks (chunks r and 2cp - 1 - r, Megatron-Core's load balancing of the causal
// mask), and attention runs as a ring: each rank's key/value chunks travel once around the
// group while every rank attends its queries to the chunk it holds (online softmax, Liu et al.,
// Ring Attention, arXiv 2310.01889; Megatron-Core's AttnFuncWithCPAndKVP2P). Everything else in
// a layer is per token, so it runs on the rank's tokens unchanged.
#pragma once

#include <chrono>
#include <cstdint>

#include "runtime/compat.h"

namespace stagecraft::runtime {

// Context-parallel state of one process, as TpContext is for tp: the group (the cp ranks that
// share this rank's tp, dp and pp coordinates; size 1 or null: no communication) and counters.
struct CpContext {
  compat::Group* group = nullptr;
  std::chrono::milliseconds timeout{60000};  // limit of each ring step's receive
  long sends = 0;                            // key/value (and their gradients') chunk sends so far
};
CpContext& cp_context();

// Where a cp rank's tokens sit in the sequence: the positions of chunks `rank` and
// 2 size - 1 - rank of the s / (2 size) tokens each, in that order. (s / size) int64 on `device`.
torch::Tensor cp_positions(std::int64_t s, int rank, int size, torch::Device device = torch::kCPU);

// The rank's tokens of a (b, s, ...) tensor: x.index_select(1, cp_positions(s, rank, size)).
torch::Tensor cp_slice(const torch::Tensor& x, int rank, int size);

// Causal attention of this rank's queries over every rank's keys and values, as a ring over
// `ctx.group` (its size the cp degree, each member holding the chunks cp_positions names):
// cp - 1 exchanges of the k and v chunks in the forward (2 (cp - 1) sends), the same cp - 1 in
// the backward plus cp exchanges of their gradients (2 cp sends), each step's transfer started
// before the step's block is computed. Grouped-query attention: k and v hold g heads, q a
// multiple of g (query head i reads key/value head i / (a/g)). Accumulation in fp32; scores as
// tensors (the materialized kernel, block by block). Autograd function.
// q: (b, a, s/cp, d); k, v: (b, g, s/cp, d); positions: (s/cp) int64 -> (b, a, s/cp, d).
torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& positions, CpContext& ctx);

}  // namespace stagecraft::runtime
