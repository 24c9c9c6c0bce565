// Preemptive communication in the runtime (plan.preemptive_comm; FOLD3D Sec. V-A): gradient
// all-reduces run chunk by chunk on a thread of the rank, each chunk after the rank's pipeline
// sends in flight. The reducer alone with a send it controls, then training with it: the same
// losses, and the chunks counted on every rank.
#include <gtest/gtest.h>

#include <chrono>

#include "costmodel/estimate.h"
#include "runtime/support/rules.h"
#include "runtime/executor.h"
#include "runtime/preempt.h"
#include "schedules/buckets.h"
#include "schedules/error.h"
#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

using namespace std::chrono_literals;
using runtime::PreemptiveReducer;
using runtime::PreemptOptions;

// A pipeline send that completes when the test says so.
struct HeldSend : c10d::Work {
  void complete() { finish(); }
};

runtime::compat::Group alone() {  // one member: its all-reduce sums nothing and returns at once
  runtime::compat::Group g;
  g.name = "test group";
  g.members = {0};
  return g;
}

TEST(RuntimePreempt, ChunksWaitForTheSendInFlight) {
  auto g = alone();
  PreemptOptions o;
  o.chunk_bytes = 1024;  // 256 floats a chunk: 4 chunks of 1,000
  o.max_hold = 10s;
  PreemptiveReducer r(o);
  auto send = c10::make_intrusive<HeldSend>();
  r.track_send(send);
  auto job = r.submit(g, torch::ones({1000}));
  EXPECT_THROW(job->wait(100ms), Error);  // held behind the send
  EXPECT_EQ(r.stats().chunks, 0);
  send->complete();
  job->wait(10s);
  const runtime::PreemptStats s = r.stats();
  EXPECT_EQ(s.chunks, 4);
  EXPECT_EQ(s.yields, 1);  // the first chunk waited; the send was done for the others
  EXPECT_EQ(s.expired, 0);
  EXPECT_GT(s.yield_s, 0.05);  // about the 100 ms the test held the send (timing: a loose bound)
  // Jobs run in the order they were queued.
  auto a = r.submit(g, torch::ones({10})), b = r.submit(g, torch::ones({10}));
  b->wait(10s);
  a->wait(0ms);
}

TEST(RuntimePreempt, ASendThatNeverCompletesHoldsAtMostMaxHold) {
  auto g = alone();
  PreemptOptions o;
  o.chunk_bytes = 64;  // 16 floats a chunk: 7 chunks of 100
  o.max_hold = 30ms;
  PreemptiveReducer r(o);
  r.track_send(c10::make_intrusive<HeldSend>());
  r.submit(g, torch::ones({100}))->wait(10s);
  const runtime::PreemptStats s = r.stats();
  EXPECT_EQ(s.chunks, 7);
  EXPECT_EQ(s.yields, 1);   // only the first chunk waited: then the send stopped holding
  EXPECT_EQ(s.expired, 1);
  EXPECT_GT(s.yield_s, 0.0);  // it waited (about max_hold less the time before the chunk began)
  EXPECT_LT(s.yield_s, 5.0);
  o.chunk_bytes = 0;
  EXPECT_THROW(PreemptiveReducer bad(o), InputError);
}

// FOLD3D's schedule on dp 2 x pp 2: its deferred reductions run under the next iteration's
// forwards and their sends. Chunked and yielding, training is the same to the bit (two
// members sum each element once, whatever the chunks).
TEST(RuntimePreempt, TrainingUnchangedAndEveryRankChunks) {
  const std::string flags = "--model tiny --nproc 4 --pp 2 --dp 2 --microbatches 4 --steps 4 --seed 5 --schedule fold3d";
  TrainRun fair = train(flags);
  TrainRun pre = train(flags + " --preemptive-comm");
  ASSERT_EQ(fair.cli.exit_code, 0) << fair.cli.err;
  ASSERT_EQ(pre.cli.exit_code, 0) << pre.cli.err;
  std::vector<double> a = losses(fair.summary), b = losses(pre.summary);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i;
  EXPECT_TRUE(pre.summary["plan"]["preemptive_comm"].get<bool>());
  // Chunks by hand: a stage of tiny holds under 130,000 parameters, one bucket and one chunk of
  // 2^20 bytes (256 Ki floats) a share. Each step reduces its shares that are not deferred; a
  // deferred share is reduced in the next step (the last step's after the steps are counted).
  const schedules::Schedule s = costmodel::plan_schedule(costmodel::plan_from_json(pre.summary["plan"]));
  for (const auto& r : pre.summary["ranks"]) {
    ASSERT_TRUE(r.contains("preempt")) << r.dump();
    const auto& list = s.actions[r["pp"].get<size_t>()];
    const std::vector<bool> deferred = schedules::deferred_reductions(list);
    long shares = 0, later = 0;
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i].op == schedules::Op::REDUCE_GRAD) ++(deferred[i] ? later : shares);
    EXPECT_EQ(r["preempt"]["chunks"].get<long>(), 4 * shares + 3 * later) << "rank " << r["rank"];
    EXPECT_GE(r["preempt"]["yields"].get<long>(), 0);
  }
  for (const auto& r : fair.summary["ranks"]) EXPECT_FALSE(r.contains("preempt"));
}

TEST(RuntimePreempt, RefusedWithTheDistributedOptimizer) {
  TrainRun r = train("--model tiny --nproc 2 --dp 2 --microbatches 2 --steps 1 --zero 1 --preemptive-comm");
  EXPECT_EQ(r.cli.exit_code, 2);
  EXPECT_NE(r.cli.err.find("preemptive_comm"), std::string::npos) << r.cli.err;
}

// The executor asserts what the runtime supports with runtime/support/rules.h's rules, in
// their words: a caller that builds its ExecConfig itself (no `train` preflight) gets the refusal
// `train` and estimate's note give. The checks run before the executor touches a part or a group.
TEST(RuntimePreempt, TheExecutorRefusesWithTheSupportRules) {
  costmodel::ParallelPlan p;
  p.num_microbatches = 2;
  p.schedule = "gpipe";
  p.zero = 1;
  p.preemptive_comm = true;
  const schedules::Schedule s = costmodel::plan_schedule(p);
  auto g = alone();
  runtime::ExecConfig c;
  c.schedule = &s;
  c.global_of = [](int) { return 0; };
  c.world = &g;
  c.dp = &g;
  c.zero = p.zero;
  c.preemptive_comm = p.preemptive_comm;
  const std::string want = error_of([&] { runtime::check_runtime_schedule(p, s); });
  EXPECT_EQ(want.rfind("runtime: plan.preemptive_comm = true with plan.zero = 1 is not supported", 0), 0u) << want;
  EXPECT_EQ(error_of([&] { runtime::Executor e(c, {}, nullptr); }), want);
  // Expert parallelism with the distributed optimizer: the rule check_runtime_plan applies to an MoE model.
  c.preemptive_comm = false;
  c.ep = 2;
  const std::string experts = error_of([&] { runtime::check_expert_reductions({2, 1, false}); });
  EXPECT_EQ(experts.rfind("runtime: plan.zero = 1 with plan.ep = 2 is not implemented by the runtime", 0), 0u) << experts;
  EXPECT_EQ(error_of([&] { runtime::Executor e(c, {}, nullptr); }), experts);
}

}  // namespace
}  // namespace stagecraft::test
