// The host's part of a layer: the CPU issues every kernel, and where issuing a layer's kernels
// takes longer than the GPU takes to run them, the GPU waits (NVIDIA, "CUDA Graph Best Practice
// for Deep Learning", docs.nvidia.com/dl-cuda-graph, "Introduction: Sources of Launch Overhead":
// a kernel launched from Python pays a language transition (10-100 us), runtime processing
// (5-20 us), driver operations (5-15 us) and hardware submission (1-5 us)). The stack says how
// many kernels each block issues and what one costs (KernelStack::host, presets/stacks); the plan
// says which blocks run as CUDA graphs (ParallelPlan::cuda_graph_scope), each then one launch.
//
// Where the host may run ahead: PyTorch queues kernels and returns, so over a pass with no
// synchronisation the pass takes the longer of the host's and the GPU's time. A dropless MoE
// layer's forward synchronises once, before its dispatch: the token counts per expert come to the
// host, which needs them for the all-to-all's splits and the grouped products' shapes (Megatron-LM
// megatron/core/transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher: one
// d2h_event.synchronize() per forward; the flex dispatcher's HybridEP dispatch runs blocking when
// dropless; the backward reuses the host's splits and does not synchronise). So an MoE layer's
// forward is two segments priced apart: up to the synchronisation (attention, router,
// preprocessing) and after it (dispatch, experts, combine). Full-iteration graphs issue nothing
// per layer (Megatron-Core requires a synchronisation-free dispatch for them).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "costmodel/specs.h"

namespace stagecraft::costmodel {

// What one block's pass issues: kernels from Python (each paying the language transition) and,
// for the routed experts, kernels per local expert launched from inside one C++ call
// (Transformer Engine's GroupedLinear: a cuBLAS product, and with FP8 a quantisation, per expert).
struct HostOps {
  double python = 0;      // kernels issued from Python
  double per_expert = 0;  // kernels per local expert issued from C++
};

struct HostCosts {
  double python_op_s = 0;  // host seconds of one kernel issued from Python; 0: the stack prices no host time
  double launch_s = 0;     // host seconds of one kernel launched from C++ (no language transition)
  // Kernels of each block's forward (_f) and backward (_b, input and weight gradients together).
  HostOps attn_f, attn_b;              // norm, QKV, core, projection, residual
  HostOps mlp_f, mlp_b;                // a dense layer's MLP block
  HostOps router_f, router_b;          // gating product, top-k, auxiliary loss
  HostOps preprocess_f, preprocess_b;  // token counts, splits, permutation 1 (graph scope moe_preprocess)
  HostOps experts_f, experts_b;        // dispatch, grouped expert products, activation, combine
  double fp8_quantize_per_expert_f = 0;  // quantisations per local expert with FP8 scaled per tensor
  double fp8_quantize_per_expert_b = 0;  // from the current tensor or per block (not delayed scaling)
  std::string source;
};

HostCosts host_costs_from_json(const nlohmann::json& j, HostCosts base);
nlohmann::json to_json(const HostCosts& h);
void check(const HostCosts& h, const std::string& stack);

// Host seconds of one layer's passes on one rank.
struct HostLayer {
  double dense_f_s = 0, dense_b_s = 0;  // a dense layer
  double moe_head_f_s = 0;   // an MoE layer's forward up to its synchronisation: attention, router, preprocessing
  double moe_tail_f_s = 0;   // after it: dispatch, experts, combine
  double moe_b_s = 0;        // an MoE layer's backward
  bool synchronises = false; // the MoE forward waits for the GPU before its dispatch
};
// `local_experts` E / ep; `fp8_per_expert` the products run FP8 scaled per tensor or per block.
HostLayer host_layer(const HostCosts& h, const CudaGraphScopes& g, double local_experts, bool fp8_per_expert);

// GPU seconds of one layer's passes, each with the communication it waits for, as the pricer has them.
struct GpuLayer {
  double attn_f_s = 0, mlp_f_s = 0, moe_f_s = 0;  // moe_f_s: the MoE block with its exposed exchanges
  double attn_b_s = 0, mlp_b_s = 0, moe_b_s = 0;  // backward: input and weight gradients together
};

// Seconds one layer's pass waits for the host beyond its GPU time.
struct HostWait {
  double dense_f_s = 0, dense_b_s = 0, moe_f_s = 0, moe_b_s = 0;
};
HostWait host_wait(const HostLayer& h, const GpuLayer& g);

}  // namespace stagecraft::costmodel
