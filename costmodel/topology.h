// Where the ranks of a plan sit on a cluster, and which link a transfer or a collective uses.
// Ranks are numbered with one axis varying fastest, Megatron-LM's order by default
// (tp fastest, then cp, then dp, then pp); GPU g sits on node g / gpus_per_node. A rank order
// that does not name cp places it right after tp, as Megatron-Core does (tp-cp-ep-dp-pp).
#pragma once

#include <array>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "costmodel/comm.h"
#include "costmodel/specs.h"

namespace stagecraft::costmodel {

enum Axis { kTp = 0, kDp = 1, kPp = 2, kCp = 3, kDpCp = 4, kTpDpCp = 5 };
inline constexpr int kAxes = 4;  // kDpCp is not an axis of its own: the dp and cp axes together,
                                 // the group that reduces gradients (Megatron-Core's data-parallel
                                 // group with context parallelism), numbered faster axis first;
                                 // kTpDpCp the tp axis and those, tp fastest (the experts' groups
                                 // with expert tp 1, costmodel/moe.h)

struct Coords {
  int tp = 0, dp = 0, pp = 0, cp = 0;
  int operator[](Axis a) const { return a == kTp ? tp : a == kDp ? dp : a == kPp ? pp : cp; }
  void set(Axis a, int v) { (a == kTp ? tp : a == kDp ? dp : a == kPp ? pp : cp) = v; }
};

// The axes of plan.rank_order, fastest first, cp inserted after tp where the order does not
// name it (check(ParallelPlan) has checked the names).
std::array<Axis, kAxes> rank_axes(const std::string& rank_order);
// Whether cp varies faster than dp in that numbering: then a dp x cp group numbers its ranks cp
// first (index cp + cp_size * dp), else dp first. Topology's dp x cp index and the simulator's
// stride between a cp ring's members (sim/workload.cpp) read this one rule.
bool cp_before_dp(const std::array<Axis, kAxes>& order);

class Topology {
 public:
  Topology(const ClusterSpec& cluster, const ParallelPlan& plan);

  int global_rank(const Coords& c) const;
  Coords coords(int global_rank) const;
  int node_of(int global_rank) const { return global_rank / gpus_per_node_; }

  // Link between two ranks, before sharing: fast group, intra-node or inter-node.
  Link raw_link(int a, int b) const;
  // The link a point-to-point transfer between pipeline ranks pp_a and pp_b sees: the slowest
  // over every (tp, cp, dp) triple, with a node's NICs shared by every rank of that node that sends
  // across nodes at the same time (all tp*dp ranks of a stage send together).
  Link p2p_link(int pp_a, int pp_b) const;
  // The bottleneck link of the ring collectives of the groups along an axis (tp or dp): the
  // slowest hop of the slowest group; inter-node hops share the node's NICs among the groups
  // of that axis that cross the node at the same time.
  Link group_link(Axis axis) const;
  int group_size(Axis axis) const {
    return axis == kDpCp ? size_[kDp] * size_[kCp] : axis == kTpDpCp ? size_[kTp] * size_[kDp] * size_[kCp] : size_[axis];
  }
  // How the groups along an axis all-reduce (comm.h): where every group has the same L >= 1
  // members on each of N >= 2 nodes, the path offers the tree (and, for L >= 2, the ring
  // with a channel per member's NIC) beside the flat ring on group_link(axis). The cross-node traffic of all groups shares
  // the node's NICs as the simulator's platform wires them: GPU with local index i sends
  // through NIC i % nics_per_node.
  AllReducePath allreduce_path(Axis axis) const;
  // The same for sub-groups along an axis: `size` members whose coordinates are `stride` apart
  // (size x stride divides the axis's degree). Hybrid sharding's shard groups are (dp, S, 1),
  // its replica groups (dp, dp / S, S). The whole axis is (axis, degree, 1).
  Link group_link(Axis axis, int size, int stride) const;
  AllReducePath allreduce_path(Axis axis, int size, int stride) const;

 private:
  ClusterSpec cluster_;
  std::array<int, kAxes> size_{};    // degree of each axis
  std::array<Axis, kAxes> order_{};  // fastest first
  int gpus_per_node_ = 1;
  // What the queries found, shared by every Topology of the same cluster links and layout (a
  // planner prices thousands of plans on a few layouts; the queries walk every GPU): one set of
  // caches per layout for the process, guarded for the planner's threads.
  struct Caches;
  std::shared_ptr<Caches> caches_;
  Link inter_node_shared(int flows) const;
  Link find_p2p_link(int pp_a, int pp_b) const;  // the queries' work, before the caches
  Link find_group_link(Axis axis, int size, int stride) const;
  AllReducePath find_allreduce_path(Axis axis, int size, int stride) const;
  // The groups along an axis: ranks sharing the two other coordinates, in axis order; with
  // `size` and `stride`, the sub-groups described at group_link.
  std::vector<std::vector<int>> groups(Axis axis, int size, int stride) const;
  // A rank's index along an axis (kDpCp: along dp and cp together), and the rank with it changed.
  int index(const Coords& c, Axis axis) const;
  Coords with_index(Coords c, Axis axis, int v) const;
};

}  // namespace stagecraft::costmodel
