// simulate(): checks, then one forked child per simulation (SimGrid allows one engine per
// process): the child builds the platform and the activity graph, runs it and writes its
// result as JSON into a pipe; the parent rethrows the child's errors with their kind.
#include "sim/simulate.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <iostream>

#include "costmodel/topology.h"
#include "schedules/error.h"
#include "sim/executor.h"
#include "sim/metrics.h"
#include "sim/platform.h"
#include "sim/symmetry.h"
#include "sim/workload.h"

namespace stagecraft::sim {

namespace sg = simgrid::s4u;

namespace {

void check_inputs(const schedules::Schedule& s, const costmodel::CostTable& c, const costmodel::ParallelPlan& p,
                  const SimOptions& opt) {
  if (opt.iterations < 1)
    throw InputError("simulator: iterations = " + std::to_string(opt.iterations) + " (must be at least 1)");
  if (s.num_ranks != p.pp)
    throw InputError("simulator: schedule '" + s.name + "' has " + std::to_string(s.num_ranks) + " ranks but plan.pp = " +
                     std::to_string(p.pp));
  if (static_cast<int>(c.stages.size()) != s.num_stages || static_cast<int>(c.optimizer_s.size()) != s.num_ranks ||
      static_cast<int>(c.static_bytes.size()) != s.num_ranks)
    throw InputError("simulator: cost table has " + std::to_string(c.stages.size()) + " stages and " +
                     std::to_string(c.optimizer_s.size()) + " ranks; schedule '" + s.name + "' has " +
                     std::to_string(s.num_stages) + " and " + std::to_string(s.num_ranks));
  check_shape(s);
  if (!opt.platform_file.empty() && !opt.whatif.nics.empty())
    throw InputError("simulator: a what-if with NICs and --platform " + opt.platform_file +
                     " (allowed: NIC what-ifs on a platform built from the cluster; a platform file's links are its own)");
}

// Bytes each link carried in the last iteration, from the flows' routes.
std::map<std::string, LinkLoad> link_loads(const Execution& ex, int last) {
  std::map<std::string, LinkLoad> out;
  std::map<std::pair<sg::Host*, sg::Host*>, std::vector<sg::Link*>> routes;
  for (const Record& r : ex.records) {
    if (r.kind != RecKind::Flow || r.iteration != last) continue;
    auto [it, fresh] = routes.try_emplace({r.from, r.to});
    if (fresh) {
      double lat = 0;
      r.from->route_to(r.to, it->second, &lat);
    }
    for (sg::Link* l : it->second) {
      LinkLoad& ll = out[l->get_name()];
      ll.bandwidth_Bps = l->get_bandwidth();
      ll.bytes += r.bytes;
    }
  }
  return out;
}

// Context parallelism as the simulator runs it: the gradients' group is dp x cp (Topology's
// kDpCp), so its dp and cp axes become one dp axis of dp x cp replicas, numbered as kDpCp numbers
// them (faster axis first), which keeps every GPU's global rank when the two axes are adjacent in
// the rank order (tp-cp-dp-pp, Megatron-Core's, and every order that names cp next to dp). Each
// cp rank runs its share of the sequence; the cost table's durations hold the ring's exposed
// time (costmodel/cp.h) and, with explicit tp, the ring's chunks run as flows beside them
// (exchange.cpp cp_ring; which replicas are ring neighbours: set_context_parallel).
costmodel::ParallelPlan flatten_cp(const costmodel::ParallelPlan& p) {
  if (p.cp <= 1) return p;
  const auto axes = costmodel::rank_axes(p.rank_order);
  const auto at = [&](costmodel::Axis a) { return std::find(axes.begin(), axes.end(), a) - axes.begin(); };
  if (std::abs(at(costmodel::kCp) - at(costmodel::kDp)) != 1)
    throw InputError("simulator: plan.rank_order = '" + p.rank_order + "' with cp = " + std::to_string(p.cp) +
                     " puts another axis between cp and dp (allowed: an order with cp next to dp, e.g. tp-cp-dp-pp)");
  costmodel::ParallelPlan f = p;
  f.dp = p.dp * p.cp;
  f.cp = 1;
  std::string order;
  for (costmodel::Axis a : axes) {
    if (a == costmodel::kCp) continue;
    order += std::string(order.empty() ? "" : "-") + (a == costmodel::kTp ? "tp" : a == costmodel::kDp ? "dp" : "pp");
  }
  f.rank_order = order;
  return f;
}

// The platform of the simulated replicas (`sim`: the plan with dp of them; sim/symmetry.h):
// from the file, else aggregated over tensor-parallel groups where that is exact
// (can_aggregate_tp), else one host per GPU.
Platform make_platform(const schedules::Schedule& s, const costmodel::ClusterSpec& cl, const costmodel::ParallelPlan& sim,
                       int num_gpus, const costmodel::Topology& topo, const Workload& w, const SimOptions& opt,
                       const NicFactors& nics) {
  if (!opt.platform_file.empty()) return load_platform_file(opt.platform_file, sim.num_gpus());
  if (cl.ranks_share_cores() && sim.tp > 1)
    throw InputError("cluster.cores_per_node = " + std::to_string(cl.cores_per_node) + " with tp = " + std::to_string(sim.tp) +
                     ": ranks sharing cores are simulated with tp 1 only (a tensor-parallel group's compute runs as one "
                     "execution; allowed: tp 1, or cores_per_node 0 or at least gpus_per_node)");
  BuildOptions bo;
  bo.fat_tree_leaf_nodes = opt.fat_tree_leaf_nodes;
  bo.nic_factor = nics;
  const auto pairs = needed_pairs(s, sim, topo, w, opt);
  if (opt.aggregate_tp && can_aggregate_tp(cl, topo, sim, nics)) return build_unit_platform(cl, topo, sim, num_gpus, pairs, bo);
  std::vector<int> gpus;
  for (int r = 0; r < sim.pp; ++r)
    for (int d = 0; d < sim.dp; ++d)
      for (int t = 0; t < sim.tp; ++t) gpus.push_back(topo.global_rank({t, d, r}));
  return build_platform(cl, num_gpus, gpus, pairs, bo);
}

// The what-if on the simulated replicas (wb maps them to the plan's): each unit's rate (its
// slowest GPU's), delay (its latest GPU's) and jitter stream (its first GPU in the plan), and
// the NIC factors of the nodes standing for the plan's.
UnitEffects unit_effects(const Resolved& rv, const WhatIfBlocks& wb, const costmodel::Topology& topo,
                         const costmodel::ParallelPlan& sim) {
  UnitEffects fx;
  fx.jitter = rv.jitter;
  for (int r = 0; r < sim.pp; ++r)
    for (int d = 0; d < sim.dp; ++d) {
      double rate = 1, delay = 0;
      const int orig = wb.replica_of[static_cast<size_t>(d)];
      for (int t = 0; t < sim.tp; ++t) {
        const size_t g = static_cast<size_t>(topo.global_rank({t, orig, r}));
        rate = std::min(rate, rv.rate[g]);
        delay = std::max(delay, rv.delay_s[g]);
      }
      fx.rate.push_back(rate);
      fx.delay_s.push_back(delay);
      fx.stream.push_back(static_cast<std::uint64_t>(topo.global_rank({0, orig, r})));
    }
  return fx;
}

NicFactors image_nics(const Resolved& rv, const WhatIfBlocks& wb, const costmodel::ClusterSpec& cl,
                      const costmodel::Topology& topo, int num_gpus) {
  NicFactors out;
  for (const auto& [node, f] : rv.nic_factor)
    for (int g = node * cl.gpus_per_node; g < std::min(num_gpus, (node + 1) * cl.gpus_per_node); ++g)
      if (const int im = wb.image_gpu[static_cast<size_t>(g)]; im >= 0) {
        out[topo.node_of(im)] = f;
        break;
      }
  return out;
}

SimResult run_here(const schedules::Schedule& s, const costmodel::CostTable& c, const costmodel::ClusterSpec& cl,
                   const costmodel::ParallelPlan& plan, const SimOptions& opt) {
  const costmodel::ParallelPlan p = flatten_cp(plan);
  auto t0 = std::chrono::steady_clock::now();
  std::string a0 = "stagecraft-sim", a1 = "--log=root.thres:critical";
  char* argv[] = {a0.data(), a1.data(), nullptr};
  int argc = 2;
  sg::Engine engine(&argc, argv);
  configure_network();
  costmodel::Topology topo(cl, p);
  Workload w = derive_workload(s, c, cl, p);
  set_context_parallel(w, c, plan);
  const Resolved rv = resolve(opt.whatif, cl, p.num_gpus());
  const WhatIfBlocks wb = whatif_blocks(find_symmetry(s, cl, topo, p, w, opt), rv, cl, topo, p);
  const Symmetry& sym = wb.sym;
  costmodel::ParallelPlan sim = p;  // the replicas simulated, on the whole plan's topology
  sim.dp = sym.dp_simulated;
  const UnitEffects fx = unit_effects(rv, wb, topo, sim);
  Platform pf = make_platform(s, cl, sim, p.num_gpus(), topo, w, opt, image_nics(rv, wb, cl, topo, p.num_gpus()));
  const auto t1 = std::chrono::steady_clock::now();
  Execution ex = execute(s, c, w, sim, p.dp, topo, pf, opt, fx);
  const auto t2 = std::chrono::steady_clock::now();
  SimResult r = summarise(s, c, ex, link_loads(ex, opt.iterations - 1), opt);
  r.setup_s = std::chrono::duration<double>(t1 - t0).count();
  r.graph_s = ex.graph_s;
  r.engine_s = ex.engine_s;
  r.metrics_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count();
  r.num_gpus = p.num_gpus();
  r.simulated_gpus = sim.num_gpus();
  r.dp_simulated = sym.dp_simulated;
  r.dp_copies = sym.copies;
  r.dp_replicas = p.dp;
  r.symmetry_off_because = sym.full_because;
  r.activities = ex.engine_activities;
  r.sim_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.events_per_s = r.sim_wall_s > 0 ? r.activities / r.sim_wall_s : 0;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  r.peak_rss_bytes = static_cast<double>(ru.ru_maxrss) * 1024.0;
  return r;
}

[[noreturn]] void child(int fd, const schedules::Schedule& s, const costmodel::CostTable& c, const costmodel::ClusterSpec& cl,
                        const costmodel::ParallelPlan& p, const SimOptions& opt) {
  nlohmann::json out;
  try {
    out = {{"ok", to_json(run_here(s, c, cl, p, opt))}};
  } catch (const InputError& e) {
    out = {{"input_error", e.what()}};
  } catch (const std::exception& e) {
    out = {{"error", e.what()}};
  }
  std::string text = out.dump();
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) _exit(3);
    done += static_cast<size_t>(n);
  }
  close(fd);
  _exit(0);
}

}  // namespace

SimResult simulate(const schedules::Schedule& s, const costmodel::CostTable& c, const costmodel::ClusterSpec& cl,
                   const costmodel::ParallelPlan& p, const SimOptions& opt) {
  check_inputs(s, c, p, opt);
  int fds[2];
  if (pipe(fds) != 0) throw Error("simulator: cannot create a pipe to the simulating process");
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) throw Error("simulator: cannot fork the simulating process");
  if (pid == 0) {
    close(fds[0]);
    child(fds[1], s, c, cl, p, opt);
  }
  close(fds[1]);
  std::string text;
  char buf[1 << 16];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || text.empty())
    throw Error("simulator: the simulating process " +
                (WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                     : "exited with status " + std::to_string(WEXITSTATUS(status))) +
                " (SimGrid's message, if any, is above; a platform file without a route between two GPUs that "
                "exchange data ends this way)");
  nlohmann::json j = nlohmann::json::parse(text);
  if (j.contains("input_error")) throw InputError(j["input_error"].get<std::string>());
  if (j.contains("error")) throw Error(j["error"].get<std::string>());
  return sim_result_from_json(j.at("ok"));
}

}  // namespace stagecraft::sim
