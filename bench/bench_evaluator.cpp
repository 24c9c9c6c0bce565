// Evaluations per second of the fast evaluator on lowered schedules: the planner evaluates a
// compiled schedule under many cost tables, so compilation is outside the timed loop.
// Goal (issue 2): at least 20,000 evaluations per second of 1F1B p=8, m=32 on one core.
//   build/bin/bench_evaluator --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include "costmodel/estimate.h"
#include "costmodel/evaluator.h"
#include "presets/load.h"
#include "schedules/lower.h"
#include "schedules/registry.h"

using namespace stagecraft;

namespace {

schedules::Schedule lowered(const char* name, int p, int m, int v) {
  schedules::GeneratorOptions o;
  o.ranks = p;
  o.microbatches = m;
  o.chunks = v;
  return schedules::lower(schedules::generate(name, o));
}

// Analytic costs of a real configuration, so the numbers are not all equal.
costmodel::CostTable costs_for(const schedules::Schedule& s, int p, int v) {
  costmodel::ParallelPlan plan;
  plan.pp = p;
  plan.tp = 8;
  plan.dp = 1024 / (8 * p);
  plan.num_microbatches = s.num_microbatches;
  plan.schedule = s.name;
  if (v > 0) plan.schedule_params = {{"chunks", v}};
  costmodel::ModelSpec m = presets::load_model("gpt3-175b");
  costmodel::ClusterSpec c = presets::load_cluster("h100-nvl-ib-64");
  c.nodes = 128;  // 1,024 GPUs
  return costmodel::analytic_cost_table(m, c, plan, s);
}

void run(benchmark::State& state, const char* name, int p, int m, int v, bool memory) {
  schedules::Schedule s = lowered(name, p, m, v);
  costmodel::EvalOptions o;
  o.memory = memory;
  costmodel::Evaluator ev(s, o);
  costmodel::CostTable t = costs_for(s, p, v);
  double sink = 0;
  for (auto _ : state) {
    costmodel::EvalResult r = ev.evaluate(t);
    sink += r.iteration_time_s;
    benchmark::DoNotOptimize(sink);
  }
  state.counters["evals_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["actions"] = static_cast<double>(s.total_actions());
  state.counters["nodes"] = static_cast<double>(ev.num_nodes());
}

void BM_Evaluate_1F1B_p8_m32(benchmark::State& st) { run(st, "1f1b", 8, 32, 0, true); }
void BM_Evaluate_1F1B_p8_m32_nomem(benchmark::State& st) { run(st, "1f1b", 8, 32, 0, false); }
void BM_Evaluate_Interleaved_p16_v4_m64(benchmark::State& st) { run(st, "interleaved-1f1b", 16, 64, 4, true); }
void BM_Evaluate_Interleaved_p16_v4_m64_nomem(benchmark::State& st) { run(st, "interleaved-1f1b", 16, 64, 4, false); }

// Compile (validate + dependency graph) once, for the record.
void BM_Compile_1F1B_p8_m32(benchmark::State& state) {
  schedules::Schedule s = lowered("1f1b", 8, 32, 0);
  for (auto _ : state) {
    costmodel::Evaluator ev(s);
    benchmark::DoNotOptimize(ev.num_nodes());
  }
}

}  // namespace

BENCHMARK(BM_Evaluate_1F1B_p8_m32);
BENCHMARK(BM_Evaluate_1F1B_p8_m32_nomem);
BENCHMARK(BM_Evaluate_Interleaved_p16_v4_m64);
BENCHMARK(BM_Evaluate_Interleaved_p16_v4_m64_nomem);
BENCHMARK(BM_Compile_1F1B_p8_m32)->Unit(benchmark::kMillisecond);
