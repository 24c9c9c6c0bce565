// A training run's log, read for `stagecraft check-run`: Megatron-LM's iteration lines
// (megatron/training/training.py training_log: "elapsed time per iteration (ms)", "throughput
// per GPU (TFLOP/s/GPU)") and memory reports (megatron/training/utils/common_utils.py
// report_memory: "max allocated" in MB), NeMo 2's "train_step_timing in s", torchtitan's step
// lines (torchtitan/components/metrics.py: "memory: GiB", "tps", "tflops", "mfu").
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace stagecraft::configs {

struct RunSample {
  int iteration = 0;                 // the iteration (step) the line reports
  double iteration_s = 0;            // seconds per iteration; 0: not logged (torchtitan: from tps)
  double tflops_per_gpu = 0;         // model TFLOP/s per GPU as the framework counts them; 0: not logged
  double tokens_per_s_per_gpu = 0;   // torchtitan's tps; 0: not logged
  double memory_bytes = 0;           // torchtitan's max reserved memory of the logging rank; 0: none
};

struct RunLog {
  std::string format;                // "megatron", "nemo" or "torchtitan"
  std::vector<RunSample> samples;    // in log order
  std::vector<double> rank_max_allocated_bytes;  // Megatron's memory reports, the last per rank
  int world_size = 0;                // Megatron's "using world size: N"; 0: not logged
};

// InputError naming `where` when no iteration line is found (an empty or foreign file).
RunLog read_run_log(const std::string& text, const std::string& where);

struct Measured {
  int samples_used = 0;              // logged lines after the warm-up
  int first_iteration = 0;           // the first iteration used
  double iteration_s = 0;            // mean seconds per iteration
  std::optional<double> tflops_per_gpu;  // mean, where logged
  std::optional<double> peak_memory_bytes;  // the largest logged (Megatron: max allocated; torchtitan: max reserved)
  std::string memory_kind;           // "max allocated" or "max reserved"
};

// The mean over the samples after the first `warmup` logged lines; tokens_per_iteration and
// world turn torchtitan's tps into seconds per iteration. InputError when none is left.
Measured measure(const RunLog& log, int warmup, double tokens_per_iteration, int world);

}  // namespace stagecraft::configs
