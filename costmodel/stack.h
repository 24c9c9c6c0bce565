// The software stack a plan runs on: which kernels compute a transformer layer, as data (a
// named kernel set under presets/stacks/, each figure with its source). The same
// model and plan run on different stacks at different speeds: eager PyTorch launches one
// kernel per elementwise operation, Megatron-LM fuses softmax, bias-GeLU and bias-dropout-add,
// Megatron-Core with Transformer Engine also runs the attention core as one flash kernel.
// The workload builder (workload.h) reads the memory-bound traffic from here; the pricer
// (price.h) reads the flash-attention throughput table.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/host.h"

namespace stagecraft::costmodel {

// Bytes read plus written per element of the (b, s, h)-shaped (or (b, a, s, s)-shaped) tensor,
// in units of the activation's bytes, for one forward of each memory-bound operation; its
// backward moves twice as much (it reads the saved input and the output gradient, writes the
// input gradient). A fused operation is one pass: it reads its inputs once and writes once.
struct MemoryTraffic {
  double layer_norm = 2;             // read x, write y (norm statistics are per row, negligible)
  double bias_dropout_residual = 3.5;  // read x and the residual, write y, a 1-byte mask (0.5)
  double residual = 3;               // the same without dropout: read x and the residual, write y
  double softmax = 2;                // the materialised core's scale, mask and softmax: read, write
  double score_dropout = 2.5;        // dropout on the (b, a, s, s) probabilities with its mask
  double gelu = 2;                   // bias + GeLU: read, write (f columns)
  double swiglu = 3;                 // gate and up in, product out (f columns)
  double glu_clamp = 8;              // a clamped gated MLP (ModelSpec::activation_clamp), per element of
                                     // f: each half clamped (read, write) and the two concatenated again
                                     // (read, write), eagerly before the fused activation (Megatron-LM
                                     // d98e8a64 fusions/fused_bias_geglu.py weighted_bias_quick_geglu_impl)
  // RoPE on the queries and keys where Megatron-Core runs it unfused (ModelSpec::rope_mscale != 1;
  // rope_utils.py _apply_rotary_pos_emb_bshd, d98e8a64), per element of q and k: t * cos (read,
  // write: 2), the rotate-half's negated half and concatenation (1 + 2), * sin (2), the sum (read 2,
  // write 1: 3) and the concatenation with the non-rotary part (2): 12; backward: the two products'
  // gradients (2 + 2), the negation's (1) and their sum (3): 8. A fused RoPE kernel is not priced.
  double rope_unfused = 12;
  double rope_unfused_backward = 8;
  // The routed experts' second bias applied outside their products (ModelSpec::linear_bias;
  // moe/experts.py TEGroupedMLP._apply_bias, d98e8a64), per element of the routed output, in units
  // of 16 bits: the bias per token in fp32 (write 2), times the router probability (read 2, write
  // 2), added to the output (read 1 + 2, write 2) and cast back (read 2, write 1): 14; backward:
  // the cast (3), the gradients of the probability and the bias (4 + 4 + 2) and the output's cast
  // to 16 bits (3): 16. Transformer Engine's fused grouped MLP scales the bias in its epilogue.
  double expert_bias = 14;
  double expert_bias_backward = 16;
  double cross_entropy = 3;          // logits in, softmax out, loss (V columns)
  double cross_entropy_backward = 2; // softmax minus one-hot, scaled (V columns)
  // FP8 (ModelSpec::fp8): Transformer Engine's fused cast-transpose of an FP8 product's input
  // (forward) or output gradient (backward): read 16 bits, write the FP8 tensor and its FP8
  // transpose (the weight gradient reads the transpose), the amax reduced in the same pass.
  double fp8_cast_transpose = 4;
};

// One measured point of a flash-attention kernel: throughput in TFLOP/s of its forward and of
// its backward at one head dimension and sequence length on one GPU, causal or not, with FLOPs
// counted as the paper counts them (causal: half the non-causal count).
struct FlashPoint {
  std::string gpu;       // matched against ClusterSpec::gpu_name by substring, e.g. "H100", "A100"
  int head_dim = 0;      // d = h / a
  int seq_length = 0;    // s
  bool causal = true;
  double fwd_tflops = 0;
  double bwd_tflops = 0;   // 0: not measured (the backward then takes the other causality's)
  double peak_tflops = 0;  // the GPU's dense 16-bit peak the paper's GPU had: the table is read
                           // as fractions of it, so another clock or SKU of the same GPU scales
};

struct KernelStack {
  std::string name;
  MemoryTraffic traffic;
  std::string flash_kernel;         // what runs a fused attention core, e.g. "flash-attention-3"
  std::vector<FlashPoint> flash;    // its measured throughput; empty: a fused core is priced as
                                    // its two batched products (no score traffic)
  // Transformer Engine's tensor-parallel overlap (plan.tp_overlap = te): the SMs its
  // communication kernels occupy while a GEMM runs beside them; 0: the stack has no such
  // overlap, and te is refused on it.
  int tp_overlap_comm_sms = 0;
  // How the routed experts' grouped products run (workload.h moe_block_work, shape.h gemm_s):
  // 0 = one grouped kernel over all local experts, their output tiles sharing the SMs' waves
  // (a CUTLASS grouped GEMM, e.g. the grouped_gemm package Megatron-LM used); n > 0 = one
  // cuBLAS product per expert, n of them at once on n CUDA streams, so the tiles of only n
  // experts share a wave. Transformer Engine's GroupedLinear runs the latter with 4 streams
  // (source: TransformerEngine PR #853 "Grouped GEMM via multi-stream cuBLAS";
  // transformer_engine/common/include/transformer_engine/multi_streams.h, num_streams = 4;
  // TE issue #1386: the maintainers keep the multi-stream cuBLAS path over a grouped kernel).
  int grouped_gemm_streams = 0;
  // The routed experts' activation (with its bias and a clamp) runs in the epilogue of their first
  // grouped product, and its gradient in the second's backward (Transformer Engine's fused grouped
  // MLP on cuDNN's CuTe DSL kernels, Megatron-Bridge's cutedsl_fused_grouped_mlp): no separate
  // activation traffic for the routed copies; false: the activation is its own kernel.
  bool fused_grouped_mlp = false;
  HostCosts host;                   // what issuing each block's kernels costs the CPU (host.h); none
                                    // given: no host time is priced
  std::string source;               // where the figures come from
};

// Efficiency of the stack's fused attention for (gpu, head dim d, sequence s, causal): the
// fraction of the GPU's peak its forward and its backward reach, interpolated in log(s) between
// the measured sequence lengths of the nearest measured head dimension (clamped at the ends).
// Returns false when the stack has no point for that GPU (then `note` says what was used:
// the points of every GPU, as fractions of their peaks).
struct FlashEfficiency {
  double fwd = 0, bwd = 0;
  bool exact_gpu = false;
  std::string note;
};
FlashEfficiency flash_efficiency(const KernelStack& k, const std::string& gpu_name, int d, int s, bool causal);

nlohmann::json to_json(const KernelStack& k);
KernelStack stack_from_json(const nlohmann::json& j);  // InputError naming "stack.<field>"
void check(const KernelStack& k);

// A preset name (presets/stacks/) or a .json file; cached by name.
const KernelStack& load_stack(const std::string& name_or_path);
std::vector<std::string> stack_preset_names();
// The default: Megatron-LM as the A100-era papers ran it (fused softmax, bias-GeLU and
// bias-dropout-add; attention materialised unless the model says fused).
inline constexpr const char* kDefaultStack = "megatron-lm";

}  // namespace stagecraft::costmodel
