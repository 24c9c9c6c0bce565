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
//
// Clocks. Those measurements are short benchmarks: the GPU runs them at its maximum boost
// clock. A training step keeps the tensor cores busy for seconds, the board reaches its power
// limit and the firmware lowers the SM clock until it holds there (NVIDIA computes an A100's HPL
// peak at the 1,305 MHz it sustains at its power limit rather than its 1,410 MHz boost, as
// G. K. Lockwood's notes on peak FLOPS record; on Hopper, DeepGEMM issue #120 (2025) reports the
// clock falling from 1,980 to 1,575 MHz once computation and communication overlap at the power
// limit, and TileOPs PR #1588 (2026) that a 700 W H200 cannot hold a locked 1,830 MHz under full
// load). The pricer (price.cpp) therefore runs compute-bound work at
// gpu_sustained_clock_mhz / gpu_boost_clock_mhz of the measured rate; memory-bound work keeps
// its rate, since the power limit lowers the SM clock and not the memory clock. gemm_s with
// clock_share 1 is the benchmark itself (tests/test_shape.cpp compares it with the measurements).
#pragma once

#include <string>

#include "costmodel/price.h"
#include "costmodel/specs.h"

namespace stagecraft::costmodel::shape {

// One product of `batch` independent (m x k) x (k x n) matrices of `bytes` per element, its
// compute at clock_share of the measured clock. FP8: operands of one byte at the FP8 peak and
// its measured efficiency (gemm_max_efficiency_fp8), the output of `bytes`.
double gemm_s(const ClusterSpec& c, double m, double n, double k, double batch = 1, double bytes = 2, double clock_share = 1,
              bool fp8 = false);
// `batch` such products run `streams` at a time (one kernel each on `streams` CUDA streams, as
// Transformer Engine's GroupedLinear runs an MoE layer's experts): floor(batch / streams) rounds
// of `streams` products sharing the SMs' waves, then one round of the rest. streams <= 0 or
// >= batch: gemm_s of the whole batch (one grouped kernel).
double streamed_gemm_s(const ClusterSpec& c, double m, double n, double k, double batch, double streams, double bytes = 2,
                       double clock_share = 1, bool fp8 = false);
// Its efficiency: FLOPs over time over peak.
double gemm_efficiency(const ClusterSpec& c, double m, double n, double k, double batch = 1, double bytes = 2);
// A memory-bound operation reading and writing `bytes` in total.
double memory_s(const ClusterSpec& c, double bytes);

using LayerTimes = costmodel::LayerTimes;

// One transformer layer and the head priced by price_layer (price.h) from layer_work
// (workload.h) on `stack`: a convenience for tests and callers that price one layer.
LayerTimes layer_times(const ModelSpec& m, const ClusterSpec& c, int bb, int t, bool selective, bool sp = false,
                       const std::string& stack = kDefaultStack);

}  // namespace stagecraft::costmodel::shape
