// Pricing a workload (workload.h) into seconds: the analytic pricer. Where the cluster gives its
// GPU's shape parameters (gpu_sms > 0) every matrix product is priced by its shape (shape.h),
// a fused attention kernel by its authors' measured throughput on that GPU at that head
// dimension and sequence length (the stack's table), and memory-bound traffic at the achieved
// memory bandwidth; otherwise every FLOP as MFU counts it runs at achieved_efficiency x peak
// (the flat rate, which folds memory-bound work into that one efficiency). The profiled pricer
// (costs.h, with a Profile) replaces these with measured layers.
#pragma once

#include <string>
#include <vector>

#include "costmodel/specs.h"
#include "costmodel/stack.h"
#include "costmodel/workload.h"

namespace stagecraft::costmodel {

// Seconds of the pieces the inner schedule runs (inner.h), each the sum of its kernels: f
// forward, i input gradient (the selective recompute of the core included), w weight gradient.
struct LayerTimes {
  double attn_f_s = 0, mlp_f_s = 0;
  double attn_i_s = 0, mlp_i_s = 0;
  double attn_w_s = 0, mlp_w_s = 0;
  double head_f_s = 0, head_i_s = 0, head_w_s = 0;  // logits (T x h x V/t) and the loss
  double moe_f_s = 0, moe_i_s = 0, moe_w_s = 0;     // an MoE layer's MLP block (0 without experts)
};

// Whether the cluster is priced by shape (gpu_sms > 0) or at the flat rate.
bool priced_by_shape(const ClusterSpec& c);
// Seconds of one block's pass. `notes` (may be null) collects what the pricer had to assume.
double block_s(const BlockWork& b, const KernelContext& w, const ClusterSpec& c, const KernelStack& k,
               std::vector<std::string>* notes = nullptr);
LayerTimes price_layer(const LayerWork& w, const ClusterSpec& c, const KernelStack& k, std::vector<std::string>* notes = nullptr);

}  // namespace stagecraft::costmodel
