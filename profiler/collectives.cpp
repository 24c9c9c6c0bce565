#include "profiler/collectives.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include "runtime/compat.h"
#include "runtime/torch_pch.h"

namespace stagecraft::profiler {
namespace {

using Clock = std::chrono::steady_clock;

costmodel::Measurement summarize(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  costmodel::Measurement m;
  m.runs = static_cast<int>(t.size());
  m.min_s = t.front();
  m.max_s = t.back();
  m.median_s = t[t.size() / 2];
  return m;
}

}  // namespace

std::vector<costmodel::CollectiveProfile> profile_collectives(const runtime::RankEnv& env, const CollectiveOptions& o) {
  torch::set_num_threads(1);
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.master_port);
  so.isServer = env.rank == 0;
  so.numWorkers = env.world;
  so.waitWorkers = false;
  auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
  runtime::compat::GroupOptions go;
  go.master_addr = env.master_addr;
  go.timeout = std::chrono::milliseconds(static_cast<long>(o.timeout_s * 1000));
  std::vector<int> all;
  for (int r = 0; r < env.world; ++r) all.push_back(r);
  runtime::compat::Group g = runtime::compat::make_group(store, "profile", all, env.rank, go);
  const auto timeout = go.timeout;
  std::vector<costmodel::CollectiveProfile> rows;
  int tag = 0;
  for (long bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
    torch::Tensor t = torch::ones({bytes / 4});  // fp32 elements, never zeros
    std::vector<double> p2p, ar;
    for (int i = 0; i < o.warmup + o.runs; ++i) {
      auto a = Clock::now();
      if (env.rank == 0) {  // ping-pong between ranks 0 and 1; one direction is half the round
        runtime::compat::wait(runtime::compat::send(g, t, 1, tag), timeout);
        runtime::compat::wait(runtime::compat::recv(g, t, 1, tag), timeout);
      } else if (env.rank == 1) {
        runtime::compat::wait(runtime::compat::recv(g, t, 0, tag), timeout);
        runtime::compat::wait(runtime::compat::send(g, t, 0, tag), timeout);
      }
      ++tag;
      double one_way = std::chrono::duration<double>(Clock::now() - a).count() / 2;
      a = Clock::now();
      runtime::compat::wait(runtime::compat::all_reduce_sum(g, t), timeout);
      double all_reduce = std::chrono::duration<double>(Clock::now() - a).count();
      if (i >= o.warmup) p2p.push_back(one_way), ar.push_back(all_reduce);
    }
    double n = env.world;
    costmodel::CollectiveProfile pp{"p2p", 2, static_cast<double>(bytes), summarize(p2p), 0, 0};
    pp.algbw_Bps = bytes / pp.time.median_s;
    pp.busbw_Bps = pp.algbw_Bps;
    costmodel::CollectiveProfile cr{"all_reduce", env.world, static_cast<double>(bytes), summarize(ar), 0, 0};
    cr.algbw_Bps = bytes / cr.time.median_s;
    cr.busbw_Bps = cr.algbw_Bps * 2 * (n - 1) / n;  // nccl-tests PERFORMANCE.md
    rows.push_back(pp);
    rows.push_back(cr);
  }
  store->add("profile_done", 1);
  if (env.rank == 0)  // rank 0 hosts the store: keep it up until everyone is done
    while (store->add("profile_done", 0) < env.world) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (env.rank != 0) rows.clear();
  return rows;
}

std::string collectives_table(const std::vector<costmodel::CollectiveProfile>& rows) {
  std::ostringstream o;
  char line[160];
  std::snprintf(line, sizeof line, "%12s %12s %6s %12s %10s %10s\n", "size (B)", "op", "ranks", "time (us)", "algbw GB/s",
                "busbw GB/s");
  o << line;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%12.0f %12s %6d %12.1f %10.3f %10.3f\n", r.bytes, r.op.c_str(), r.ranks,
                  r.time.median_s * 1e6, r.algbw_Bps / 1e9, r.busbw_Bps / 1e9);
    o << line;
  }
  return o.str();
}

}  // namespace stagecraft::profiler
