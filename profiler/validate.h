// Validation (`stagecraft validate`): for each configuration of a sweep file, the evaluator's
// and the simulator's predicted iteration time and the runtime's measured one (median of the
// steps after warm-up, pooled over the sweep's rounds), then rank correlation and error of
// each engine against the measurements (stats/stats.h). Measurements and simulations run as child processes of
// the same program (`stagecraft train`, `stagecraft simulate`), so this file needs neither
// torch nor SimGrid. Torch-free.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <functional>
#include <string>
#include <vector>

#include "costmodel/specs.h"

namespace stagecraft::profiler {

struct SweepConfig {
  std::string name;                 // row label
  costmodel::ModelSpec model;       // model of this row
  std::string model_arg;            // how to name it to a child process (preset or file)
  costmodel::ParallelPlan plan;     // dp, tp, pp, microbatches, schedule, recompute
  std::string precision = "fp32";   // how the runtime trains it: fp32, or bf16 (autocast); the
                                    // predictions read it from the model (bytes_per_*) and the
                                    // profile (its layers' precision)
};

struct Sweep {
  std::string cluster = "local-cpu-2";  // cluster preset or file the engines predict for
  int steps = 8;                        // training steps measured per configuration
  int warmup = 3;                       // first steps left out of the median
  int threads = 1;                      // intra-op threads per rank
  int rounds = 1;                       // training runs per configuration, round-robin over the sweep
  std::vector<SweepConfig> configs;
};

// {"format": "stagecraft-sweep", "cluster", "steps", "warmup", "threads", "rounds",
//  "configs": [{"name", "model", "schedule", "dp", "tp", "pp", "microbatch_size",
//               "num_microbatches", "recompute", "schedule_params", "precision"}]}; "model" is a preset name
// or an inline ModelSpec object. Throws InputError naming the field.
Sweep load_sweep(const std::string& path);

struct ValidationRow;

struct ValidateOptions {
  std::string program;     // the stagecraft binary to run children with
  std::string profile;     // --profile for the predictions ("" = analytic)
  bool simulate = true;    // also predict with the simulator
  std::string work_dir;    // where children's files go: a fresh folder inside it, removed on success,
                           // failure or interrupt (and work_dir itself when this run created it)
  std::function<std::string(long done, long total)> eta;  // appended to each measured line (time
                                                          // elapsed and left); empty: nothing
  std::function<void(const std::vector<ValidationRow>&)> on_rows;  // after each row completes: the
                                                          // rows so far (to write them as they come)
};

struct ValidationRow {
  SweepConfig config;
  double evaluator_s = 0;  // predicted by the evaluator
  double simulator_s = 0;  // predicted by the simulator (0 when not run)
  double measured_s = 0;   // median measured iteration time
  double evaluator_memory_bytes = 0;  // the evaluator's peak memory of the largest rank
  double measured_memory_bytes = 0;   // the runtime's peak of its largest rank: live tensor bytes
                                      // (counting allocator on the CPU, caching allocator on a GPU)
  std::string failed;  // why an engine or the run failed for this row ("" = none): the row is kept
                       // and reported, its missing numbers 0 and left out of the summary
};

std::vector<ValidationRow> run_validation(const Sweep& sweep, const ValidateOptions& opt, std::ostream& log);
std::string validation_csv(const std::vector<ValidationRow>& rows);
// Spearman, Kendall tau-b and MAPE of each engine against the measurements, and the MAPE and
// largest error of the evaluator's peak memory.
nlohmann::json validation_summary(const std::vector<ValidationRow>& rows, bool simulated);

}  // namespace stagecraft::profiler
