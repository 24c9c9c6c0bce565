#include "profiler/collectives.h"

#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>
#include <thread>

#include "runtime/compat.h"
#include "runtime/device.h"
#include "runtime/plan.h"
#include "runtime/torch_pch.h"
#include "schedules/error.h"

namespace stagecraft::profiler {
namespace {

using Clock = std::chrono::steady_clock;
namespace compat = runtime::compat;

// Median of `runs` timed calls after `warmup` untimed ones; every rank calls it in step. On
// a GPU the time runs between device events around the call (NCCL's work is stream-ordered).
costmodel::Measurement time_op(const CollectiveOptions& o, const torch::Device& d, const std::function<void()>& op) {
  std::vector<double> t;
  runtime::Timeline tl(d);
  for (int i = 0; i < o.warmup + o.runs; ++i) {
    tl.begin(Clock::now());
    const int a = tl.mark();
    op();
    const int b = tl.mark();
    tl.resolve();
    if (i >= o.warmup) t.push_back(tl.seconds(b) - tl.seconds(a));
  }
  return costmodel::measurement_of(t);
}

// nccl-tests' bus-bandwidth factors (PERFORMANCE.md): all-reduce 2(n-1)/n, all-gather and
// reduce-scatter (n-1)/n, point-to-point 1; `bytes` is the whole buffer.
costmodel::CollectiveProfile row(const std::string& op, int ranks, long bytes, const costmodel::Measurement& m) {
  const double n = ranks;
  const double factor = op == "all_reduce" ? 2 * (n - 1) / n : op == "p2p" ? 1.0 : (n - 1) / n;
  costmodel::CollectiveProfile r{op, ranks, static_cast<double>(bytes), m, 0, 0};
  r.algbw_Bps = bytes / m.median_s;
  r.busbw_Bps = r.algbw_Bps * factor;
  return r;
}

// Checks the results before timing anything: member r contributes (r + 1) * (j + 1) at
// position j, so every sum is known in closed form. Throws Error naming the collective.
void check_results(compat::Group& g, const torch::Device& d, long k, std::chrono::milliseconds timeout) {
  const int n = g.size(), r = g.rank;
  auto on = torch::TensorOptions().device(d);
  torch::Tensor pos = torch::arange(1, k * n + 1, torch::kFloat);  // (n*k) j + 1, on the host
  torch::Tensor mine = (pos * static_cast<float>(r + 1)).to(d);    // (n*k)
  torch::Tensor out = torch::empty({k}, on);                        // (k)
  compat::reduce_scatter_sum(g, mine, out, timeout);
  torch::Tensor want = pos.narrow(0, r * k, k) * static_cast<float>(n * (n + 1) / 2);
  if (!torch::allclose(out.cpu(), want)) throw Error("profile: reduce_scatter over " + std::to_string(n) + " ranks gave wrong sums");
  torch::Tensor gathered = torch::empty({k * n}, on);  // (n*k)
  compat::all_gather(g, torch::full({k}, static_cast<float>(r + 1), on), gathered, timeout);
  torch::Tensor got = gathered.cpu();
  for (int i = 0; i < n; ++i)
    if (!torch::allclose(got.narrow(0, i * k, k), torch::full({k}, static_cast<float>(i + 1))))
      throw Error("profile: all_gather over " + std::to_string(n) + " ranks put the wrong block at " + std::to_string(i));
  torch::Tensor sum = mine.clone();
  compat::wait(compat::all_reduce_sum(g, sum), timeout);
  if (!torch::allclose(sum.cpu(), pos * static_cast<float>(n * (n + 1) / 2)))
    throw Error("profile: all_reduce over " + std::to_string(n) + " ranks gave wrong sums");
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
  compat::GroupOptions go;
  go.backend = runtime::resolve_backend(o.backend);
  const torch::Device d = runtime::device_for_backend(go.backend, env.local_rank);
  go.master_addr = env.master_addr;
  go.timeout = std::chrono::milliseconds(static_cast<long>(o.timeout_s * 1000));
  std::vector<int> all;
  for (int r = 0; r < env.world; ++r) all.push_back(r);
  compat::Group g = compat::make_group(store, "profile", all, env.rank, go);
  const auto timeout = go.timeout;
  const int n = env.world;
  check_results(g, d, 5, timeout);
  std::vector<costmodel::CollectiveProfile> rows;
  int tag = 0;
  for (long bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
    const long k = bytes / 4 / n;                          // fp32 elements per member's block
    torch::Tensor t = (torch::rand({bytes / 4}) + 1).to(d);  // (bytes/4) never zeros
    torch::Tensor block = (torch::rand({k}) + 1).to(d);      // (k) one member's share
    torch::Tensor gathered = torch::empty({k * n}, torch::TensorOptions().device(d));  // (n*k)
    // Ping-pong between ranks 0 and 1; one direction is half the round trip.
    costmodel::Measurement p2p = time_op(o, d, [&] {
      if (env.rank == 0) {
        compat::wait(compat::send(g, t, 1, tag), timeout);
        compat::wait(compat::recv(g, t, 1, tag), timeout);
      } else if (env.rank == 1) {
        compat::wait(compat::recv(g, t, 0, tag), timeout);
        compat::wait(compat::send(g, t, 0, tag), timeout);
      }
      ++tag;
    });
    p2p.median_s /= 2, p2p.min_s /= 2, p2p.max_s /= 2;
    costmodel::Measurement ar = time_op(o, d, [&] { compat::wait(compat::all_reduce_sum(g, t), timeout); });
    costmodel::Measurement ag = time_op(o, d, [&] { compat::all_gather(g, block, gathered, timeout); });
    costmodel::Measurement rs = time_op(o, d, [&] { compat::reduce_scatter_sum(g, gathered, block, timeout); });
    t.div_(n);  // keep the all-reduced values bounded across sizes
    rows.push_back(row("p2p", 2, bytes, p2p));
    rows.push_back(row("all_reduce", n, bytes, ar));
    rows.push_back(row("all_gather", n, k * n * 4, ag));
    rows.push_back(row("reduce_scatter", n, k * n * 4, rs));
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
  std::snprintf(line, sizeof line, "%12s %15s %6s %12s %10s %10s\n", "size (B)", "op", "ranks", "time (us)", "algbw GB/s",
                "busbw GB/s");
  o << line;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%12.0f %15s %6d %12.1f %10.3f %10.3f\n", r.bytes, r.op.c_str(), r.ranks,
                  r.time.median_s * 1e6, r.algbw_Bps / 1e9, r.busbw_Bps / 1e9);
    o << line;
  }
  return o.str();
}

}  // namespace stagecraft::profiler
