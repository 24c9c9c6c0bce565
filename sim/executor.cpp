#include "sim/executor.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string>

#include "costmodel/comm.h"
#include "costmodel/fsdp.h"
#include "costmodel/moe.h"
#include "schedules/buckets.h"
#include "schedules/error.h"
#include "sim/runner.h"

namespace stagecraft::sim {

std::vector<std::vector<int>> node_groups(const std::vector<int>& gpus, const costmodel::Topology& topo) {
  std::map<int, std::vector<int>> by_node;
  for (size_t j = 0; j < gpus.size(); ++j) by_node[topo.node_of(gpus[j])].push_back(static_cast<int>(j));
  const size_t per_node = by_node.begin()->second.size();
  std::vector<std::vector<int>> out;
  for (auto& [node, idx] : by_node) {
    if (idx.size() != per_node) return {};
    out.push_back(std::move(idx));
  }
  if (out.size() < 2) return {};
  return out;
}

namespace detail {

using schedules::Action;
using schedules::Op;

Done& Runner::transfer(int k, bool fwd, int cs, int mb, int d) {
  auto key = std::make_tuple(k, fwd ? 0 : 1, cs, mb, d);
  if (auto it = transfers_.find(key); it != transfers_.end()) return it->second;
  const int ps = fwd ? s_.prev_stage(cs) : s_.next_stage(cs);
  const int rr = s_.rank_of(cs);
  const Op send = fwd ? Op::SEND_F : Op::SEND_B;
  const std::string what = std::string(fwd ? "RECV_F" : "RECV_B") + " of stage " + std::to_string(cs) + " microbatch " +
                           std::to_string(mb);
  if (ps < 0) throw InputError("simulator: rank " + std::to_string(rr) + " posts " + what + " but that stage has no neighbour");
  const int rs = s_.rank_of(ps);
  auto sp = pos_of_[static_cast<size_t>(rs)].find(pos_key(send, ps, mb));
  if (sp == pos_of_[static_cast<size_t>(rs)].end())
    throw InputError("simulator: rank " + std::to_string(rr) + " posts " + what + " but rank " + std::to_string(rs) +
                     " never sends it (no " + std::to_string(ps) + std::string(fwd ? "SEND_F" : "SEND_B") + std::to_string(mb) + ")");
  auto rp = pos_of_[static_cast<size_t>(rr)].at(pos_key(fwd ? Op::RECV_F : Op::RECV_B, cs, mb));
  const int us = rs * dp_ + d, ur = rr * dp_ + d;
  Act spost = post_[static_cast<size_t>(k)][static_cast<size_t>(us)][static_cast<size_t>(sp->second)];
  Act rpost = post_[static_cast<size_t>(k)][static_cast<size_t>(ur)][static_cast<size_t>(rp)];
  const double bytes = fwd ? w_.send_f_bytes[static_cast<size_t>(ps)] : w_.send_b_bytes[static_cast<size_t>(ps)];
  Done done;
  if (bytes <= 0) {
    for (Act a : {spost, rpost})
      if (a != kNone) done.acts.push_back(a);
    done.chain_only = false;
    return transfers_[key] = done;
  }
  done.chain_only = false;
  for (int t = 0; t < flows_per_group(); ++t) {
    Record r;
    r.unit = us;
    r.peer_unit = ur;
    r.iteration = k;
    r.position = sp->second;
    r.src_gpu = gpu(us, t);
    r.dst_gpu = gpu(ur, t);
    r.comm = CommKind::Pipeline;
    Act f = flow(pf_.gpus[static_cast<size_t>(r.src_gpu)], pf_.gpus[static_cast<size_t>(r.dst_gpu)], bytes, r);
    add_edge(spost, f);
    add_edge(rpost, f);
    done.acts.push_back(f);
  }
  return transfers_[key] = done;
}

// Members of the reduction issued at (k, r, pos), in ring order: the dp group of the stage,
// and with several chains (Chimera) the dp groups of every copy of its model part, copy by
// copy (one ring over dp x chains ranks, as the evaluator and cost model reduce them).
std::vector<Runner::Member> Runner::ring_members(int r, int pos) const {
  const auto& list = s_.actions[static_cast<size_t>(r)];
  const int st = list[static_cast<size_t>(pos)].stage;
  std::vector<std::pair<int, int>> copies = {{r, pos}};  // (rank, position) of each copy
  if (s_.num_chains > 1) {
    copies.clear();
    int j = 0;  // this is the j-th reduction of its stage on r
    for (int i = 0; i < pos; ++i) j += list[static_cast<size_t>(i)].op == Op::REDUCE_GRAD && list[static_cast<size_t>(i)].stage == st;
    for (int c = 0; c < s_.num_chains; ++c) {
      const int st2 = c * s_.stages_per_chain() + s_.model_part(st), r2 = s_.rank_of(st2);
      const auto& l2 = s_.actions[static_cast<size_t>(r2)];
      for (int i = 0, seen = 0; i < static_cast<int>(l2.size()); ++i)
        if (l2[static_cast<size_t>(i)].op == Op::REDUCE_GRAD && l2[static_cast<size_t>(i)].stage == st2 && seen++ == j) {
          copies.emplace_back(r2, i);
          break;
        }
    }
  }
  std::vector<Member> out;
  for (auto [rank, p] : copies)
    for (int d = 0; d < dp_; ++d) out.push_back({rank, p, d});
  return out;
}

// The reduction issued on rank r before position pos (or the last of iteration k-1).
std::tuple<int, int, int> Runner::prev_reduce(int k, int r, int pos) const {
  const auto& rp = reduce_pos_[static_cast<size_t>(r)];
  auto it = std::lower_bound(rp.begin(), rp.end(), pos);
  if (it != rp.begin()) return {k, r, *(it - 1)};
  if (k > 0 && !rp.empty()) return {k - 1, r, rp.back()};
  return {-1, -1, -1};
}

// What member m waits for before its first step: its issue (the compute stream up to the
// REDUCE_GRAD), its previous reduction (collectives run in issue order), and with chains the
// issue of every copy's matching reduction.
Done Runner::member_issue(int k, const Member& m) {
  Done is;
  Act po = post_[static_cast<size_t>(k)][static_cast<size_t>(m.rank * dp_ + m.d)][static_cast<size_t>(m.pos)];
  if (auto it = bucket_ready_.find({k, m.rank * dp_ + m.d, m.pos}); it != bucket_ready_.end()) po = it->second;  // early bucket
  if (po != kNone) is.acts.push_back(po);
  auto pk = prev_reduce(k, m.rank, m.pos);
  if (std::get<0>(pk) >= 0) {
    const Done& prev = ring(std::get<0>(pk), std::get<1>(pk), std::get<2>(pk))[static_cast<size_t>(m.d)];
    if (!prev.chain_only) {
      is.acts.insert(is.acts.end(), prev.acts.begin(), prev.acts.end());
      is.chain_only = false;
    }
  }
  for (Act x : copies_issue(k, m.rank, m.pos, m.d)) {
    is.acts.push_back(x);
    is.chain_only = false;
  }
  return is;
}

// Ring all-reduce over the members, for every tp lane: 2(n-1) steps of S/n bytes, member j
// sending to j+1 (members in dp order, so node by node: one network hop per node boundary,
// as NCCL's rings). Step s of j waits for j's step s-1 and for what j received in step s-1;
// step 0 waits for both ends to have issued the reduction (rendezvous).
std::vector<Done>& Runner::ring(int k, int r, int pos) {
  auto key = std::make_tuple(k, r, pos);
  if (auto it = rings_.find(key); it != rings_.end()) return it->second;
  if (!rings_building_.insert(key).second)
    throw InputError("schedule '" + s_.name + "' deadlocks in the simulator: the gradient reductions of rank " + std::to_string(r) +
                     " and of the ranks holding copies of its stages are issued in crossing orders (each waits for the other)");
  const std::vector<Member> mem = ring_members(r, pos);
  const int n = static_cast<int>(mem.size());
  const Action& a = s_.actions[static_cast<size_t>(r)][static_cast<size_t>(pos)];
  const size_t st = static_cast<size_t>(a.stage);
  const double bytes = w_.reduce_bytes[st] * a.fraction, replica = w_.replica_reduce_bytes[st] * a.fraction;
  std::vector<Done> issue, done;
  for (const Member& m : mem) issue.push_back(member_issue(k, m));
  if (whole(n) <= 1 || (bytes <= 0 && replica <= 0)) {
    done = issue;
  } else {
    done.resize(static_cast<size_t>(n));
    const Half half = w_.reduce_scatter ? Half::ReduceScatter : Half::Both;
    for (int t = 0; t < flows_per_group(); ++t) {
      std::vector<Done> lane = bytes <= 0 ? issue
                               : s_.num_chains > 1 ? flat_ring(k, mem, t, bytes, issue, Half::Both)
                                                   : dp_allreduce(k, mem, t, bytes, issue, half);
      // The routed experts': on each copy's expert-data-parallel groups (a schedule with several
      // chains, Chimera or DualPipe, holds a copy per chain; the evaluator reduces the experts of
      // one copy over its own dp group, costs.cpp add_expert_grad_reduction).
      if (s_.num_chains > 1) {
        std::map<int, std::vector<int>> by_rank;  // the ring's members on each copy's rank
        for (int j = 0; j < n; ++j) by_rank[mem[static_cast<size_t>(j)].rank].push_back(j);
        for (const auto& [copy_rank, at] : by_rank) {
          std::vector<Member> sub;
          std::vector<Done> sub_done;
          for (int j : at) sub.push_back(mem[static_cast<size_t>(j)]), sub_done.push_back(lane[static_cast<size_t>(j)]);
          strided_reductions(k, sub, t, w_.expert_reduce_bytes[st] * a.fraction, w_.ep, half, sub_done);
          for (size_t i = 0; i < at.size(); ++i) lane[static_cast<size_t>(at[i])] = sub_done[i];
        }
      } else {
        strided_reductions(k, mem, t, w_.expert_reduce_bytes[st] * a.fraction, w_.ep, half, lane);
      }
      strided_reductions(k, mem, t, replica, w_.replica_stride, Half::Both, lane);  // HSDP's shard copies
      for (int j = 0; j < n; ++j) {
        Done& d = done[static_cast<size_t>(j)];
        d.chain_only = false;
        d.acts.insert(d.acts.end(), lane[static_cast<size_t>(j)].acts.begin(), lane[static_cast<size_t>(j)].acts.end());
      }
    }
  }
  for (int j = 0; j < n; ++j) {  // file each member's done under its own reduction
    auto& slot = rings_[std::make_tuple(k, mem[static_cast<size_t>(j)].rank, mem[static_cast<size_t>(j)].pos)];
    slot.resize(static_cast<size_t>(dp_));
    slot[static_cast<size_t>(mem[static_cast<size_t>(j)].d)] = done[static_cast<size_t>(j)];
  }
  rings_building_.erase(key);
  return rings_.at(key);
}

void Runner::strided_reductions(int k, const std::vector<Member>& mem, int t, double bytes, int stride, Half half,
                                std::vector<Done>& done) {
  const int m = static_cast<int>(mem.size()), n = whole(m);  // simulated, whole group's members
  if (bytes <= 0 || stride < 1 || n / stride < 2) return;
  const costmodel::AllReducePath path = topo_.allreduce_path(costmodel::kDpCp, n / stride, stride);
  for (int j = 0; j < stride; ++j) {  // the group of dp indices j, j + stride, ...
    std::vector<Member> sub;
    std::vector<Done> start;
    std::vector<int> at;
    for (int i = 0; i < m; ++i)
      if (mem[static_cast<size_t>(i)].d % stride == j) {
        sub.push_back(mem[static_cast<size_t>(i)]);
        start.push_back(done[static_cast<size_t>(i)]);
        at.push_back(i);
      }
    const std::vector<Done> out = dp_allreduce(k, sub, t, bytes, start, half, &path);
    for (size_t i = 0; i < at.size(); ++i) done[static_cast<size_t>(at[i])] = out[i];
  }
}

// One flow of a data-parallel collective on lane t: from member a's GPU to member b's.
Act Runner::dp_flow(int k, const Member& a, const Member& b, int t, double bytes) {
  Record rec;
  rec.unit = a.rank * dp_ + a.d;
  rec.peer_unit = b.rank * dp_ + b.d;
  rec.iteration = k;
  rec.position = a.pos;
  rec.src_gpu = gpu(rec.unit, t);
  rec.dst_gpu = gpu(rec.peer_unit, t);
  rec.comm = CommKind::DataParallel;
  return flow(pf_.gpus[static_cast<size_t>(rec.src_gpu)], pf_.gpus[static_cast<size_t>(rec.dst_gpu)], bytes, rec);
}

// One ring phase of lane t over the members idx (in ring order): `steps` steps of step_bytes,
// idx[j] sending to idx[j+1]; step 0 of j waits for start[] of both ends, step s for j's step
// s-1 and what j received in it. Sets out[] of each member to its last send and receive.
void Runner::ring_phase(int k, const std::vector<Member>& mem, const std::vector<int>& idx, int t, int steps, double step_bytes,
                        const std::vector<Done>& start, std::vector<Done>& out) {
  const int n = static_cast<int>(idx.size());
  std::vector<Act> cur(static_cast<size_t>(n), kNone), next(cur);  // cur[j]: idx[j] -> idx[j+1]
  for (int s = 0; s < steps; ++s) {
    for (int j = 0; j < n; ++j) {
      const int from = idx[static_cast<size_t>(j)], to = idx[static_cast<size_t>((j + 1) % n)];
      Act f = dp_flow(k, mem[static_cast<size_t>(from)], mem[static_cast<size_t>(to)], t, step_bytes);
      if (s == 0) {
        add_edges(start[static_cast<size_t>(from)], f);
        add_edges(start[static_cast<size_t>(to)], f);
      } else {
        add_edge(cur[static_cast<size_t>(j)], f);
        add_edge(cur[static_cast<size_t>((j + n - 1) % n)], f);
      }
      next[static_cast<size_t>(j)] = f;
    }
    cur.swap(next);
  }
  for (int j = 0; j < n; ++j) {
    Done& d = out[static_cast<size_t>(idx[static_cast<size_t>(j)])];
    d.acts = {cur[static_cast<size_t>(j)], cur[static_cast<size_t>((j + n - 1) % n)]};
    d.chain_only = false;
  }
}

// Flat ring over all members: 2(n-1) steps of bytes/n for an all-reduce, n-1 for either half,
// n the whole group's members (whole(): the simulated ones' ring stands for it).
std::vector<Done> Runner::flat_ring(int k, const std::vector<Member>& mem, int t, double bytes, const std::vector<Done>& issue,
                                    Half half) {
  const int m = static_cast<int>(mem.size()), n = whole(m);
  std::vector<int> all(static_cast<size_t>(m));
  for (int j = 0; j < m; ++j) all[static_cast<size_t>(j)] = j;
  std::vector<Done> out(static_cast<size_t>(m));
  ring_phase(k, mem, all, t, (half == Half::Both ? 2 : 1) * (n - 1), bytes / n, issue, out);
  return out;
}

// A dp group's all-reduce on lane t in the form the evaluator's cost model picks for this size
// (costmodel::allreduce_algorithm; rings only for a half): the flat ring step by step when the
// group lies in one node, is not spread evenly or where that is fastest; else NCCL's ring with a
// channel per member's NIC or its tree (fill_then_stream). A distributed optimizer runs the two
// halves apart: the reduce-scatter at REDUCE_GRAD, the all-gather after the optimizer step.
std::vector<Done> Runner::dp_allreduce(int k, const std::vector<Member>& mem, int t, double bytes, const std::vector<Done>& issue,
                                       Half half, const costmodel::AllReducePath* path) {
  std::vector<int> gpus;
  for (const Member& m : mem) gpus.push_back(gpu(m.rank * dp_ + m.d, t));
  const auto groups = opt_.hierarchical_dp ? node_groups(gpus, topo_) : std::vector<std::vector<int>>{};
  using costmodel::AllReduceAlgo;
  const AllReduceAlgo algo = groups.empty() ? AllReduceAlgo::Flat
                                            : costmodel::allreduce_algorithm(bytes, path ? *path : topo_.allreduce_path(costmodel::kDp), half == Half::Both);
  if (algo == AllReduceAlgo::Flat) return flat_ring(k, mem, t, bytes, issue, half);
  // N nodes simulated of the whole group's whole(N) (symmetry.h): steps and bytes are the
  // whole group's, flows run between the simulated members (the last node's to the first).
  const int N = static_cast<int>(groups.size()), L = static_cast<int>(groups.front().size()), Nw = whole(N);
  std::vector<std::pair<int, int>> fill;
  std::vector<LinkShare> streams;
  if (algo == AllReduceAlgo::Channels) {
    // Channel c: node by node, each node's members from index c on, so it leaves node n
    // through member (c + L - 1) % L. Its steps: 2(n-1), or n-1 for a half; the fill follows
    // channel 0 step by step.
    const int n = N * L, nw = Nw * L, steps = (half == Half::Both ? 2 : 1) * (nw - 1);
    for (int c = 0; c < L; ++c) {
      std::vector<int> order;
      for (int node = 0; node < N; ++node)
        for (int j = 0; j < L; ++j) order.push_back(groups[static_cast<size_t>(node)][static_cast<size_t>((c + j) % L)]);
      for (int j = 0; j < n; ++j)
        streams.push_back({order[static_cast<size_t>(j)], order[static_cast<size_t>((j + 1) % n)], static_cast<double>(steps) / nw * bytes / L});
      for (int s = 0; c == 0 && s < steps; ++s) fill.emplace_back(order[static_cast<size_t>(s % n)], order[static_cast<size_t>((s + 1) % n)]);
    }
  } else {
    // Tree: the fill goes up node 0's chain, across tree_depth(N) nodes and back down; channel
    // c's chains start at member c, which carries its trees' edges across nodes.
    for (int j = L - 1; j > 0; --j) fill.emplace_back(groups[0][static_cast<size_t>(j)], groups[0][static_cast<size_t>(j - 1)]);
    for (int i = 0; i < costmodel::tree_depth(Nw); ++i)
      fill.emplace_back(groups[static_cast<size_t>(i % N)][0], groups[static_cast<size_t>((i + 1) % N)][0]);
    for (size_t i = fill.size(); i-- > 0;) fill.emplace_back(fill[i].second, fill[i].first);
    for (int c = 0; c < L; ++c) {
      auto member = [&](int node, int j) { return groups[static_cast<size_t>(node)][static_cast<size_t>((c + j) % L)]; };
      for (int node = 0; node < N; ++node) {
        for (int j = 1; j < L; ++j) {  // both trees' halves: S/L each way
          streams.push_back({member(node, j), member(node, j - 1), bytes / L});
          streams.push_back({member(node, j - 1), member(node, j), bytes / L});
        }
        for (int w = 0; w < 2; ++w)
          if (const int par = costmodel::double_tree_parent(node, N, w); par >= 0) {
            streams.push_back({member(node, 0), member(par, 0), bytes / (2.0 * L)});
            streams.push_back({member(par, 0), member(node, 0), bytes / (2.0 * L)});
          }
      }
    }
  }
  return fill_then_stream(k, mem, t, issue, fill, streams);
}

// A pipelined collective as a fluid: its fill, one zero-byte hop after the other along
// `fill` (each paying its link's latency: the collective's latency term), after every member
// has issued it; then its streaming, every stream at once with all its bytes, sharing the
// links (the bandwidth term, with contention). Every member is done when the last stream is.
std::vector<Done> Runner::fill_then_stream(int k, const std::vector<Member>& mem, int t, const std::vector<Done>& issue,
                                           const std::vector<std::pair<int, int>>& fill, const std::vector<LinkShare>& streams) {
  auto hop = [&](int from, int to, double b) { return dp_flow(k, mem[static_cast<size_t>(from)], mem[static_cast<size_t>(to)], t, b); };
  Act last = kNone;
  for (size_t i = 0; i < fill.size(); ++i) {
    const Act f = hop(fill[i].first, fill[i].second, 0);
    if (i == 0)
      for (const Done& d : issue) add_edges(d, f);
    else
      add_edge(last, f);
    last = f;
  }
  Done all;
  all.chain_only = false;
  for (const LinkShare& st : streams) {
    const Act f = hop(st.from, st.to, st.bytes);
    if (last == kNone)
      for (const Done& d : issue) add_edges(d, f);
    else
      add_edge(last, f);
    all.acts.push_back(f);
  }
  return std::vector<Done>(mem.size(), all);
}

// The parameter all-gather of a distributed optimizer after rank r's optimizer step at pos, for
// every dp member and tp lane: each member starts after its own step (rendezvous on the first
// step, as the reductions). Built once per (k, r) for all of the rank's dp members. With an
// overlapped gather (head share below 1) in two parts: the first bucket (`tail` false), which
// the next compute waits for, then the rest after it (`tail` true).
std::vector<Done>& Runner::param_gather(int k, int r, int pos, bool tail) {
  auto key = std::make_tuple(k, r, pos, tail);
  if (auto it = gathers_.find(key); it != gathers_.end()) return it->second;
  std::vector<Member> mem;
  std::vector<Done> issue;
  if (tail) {
    issue = param_gather(k, r, pos, false);
    for (int d = 0; d < dp_; ++d) mem.push_back({r, pos, d});
  } else {
    for (int d = 0; d < dp_; ++d) {
      mem.push_back({r, pos, d});
      Done is;
      is.acts.push_back(compute_[static_cast<size_t>(k)][static_cast<size_t>(r * dp_ + d)][static_cast<size_t>(pos)]);
      is.chain_only = false;
      issue.push_back(is);
    }
  }
  const double share = w_.gather_head_share[static_cast<size_t>(r)];
  const double bytes = w_.gather_bytes[static_cast<size_t>(r)] * (tail ? 1 - share : share);
  std::vector<Done> done(static_cast<size_t>(dp_));
  for (int t = 0; t < flows_per_group(); ++t) {
    std::vector<Done> lane = dp_allreduce(k, mem, t, bytes, issue, Half::AllGather);
    for (int d = 0; d < dp_; ++d) {
      Done& x = done[static_cast<size_t>(d)];
      x.chain_only = false;
      x.acts.insert(x.acts.end(), lane[static_cast<size_t>(d)].acts.begin(), lane[static_cast<size_t>(d)].acts.end());
    }
  }
  return gathers_[key] = done;
}

// Stages holding copies of one model part (Chimera's chains) reduce in one collective: the
// j-th reduction of a copy waits until every other copy has issued its j-th (as the evaluator).
std::vector<Act> Runner::copies_issue(int k, int r, int pos, int d) const {
  std::vector<Act> out;
  if (s_.num_chains <= 1) return out;
  for (const Member& m : ring_members(r, pos)) {
    if (m.d != d || (m.rank == r && m.pos == pos)) continue;
    Act a = post_[static_cast<size_t>(k)][static_cast<size_t>(m.rank * dp_ + d)][static_cast<size_t>(m.pos)];
    if (a != kNone) out.push_back(a);
  }
  return out;
}

Done Runner::copy(int u, int k, int pos, bool to_host, const Done& prev) {
  const Action& a = s_.actions[static_cast<size_t>(rank_of_unit(u))][static_cast<size_t>(pos)];
  const double bytes = w_.copy_bytes[static_cast<size_t>(a.stage)] * kept_share(a);
  Act po = post_[static_cast<size_t>(k)][static_cast<size_t>(u)][static_cast<size_t>(pos)];
  Done done;
  if (bytes <= 0) {
    if (po != kNone) done.acts.push_back(po);
    if (!prev.chain_only) done.acts.insert(done.acts.end(), prev.acts.begin(), prev.acts.end());
    done.chain_only = prev.chain_only;
    return done;
  }
  done.chain_only = false;
  for (int t = 0; t < flows_per_group(); ++t) {
    const int g = gpu(u, t);
    sg::Host* mem = pf_.host_memory[static_cast<size_t>(g)];
    if (!mem)
      throw InputError("simulator: rank " + std::to_string(rank_of_unit(u)) + " offloads but GPU " + std::to_string(g) +
                       " has no host memory (platform files: give it the property stagecraft_host_memory)");
    Record r;
    r.unit = r.peer_unit = u;
    r.iteration = k;
    r.position = pos;
    r.src_gpu = to_host ? g : -1;
    r.dst_gpu = to_host ? -1 : g;
    r.comm = CommKind::Copy;
    sg::Host* h = pf_.gpus[static_cast<size_t>(g)];
    Act f = to_host ? flow(h, mem, bytes, r) : flow(mem, h, bytes, r);
    add_edge(po, f);
    add_edges(prev, f);
    done.acts.push_back(f);
  }
  return done;
}

void Runner::build_edges() {
  reduce_pos_.assign(static_cast<size_t>(s_.num_ranks), {});
  for (int r = 0; r < s_.num_ranks; ++r)
    for (size_t i = 0; i < s_.actions[static_cast<size_t>(r)].size(); ++i)
      if (s_.actions[static_cast<size_t>(r)][i].op == Op::REDUCE_GRAD) reduce_pos_[static_cast<size_t>(r)].push_back(static_cast<int>(i));
  std::vector<Done> prev_coll(static_cast<size_t>(U_)), prev_copy(static_cast<size_t>(U_));
  for (int k = 0; k < K_; ++k)
    for (int u = 0; u < U_; ++u) {
      const int r = rank_of_unit(u), d = u % dp_;
      const auto& list = s_.actions[static_cast<size_t>(r)];
      // A forward waits for the input received before it (kind 0); a backward or recompute for
      // the gradient received and the checkpoint reloaded before it (kind 1); W for neither.
      std::map<std::tuple<int, int, int>, std::vector<Done>> pending;
      auto consume = [&](int st, int mb, int kind, Act e) {
        auto it = pending.find({st, mb, kind});
        if (it == pending.end()) return;
        for (const Done& x : it->second) add_edges(x, e);
        pending.erase(it);
      };
      // FOLD3D's deferred shares: the stage's next compute waits for the reduction (buckets.h).
      const std::vector<bool> deferred = schedules::deferred_reductions(list);
      std::map<int, Done> deferred_wait;
      auto after_deferred = [&](int st, Act e) {
        auto it = deferred_wait.find(st);
        if (it == deferred_wait.end()) return;
        add_edges(it->second, e);
        deferred_wait.erase(it);
      };
      for (size_t i = 0; i < list.size(); ++i) {
        const Action& a = list[i];
        const Act e = compute_[static_cast<size_t>(k)][static_cast<size_t>(u)][i];
        const int pos = static_cast<int>(i);
        if (schedules::is_compute(a.op) && a.op != Op::OPTIMIZER && e != kNone) {
          after_deferred(a.stage, e);
          if (a.op == Op::OVERLAP_F_B) after_deferred(a.b_stage, e);
        }
        switch (a.op) {
          case Op::RECV_F: pending[{a.stage, a.microbatch, 0}].push_back(transfer(k, true, a.stage, a.microbatch, d)); break;
          case Op::RECV_B: pending[{a.stage, a.microbatch, 1}].push_back(transfer(k, false, a.stage, a.microbatch, d)); break;
          case Op::F: consume(a.stage, a.microbatch, 0, e); break;
          case Op::B: case Op::I: case Op::R: consume(a.stage, a.microbatch, 1, e); break;
          case Op::OVERLAP_F_B:
            consume(a.stage, a.microbatch, 0, e);
            consume(a.b_stage, a.b_microbatch, 1, e);
            break;
          case Op::REDUCE_GRAD:
            prev_coll[static_cast<size_t>(u)] = ring(k, r, pos)[static_cast<size_t>(d)];
            if (deferred[i]) deferred_wait[a.stage] = prev_coll[static_cast<size_t>(u)];
            break;
          case Op::OFFLOAD: prev_copy[static_cast<size_t>(u)] = copy(u, k, pos, true, prev_copy[static_cast<size_t>(u)]); break;
          case Op::RELOAD:
            prev_copy[static_cast<size_t>(u)] = copy(u, k, pos, false, prev_copy[static_cast<size_t>(u)]);
            pending[{a.stage, a.microbatch, 1}].push_back(prev_copy[static_cast<size_t>(u)]);
            break;
          case Op::OPTIMIZER:
            add_edges(prev_coll[static_cast<size_t>(u)], e);
            if (gather_end_[static_cast<size_t>(k)][static_cast<size_t>(u)] != kNone) {
              add_edges(param_gather(k, r, pos, false)[static_cast<size_t>(d)], gather_end_[static_cast<size_t>(k)][static_cast<size_t>(u)]);
              if (w_.gather_head_share[static_cast<size_t>(r)] < 1) {
                const std::vector<Done>& rest = param_gather(k, r, pos, true);
                if (gather_tail_[static_cast<size_t>(k)][static_cast<size_t>(u)] != kNone)
                  add_edges(rest[static_cast<size_t>(d)], gather_tail_[static_cast<size_t>(k)][static_cast<size_t>(u)]);
              }
            }
            break;
          default: break;  // sends: the transfer is made when its receive is reached
        }
      }
    }
}

std::string describe(const schedules::Schedule& s, const Record& r, int dp) {
  const int rank = r.unit / dp;
  const Action& a = s.actions[static_cast<size_t>(rank)][static_cast<size_t>(r.position)];
  std::string txt = schedules::to_text(a);
  if (r.kind != RecKind::Flow) return "compute " + txt + " of rank " + std::to_string(rank);
  switch (r.comm) {
    case CommKind::Pipeline:
      return "the transfer " + txt + " from rank " + std::to_string(rank) + " to rank " + std::to_string(r.peer_unit / dp) +
             (r.start_s < 0 ? " (not started: a side has not posted it)" : "");
    case CommKind::DataParallel: return "the data-parallel ring of " + txt + " on rank " + std::to_string(rank);
    case CommKind::TensorParallel: return "the tensor-parallel all-reduce of " + txt + " on rank " + std::to_string(rank);
    case CommKind::Copy: return "the host copy " + txt + " of rank " + std::to_string(rank);
    case CommKind::ExpertParallel: return "the expert-parallel all-to-alls of " + txt + " on rank " + std::to_string(rank);
    case CommKind::ContextParallel: return "the context-parallel ring of " + txt + " on rank " + std::to_string(rank);
  }
  return txt;
}

void Runner::report_deadlock() const {
  // Per unit with a data-parallel index 0: the first compute of the earliest stuck iteration.
  std::vector<std::vector<Act>> preds(ex_.records.size());
  for (auto [a, b] : edges_) preds[static_cast<size_t>(b)].push_back(a);
  std::string who;
  int stuck_units = 0;
  for (int u = 0; u < U_; u += dp_) {
    for (int k = 0; k < K_; ++k) {
      const auto& co = compute_[static_cast<size_t>(k)][static_cast<size_t>(u)];
      size_t i = 0;
      for (; i < co.size(); ++i)
        if (co[i] != kNone && ex_.records[static_cast<size_t>(co[i])].start_s < 0) break;
      if (i == co.size()) continue;
      ++stuck_units;
      const int rank = rank_of_unit(u);
      who += "\n  rank " + std::to_string(rank) + " (iteration " + std::to_string(k) + ") waits at step " + std::to_string(i) +
             " (" + schedules::to_text(s_.actions[static_cast<size_t>(rank)][i]) + ") for";
      std::set<std::string> waits;
      for (Act dep : preds[static_cast<size_t>(co[i])])
        if (ex_.records[static_cast<size_t>(dep)].end_s < 0) waits.insert(describe(s_, ex_.records[static_cast<size_t>(dep)], dp_));
      for (const std::string& w : waits) who += "\n    " + w;
      break;
    }
  }
  throw InputError("schedule '" + s_.name + "' deadlocks in the simulator: " + std::to_string(stuck_units) +
                   " pipeline ranks stop (a transfer waits on a receive posted after the compute that waits on it)" + who);
}

// Successor lists (CSR) and the count of unfinished predecessors of every node.
void Runner::link_graph() {
  const size_t n = ex_.records.size();
  succ_begin_.assign(n + 1, 0);
  waiting_.assign(n, 0);
  for (auto [a, b] : edges_) {
    ++succ_begin_[static_cast<size_t>(a) + 1];
    ++waiting_[static_cast<size_t>(b)];
  }
  for (size_t i = 0; i < n; ++i) succ_begin_[i + 1] += succ_begin_[i];
  succ_.assign(edges_.size(), 0);
  std::vector<std::int32_t> fill(succ_begin_.begin(), succ_begin_.end() - 1);
  for (auto [a, b] : edges_) succ_[static_cast<size_t>(fill[static_cast<size_t>(a)]++)] = b;
}

// Creates and starts the SimGrid activity of a node whose predecessors have all finished.
void Runner::launch(Act id) {
  const Record& r = ex_.records[static_cast<size_t>(id)];
  sg::ActivityPtr a;
  if (r.kind == RecKind::Flow)
    a = sg::Comm::sendto_init(r.from, r.to)->set_payload_size(static_cast<std::uint64_t>(std::llround(r.work)));
  else if (r.kind == RecKind::TpPad)
    a = sg::Exec::init()->set_flops_amount(r.work)->set_bound(r.from->get_speed() * kPadShare)->set_host(r.from);
  else
    a = sg::Exec::init()->set_flops_amount(r.work)->set_host(r.from);
  a->set_data(reinterpret_cast<void*>(static_cast<std::uintptr_t>(id)));
  live_[static_cast<size_t>(id)] = a;
  a->start();
  if (preempt_ && r.kind == RecKind::Flow) preempt_on_start(id);
}

std::pair<int, int> Runner::nodes_of(const Record& r) const {
  if (r.src_gpu < 0 || r.dst_gpu < 0) return {-1, -1};
  int a = topo_.node_of(r.src_gpu), b = topo_.node_of(r.dst_gpu);
  return a == b ? std::pair{-1, -1} : std::pair{a, b};
}

// FOLD3D Sec. V-A: a pipeline send stops the dp flows sending from its node; a pipeline
// receive stops the dp flows receiving on its node.
bool Runner::held(const Record& dp_flow) const {
  auto [from, to] = nodes_of(dp_flow);
  return from >= 0 && (pp_sending_[static_cast<size_t>(from)] > 0 || pp_receiving_[static_cast<size_t>(to)] > 0);
}

void Runner::preempt_on_start(Act id) {
  const Record& r = ex_.records[static_cast<size_t>(id)];
  auto [from, to] = nodes_of(r);
  if (from < 0) return;
  if (r.comm == CommKind::DataParallel) {
    dp_live_.push_back(id);
    if (held(r)) live_[static_cast<size_t>(id)]->suspend(), suspended_[static_cast<size_t>(id)] = 1;
  } else if (r.comm == CommKind::Pipeline) {
    ++pp_sending_[static_cast<size_t>(from)];
    ++pp_receiving_[static_cast<size_t>(to)];
    for (Act d : dp_live_)
      if (!suspended_[static_cast<size_t>(d)] && held(ex_.records[static_cast<size_t>(d)]))
        live_[static_cast<size_t>(d)]->suspend(), suspended_[static_cast<size_t>(d)] = 1;
  }
}

void Runner::preempt_on_end(Act id) {
  const Record& r = ex_.records[static_cast<size_t>(id)];
  auto [from, to] = nodes_of(r);
  if (from < 0) return;
  if (r.comm == CommKind::DataParallel) {
    dp_live_.erase(std::find(dp_live_.begin(), dp_live_.end(), id));
  } else if (r.comm == CommKind::Pipeline) {
    --pp_sending_[static_cast<size_t>(from)];
    --pp_receiving_[static_cast<size_t>(to)];
    for (Act d : dp_live_)
      if (suspended_[static_cast<size_t>(d)] && !held(ex_.records[static_cast<size_t>(d)]))
        live_[static_cast<size_t>(d)]->resume(), suspended_[static_cast<size_t>(d)] = 0;
  }
}

void Runner::on_done(const sg::Activity& a) {
  // Finished activities are released one completion later (not inside their own callback), so
  // that memory holds the activities in flight, not every one the run made.
  for (Act x : finished_) live_[static_cast<size_t>(x)] = nullptr;
  finished_.clear();
  const auto id = reinterpret_cast<std::uintptr_t>(a.get_data<void>());
  finished_.push_back(static_cast<Act>(id));
  Record& r = ex_.records[id];
  r.start_s = a.get_start_time();
  r.end_s = a.get_finish_time();
  if (preempt_ && r.kind == RecKind::Flow) preempt_on_end(static_cast<Act>(id));
  for (std::int32_t i = succ_begin_[id]; i < succ_begin_[id + 1]; ++i) {
    const Act s = succ_[static_cast<size_t>(i)];
    if (--waiting_[static_cast<size_t>(s)] == 0) launch(s);
  }
}

Execution Runner::run() {
  ex_.dp = dp_;
  ex_.tp = tp_;
  pos_of_.resize(static_cast<size_t>(s_.num_ranks));
  for (int r = 0; r < s_.num_ranks; ++r) {
    const auto& list = s_.actions[static_cast<size_t>(r)];
    for (size_t i = 0; i < list.size(); ++i)
      if (schedules::is_p2p(list[i].op))
        pos_of_[static_cast<size_t>(r)][pos_key(list[i].op, list[i].stage, list[i].microbatch)] = static_cast<int>(i);
  }
  const auto t0 = std::chrono::steady_clock::now();
  // A what-if that changes compute times runs inner schedules piece by piece (their collapsed
  // times are priced once per stage, for nominal compute).
  collapse_inner_ = opt_.symmetry && inner_isolated() && !fx_.perturbs_compute();
  collapse_rings_ = opt_.symmetry && inner_isolated();
  build_chains();
  build_edges();
  transfers_.clear();
  rings_.clear();
  link_graph();
  live_.assign(ex_.records.size(), nullptr);
  suspended_.assign(ex_.records.size(), 0);
  const size_t nodes = pf_.gpus.empty() ? 0 : static_cast<size_t>(topo_.node_of(static_cast<int>(pf_.gpus.size()) - 1)) + 1;
  pp_sending_.assign(nodes, 0);
  pp_receiving_.assign(nodes, 0);
  dp_live_.clear();
  const auto t1 = std::chrono::steady_clock::now();
  ex_.graph_s = std::chrono::duration<double>(t1 - t0).count();
  sg::Activity::on_completion_cb([this](sg::Activity const& a) { on_done(a); });
  for (size_t i = 0; i < ex_.records.size(); ++i)
    if (waiting_[i] == 0) launch(static_cast<Act>(i));
  sg::Engine::get_instance()->run();
  for (const Record& r : ex_.records)
    if (r.end_s < 0) report_deadlock();
  live_.clear();
  ex_.engine_activities = static_cast<long>(ex_.records.size());
  expand_blocks();
  expand_rings();
  ex_.engine_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  return std::move(ex_);
}

}  // namespace detail

std::vector<int> reduction_strides(const costmodel::ParallelPlan& p) {
  std::vector<int> out;
  if (p.ep > 1) out.push_back(p.ep);
  if (p.zero == 3 && costmodel::shard_degree(p) < p.dp) out.push_back(costmodel::shard_degree(p));
  return out;
}

std::vector<std::pair<int, int>> needed_pairs(const schedules::Schedule& s, const costmodel::ParallelPlan& p,
                                              const costmodel::Topology& topo, const Workload& w, const SimOptions& opt) {
  std::set<std::pair<int, int>> out;
  for (int st = 0; st < s.num_stages; ++st) {
    const int nx = s.next_stage(st);
    if (nx < 0 || s.rank_of(nx) == s.rank_of(st)) continue;
    for (int t = 0; t < p.tp; ++t)
      for (int d = 0; d < p.dp; ++d) {
        int a = topo.global_rank({t, d, s.rank_of(st)}), b = topo.global_rank({t, d, s.rank_of(nx)});
        out.insert({a, b});
        out.insert({b, a});
      }
  }
  for (int r = 0; r < p.pp; ++r)
    for (int t = 0; t < p.tp; ++t)
      for (int d = 0; d < p.dp; ++d) {
        const int g = topo.global_rank({t, d, r});
        if (p.dp > 1) out.insert({g, topo.global_rank({t, (d + 1) % p.dp, r})});
        if (p.tp > 1 && opt.tp_comm == TpComm::Explicit) out.insert({g, topo.global_rank({(t + 1) % p.tp, d, r})});
      }
  // NCCL-like dp all-reduces (channel rings and trees): neighbours inside each node and across
  // nodes; the same on each expert-data-parallel group (dp indices ep apart; plan.ep), whose flat
  // ring joins its members in order.
  auto collective_pairs = [&](const std::vector<int>& gpus) {
    if (!opt.hierarchical_dp) return;
    const auto groups = node_groups(gpus, topo);
    const int N = static_cast<int>(groups.size());
    auto at = [&](int n, size_t i) { return gpus[static_cast<size_t>(groups[static_cast<size_t>(n)][i])]; };
    for (int n = 0; n < N; ++n)
      for (size_t i = 0; i < groups[static_cast<size_t>(n)].size(); ++i) {
        const size_t next = (i + 1) % groups[static_cast<size_t>(n)].size();
        out.insert({at(n, i), at(n, next)});  // rings and the trees' chains, both ways
        out.insert({at(n, next), at(n, i)});
        out.insert({at(n, i), at((n + 1) % N, i)});  // the tree's fill across nodes, both ways
        out.insert({at((n + 1) % N, i), at(n, i)});
        out.insert({at(n, i), at((n + 1) % N, next)});  // the channels' rings across nodes
        for (int w = 0; w < 2; ++w)  // the trees' edges across nodes, both ways
          if (const int par = costmodel::double_tree_parent(n, N, w); par >= 0) {
            out.insert({at(n, i), at(par, i)});
            out.insert({at(par, i), at(n, i)});
          }
      }
  };
  const std::vector<int> strides = reduction_strides(p);
  for (int r = 0; p.dp > 1 && r < p.pp; ++r)
    for (int t = 0; t < p.tp; ++t) {
      std::vector<int> gpus;
      for (int d = 0; d < p.dp; ++d) gpus.push_back(topo.global_rank({t, d, r}));
      collective_pairs(gpus);
      for (int stride : strides)
        for (int j = 0; p.dp / stride > 1 && j < stride; ++j) {
          std::vector<int> sub;
          for (int d = j; d < p.dp; d += stride) sub.push_back(gpus[static_cast<size_t>(d)]);
          for (size_t i = 0; i < sub.size(); ++i) out.insert({sub[i], sub[(i + 1) % sub.size()]});
          collective_pairs(sub);
        }
    }
  // Expert parallelism's all-to-alls (explicit tp, ep groups along dp): every two members of a group.
  if (p.ep > 1 && opt.tp_comm == TpComm::Explicit && costmodel::expert_axis(p) == costmodel::kDpCp)
    for (int r = 0; r < p.pp; ++r)
      for (int t = 0; t < p.tp; ++t)
        for (int d = 0; d < p.dp; ++d)
          for (int e = d / p.ep * p.ep; e < (d / p.ep + 1) * p.ep; ++e)
            if (e != d) out.insert({topo.global_rank({t, d, r}), topo.global_rank({t, e, r})});
  // Context parallelism's ring: each replica to the next cp rank of its ring (Workload::cp_stride apart).
  if (w.cp > 1 && opt.tp_comm == TpComm::Explicit)
    for (int r = 0; r < p.pp; ++r)
      for (int t = 0; t < p.tp; ++t)
        for (int i = 0; i < p.dp; ++i) {
          const int c = i / w.cp_stride % w.cp, next = i - c * w.cp_stride + (c + 1) % w.cp * w.cp_stride;
          if (next != i) out.insert({topo.global_rank({t, i, r}), topo.global_rank({t, next, r})});
        }
  // Chimera: one ring over the dp groups of every copy of a model part, copy by copy.
  for (int part = 0; s.num_chains > 1 && part < s.stages_per_chain(); ++part) {
    std::vector<int> ranks;
    for (int c = 0; c < s.num_chains; ++c) ranks.push_back(s.rank_of(c * s.stages_per_chain() + part));
    const int n = static_cast<int>(ranks.size()) * p.dp;
    for (int t = 0; t < p.tp; ++t)
      for (int j = 0; j < n; ++j) {
        const int k = (j + 1) % n;
        out.insert({topo.global_rank({t, j % p.dp, ranks[static_cast<size_t>(j / p.dp)]}),
                    topo.global_rank({t, k % p.dp, ranks[static_cast<size_t>(k / p.dp)]})});
      }
  }
  return {out.begin(), out.end()};
}

bool UnitEffects::perturbs_compute() const {
  return std::any_of(rate.begin(), rate.end(), [](double x) { return x != 1; }) ||
         (jitter.dist != JitterDist::None && jitter.cv > 0);
}

Execution execute(const schedules::Schedule& s, const costmodel::CostTable& c, const Workload& w,
                  const costmodel::ParallelPlan& p, int dp_whole, const costmodel::Topology& topo, const Platform& pf,
                  const SimOptions& opt, const UnitEffects& fx) {
  return detail::Runner(s, c, w, p, dp_whole, topo, pf, opt, fx).run();
}

}  // namespace stagecraft::sim
