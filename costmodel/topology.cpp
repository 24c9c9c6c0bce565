#include "costmodel/topology.h"

#include "costmodel/memo.h"

#include <algorithm>
#include <set>
#include <sstream>

namespace stagecraft::costmodel {

std::array<Axis, kAxes> rank_axes(const std::string& rank_order) {
  std::vector<Axis> axes;
  for (size_t i = 0; i < rank_order.size(); i += 3) {
    const std::string n = rank_order.substr(i, 2);
    axes.push_back(n == "tp" ? kTp : n == "dp" ? kDp : n == "pp" ? kPp : kCp);
  }
  if (axes.size() == 3) axes.insert(std::find(axes.begin(), axes.end(), kTp) + 1, kCp);
  return {axes[0], axes[1], axes[2], axes[3]};
}

struct Topology::Caches {
  using GroupKey = std::array<int, 3>;  // axis, size, stride
  SharedMemo<std::pair<int, int>, Link> p2p;
  SharedMemo<GroupKey, Link> group;
  SharedMemo<GroupKey, AllReducePath> path;
};

namespace {

// Everything a Topology's answers depend on: the links' figures, the node shape, the degrees
// and the rank order.
std::string layout_key(const ClusterSpec& c, const std::array<int, kAxes>& size, const std::array<Axis, kAxes>& order) {
  std::ostringstream k;
  k.precision(17);
  k << c.gpus_per_node << ' ' << c.nics_per_node << ' ' << c.fast_group_size << ' ' << c.inter_node_achieved_Bps() << ' '
    << c.inter_node_latency_s << ' ' << c.intra_node_achieved_Bps() << ' ' << c.intra_node_latency_s << ' '
    << c.fast_group_achieved_Bps() << ' ' << c.fast_group_latency_s;
  for (int i = 0; i < kAxes; ++i) k << ' ' << size[static_cast<size_t>(i)] << ':' << order[static_cast<size_t>(i)];
  return k.str();
}

}  // namespace

Topology::Topology(const ClusterSpec& cluster, const ParallelPlan& plan) : cluster_(cluster) {
  size_ = {plan.tp, plan.dp, plan.pp, plan.cp};
  gpus_per_node_ = cluster.gpus_per_node;
  order_ = rank_axes(plan.rank_order);
  static SharedMemo<std::string, std::shared_ptr<Caches>> registry;  // one set of caches per layout
  caches_ = registry.get(layout_key(cluster, size_, order_), [] { return std::make_shared<Caches>(); });
}

int Topology::global_rank(const Coords& c) const {
  int r = 0, stride = 1;
  for (Axis a : order_) {
    r += c[a] * stride;
    stride *= size_[a];
  }
  return r;
}

Coords Topology::coords(int g) const {
  Coords c;
  for (Axis a : order_) {
    c.set(a, g % size_[a]);
    g /= size_[a];
  }
  return c;
}

Link Topology::raw_link(int a, int b) const {
  if (a == b) return {0, 0, "self"};
  if (node_of(a) != node_of(b)) return {cluster_.inter_node_achieved_Bps(), cluster_.inter_node_latency_s, "inter-node"};
  int fg = cluster_.fast_group_size;
  if (fg > 1 && (a % gpus_per_node_) / fg == (b % gpus_per_node_) / fg)
    return {cluster_.fast_group_achieved_Bps(), cluster_.fast_group_latency_s, "fast-group"};
  return {cluster_.intra_node_achieved_Bps(), cluster_.intra_node_latency_s, "intra-node"};
}

Link Topology::inter_node_shared(int flows) const {
  flows = std::max(flows, 1);
  double share = static_cast<double>(std::min(flows, cluster_.nics_per_node)) / flows;
  return {cluster_.inter_node_achieved_Bps() * share, cluster_.inter_node_latency_s, "inter-node"};
}

Link Topology::p2p_link(int pp_a, int pp_b) const {
  return caches_->p2p.get(std::make_pair(pp_a, pp_b), [&] { return find_p2p_link(pp_a, pp_b); });
}

Link Topology::find_p2p_link(int pp_a, int pp_b) const {
  Link worst{0, 0, "self"};
  for (int t = 0; t < size_[kTp]; ++t)
    for (int d = 0; d < size_[kDp]; ++d)
      for (int x = 0; x < size_[kCp]; ++x) {
        int a = global_rank({t, d, pp_a, x}), b = global_rank({t, d, pp_b, x});
        Link l = raw_link(a, b);
        if (l.kind == "self") continue;
        if (l.kind == "inter-node") {
          // Every rank of stage pp_a on this node that talks to stage pp_b off-node sends at once.
          int flows = 0, node = node_of(a);
          for (int g = node * gpus_per_node_; g < (node + 1) * gpus_per_node_; ++g) {
            Coords c = coords(g);
            if (c.pp == pp_a && node_of(global_rank({c.tp, c.dp, pp_b, c.cp})) != node) ++flows;
          }
          l = inter_node_shared(flows);
        }
        if (worst.kind == "self" || l.bandwidth_Bps < worst.bandwidth_Bps) worst = l;
      }
  return worst;
}

bool cp_before_dp(const std::array<Axis, kAxes>& order) {
  return std::find(order.begin(), order.end(), kCp) < std::find(order.begin(), order.end(), kDp);
}

int Topology::index(const Coords& c, Axis axis) const {
  if (axis == kTpDpCp) return c.tp + size_[kTp] * index(c, kDpCp);
  if (axis != kDpCp) return c[axis];
  return cp_before_dp(order_) ? c.cp + size_[kCp] * c.dp : c.dp + size_[kDp] * c.cp;
}

Coords Topology::with_index(Coords c, Axis axis, int v) const {
  if (axis == kTpDpCp) {
    c.tp = v % size_[kTp];
    return with_index(c, kDpCp, v / size_[kTp]);
  }
  if (axis != kDpCp) {
    c.set(axis, v);
    return c;
  }
  const bool cp_first = cp_before_dp(order_);
  const Axis fast = cp_first ? kCp : kDp, slow = cp_first ? kDp : kCp;
  c.set(fast, v % size_[fast]);
  c.set(slow, v / size_[fast]);
  return c;
}

std::vector<std::vector<int>> Topology::groups(Axis axis, int size, int stride) const {
  const int total = size_[0] * size_[1] * size_[2] * size_[3];
  std::vector<std::vector<int>> out;
  for (int g = 0; g < total; ++g) {
    const Coords c = coords(g);
    const int i = index(c, axis);
    if ((i / stride) % size != 0) continue;  // one group per member with index 0 in its group
    std::vector<int> members;
    for (int k = 0; k < size; ++k) members.push_back(global_rank(with_index(c, axis, i + k * stride)));
    out.push_back(std::move(members));
  }
  return out;
}

AllReducePath Topology::allreduce_path(Axis axis) const { return allreduce_path(axis, group_size(axis), 1); }

AllReducePath Topology::allreduce_path(Axis axis, int size, int stride) const {
  return caches_->path.get(Caches::GroupKey{axis, size, stride},
                               [&] { return find_allreduce_path(axis, size, stride); });
}

AllReducePath Topology::find_allreduce_path(Axis axis, int size, int stride) const {
  AllReducePath path;
  path.ranks = size;
  path.flat = group_link(axis, size, stride);
  int L = 0, N = 0;
  bool uniform = path.ranks > 1;  // every group has L members on each of its N >= 2 nodes
  std::map<std::pair<int, int>, int> nic_flows;  // (node, nic) -> cross-node rings through it
  Link intra{0, 0, "self"};
  for (const auto& mem : groups(axis, size, stride)) {
    std::map<int, std::vector<int>> by_node;  // members of this group on each node, in ring order
    for (int g : mem) by_node[node_of(g)].push_back(g);
    const int l = static_cast<int>(by_node.begin()->second.size()), nn = static_cast<int>(by_node.size());
    for (const auto& [node, on] : by_node) uniform = uniform && static_cast<int>(on.size()) == l;
    uniform = uniform && nn >= 2 && (L == 0 || (L == l && N == nn));
    if (!uniform) break;
    L = l;
    N = nn;
    for (const auto& [node, on] : by_node)
      for (size_t k = 0; k < on.size(); ++k) {
        ++nic_flows[{node, (on[k] % gpus_per_node_) % cluster_.nics_per_node}];
        Link hop = raw_link(on[k], on[(k + 1) % on.size()]);
        if (intra.kind == "self" || hop.bandwidth_Bps < intra.bandwidth_Bps) intra = hop;
      }
  }
  if (uniform) {
    int worst = 1;
    for (const auto& [nic, flows] : nic_flows) worst = std::max(worst, flows);
    path.local = L;
    path.nodes = N;
    path.intra = intra;
    path.inter = {cluster_.inter_node_achieved_Bps() / worst, cluster_.inter_node_latency_s, "inter-node"};
  }
  return path;
}

Link Topology::group_link(Axis axis) const { return group_link(axis, group_size(axis), 1); }

Link Topology::group_link(Axis axis, int size, int stride) const {
  return caches_->group.get(Caches::GroupKey{axis, size, stride},
                               [&] { return find_group_link(axis, size, stride); });
}

Link Topology::find_group_link(Axis axis, int size, int stride) const {
  Link worst{0, 0, "self"};
  if (size > 1) {
    int total = size_[0] * size_[1] * size_[2] * size_[3];
    const std::vector<std::vector<int>> groups = this->groups(axis, size, stride);
    std::vector<int> group_of(static_cast<size_t>(total), -1);
    for (size_t i = 0; i < groups.size(); ++i)
      for (int mbr : groups[i]) group_of[static_cast<size_t>(mbr)] = static_cast<int>(i);
    // Groups crossing each node: those with members on that node and on another.
    std::vector<bool> spans(groups.size(), false);
    for (size_t i = 0; i < groups.size(); ++i) {
      std::set<int> nodes;
      for (int mbr : groups[i]) nodes.insert(node_of(mbr));
      spans[i] = nodes.size() > 1;
    }
    int num_nodes = (total + gpus_per_node_ - 1) / gpus_per_node_;
    std::vector<int> crossing(static_cast<size_t>(num_nodes), 0);
    for (int node = 0; node < num_nodes; ++node) {
      std::set<int> seen;
      for (int g = node * gpus_per_node_; g < std::min(total, (node + 1) * gpus_per_node_); ++g) {
        int gi = group_of[static_cast<size_t>(g)];
        if (spans[static_cast<size_t>(gi)]) seen.insert(gi);
      }
      crossing[static_cast<size_t>(node)] = static_cast<int>(seen.size());
    }
    bool first = true;
    for (size_t i = 0; i < groups.size(); ++i) {
      const auto& mem = groups[i];
      for (size_t k = 0; k < mem.size(); ++k) {
        int a = mem[k], b = mem[(k + 1) % mem.size()];
        Link l = raw_link(a, b);
        if (l.kind == "inter-node") l = inter_node_shared(crossing[static_cast<size_t>(node_of(a))]);
        if (first || l.bandwidth_Bps < worst.bandwidth_Bps ||
            (l.bandwidth_Bps == worst.bandwidth_Bps && l.latency_s > worst.latency_s)) {
          worst = l;
          first = false;
        }
      }
    }
  }
  return worst;
}

}  // namespace stagecraft::costmodel
