#include "graphs/shard.h"

#include <algorithm>
#include <map>
#include <set>

#include "schedules/error.h"

namespace stagecraft::graphs {
namespace {

constexpr int kNone = -1;

// The state Algorithms 1 and 2 share (Merak's C, X, I, M, S_outs and N).
struct State {
  const Graph& g;
  std::vector<int> common_left;          // C: remaining users of each common node; -1 = not common
  std::vector<char> is_input;            // X
  std::vector<int> first_user;           // I: graph input -> its first user
  std::vector<int> sub;                  // M: node -> subgraph id (kNone until visited)
  std::vector<int> out_of;               // S_outs, inverted: node -> the subgraph it is an output of
  std::map<int, std::vector<int>> outs;  // S_outs: subgraph -> outputs
  std::vector<int> visited;              // N
  std::vector<double> params;            // parameter bytes per subgraph id
};

// Algorithm 1: the smallest subgraph id the node must join, and the node that forces it.
std::pair<int, int> search_dependency(State& st, int n, int s) {
  int s_min = s, n_min = kNone;
  for (int arg : st.g.nodes[static_cast<size_t>(n)].inputs) {
    const size_t a = static_cast<size_t>(arg);
    if (st.common_left[a] >= 0) {  // lines 3-4: common nodes are exempt; count the use
      --st.common_left[a];
    } else if (st.is_input[a]) {   // lines 5-10: a graph input stays with its first user
      if (st.first_user[a] == kNone) st.first_user[a] = n;
      else if (st.sub[static_cast<size_t>(st.first_user[a])] < s_min)
        s_min = st.sub[static_cast<size_t>(st.first_user[a])], n_min = st.first_user[a];
    } else if (st.out_of[a] != kNone) {  // lines 11-14: an earlier subgraph's output, readable by the next one
      if (st.sub[a] + 1 < s_min) s_min = st.sub[a] + 1, n_min = arg;
    } else if (st.sub[a] != kNone && arg != st.visited.back()) {  // lines 15-19
      if (st.sub[a] < s_min) s_min = st.sub[a], n_min = arg;
    }
  }
  return {s_min, n_min};
}

void reopen(State& st, int s_min) {  // subgraphs from s_min on are open again: their outputs are internal
  for (auto it = st.outs.lower_bound(s_min); it != st.outs.end(); it = st.outs.erase(it))
    for (int o : it->second) st.out_of[static_cast<size_t>(o)] = kNone;
}

Subgraph describe(const Graph& g, const std::vector<int>& nodes, const std::vector<int>& sub_of, int id,
                  const std::vector<std::vector<int>>& users) {
  Subgraph sg;
  sg.nodes = nodes;
  std::set<int> in, out;
  for (int n : nodes) {
    const Node& x = g.nodes[static_cast<size_t>(n)];
    sg.fwd_flops += x.fwd_flops;
    sg.bwd_flops += x.backward_flops();
    sg.param_bytes += x.param_bytes;
    if (!x.shares.empty()) {
      int owner = g.index_of(x.shares);
      if (owner >= 0 && sub_of[static_cast<size_t>(owner)] != id) sg.param_bytes += g.nodes[static_cast<size_t>(owner)].param_bytes;
    }
    sg.act_bytes += kept_bytes(x);
    if (x.fwd_s >= 0) sg.fwd_s += x.fwd_s, sg.measured_fwd_flops += x.fwd_flops;
    if (x.bwd_s >= 0) sg.bwd_s += x.bwd_s, sg.measured_bwd_flops += x.backward_flops();
    sg.unmeasured += x.fwd_s < 0 || x.bwd_s < 0;
    for (int p : x.inputs)
      if (sub_of[static_cast<size_t>(p)] != id) in.insert(p);
    for (int u : users[static_cast<size_t>(n)])
      if (sub_of[static_cast<size_t>(u)] > id) out.insert(n);
  }
  sg.inputs.assign(in.begin(), in.end());
  sg.outputs.assign(out.begin(), out.end());
  return sg;
}

}  // namespace

Sharding shard(const Graph& g, const ShardOptions& opt) {
  if (g.nodes.empty()) throw InputError("graph '" + g.name + "' has no nodes to shard");
  if (opt.max_subgraphs < 0)
    throw InputError("shard: max_subgraphs = " + std::to_string(opt.max_subgraphs) + " is invalid (0 for no bound, or at least 1)");
  if (opt.common_min_users < 2)
    throw InputError("shard: common_min_users = " + std::to_string(opt.common_min_users) + " is invalid (at least 2)");
  const size_t n = g.nodes.size();
  const auto users = g.users();
  State st{g, std::vector<int>(n, -1), std::vector<char>(n, 0), std::vector<int>(n, kNone), std::vector<int>(n, kNone),
           std::vector<int>(n, kNone), {}, {}, {}};
  Sharding out;
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    const Node& x = g.nodes[i];
    st.is_input[i] = x.inputs.empty() && x.kind == "input";
    const int u = static_cast<int>(users[i].size());
    if (u >= opt.common_min_users || (st.is_input[i] && u >= 2)) st.common_left[i] = u, out.common.push_back(static_cast<int>(i));
    total += x.param_bytes;
  }
  const int k = opt.max_subgraphs > 0 ? opt.max_subgraphs : static_cast<int>(n);
  const double threshold = total / k;  // Algorithm 2, line 2
  int s = 0;
  st.params.assign(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) {
    if (st.is_input[i]) continue;  // graph inputs belong to no subgraph
    const int node = static_cast<int>(i);
    if (st.visited.empty()) st.visited.push_back(kNone);  // no "last visited node" yet
    auto [s_min, n_min] = search_dependency(st, node, s);
    if (s_min < s) {  // lines 5-12: everything after the farthest dependency joins its subgraph
      reopen(st, s_min);
      s = s_min;
      // The nodes after the dependency (Merak's loop also relabels the dependency itself, a no-op
      // except for an earlier subgraph's output, which stays where it is).
      for (auto it = st.visited.rbegin(); it != st.visited.rend() && *it != kNone && *it != n_min; ++it) {
        const size_t p = static_cast<size_t>(*it);
        if (st.sub[p] != s_min) st.params[static_cast<size_t>(st.sub[p])] -= g.nodes[p].param_bytes, st.params[static_cast<size_t>(s_min)] += g.nodes[p].param_bytes;
        st.sub[p] = s_min;
      }
    }
    st.sub[i] = s;
    st.visited.push_back(node);
    st.params[static_cast<size_t>(s)] += g.nodes[i].param_bytes;
    if (st.params[static_cast<size_t>(s)] > threshold) {  // lines 13-22: close subgraph s
      auto& o = st.outs[s];
      for (int c : out.common)
        if (st.sub[static_cast<size_t>(c)] != kNone && st.common_left[static_cast<size_t>(c)] > 0) o.push_back(c);
      o.push_back(node);
      for (int x : o) st.out_of[static_cast<size_t>(x)] = s;
      ++s;
    }
  }
  // Lines 23-29: the subgraphs, numbered densely in order (closing may leave an empty last id).
  std::map<int, std::vector<int>> members;
  for (size_t i = 0; i < n; ++i)
    if (st.sub[i] != kNone) members[st.sub[i]].push_back(static_cast<int>(i));
  out.subgraph_of.assign(n, kNone);
  int id = 0;
  for (auto& [sid, nodes] : members) {
    for (int x : nodes) out.subgraph_of[static_cast<size_t>(x)] = id;
    ++id;
  }
  id = 0;
  for (auto& [sid, nodes] : members) out.subgraphs.push_back(describe(g, nodes, out.subgraph_of, id++, users));
  for (Subgraph& sg : out.subgraphs)
    for (int o : sg.outputs) {
      const bool passed = std::find(out.common.begin(), out.common.end(), o) != out.common.end();
      if (!passed) sg.boundary_bytes += output_bytes(g.nodes[static_cast<size_t>(o)]);
    }
  return out;
}

}  // namespace stagecraft::graphs
