#include "sim/platform.h"

#include <fstream>
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

namespace {

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
  std::vector<sg::SplitDuplexLink*> port, bridge, host;  // (gpus) each
  std::vector<sg::SplitDuplexLink*> nic, leaf;           // (nodes * nics), (leaves)

  int node(int g) const { return g / c.gpus_per_node; }
  int local(int g) const { return g % c.gpus_per_node; }
  bool same_fast_group(int a, int b) const {
    int fg = c.fast_group_size;
    return fg > 1 && node(a) == node(b) && local(a) / fg == local(b) / fg;
  }

  std::vector<sg::LinkInRoute> route(int a, int b) const {
    if (same_fast_group(a, b)) return {{bridge[a], Dir::UP}, {bridge[b], Dir::DOWN}};
    if (node(a) == node(b)) return {{port[a], Dir::UP}, {port[b], Dir::DOWN}};
    const int nics = c.nics_per_node;
    std::vector<sg::LinkInRoute> r = {{nic[node(a) * nics + local(a) % nics], Dir::UP}};
    int la = node(a) / opt.fat_tree_leaf_nodes, lb = node(b) / opt.fat_tree_leaf_nodes;
    if (!leaf.empty() && la != lb) {
      r.push_back({leaf[la], Dir::UP});
      r.push_back({leaf[lb], Dir::DOWN});
    }
    r.push_back({nic[node(b) * nics + local(b) % nics], Dir::DOWN});
    return r;
  }
};

}  // namespace

Platform build_platform(const costmodel::ClusterSpec& c, int num_gpus, const std::vector<std::pair<int, int>>& pairs,
                        const BuildOptions& opt) {
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
  for (int n = 0; n < nodes; ++n) {
    b.cpu.push_back(b.zone->create_host("node-" + std::to_string(n) + "-cpu", 1e9));
    for (int i = 0; i < c.nics_per_node; ++i)
      b.nic.push_back(duplex(b.zone, "node-" + std::to_string(n) + "-nic-" + std::to_string(i), c.inter_node_bandwidth_Bps,
                             c.inter_node_latency_s));
  }
  if (c.inter_node_topology == "fat-tree") {
    const int leaves = (nodes + opt.fat_tree_leaf_nodes - 1) / opt.fat_tree_leaf_nodes;
    const double up = opt.fat_tree_leaf_nodes * c.nics_per_node * c.inter_node_bandwidth_Bps;
    for (int l = 0; l < leaves; ++l) b.leaf.push_back(duplex(b.zone, "leaf-" + std::to_string(l), up, 0));
  }
  for (int g = 0; g < num_gpus; ++g) {
    const std::string n = "gpu-" + std::to_string(g);
    b.gpu.push_back(b.zone->create_host(n, speed));
    b.port.push_back(duplex(b.zone, n + "-" + c.intra_node_link, c.intra_node_bandwidth_Bps, c.intra_node_latency_s));
    b.bridge.push_back(c.fast_group_size > 1 ? duplex(b.zone, n + "-" + (c.fast_group_link.empty() ? "bridge" : c.fast_group_link),
                                                      c.fast_group_bandwidth_Bps, c.fast_group_latency_s)
                                             : nullptr);
    b.host.push_back(duplex(b.zone, n + "-host", c.host_link_bandwidth_Bps, 0));
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
  for (int g = 0; g < num_gpus; ++g) {
    sg::Host* h = b.cpu[static_cast<size_t>(b.node(g))];
    b.zone->add_route(b.gpu[g]->get_netpoint(), h->get_netpoint(), nullptr, nullptr, {{b.host[g], Dir::UP}}, false);
    b.zone->add_route(h->get_netpoint(), b.gpu[g]->get_netpoint(), nullptr, nullptr, {{b.host[g], Dir::DOWN}}, false);
    p.host_memory.push_back(h);
  }
  b.zone->seal();
  return p;
}

Platform load_platform_file(const std::string& path, int num_gpus) {
  if (!std::ifstream(path).good())
    throw InputError("--platform: cannot read '" + path + "' (give a SimGrid XML platform file)");
  sg::Engine* e = sg::Engine::get_instance();
  e->load_platform(path);
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
