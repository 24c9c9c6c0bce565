#include "runtime/bench.h"

#include <algorithm>

#include "costmodel/estimate.h"
#include "stats/stats.h"
#include "runtime/executor.h"
#include "runtime/rank.h"

namespace stagecraft::runtime {

using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

nlohmann::json measure_overhead(const OverheadOptions& o) {
  torch::set_num_threads(o.threads);
  const auto& m = o.model;
  PartShape whole{0, m.num_layers, true, true};
  GptPart plain_model(m, whole, 0, 1, 1), exec_model(m, whole, 0, 1, 1);
  AdamW plain_opt(plain_model.named_parameters(), {}), exec_opt(exec_model.named_parameters(), {});
  costmodel::ParallelPlan plan;
  plan.num_microbatches = o.microbatches;
  plan.microbatch_size = o.microbatch_size;
  plan.schedule = "gpipe";
  schedules::Schedule sched = costmodel::plan_schedule(plan);
  compat::Group solo;
  solo.name = "single rank";
  solo.members = {0};
  ExecConfig c;
  c.schedule = &sched;
  c.global_of = [](int) { return 0; };
  c.world = &solo;
  c.dp = &solo;
  c.microbatch_size = o.microbatch_size;
  tp_context().group = &solo;
  Executor exec(c, {{0, &exec_model}}, &exec_opt);
  long step = 0;
  auto batch_of = [&](int mb) { return synthetic_batch(1, (step * o.microbatches + mb) * o.microbatch_size, o.microbatch_size, m.seq_length, m.vocab_size); };
  BatchFn batch = batch_of;
  auto plain_step = [&] {
    for (int mb = 0; mb < o.microbatches; ++mb) {
      auto [tokens, targets] = batch_of(mb);
      torch::Tensor loss = plain_model.loss(plain_model.layers(plain_model.embed(tokens), 0, m.num_layers), targets);
      (loss / static_cast<double>(o.microbatches)).backward();
    }
    plain_opt.step();
  };
  std::vector<double> plain_s, exec_s;
  const auto t0 = Clock::now();
  for (int i = 0; i < 3; ++i, ++step) plain_step(), exec.run_step(batch, t0);
  for (int block = 0; block < o.steps / 5; ++block) {
    for (int i = 0; i < 5; ++i, ++step) {
      auto a = Clock::now();
      plain_step();
      plain_s.push_back(seconds_since(a));
    }
    for (int i = 0; i < 5; ++i, ++step) {
      auto a = Clock::now();
      exec.run_step(batch, t0);
      exec_s.push_back(seconds_since(a));
    }
  }
  double p = stats::median(plain_s), e = stats::median(exec_s);
  return {{"model", m.name}, {"microbatches", o.microbatches}, {"microbatch_size", o.microbatch_size},
          {"threads", o.threads}, {"plain_iteration_s", p}, {"executor_iteration_s", e}, {"overhead", e / p - 1}};
}

nlohmann::json measure_gloo(const RankEnv& env) {
  torch::set_num_threads(1);
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.master_port);
  so.isServer = env.rank == 0;
  so.numWorkers = 2;
  so.waitWorkers = false;
  auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
  compat::GroupOptions go;
  go.master_addr = env.master_addr;
  compat::Group g = compat::make_group(store, "bench", {0, 1}, env.rank, go);
  nlohmann::json rows = nlohmann::json::array();
  for (long bytes = 4096; bytes <= (16L << 20); bytes *= 4) {
    torch::Tensor t = torch::ones({bytes / 4});
    const int iters = bytes >= (1L << 20) ? 10 : 50;
    auto a = Clock::now();
    for (int i = 0; i < iters; ++i) {
      if (env.rank == 0) {
        compat::wait(compat::send(g, t, 1, i), std::chrono::milliseconds(60000));
        compat::wait(compat::recv(g, t, 1, i), std::chrono::milliseconds(60000));
      } else {
        compat::wait(compat::recv(g, t, 0, i), std::chrono::milliseconds(60000));
        compat::wait(compat::send(g, t, 0, i), std::chrono::milliseconds(60000));
      }
    }
    double p2p = seconds_since(a) / (2.0 * iters);  // one direction
    a = Clock::now();
    for (int i = 0; i < iters; ++i) compat::wait(compat::all_reduce_sum(g, t), std::chrono::milliseconds(60000));
    double ar = seconds_since(a) / iters;
    rows.push_back({{"bytes", bytes}, {"p2p_s", p2p}, {"p2p_GBps", bytes / p2p / 1e9},
                    {"allreduce_s", ar}, {"allreduce_busbw_GBps", bytes / ar / 1e9}});
  }
  store->add("bench_done", 1);
  if (env.rank == 0) {  // rank 0 hosts the store: wait for rank 1 to finish with it
    while (store->add("bench_done", 0) < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return env.rank == 0 ? rows : nlohmann::json::object();
}

}  // namespace stagecraft::runtime
