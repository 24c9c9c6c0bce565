#include "costmodel/shape.h"

#include <algorithm>
#include <cmath>

#include "costmodel/workload.h"

namespace stagecraft::costmodel::shape {
namespace {

double tiles(double x, int tile) { return std::ceil(x / tile); }

// The share of the GPU's tile slots a product uses: tile quantization times wave quantization.
double quantization(const ClusterSpec& c, double m, double n, double batch) {
  const double tm = tiles(m, c.gemm_tile_m), tn = tiles(n, c.gemm_tile_n);
  const double tile_use = m * n / (tm * c.gemm_tile_m * tn * c.gemm_tile_n);
  const double count = tm * tn * batch;
  const double wave_use = count / (std::ceil(count / c.gpu_sms) * c.gpu_sms);
  return tile_use * wave_use;
}

}  // namespace

double memory_s(const ClusterSpec& c, double bytes) {
  return bytes / (c.gpu_memory_bandwidth_Bps * c.memory_efficiency);
}

double gemm_s(const ClusterSpec& c, double m, double n, double k, double batch, double bytes, double clock_share, bool fp8) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
  const double flops = 2 * m * n * k * batch;
  const double rate = (fp8 ? c.gpu_fp8_peak_flops_per_s * c.gemm_max_efficiency_fp8 : c.gpu_peak_flops_per_s * c.gemm_max_efficiency) *
                      clock_share;
  const double compute = flops / (rate * quantization(c, m, n, batch));
  const double moved = ((m * k + k * n) * (fp8 ? 1 : bytes) + m * n * bytes) * batch;
  return std::max(compute, memory_s(c, moved));
}

double streamed_gemm_s(const ClusterSpec& c, double m, double n, double k, double batch, double streams, double bytes,
                       double clock_share, bool fp8) {
  if (streams <= 0 || streams >= batch) return gemm_s(c, m, n, k, batch, bytes, clock_share, fp8);
  const double rounds = std::floor(batch / streams), rest = batch - rounds * streams;
  return rounds * gemm_s(c, m, n, k, streams, bytes, clock_share, fp8) + gemm_s(c, m, n, k, rest, bytes, clock_share, fp8);
}

double gemm_efficiency(const ClusterSpec& c, double m, double n, double k, double batch, double bytes) {
  const double t = gemm_s(c, m, n, k, batch, bytes);
  return t > 0 ? 2 * m * n * k * batch / t / c.gpu_peak_flops_per_s : 0;
}

LayerTimes layer_times(const ModelSpec& m, const ClusterSpec& c, int bb, int t, bool selective, bool sp, const std::string& stack) {
  const KernelStack& k = load_stack(stack);
  return price_layer(layer_work(m, k, bb, t, sp, selective, 1, 1, 0, {}, c.fp8_gemm_any_layout()), c, k);
}

}  // namespace stagecraft::costmodel::shape
