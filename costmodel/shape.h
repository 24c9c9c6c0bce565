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

#include <string>

#include "costmodel/price.h"
#include "costmodel/specs.h"

namespace stagecraft::costmodel::shape {

// One product of `batch` independent (m x k) x (k x n) matrices of `bytes` per element.
double gemm_s(const ClusterSpec& c, double m, double n, double k, double batch = 1, double bytes = 2);
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
