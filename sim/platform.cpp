#include "sim/platform.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "schedules/error.h"

namespace stagecraft::sim {

namespace sg = simgrid::s4u;
using Dir = sg::LinkInRoute::Direction;

void configure_network() {
  sg::Engine::set_config("network/model:CM02");
  sg::Engine::set_config("network/latency-factor:1");
  sg::Engine::set_config("network/bandwidth-factor:1");
  sg::Engine::set_config("network/TCP-gamma:1e30");
  sg::Engine::set_config("network/crosstraffic:0");
}

int routed_nic(const costmodel::ClusterSpec& c, const NicFactors& f, int g) {
  const int nics = std::max(1, c.nics_per_node), node = g / c.gpus_per_node, own = (g % c.gpus_per_node) % nics;
  auto it = f.find(node);
  if (it == f.end()) return own;
  for (int i = 0; i < nics; ++i)
    if (it->second[static_cast<size_t>((own + i) % nics)] > 0) return (own + i) % nics;
  throw InputError("simulator platform: every NIC of node " + std::to_string(node) + " failed (no route off the node)");
}

namespace {

// Bandwidth factor of NIC i of node n; a failed NIC keeps its nominal bandwidth (nothing is routed
// over it).
double nic_bandwidth_factor(const NicFactors& f, int n, int i) {
  auto it = f.find(n);
  if (it == f.end()) return 1;
  const double x = it->second[static_cast<size_t>(i)];
  return x > 0 ? x : 1;
}

void require_positive(const std::string& field, double v) {
  if (!(v > 0))
    throw InputError("simulator platform: cluster." + field + " = " + std::to_string(v) + " (must be > 0)");
}

// A split-duplex link whose route latency is `latency_s` when used as one end of a two-hop
// route (each hop carries half).
sg::SplitDuplexLink* duplex(sg::NetZone* z, const std::string& name, double bw, double latency_s) {
  sg::SplitDuplexLink* l = z->create_split_duplex_link(name, bw);
  l->set_latency(latency_s / 2);
  l->seal();
  return l;
}

struct Builder {
  Builder(const costmodel::ClusterSpec& cl, const BuildOptions& o) : c(cl), opt(o) {}
  const costmodel::ClusterSpec& c;
  BuildOptions opt;
  sg::NetZone* zone = nullptr;
  std::vector<sg::Host*> gpu, cpu;                       // (gpus), (nodes)
  std::vector<sg::Host*> compute, shared;                // (gpus), (nodes): ranks sharing a node's cores
  std::vector<sg::SplitDuplexLink*> port, bridge, host;  // (gpus) each
  std::vector<sg::SplitDuplexLink*> nic, leaf;           // (nodes * nics), (leaves)

  int node(int g) const { return g / c.gpus_per_node; }
  // Node n's cores, one host of cores_per_node cores at `speed` each (no links: compute only).
  sg::Host* cores(int n, double speed) {
    sg::Host*& h = shared[static_cast<size_t>(n)];
    if (!h) h = zone->create_host("node-" + std::to_string(n) + "-cores", speed)->set_core_count(c.cores_per_node);
    return h;
  }
  int local(int g) const { return g % c.gpus_per_node; }
  bool same_fast_group(int a, int b) const {
    int fg = c.fast_group_size;
    return fg > 1 && node(a) == node(b) && local(a) / fg == local(b) / fg;
  }

