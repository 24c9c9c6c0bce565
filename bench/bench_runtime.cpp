// Runtime measurements (docs/benchmarks.md, "Runtime"): the executor against a plain
// LibTorch loop of the same model and batch on one rank, then Gloo point-to-point and
// all-reduce bandwidth between two local ranks (this program re-executed as rank 0 and 1).
// Usage: bench_runtime [MODEL [MICROBATCHES [MICROBATCH_SIZE [STEPS]]]]  (default tiny 4 4 30)
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "presets/load.h"
#include "runtime/bench.h"

using namespace stagecraft;

int main(int argc, char** argv) {
  if (runtime::launched_locally()) {
    auto rows = runtime::measure_gloo(runtime::rank_env_from_environment());
    if (!rows.empty()) std::cout << "gloo between two local ranks:\n" << rows.dump(2) << "\n";
    std::fflush(stdout);
    std::_Exit(0);
  }
  runtime::OverheadOptions o;
  o.model = presets::load_model(argc > 1 ? argv[1] : "tiny");
  if (argc > 2) o.microbatches = std::atoi(argv[2]);
  if (argc > 3) o.microbatch_size = std::atoi(argv[3]);
  if (argc > 4) o.steps = std::atoi(argv[4]);
  std::cout << "executor overhead (one rank):\n" << runtime::measure_overhead(o).dump(2) << "\n";
  std::fflush(stdout);
  return runtime::launch_local(2, std::vector<std::string>(argv, argv + argc), 60);
}
