#include <algorithm>

#include "sim/simulate.h"

namespace stagecraft::sim {

costmodel::Estimate simulated_estimate(const costmodel::Estimate& e, const SimOptions& opt, SimResult* out) {
  SimResult r = simulate(e.schedule, e.costs, e.cluster, e.plan, opt);
  costmodel::Estimate s = e;
  s.eval = r.eval;
  const double T = r.eval.iteration_time_s;
  const double tokens = static_cast<double>(e.plan.global_batch()) * e.model.seq_length;
  s.tokens_per_s = T > 0 ? tokens / T : 0;
  s.tflops_per_gpu = T > 0 ? e.model_flops / T / e.plan.num_gpus() / 1e12 : 0;
  s.mfu = s.tflops_per_gpu * 1e12 / e.cluster.gpu_peak_flops_per_s;
  s.max_memory_bytes = r.eval.peak_memory_bytes.empty()
                           ? 0 : *std::max_element(r.eval.peak_memory_bytes.begin(), r.eval.peak_memory_bytes.end());
  s.fits = s.max_memory_bytes <= e.cluster.gpu_memory_bytes;
  if (out) *out = std::move(r);
  return s;
}

}  // namespace stagecraft::sim
