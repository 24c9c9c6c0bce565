#include "profiler/gemm_calibration.h"

#include <torch/torch.h>

#include <chrono>

#include "costmodel/gpus.h"
#include "runtime/device.h"
#include "schedules/error.h"

namespace stagecraft::profiler {
namespace {

// TFLOP/s of (m x k) x (k x n) bf16 products run back to back for `seconds` after a second of
// warm-up, timed from one device synchronisation to the next.
double sustained_tflops(const torch::Device& d, long m, long n, long k, double seconds) {
  const auto opts = torch::TensorOptions().device(d).dtype(torch::kBFloat16);
  const torch::Tensor a = torch::randn({m, k}, opts), b = torch::randn({k, n}, opts);
  torch::Tensor c = torch::empty({m, n}, opts);
  using clock = std::chrono::steady_clock;
  auto run_for = [&](double s) {
    long count = 0;
    runtime::synchronize(d);
    const auto t0 = clock::now();
    double elapsed = 0;
    while (elapsed < s) {
      for (int i = 0; i < 8; ++i) torch::mm_out(c, a, b);
      count += 8;
      runtime::synchronize(d);
      elapsed = std::chrono::duration<double>(clock::now() - t0).count();
    }
    return 2.0 * m * n * k * count / elapsed / 1e12;
  };
  run_for(1.0);  // warm-up: cuBLAS's choice, the clock ramping to its limit
  return run_for(seconds);
}

}  // namespace

nlohmann::json measure_gemm_calibration(const GemmCalibrationOptions& o) {
  if (o.gpu.empty()) throw InputError("--gpu is required with --gemm-calibration (the catalog GPU measured: its peak is the base)");
  const nlohmann::json entry = costmodel::gpu_entry(o.gpu, "--gpu");
  const double peak = entry.value("gpu_peak_flops_per_s", 0.0);
  if (!(peak > 0)) throw InputError("--gpu " + o.gpu + ": the catalog entry has no gpu_peak_flops_per_s");
  const torch::Device d = runtime::parse_device(o.device, "--device");  // refused without CUDA
  if (!d.is_cuda()) throw InputError("--device " + o.device + " is invalid with --gemm-calibration (allowed: cuda, cuda:N)");
  torch::NoGradGuard no_grad;
  nlohmann::json shapes = nlohmann::json::array();
  double best = 0;
  for (const auto& s : o.shapes) {
    const double tflops = sustained_tflops(d, s.at(0), s.at(1), s.at(2), o.seconds_per_shape);
    shapes.push_back({{"m", s[0]}, {"n", s[1]}, {"k", s[2]}, {"tflops", tflops}});
    best = std::max(best, tflops);
  }
  return {{"gpu", o.gpu},
          {"gemm_max_efficiency", std::min(1.0, best * 1e12 / peak)},
          {"measured_tflops", best},
          {"shapes", shapes},
          {"source", "stagecraft profile --gemm-calibration on " + runtime::describe(d) + ": bf16 torch::mm, " +
                         std::to_string(static_cast<int>(o.seconds_per_shape)) +
                         " s back to back per shape after 1 s of warm-up; the best shape's rate over the catalog peak"}};
}

}  // namespace stagecraft::profiler