  std::vector<sg::LinkInRoute> route(int a, int b) const {
    if (same_fast_group(a, b)) return {{bridge[a], Dir::UP}, {bridge[b], Dir::DOWN}};
    if (node(a) == node(b)) return {{port[a], Dir::UP}, {port[b], Dir::DOWN}};
    const int nics = c.nics_per_node;
    std::vector<sg::LinkInRoute> r = {{nic[node(a) * nics + routed_nic(c, opt.nic_factor, a)], Dir::UP}};
    int la = node(a) / opt.fat_tree_leaf_nodes, lb = node(b) / opt.fat_tree_leaf_nodes;
    if (!leaf.empty() && la != lb) {
      r.push_back({leaf[la], Dir::UP});
      r.push_back({leaf[lb], Dir::DOWN});
    }
    r.push_back({nic[node(b) * nics + routed_nic(c, opt.nic_factor, b)], Dir::DOWN});
    return r;
  }
};

}  // namespace

Platform build_platform(const costmodel::ClusterSpec& c, int num_gpus, const std::vector<int>& gpus,
                        const std::vector<std::pair<int, int>>& pairs, const BuildOptions& opt) {
  require_positive("gpu_peak_flops_per_s x achieved_efficiency", c.gpu_peak_flops_per_s * c.achieved_efficiency);
  require_positive("intra_node_bandwidth_Bps", c.intra_node_bandwidth_Bps);
  require_positive("inter_node_bandwidth_Bps", c.inter_node_bandwidth_Bps);
  require_positive("host_link_bandwidth_Bps", c.host_link_bandwidth_Bps);
  if (c.fast_group_size > 1) require_positive("fast_group_bandwidth_Bps", c.fast_group_bandwidth_Bps);
  if (c.gpus_per_node < 1 || c.nics_per_node < 1 || opt.fat_tree_leaf_nodes < 1)
    throw InputError("simulator platform: gpus_per_node, nics_per_node and fat-tree leaf size must be >= 1");
  if (num_gpus > c.num_gpus())
    throw InputError("simulator platform: the plan needs " + std::to_string(num_gpus) + " GPUs but cluster '" + c.name +
                     "' has " + std::to_string(c.num_gpus()));
  Builder b(c, opt);
  b.zone = sg::create_full_zone("cluster");
  const int nodes = (num_gpus + c.gpus_per_node - 1) / c.gpus_per_node;
  const double speed = c.gpu_peak_flops_per_s * c.achieved_efficiency;
  const size_t G = static_cast<size_t>(num_gpus);
  b.gpu.assign(G, nullptr);
  b.port.assign(G, nullptr);
  b.bridge.assign(G, nullptr);
  b.host.assign(G, nullptr);
  b.cpu.assign(static_cast<size_t>(nodes), nullptr);
  if (c.ranks_share_cores()) b.compute.assign(G, nullptr), b.shared.assign(static_cast<size_t>(nodes), nullptr);
  b.nic.assign(static_cast<size_t>(nodes * c.nics_per_node), nullptr);
  if (c.inter_node_topology == "fat-tree") b.leaf.assign(static_cast<size_t>((nodes + opt.fat_tree_leaf_nodes - 1) / opt.fat_tree_leaf_nodes), nullptr);
  const double up = opt.fat_tree_leaf_nodes * c.nics_per_node * c.inter_node_achieved_Bps();
  for (int g : gpus) {
    const int n = b.node(g);
    if (!b.cpu[static_cast<size_t>(n)]) {
      b.cpu[static_cast<size_t>(n)] = b.zone->create_host("node-" + std::to_string(n) + "-cpu", 1e9);
      for (int i = 0; i < c.nics_per_node; ++i)
        b.nic[static_cast<size_t>(n * c.nics_per_node + i)] =
            duplex(b.zone, "node-" + std::to_string(n) + "-nic-" + std::to_string(i),
                   c.inter_node_achieved_Bps() * nic_bandwidth_factor(opt.nic_factor, n, i), c.inter_node_latency_s);
      const size_t l = static_cast<size_t>(n / opt.fat_tree_leaf_nodes);
      if (!b.leaf.empty() && !b.leaf[l]) b.leaf[l] = duplex(b.zone, "leaf-" + std::to_string(l), up, 0);
    }
    const std::string name = "gpu-" + std::to_string(g);
    const size_t i = static_cast<size_t>(g);
    b.gpu[i] = b.zone->create_host(name, speed);
    if (c.ranks_share_cores()) b.compute[i] = b.cores(n, speed);
    b.port[i] = duplex(b.zone, name + "-" + c.intra_node_link, c.intra_node_achieved_Bps(), c.intra_node_latency_s);
    if (c.fast_group_size > 1)
      b.bridge[i] = duplex(b.zone, name + "-" + (c.fast_group_link.empty() ? "bridge" : c.fast_group_link), c.fast_group_achieved_Bps(),
                           c.fast_group_latency_s);
    b.host[i] = duplex(b.zone, name + "-host", c.host_link_bandwidth_Bps, 0);
  }
  // Every link half carries latency/2; a route uses the UP half at one end and the DOWN half at
  // the other (leaf uplinks add none), so its latency is the configured one.
  for (auto [a, d] : pairs) {
    if (a == d) continue;
    auto r = b.route(a, d);
    b.zone->add_route(b.gpu[a]->get_netpoint(), b.gpu[d]->get_netpoint(), nullptr, nullptr, r, false);
  }
  Platform p;
  p.gpus = b.gpu;
  p.compute = b.compute;
  p.host_memory.assign(G, nullptr);
  for (int g : gpus) {
    sg::Host* h = b.cpu[static_cast<size_t>(b.node(g))];
    b.zone->add_route(b.gpu[g]->get_netpoint(), h->get_netpoint(), nullptr, nullptr, {{b.host[g], Dir::UP}}, false);
    b.zone->add_route(h->get_netpoint(), b.gpu[g]->get_netpoint(), nullptr, nullptr, {{b.host[g], Dir::DOWN}}, false);
    p.host_memory[static_cast<size_t>(g)] = h;
  }
  b.zone->seal();
  return p;
}

namespace {

// The GPUs of tensor-parallel group (pipeline rank r, data-parallel index d).
std::vector<int> group_gpus(const costmodel::Topology& topo, int tp, int d, int r) {
  std::vector<int> g;
  for (int t = 0; t < tp; ++t) g.push_back(topo.global_rank({t, d, r}));
  return g;
}

// NICs (node-local indices) a group's GPUs use, each once; empty when the GPUs do not share
// their NICs evenly or span nodes.
std::vector<int> group_nics(const costmodel::ClusterSpec& c, const std::vector<int>& gpus, const NicFactors& f) {
  const int node = gpus.front() / c.gpus_per_node;
  std::map<int, int> uses;
  for (int g : gpus) {
    if (g / c.gpus_per_node != node) return {};
    ++uses[routed_nic(c, f, g)];
  }
  std::vector<int> out;
  for (auto [nic, n] : uses) {
    if (n != uses.begin()->second) return {};
    out.push_back(nic);
  }
  return out;
}

}  // namespace

bool can_aggregate_tp(const costmodel::ClusterSpec& c, const costmodel::Topology& topo, const costmodel::ParallelPlan& p,
                      const NicFactors& f) {
  if (p.tp <= 1 || c.fast_group_size > 1 || c.gpus_per_node < 1 || c.nics_per_node < 1) return false;
  std::map<std::pair<int, int>, bool> nic_taken;  // (node, nic) -> used by some group
  std::map<std::pair<int, std::vector<int>>, bool> sets;  // (node, nic set) seen
  for (int r = 0; r < p.pp; ++r)
    for (int d = 0; d < p.dp; ++d) {
      std::vector<int> g = group_gpus(topo, p.tp, d, r);
      std::vector<int> nics = group_nics(c, g, f);
      if (nics.empty()) return false;
      const int node = g.front() / c.gpus_per_node;
      if (sets.count({node, nics})) continue;  // identical to a set seen on this node
      for (int n : nics)
        if (nic_taken[{node, n}]) return false;  // overlaps another set partly
      for (int n : nics) nic_taken[{node, n}] = true;
      sets[{node, nics}] = true;
    }
  return true;
}

Platform build_unit_platform(const costmodel::ClusterSpec& c, const costmodel::Topology& topo,
                             const costmodel::ParallelPlan& p, int num_gpus, const std::vector<std::pair<int, int>>& pairs,
                             const BuildOptions& opt) {
  require_positive("gpu_peak_flops_per_s x achieved_efficiency", c.gpu_peak_flops_per_s * c.achieved_efficiency);
  require_positive("intra_node_bandwidth_Bps", c.intra_node_bandwidth_Bps);
  require_positive("inter_node_bandwidth_Bps", c.inter_node_bandwidth_Bps);
  require_positive("host_link_bandwidth_Bps", c.host_link_bandwidth_Bps);
  if (num_gpus > c.num_gpus())
    throw InputError("simulator platform: the plan needs " + std::to_string(num_gpus) + " GPUs but cluster '" + c.name +
                     "' has " + std::to_string(c.num_gpus()));
  sg::NetZone* zone = sg::create_full_zone("cluster");
  const double speed = c.gpu_peak_flops_per_s * c.achieved_efficiency, t = p.tp;
  const int groups = p.dp * p.pp;
  std::vector<int> group_of(static_cast<size_t>(num_gpus), -1);
  std::vector<sg::Host*> host(static_cast<size_t>(groups)), peer(host), cpu;
  std::vector<sg::SplitDuplexLink*> port(static_cast<size_t>(groups)), nic(port);
  std::map<std::pair<int, std::vector<int>>, sg::SplitDuplexLink*> nic_links;
  std::map<int, sg::Host*> cpu_of_node;
  std::vector<int> node_of(static_cast<size_t>(groups));
  Platform pf;
  pf.lanes = p.tp;
  pf.gpus.resize(group_of.size());
  pf.host_memory.resize(group_of.size());
  pf.tp_peer.resize(group_of.size());
  for (int r = 0; r < p.pp; ++r)
    for (int d = 0; d < p.dp; ++d) {
      const int u = r * p.dp + d;
      const std::vector<int> g = group_gpus(topo, p.tp, d, r);
      const std::vector<int> nics = group_nics(c, g, opt.nic_factor);
      const int node = g.front() / c.gpus_per_node;
      double slowest = 1;  // the group's lanes move in step: its slowest NIC sets their pace
      for (int n : nics) slowest = std::min(slowest, nic_bandwidth_factor(opt.nic_factor, node, n));
      const std::string name = "group-" + std::to_string(u);
      node_of[static_cast<size_t>(u)] = node;
      host[static_cast<size_t>(u)] = zone->create_host(name, speed);
      peer[static_cast<size_t>(u)] = zone->create_host(name + "-tp-peer", speed);
      port[static_cast<size_t>(u)] = duplex(zone, name + "-" + c.intra_node_link, t * c.intra_node_achieved_Bps(), c.intra_node_latency_s);
      auto& nl = nic_links[{node, nics}];
      if (!nl)
        nl = duplex(zone, "node-" + std::to_string(node) + "-nic-" + std::to_string(nics.front()) + "-" + std::to_string(nics.back()),
                    static_cast<double>(nics.size()) * c.inter_node_achieved_Bps() * slowest, c.inter_node_latency_s);
      nic[static_cast<size_t>(u)] = nl;
      auto& cp = cpu_of_node[node];
      if (!cp) cp = zone->create_host("node-" + std::to_string(node) + "-cpu", 1e9);
      sg::SplitDuplexLink* hl = duplex(zone, name + "-host", t * c.host_link_bandwidth_Bps, 0);
      zone->add_route(host[static_cast<size_t>(u)]->get_netpoint(), cp->get_netpoint(), nullptr, nullptr, {{hl, Dir::UP}}, false);
      zone->add_route(cp->get_netpoint(), host[static_cast<size_t>(u)]->get_netpoint(), nullptr, nullptr, {{hl, Dir::DOWN}}, false);
      zone->add_route(host[static_cast<size_t>(u)]->get_netpoint(), peer[static_cast<size_t>(u)]->get_netpoint(), nullptr, nullptr,
                      {{port[static_cast<size_t>(u)], Dir::UP}, {port[static_cast<size_t>(u)], Dir::DOWN}}, false);
      for (int x : g) {
        group_of[static_cast<size_t>(x)] = u;
        pf.gpus[static_cast<size_t>(x)] = host[static_cast<size_t>(u)];
        pf.host_memory[static_cast<size_t>(x)] = cp;
        pf.tp_peer[static_cast<size_t>(x)] = peer[static_cast<size_t>(u)];
      }
    }
  const int leaf_nodes = std::max(1, opt.fat_tree_leaf_nodes);
  std::map<int, sg::SplitDuplexLink*> leaf;
  if (c.inter_node_topology == "fat-tree")
    for (const auto& [node, cp] : cpu_of_node) {
      auto& l = leaf[node / leaf_nodes];
      if (!l) l = duplex(zone, "leaf-" + std::to_string(node / leaf_nodes), leaf_nodes * c.nics_per_node * c.inter_node_achieved_Bps(), 0);
    }
  std::set<std::pair<int, int>> routed;
  for (auto [a, b] : pairs) {
    const int ua = group_of[static_cast<size_t>(a)], ub = group_of[static_cast<size_t>(b)];
    if (ua == ub || !routed.insert({ua, ub}).second) continue;
    std::vector<sg::LinkInRoute> route;
    const int na = node_of[static_cast<size_t>(ua)], nb = node_of[static_cast<size_t>(ub)];
    if (na == nb) {
      route = {{port[static_cast<size_t>(ua)], Dir::UP}, {port[static_cast<size_t>(ub)], Dir::DOWN}};
    } else {
      route = {{nic[static_cast<size_t>(ua)], Dir::UP}};
      if (!leaf.empty() && na / leaf_nodes != nb / leaf_nodes) {
        route.push_back({leaf[na / leaf_nodes], Dir::UP});
        route.push_back({leaf[nb / leaf_nodes], Dir::DOWN});
      }
      route.push_back({nic[static_cast<size_t>(ub)], Dir::DOWN});
    }
    zone->add_route(host[static_cast<size_t>(ua)]->get_netpoint(), host[static_cast<size_t>(ub)]->get_netpoint(), nullptr, nullptr,
                    route, false);
  }
  zone->seal();
  return pf;
}

Platform load_platform_file(const std::string& path, int num_gpus) {
  if (!std::ifstream(path).good())
    throw InputError("--platform: cannot read '" + path + "' (give a SimGrid XML platform file)");
  sg::Engine* e = sg::Engine::get_instance();
  try {
    e->load_platform(path);
  } catch (const std::exception& err) {  // SimGrid's parse error: bad input, not a failure at run time
    std::string what = err.what();
    throw InputError("--platform '" + path + "' is not a SimGrid XML platform (" + what.substr(0, what.find('\n')) + ")");
  }
  Platform p;
  p.gpus.assign(static_cast<size_t>(num_gpus), nullptr);
  p.host_memory.assign(static_cast<size_t>(num_gpus), nullptr);
  int marked = 0;
  for (sg::Host* h : e->get_all_hosts()) {
    const char* v = h->get_property("stagecraft_gpu");
    if (!v) continue;
    ++marked;
    int g = -1;
    try {
      g = std::stoi(v);
    } catch (const std::exception&) {
    }
    if (g < 0 || g >= num_gpus || p.gpus[static_cast<size_t>(g)])
      throw InputError("--platform " + path + ": host '" + h->get_name() + "' has stagecraft_gpu=\"" + v +
                       "\" (must be a distinct integer in [0, " + std::to_string(num_gpus) + "), the plan's GPU count)");
    p.gpus[static_cast<size_t>(g)] = h;
    if (const char* mem = h->get_property("stagecraft_host_memory")) {
      sg::Host* m = e->host_by_name_or_null(mem);
      if (!m) throw InputError("--platform " + path + ": host '" + h->get_name() + "' names stagecraft_host_memory=\"" + mem +
                               "\", which is not a host of the platform");
      p.host_memory[static_cast<size_t>(g)] = m;
    }
  }
  if (marked != num_gpus)
    throw InputError("--platform " + path + ": " + std::to_string(marked) +
                     " hosts carry the property stagecraft_gpu but the plan has dp x tp x pp = " + std::to_string(num_gpus) +
                     " GPUs (mark exactly one host per GPU, stagecraft_gpu=\"0\" .. \"" + std::to_string(num_gpus - 1) + "\")");
  for (sg::Link* l : e->get_all_links())
    if (!(l->get_bandwidth() > 0))
      throw InputError("--platform " + path + ": link '" + l->get_name() + "' has bandwidth " +
                       std::to_string(l->get_bandwidth()) + " B/s (must be > 0)");
  for (sg::Host* h : p.gpus)
    if (!(h->get_speed() > 0))
      throw InputError("--platform " + path + ": GPU host '" + h->get_name() + "' has speed 0 (must be > 0 flop/s)");
  return p;
}

}  // namespace stagecraft::sim
