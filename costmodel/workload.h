// The work of a plan as data, built once and priced separately (price.h): for one transformer
// layer (and the head) on one tensor-parallel rank and one sub-batch, every matrix product with
// its shape, the fused attention kernel with its FLOPs, and the memory-bound traffic, per pass.
// A plan's stages hold it with what each sends, reduces, keeps and exchanges, in bytes
// (plan_workload.h, StageWorkload). Every model and plan option changes the work here and only
// here: the attention kernel, dropout, the activation, grouped-query attention, sequence parallelism, selective
// recomputation, FP8 (the linear products at the FP8 rate, the casts of their inputs and
// output gradients as memory-bound traffic) and context parallelism (s / cp tokens, the core
// per key/value chunk). The evaluator, the simulator, the planner and the graph route all price what
// this builds.
#pragma once

#include <string>
#include <vector>

#include "costmodel/specs.h"
#include "costmodel/stack.h"

namespace stagecraft::costmodel {

// `batch` independent products of (m x k) x (k x n) matrices.
struct Gemm {
  double m = 0, n = 0, k = 0, batch = 1;
  bool fp8 = false;  // FP8 operands at the FP8 rate (ModelSpec::fp8), 16-bit output
  // How many of the `batch` products run at once: 0 = all (one grouped or batched kernel);
  // n > 0 = n at a time, one kernel each on n streams (KernelStack::grouped_gemm_streams), so
  // only n products' tiles share the SMs' waves (shape::streamed_gemm_s).
  double concurrent = 0;
  double flops() const { return 2 * m * n * k * batch; }
};

// What a fused attention kernel's throughput depends on (stack.h's table) and the operand width
// of the products.
struct KernelContext {
  int head_dim = 0;       // d = h / a
  int seq_length = 0;     // s
  bool causal = true;     // decoders mask the future; BERT does not
  int element_bytes = 2;  // bytes of one operand element of the products
  bool mxfp8 = false;     // FP8 products at the GPU's MXFP8 peak (Fp8Recipe::Mxfp8)
};

// One pass of one block: what its kernels compute and move.
struct BlockWork {
  std::vector<Gemm> gemms;      // matrix products, priced by shape
  double flash_flops = 0;       // a fused attention kernel's FLOPs as its authors count them
                                // (causal: half the full count); 0: none
  bool flash_backward = false;  // the kernel is the backward (priced at its backward throughput)
  double model_flops = 0;       // the same kernel's FLOPs as MFU counts them (full count), for the
                                // flat-rate pricer
  double other_flops = 0;       // FLOPs of kernels known by their count alone (a graph node without
                                // shapes): at the largest products' rate when priced by shape
  double memory_bytes = 0;      // memory-bound operations: bytes read and written

