// Compute by shape: a layer's time as the sum of its matrix products, each at the efficiency a
// product of that shape reaches on the GPU, and its memory-bound operations (layer norms,
// softmax, dropout, activation functions, residual adds), each its bytes over the achieved
// memory bandwidth. Used where the cluster gives its GPU's shape parameters (gpu_sms > 0);
// otherwise every FLOP runs at achieved_efficiency x peak (the simple per-cluster override).
//
// GEMM efficiency (NVIDIA, "Matrix Multiplication Background User's Guide", Deep Learning
// Performance documentation: tile quantization, wave quantization, arithmetic intensity):
// C (m x n) is computed in tiles of tile_m x tile_n, one tile per SM at a time, so
//   tile use  = m n / (ceil(m/tile_m) tile_m ceil(n/tile_n) tile_n)
//   wave use  = tiles / (ceil(tiles / sms) sms)
// and time = max(2 m n k / (peak x gemm_max_efficiency x tile use x wave use),
//                bytes moved (A, B read, C written) / (memory bandwidth x memory_efficiency)).
// gemm_max_efficiency is what the largest products measure on that GPU (a public measurement,
// cited in the cluster's compute_source), not a fit to end-to-end results.
#pragma once

#include "costmodel/specs.h"

namespace stagecraft::costmodel::shape {

// One product of `batch` independent (m x k) x (k x n) matrices of `bytes` per element.
double gemm_s(const ClusterSpec& c, double m, double n, double k, double batch = 1, double bytes = 2);
// Its efficiency: FLOPs over time over peak.
double gemm_efficiency(const ClusterSpec& c, double m, double n, double k, double batch = 1, double bytes = 2);
// A memory-bound operation reading and writing `bytes` in total.
double memory_s(const ClusterSpec& c, double bytes);

// One Megatron transformer layer (or the head) on one tensor-parallel rank, for bb samples:
// the pieces the inner schedule runs (inner.h), each the sum of its products and memory-bound
// operations. f forward, i input gradient, w weight gradient, r recomputation (= f).
struct LayerTimes {
  double attn_f_s = 0, mlp_f_s = 0;  // forward of the attention block (LN, QKV, core, projection,
                                     // dropout + residual) and of the MLP block (LN, up, act, down, ...)
  double attn_i_s = 0, mlp_i_s = 0;  // input gradients (the selective recompute of the core in attn_i_s)
  double attn_w_s = 0, mlp_w_s = 0;  // weight gradients
  double head_f_s = 0, head_i_s = 0, head_w_s = 0;  // logits (T x h x V/t) and the loss
};
LayerTimes layer_times(const ModelSpec& m, const ClusterSpec& c, int bb, int t, bool selective);

}  // namespace stagecraft::costmodel::shape
