// The trace of a run: one complete event per executed action, per rank in the order of the
// rank's lowered action list, iteration after iteration, on the evaluator's tracks.
#include "costmodel/estimate.h"
#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

void check_trace(const std::string& flags, const costmodel::ParallelPlan& plan, int world, int steps) {
  std::string trace_path = temp_path("trace.json");
  TrainRun r = train(flags + " --trace " + trace_path);
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err;
  nlohmann::json trace = nlohmann::json::parse(read_text(trace_path));
  std::remove(trace_path.c_str());
  schedules::Schedule s = costmodel::plan_schedule(plan);
  std::map<int, std::vector<nlohmann::json>> by_rank;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X") by_rank[e["pid"].get<int>()].push_back(e);
  ASSERT_EQ(by_rank.size(), static_cast<size_t>(world));
  for (const auto& [rank, events] : by_rank) {
    int pp = rank / (plan.tp * plan.dp);  // rank order tp-dp-pp
    const auto& list = s.actions[static_cast<size_t>(pp)];
    ASSERT_EQ(events.size(), list.size() * static_cast<size_t>(steps)) << "rank " << rank;
    double last_compute_end = 0;
    for (size_t i = 0; i < events.size(); ++i) {
      const auto& e = events[i];
      size_t pos = i % list.size();
      std::string name = e["name"];
      EXPECT_EQ(name.substr(0, name.find(" -> ")), schedules::to_text(list[pos])) << "rank " << rank << " event " << i;
      EXPECT_EQ(e["args"]["step"].get<size_t>(), pos);
      EXPECT_EQ(e["args"]["iteration"].get<size_t>(), i / list.size());
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      if (e["tid"] == 0) {  // the compute track runs its actions one after another
        EXPECT_GE(e["ts"].get<double>() + 1e-3, last_compute_end) << "rank " << rank << " event " << i;
        last_compute_end = e["ts"].get<double>() + e["dur"].get<double>();
      }
      bool p2p = schedules::is_p2p(list[pos].op);
      EXPECT_EQ(e["tid"].get<int>() == 1, p2p) << name;
    }
  }
  // Each run of consecutive sends and receives went out as one group (docs/runtime.md).
  for (const auto& rank : r.summary["ranks"]) {
    const auto& list = s.actions[static_cast<size_t>(rank["pp"].get<int>())];
    long runs = 0;
    for (size_t i = 0; i < list.size(); ++i)
      if (schedules::is_p2p(list[i].op) && (i == 0 || !schedules::is_p2p(list[i - 1].op))) ++runs;
    EXPECT_GT(runs, 0);
    EXPECT_EQ(rank["p2p_groups_per_step"].get<long>(), runs) << "rank " << rank["rank"];
  }
}

TEST(RuntimeTrace, OneEventPerActionInListOrder1F1B) {
  costmodel::ParallelPlan p;
  p.pp = 2;
  p.dp = 2;
  p.num_microbatches = 4;
  p.schedule = "1f1b";
  check_trace("--model tiny --nproc 4 --pp 2 --dp 2 --microbatches 4 --schedule 1f1b --steps 3", p, 4, 3);
}

TEST(RuntimeTrace, OneEventPerActionInListOrderInterleaved) {
  costmodel::ParallelPlan p;
  p.pp = 2;
  p.num_microbatches = 4;
  p.schedule = "interleaved-1f1b";
  p.schedule_params["chunks"] = 2;
  check_trace("--model tiny --nproc 2 --pp 2 --microbatches 4 --schedule interleaved-1f1b --chunks 2 --steps 2", p, 2, 2);
}

// Two chains: every rank holds a stage of each direction (Chimera).
TEST(RuntimeTrace, OneEventPerActionInListOrderChimera) {
  costmodel::ParallelPlan p;
  p.pp = 2;
  p.num_microbatches = 4;
  p.schedule = "chimera";
  check_trace("--model tiny --nproc 2 --pp 2 --microbatches 4 --schedule chimera --steps 2", p, 2, 2);
}

}  // namespace
}  // namespace stagecraft::test