  // Every FLOP as the flat-rate pricer counts it: the products plus the core's model count.
  double flops() const;
  void add(const BlockWork& o);  // appends o's kernels
};

// How a block's backward divides between a split backward's input gradient (I) and weight
// gradient (W) (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, Sec. 2): W holds the
// products that compute parameter gradients. The one rule for every route that splits a
// backward it knows only as a total (a node's FLOPs, a measured node's seconds):
//   Product        a product with weights, Y = X W: dX = dY W^T (I) and dW = X^T dY (W), equal
//                  in FLOPs, so half each (layer_work writes both products by shape)
//   Table          a lookup table (the embedding): its only gradient is its table's, all W
//   NoParameters   the attention core, norms' and activations' elementwise work, residual adds,
//                  the loss: no parameter gradient, all I
enum class ParameterUse { Product, Table, NoParameters };
double weight_gradient_share(ParameterUse use);

// Memory-bound operations move about twice their forward's bytes in the backward: it reads the
// saved input and the output gradient and writes the input gradient (stack.h's traffic table).
// The one statement of the factor, for layer_work and the graph route.
inline constexpr double kBackwardTrafficFactor = 2.0;
inline double backward_traffic_bytes(double forward_bytes) { return kBackwardTrafficFactor * forward_bytes; }

// The attention core of bb samples of s tokens over `heads` heads of d on one rank: forward and
// input gradient. Materialised: two batched products (four in the backward) and the score
// matrix's softmax (and with dropout its dropout and mask) traffic; fused with a measured kernel
// in the stack: one flash kernel, its FLOPs halved when causal, the backward 2.5 times the
// forward (FlashAttention-2, Dao 2023, Sec. 4: five products against two); fused without one:
// the products without the score traffic. One rule for layer_work and the graph route.
struct CoreWork {
  BlockWork f, i;
};
// `d` is the query/key width of a head, `dv` the value's (0: d; MLA's differ).
CoreWork attention_core_work(const KernelStack& k, double bb, double s, double heads, double d, bool fused, bool causal,
                             bool dropout, double element_bytes, double dv = 0);

// The core of context parallelism (plan.cp): the rank's s_local = s / cp queries against each of
// the cp key/value chunks the ring brings, one fused kernel per chunk of s_local x s_local
// (non-causal but for the rank's own chunks); in all 1/cp of the whole sequence's core, causal
// included (Megatron-Core's load balancing gives each rank two chunks, one from each end). The
// model FLOPs are the full sequence's over cp; the kernels run at one chunk's length.
CoreWork cp_core_work(const KernelStack& k, double bb, double s_local, double heads, double d, bool causal, int cp,
                      double dv = 0);

// Bytes the permutations of one MoE layer's forward move on one rank for `copies` routed copies
// (tokens x k x load) of h elements of `e` bytes: permutation 1 and its inverse, 4 copies h e
// (each read and written); with `sources` > 1 (ep x et ranks sending copies) and several
// local experts, permutation 2 and its inverse as well (Megatron-Core's sort_chunks_by_idxs
// after the dispatch and before the combine), 8 copies h e. The backward moves twice this.
double moe_permute_bytes(double copies, double h, double e, double local_experts, int sources);

// Bytes per element of f (the MLP's, or an expert's, width) that one forward of the MLP's
// activation moves: the stack's fused activation (GeLU, SwiGLU), plus a clamped gated MLP's eager
// clamps (ModelSpec::activation_clamp, MemoryTraffic::glu_clamp). The one rule for dense MLPs,
// routed and shared experts and the recomputed activation.
double activation_traffic(const ModelSpec& m, const MemoryTraffic& tr);

// One transformer layer and the head on one of t tensor-parallel ranks, for bb samples.
struct LayerWork : KernelContext {
  BlockWork attn_f, attn_i, attn_w;  // LN, QKV, core, projection, bias-dropout-residual
  BlockWork mlp_f, mlp_i, mlp_w;     // LN, up (and gate), activation, down, bias-dropout-residual
  BlockWork head_f, head_i, head_w;  // final norm, logits (T x h x V/t), cross-entropy
  BlockWork moe_f, moe_i, moe_w;     // an MoE layer's MLP block (models with experts): LN, router,
                                     // grouped expert products, shared experts, permutations
  CoreWork core;                     // the attention core alone (in attn_f and attn_i already)
};

// The layer's work under `k` (what each memory-bound operation moves; the core as
// attention_core_work); selective recomputation adds the core's
// forward to the input gradient; with sequence parallelism the (b, s, h) operations outside
// the tensor-parallel blocks (norms, residual adds) work on s/t of the sequence; without
// dropout there are no masks.
// With cp > 1 (context parallelism) the rank's s / cp tokens, the core as cp_core_work.
// With experts (ModelSpec::num_experts) the MoE layers' MLP block too (moe_f, moe_i, moe_w), its
// E / ep local experts each taking ep T k / E copies times moe_load_factor (the busiest rank), at
// the experts' tensor-parallel degree et (0: t; 1: whole experts on each rank's s/t tokens).
// `modules`: what selective recomputation recomputes beyond the core (specs.h RecomputeModules),
// each module's forward again inside the input gradient: the norms' traffic (layernorm), MLA's
// up projections (mla_up_proj), the dense MLP block (mlp), the experts' activation (moe_act), the
// shared experts' products (shared_experts), the whole MoE block (moe).
// `fp8_any_layout`: the GPU's FP8 products read any layout (ClusterSpec::fp8_gemm_any_layout), so
// per-tensor FP8 casts write no transpose (specs.h fp8_cast_bytes); false prices Hopper's.
LayerWork layer_work(const ModelSpec& m, const KernelStack& k, int bb, int t, bool sp, bool selective, int cp = 1,
                     int ep = 1, int et = 0, const RecomputeModules& modules = {}, bool fp8_any_layout = false);

}  // namespace stagecraft::costmodel
