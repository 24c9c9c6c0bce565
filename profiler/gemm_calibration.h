// A GPU calibration from a measurement (`stagecraft profile --device cuda --gemm-calibration F
// --gpu NAME`): the sustained bf16 GEMM rate over a sweep of large shapes, each run back to back
// for seconds so that the SM clock settles at the board's power limit, written as the file
// `estimate --gpu-calibration F` reads (costmodel/gpus.h apply_gpu_calibration). Only a build
// whose LibTorch has CUDA measures; elsewhere the device is refused naming --device.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace stagecraft::profiler {

struct GemmCalibrationOptions {
  std::string device = "cuda";   // a CUDA device: cuda or cuda:N
  std::string gpu;               // the catalog GPU measured (its dense bf16 peak: the share's base)
  double seconds_per_shape = 4;  // back-to-back products per shape, after one second of warm-up
  // (m, n, k) products swept: squares and the shapes of a large model's layer (8192 tokens, h
  // 8192 and 4h), the largest ones where the efficiency is measured (the catalog's definition).
  std::vector<std::vector<long>> shapes = {{8192, 8192, 8192}, {16384, 8192, 8192}, {8192, 32768, 8192},
                                           {8192, 8192, 32768}, {16384, 16384, 16384}};
};

// Measures and returns the calibration JSON (gpu, gemm_max_efficiency, measured_tflops, shapes
// with each one's TFLOP/s, source). InputError naming --gpu or --device.
nlohmann::json measure_gemm_calibration(const GemmCalibrationOptions& o);

}  // namespace stagecraft::profiler
