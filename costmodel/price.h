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

// What one block's pass spends, by kind of kernel: matrix products (and kernels known by their
// FLOPs alone), fused attention kernels, memory-bound traffic. block_s is their sum.
struct BlockKinds {
  double products_s = 0;
  double flash_s = 0;
  double memory_s = 0;
  double total_s() const { return products_s + flash_s + memory_s; }
  void add(const BlockKinds& o, double times = 1) {
    products_s += times * o.products_s, flash_s += times * o.flash_s, memory_s += times * o.memory_s;
  }
};

// Whether the cluster is priced by shape (gpu_sms > 0) or at the flat rate.
bool priced_by_shape(const ClusterSpec& c);
// The flat rate, the one rule for every FLOP priced without a shape: the peak times
// achieved_efficiency (measured end to end, clocks included); a cluster priced by shape gives
// no achieved efficiency, and then its best GEMM efficiency stands for it (a graph's FLOPs
// without shapes, stage balancing by FLOPs).
double flat_rate_flops_per_s(const ClusterSpec& c);
// Seconds of one block's pass. `notes` (may be null) collects what the pricer had to assume.
double block_s(const BlockWork& b, const KernelContext& w, const ClusterSpec& c, const KernelStack& k,
               std::vector<std::string>* notes = nullptr);
// The same seconds by kind. At the flat rate the core's model FLOPs count as the fused kernel's,
// the rest as products, and memory-bound work is folded into the rate (memory_s 0).
BlockKinds block_kinds(const BlockWork& b, const KernelContext& w, const ClusterSpec& c, const KernelStack& k,
                       std::vector<std::string>* notes = nullptr);
LayerTimes price_layer(const LayerWork& w, const ClusterSpec& c, const KernelStack& k, std::vector<std::string>* notes = nullptr);

}  // namespace stagecraft::costmodel
