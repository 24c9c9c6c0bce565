// Simulator speed (docs/benchmarks.md, "Simulator"): GPT-3 175B, 1F1B, dp 8, tp 8, and
// pp 16 / 64 microbatches on 1,024 GPUs (128 nodes of 8) or pp 1 x dp 1 x tp 8 x 8 nodes = 64 GPUs.
// Each simulation runs in a forked process; the counters report its wall time, peak memory
// and simulated events (activities) per second. BM_Sim1024PerGpuFlows turns the tp-lane
// aggregation off (one flow per GPU), to show what it saves.
#include <benchmark/benchmark.h>

#include "costmodel/estimate.h"
#include "presets/load.h"
#include "sim/simulate.h"

namespace {

using namespace stagecraft;

void run(benchmark::State& state, int dp, int pp, int microbatches, int nodes, int iterations, sim::TpComm tp_comm,
         bool aggregate_tp = true) {
  costmodel::ClusterSpec c = presets::load_cluster("h100-nvl-ib-64");
  c.nodes = nodes;
  costmodel::ParallelPlan p;
  p.dp = dp;
  p.tp = 8;
  p.pp = pp;
  p.num_microbatches = microbatches;
  p.schedule = "1f1b";
  p.recompute = costmodel::RecomputePolicy::Full;
  auto e = costmodel::estimate(presets::load_model("gpt3-175b"), c, p);
  sim::SimOptions o;
  o.iterations = iterations;
  o.tp_comm = tp_comm;
  o.aggregate_tp = aggregate_tp;
  sim::SimResult r;
  for (auto _ : state) {
    r = sim::simulate(e.schedule, e.costs, e.cluster, e.plan, o);
    state.SetIterationTime(r.sim_wall_s);
  }
  state.counters["gpus"] = p.num_gpus();
  state.counters["events"] = static_cast<double>(r.activities);
  state.counters["events_per_s"] = r.events_per_s;
  state.counters["peak_rss_MiB"] = r.peak_rss_bytes / (1 << 20);
  state.counters["sim_iteration_s"] = r.eval.iteration_time_s;
  state.counters["eval_iteration_s"] = e.eval.iteration_time_s;
}

void BM_Sim64(benchmark::State& s) { run(s, 2, 4, 16, 8, 3, sim::TpComm::Folded); }
void BM_Sim64Explicit(benchmark::State& s) { run(s, 2, 4, 16, 8, 3, sim::TpComm::Explicit); }
void BM_Sim1024OneIteration(benchmark::State& s) { run(s, 8, 16, 64, 128, 1, sim::TpComm::Folded); }
void BM_Sim1024ThreeIterations(benchmark::State& s) { run(s, 8, 16, 64, 128, 3, sim::TpComm::Folded); }
void BM_Sim1024Explicit(benchmark::State& s) { run(s, 8, 16, 64, 128, 1, sim::TpComm::Explicit); }
// One flow per GPU (tp lanes not aggregated): what the aggregation saves.
void BM_Sim1024PerGpuFlows(benchmark::State& s) { run(s, 8, 16, 64, 128, 1, sim::TpComm::Folded, false); }

BENCHMARK(BM_Sim64)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Sim64Explicit)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Sim1024OneIteration)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Sim1024ThreeIterations)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Sim1024Explicit)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Sim1024PerGpuFlows)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
