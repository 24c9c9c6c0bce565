#include "sim/symmetry.h"

#include <algorithm>
#include <set>
#include <vector>

#include "costmodel/comm.h"
#include "sim/executor.h"

namespace stagecraft::sim {

namespace {

constexpr int kTreeNodes = 5;  // from 5 nodes on, a double binary tree's busiest node has 4 edges (3 below), costmodel/comm.h

// Whether the block of the first dp' replicas repeats dp / dp' times over the cluster: every
// node holds one block only, and replica d + k dp' sits on a copy of d's node at the same local
// indices.
bool blocks_repeat(const costmodel::ClusterSpec& cl, const costmodel::Topology& topo, const costmodel::ParallelPlan& p, int dp_sim) {
  const int gpn = cl.gpus_per_node, nodes = p.num_gpus() / gpn;
  std::vector<int> block_of(static_cast<size_t>(nodes), -1);
  for (int g = 0; g < p.num_gpus(); ++g) {
    const int b = topo.coords(g).dp / dp_sim;
    int& nb = block_of[static_cast<size_t>(topo.node_of(g))];
    if (nb >= 0 && nb != b) return false;
    nb = b;
  }
  std::vector<int> image(static_cast<size_t>(nodes));
  for (int k = 1; k < p.dp / dp_sim; ++k) {
    std::fill(image.begin(), image.end(), -1);
    for (int r = 0; r < p.pp; ++r)
      for (int d = 0; d < dp_sim; ++d)
        for (int t = 0; t < p.tp; ++t) {
          const int g = topo.global_rank({t, d, r}), h = topo.global_rank({t, d + k * dp_sim, r});
          if (h % gpn != g % gpn) return false;
          int& im = image[static_cast<size_t>(topo.node_of(g))];
          if (im >= 0 && im != topo.node_of(h)) return false;
          im = topo.node_of(h);
        }
  }
  return true;
}

int distinct_nodes(const std::vector<int>& gpus, const costmodel::Topology& topo) {
  std::set<int> n;
  for (int g : gpus) n.insert(topo.node_of(g));
  return static_cast<int>(n.size());
}

// Whether the group's first members (those of the block) span nodes as the whole group does:
// at least `min_nodes` of them where the whole spans more.
bool group_kept(const std::vector<int>& whole, const std::vector<int>& kept, const costmodel::Topology& topo, int min_nodes) {
  const auto gw = node_groups(whole, topo), gk = node_groups(kept, topo);
  if (gw.empty() != gk.empty()) return false;
  if (!gw.empty() && gw.front().size() != gk.front().size()) return false;
  const int nw = distinct_nodes(whole, topo), nk = distinct_nodes(kept, topo);
  return nk >= std::min(nw, min_nodes);
}

// Whether one of the schedule's gradient all-reduces of `bytes` per stage (times each
// REDUCE_GRAD's fraction) takes the tree on `path`, as Runner::dp_allreduce picks it.
bool tree_taken(const schedules::Schedule& s, const std::vector<double>& bytes, const costmodel::AllReducePath& path) {
  for (const auto& list : s.actions)
    for (const schedules::Action& a : list)
      if (a.op == schedules::Op::REDUCE_GRAD && bytes[static_cast<size_t>(a.stage)] * a.fraction > 0 &&
          costmodel::allreduce_algorithm(bytes[static_cast<size_t>(a.stage)] * a.fraction, path, true) ==
              costmodel::AllReduceAlgo::Tree)
        return true;
  return false;
}

// A group kind the block must keep: dp indices `stride` apart (1: the whole dp group), on at
// least `min_nodes` nodes where the whole group spans more.
struct GroupKind {
  int stride, min_nodes;
};

// Every group of each kind (per pipeline rank, tp lane and first index) kept as the whole spans.
bool groups_kept(const costmodel::Topology& topo, const costmodel::ParallelPlan& p, int dp_sim, const std::vector<GroupKind>& kinds) {
  for (const GroupKind& g : kinds)
    for (int r = 0; r < p.pp; ++r)
      for (int t = 0; t < p.tp; ++t)
        for (int j = 0; j < g.stride; ++j) {
          std::vector<int> whole, kept;
          for (int d = j; d < p.dp; d += g.stride) {
            whole.push_back(topo.global_rank({t, d, r}));
            if (d < dp_sim) kept.push_back(whole.back());
          }
          if (whole.size() > 1 && !group_kept(whole, kept, topo, g.min_nodes)) return false;
        }
  return true;
}

}  // namespace

Symmetry find_symmetry(const schedules::Schedule& s, const costmodel::ClusterSpec& cl, const costmodel::Topology& topo,
                       const costmodel::ParallelPlan& p, const Workload& w, const SimOptions& opt) {
  Symmetry out;
  out.dp_simulated = p.dp;
  if (p.dp < 2) return out;
  if (!opt.symmetry) {
    out.full_because = "asked for (--no-symmetry)";
  } else if (!opt.platform_file.empty()) {
    out.full_because = "a platform file (its links need not repeat)";
  } else if (cl.gpus_per_node < 1 || p.num_gpus() % cl.gpus_per_node != 0) {
    out.full_because = "the plan fills its last node in part";
  } else {
    // Trees only where an all-reduce takes one (a distributed optimizer's halves run as rings;
    // Chimera's joint reduction is a flat ring): the whole dp group, then the sub-groups that
    // reduce apart (reduction_strides: the experts' groups, HSDP's copies), each with its bytes.
    const bool rings_only = w.reduce_scatter || !opt.hierarchical_dp;
    auto min_nodes = [&](const std::vector<double>& bytes, int stride) {
      const bool tree = !rings_only && (stride > 1 || s.num_chains == 1) &&
                        tree_taken(s, bytes, stride == 1 ? topo.allreduce_path(costmodel::kDp)
                                                         : topo.allreduce_path(costmodel::kDpCp, p.dp / stride, stride));
      return tree ? kTreeNodes : 2;
    };
    std::vector<GroupKind> kinds = {{1, min_nodes(w.reduce_bytes, 1)}};
    if (p.ep > 1) kinds.push_back({p.ep, min_nodes(w.expert_reduce_bytes, p.ep)});
    if (w.replica_stride > 0) kinds.push_back({w.replica_stride, min_nodes(w.replica_reduce_bytes, w.replica_stride)});
    for (int d = 1; d < p.dp; ++d)
      if (p.dp % d == 0 && d % p.ep == 0 && (w.replica_stride == 0 || d % w.replica_stride == 0) &&
          d % (w.cp * w.cp_stride) == 0 &&
          blocks_repeat(cl, topo, p, d) && groups_kept(topo, p, d, kinds)) {
        out.dp_simulated = d;
        out.copies = p.dp / d;
        return out;
      }
    out.full_because = "no smaller block of replicas repeats over the nodes";
  }
  return out;
}

WhatIfBlocks whatif_blocks(const Symmetry& base, const Resolved& r, const costmodel::ClusterSpec& cl,
                           const costmodel::Topology& topo, const costmodel::ParallelPlan& p) {
  const int size = base.dp_simulated, blocks = p.dp / size;
  const bool jitter = r.jitter.dist != JitterDist::None && r.jitter.cv > 0;
  std::vector<char> touched(static_cast<size_t>(blocks), jitter ? 1 : 0);
  for (int g = 0; g < p.num_gpus() && !jitter; ++g)
    if (r.touches_gpu(g, cl.gpus_per_node)) touched[static_cast<size_t>(topo.coords(g).dp / size)] = 1;
  std::vector<int> kept;  // the plan's blocks simulated, in order
  bool clean = false;
  for (int b = 0; b < blocks; ++b)
    if (touched[static_cast<size_t>(b)] || (!clean && (clean = true))) kept.push_back(b);
  WhatIfBlocks out;
  out.sym = base;
  if (static_cast<int>(kept.size()) == blocks) {
    if (blocks > 1) out.sym.full_because = jitter ? "a what-if with jitter (every replica differs)"
                                                  : "the what-if touches every block of replicas";
    kept.resize(0);
    for (int b = 0; b < blocks; ++b) kept.push_back(b);
    out.sym.dp_simulated = p.dp;
  } else {
    out.sym.dp_simulated = static_cast<int>(kept.size()) * size;
  }
  if (static_cast<int>(kept.size()) > 1) out.sym.copies = 1;
  out.image_gpu.assign(static_cast<size_t>(p.num_gpus()), -1);
  for (size_t i = 0; i < kept.size(); ++i)
    for (int j = 0; j < size; ++j) {
      const int d = kept[i] * size + j, di = static_cast<int>(i) * size + j;
      out.replica_of.push_back(d);
      for (int rr = 0; rr < p.pp; ++rr)
        for (int t = 0; t < p.tp; ++t) out.image_gpu[static_cast<size_t>(topo.global_rank({t, d, rr}))] = topo.global_rank({t, di, rr});
    }
  return out;
}

}  // namespace stagecraft::sim
