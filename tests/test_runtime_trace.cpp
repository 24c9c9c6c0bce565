// The trace of a run: one complete event per executed action, per rank in the order of the
// rank's lowered action list, iteration after iteration, on the evaluator's tracks.
#include "costmodel/estimate.h"
#include "schedules/buckets.h"
#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

// Runs `flags` with a trace and checks it; the parsed trace goes to *out when given.
void check_trace(const std::string& flags, const costmodel::ParallelPlan& plan, int world, int steps, nlohmann::json* out = nullptr) {
  std::string trace_path = temp_path("trace.json");
  TrainRun r = train(flags + " --trace " + trace_path);
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err;
  nlohmann::json trace = nlohmann::json::parse(read_text(trace_path));
  std::remove(trace_path.c_str());
  if (out) *out = trace;
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

// The plan of the runs below: data-parallel degree dp, pp 2, 4 microbatches, `schedule` with `params`.
costmodel::ParallelPlan pp2_plan(int dp, const std::string& schedule, const nlohmann::json& params = nlohmann::json::object()) {
  costmodel::ParallelPlan p = plan_of(dp, 1, 2, 4);
  p.schedule = schedule;
  p.schedule_params = params;
  return p;
}

TEST(RuntimeTrace, OneEventPerActionInListOrder1F1B) {
  check_trace("--model tiny --nproc 4 --pp 2 --dp 2 --microbatches 4 --schedule 1f1b --steps 3", pp2_plan(2, "1f1b"), 4, 3);
}

TEST(RuntimeTrace, OneEventPerActionInListOrderInterleaved) {
  check_trace("--model tiny --nproc 2 --pp 2 --microbatches 4 --schedule interleaved-1f1b --chunks 2 --steps 2",
              pp2_plan(1, "interleaved-1f1b", {{"chunks", 2}}), 2, 2);
}

// Two chains: every rank holds a stage of each direction (Chimera).
TEST(RuntimeTrace, OneEventPerActionInListOrderChimera) {
  check_trace("--model tiny --nproc 2 --pp 2 --microbatches 4 --schedule chimera --steps 2", pp2_plan(1, "chimera"), 2, 2);
}

// FOLD3D: the deferred shares open each iteration (launched together) and the span of segment
// 1's runs beside segment 0's forwards, closing inside segment 1's first forward, which waits for
// it (schedules/buckets.h): on every rank, in every iteration after the first. The losses of this
// schedule equal synchronous data parallelism's (test_runtime_parity.cpp, dp 2).
TEST(RuntimeTrace, Fold3dDeferredReductionOverlapsForwards) {
  const costmodel::ParallelPlan p = pp2_plan(2, "fold3d-aiao", {{"segments", 2}});
  const std::string flags = "--model tiny --nproc 4 --pp 2 --dp 2 --microbatches 4 --schedule fold3d-aiao --segments 2 --steps 3";
  nlohmann::json trace;
  check_trace(flags, p, 4, 3, &trace);
  ASSERT_TRUE(trace.contains("traceEvents"));
  schedules::Schedule s = costmodel::plan_schedule(p);
  std::map<std::tuple<int, size_t, size_t>, nlohmann::json> at;  // (rank, iteration, step)
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X") at[{e["pid"].get<int>(), e["args"]["iteration"].get<size_t>(), e["args"]["step"].get<size_t>()}] = e;
  for (int rank = 0; rank < 4; ++rank) {
    const auto& list = s.actions[static_cast<size_t>(rank / 2)];  // tp-dp-pp: pp = rank / dp
    const std::vector<bool> deferred = schedules::deferred_reductions(list);
    ASSERT_TRUE(deferred[0] && deferred[1]) << "the two shares open the list";
    for (size_t k = 1; k < 3; ++k) {
      const auto& red = at.at({rank, k, size_t{1}});  // segment 1's share
      const double a = red["ts"].get<double>(), b = a + red["dur"].get<double>();
      const size_t w = static_cast<size_t>(schedules::deferred_waiter(list, 1));
      int overlapped = 0, forwards = 0;
      for (size_t q = 2; q < w; ++q) {
        const auto& c = at.at({rank, k, q});
        if (list[q].op != schedules::Op::F) continue;
        ++forwards;
        const double cs = c["ts"].get<double>(), ce = cs + c["dur"].get<double>();
        overlapped += cs < b && ce > a;
      }
      // Some, and at most every one, of segment 0's forwards before the waiter (timing decides which).
      EXPECT_GT(overlapped, 0) << "rank " << rank << " iteration " << k << ": segment 1's share [" << a << ", " << b
                               << "] beside no forward of segment 0";
      EXPECT_LE(overlapped, forwards) << "rank " << rank << " iteration " << k;
      // The first forward of segment 1 waits for it: the share closes inside that forward's span,
      // where the runtime waits for the all-reduce and applies the update before computing.
      const auto& waiter = at.at({rank, k, w});
      const double ws = waiter["ts"].get<double>(), we = ws + waiter["dur"].get<double>();
      EXPECT_GE(b, ws - 1e-3) << "rank " << rank << " iteration " << k;
      EXPECT_LE(b, we + 1e-3) << "rank " << rank << " iteration " << k;
    }
  }
}

}  // namespace
}  // namespace stagecraft::test
