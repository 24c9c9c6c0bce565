#include "runtime/p2p.h"

namespace stagecraft::runtime {

using schedules::Action;
using schedules::Op;

// A receive buffer: the stage's input (forward) or its output's gradient, fp32 (stage outputs
// are fp32 under autocast too).
torch::Tensor P2p::activation(int stage, bool forward) {
  return torch::empty(part_of(parts_, stage, cfg_.global_rank).boundary_shape(forward, cfg_.microbatch_size),
                      torch::TensorOptions().device(cfg_.device));
}

int P2p::tag(bool forward, int consumer, int mb) const {
  const auto& s = *cfg_.schedule;
  return ((forward ? 0 : 1) * s.num_stages + consumer) * s.num_microbatches + mb;
}

compat::WorkPtr P2p::post_send(const Action& a, const torch::Tensor& output) {
  const auto& s = *cfg_.schedule;
  bool fwd = a.op == Op::SEND_F;
  int peer_stage = fwd ? s.next_stage(a.stage) : s.prev_stage(a.stage);
  torch::Tensor t;
  if (fwd) {
    t = output.detach().contiguous();
  } else {
    auto g = grad_in_.find({a.stage, a.microbatch});
    if (g == grad_in_.end()) throw Error("runtime: SEND_B of stage " + std::to_string(a.stage) + " before its backward");
    t = g->second.contiguous();
    grad_in_.erase(g);
    tag_tensor(t, MemCategory::SendHeld);  // only the send needs it now
  }
  int peer = global_of_stage(peer_stage);
  sends_.emplace_back(compat::send(*cfg_.world, t, peer, tag(fwd, peer_stage, a.microbatch)), peer);
  note_in_group(sends_.back().first, {-1, -1}, static_cast<long>(sends_.size()) - 1);
  return sends_.back().first;
}

void P2p::post_recv(const Action& a, size_t span) {
  const auto& s = *cfg_.schedule;
  bool fwd = a.op == Op::RECV_F;
  int peer_stage = fwd ? s.prev_stage(a.stage) : s.next_stage(a.stage);
  torch::Tensor t = activation(a.stage, fwd);
  int peer = global_of_stage(peer_stage);
  Pending p{compat::recv(*cfg_.world, t, peer, tag(fwd, a.stage, a.microbatch)), span, a.op, peer};
  (fwd ? recv_f_ : recv_b_)[{a.stage, a.microbatch}] = t;
  auto& list_of_key = pending_[{a.stage, a.microbatch}];
  list_of_key.push_back(p);
  note_in_group(p.work, {a.stage, a.microbatch}, static_cast<long>(list_of_key.size()) - 1);
}

void P2p::note_in_group(const compat::WorkPtr& w, ExecKey key, long index) {
  if (!in_group_) return;
  group_issued_.push_back(w);
  group_slots_.emplace_back(key, index);
}

void P2p::begin_group() {
  compat::begin_p2p(*cfg_.world);
  in_group_ = true;
  group_issued_.clear();
  group_slots_.clear();
}

void P2p::end_group() {
  compat::WorkPtr whole = compat::end_p2p(*cfg_.world, group_issued_);
  in_group_ = false;
  ++acc_.rec().p2p_groups;
  for (const auto& [key, index] : group_slots_) {
    compat::WorkPtr& w = key.first < 0 ? sends_.at(static_cast<size_t>(index)).first
                                       : pending_.at(key).at(static_cast<size_t>(index)).work;
    if (!w) w = whole;
    if (!w) throw Error("runtime: a grouped send or receive has no handle to wait on");
  }
}

void P2p::wait_inputs(int stage, int mb, bool grad) {
  auto it = pending_.find({stage, mb});
  if (it == pending_.end()) return;
  std::vector<Pending> keep;
  for (Pending& p : it->second) {
    if ((p.op == Op::RECV_B) != grad) {
      keep.push_back(p);
      continue;
    }
    auto a = ExecClock::now();
    try {
      compat::wait(p.work, cfg_.timeout);
    } catch (const std::exception& e) {
      comm_failure(cfg_.global_rank, std::string("waiting for ") + std::string(schedules::op_name(p.op)) + " of stage " +
                   std::to_string(stage) + " microbatch " + std::to_string(mb), p.peer_global, e);
    }
    acc_.add_wait_s(seconds_between(a, ExecClock::now()));
    acc_.close_span(p.span);
  }
  if (keep.empty()) pending_.erase(it);
  else it->second = keep;
}

torch::Tensor P2p::take_received_input(int stage, int mb) {
  auto it = recv_f_.find({stage, mb});
  if (it == recv_f_.end()) return torch::Tensor();
  torch::Tensor t = it->second;
  recv_f_.erase(it);
  tag_tensor(t, MemCategory::Activations);  // the stage's input, kept for its backward
  return t;
}

torch::Tensor P2p::take_output_grad(int stage, int mb) {
  for (auto* from : {&recv_b_, &grad_in_}) {
    ExecKey k = from == &recv_b_ ? ExecKey{stage, mb} : ExecKey{cfg_.schedule->next_stage(stage), mb};
    auto it = from->find(k);
    if (it == from->end()) continue;
    torch::Tensor t = it->second;
    from->erase(it);
    tag_tensor(t, MemCategory::Backward);
    return t;
  }
  throw Error("runtime: backward of stage " + std::to_string(stage) + " mb " + std::to_string(mb) +
              " has no output gradient (no RECV_B, no local backward)");
}

void P2p::wait_sends() {
  for (auto& [work, peer] : sends_) {
    auto a = ExecClock::now();
    try {
      compat::wait(work, cfg_.timeout);
    } catch (const std::exception& e) {
      comm_failure(cfg_.global_rank, "a send", peer, e);
    }
    acc_.add_wait_s(seconds_between(a, ExecClock::now()));
  }
  sends_.clear();
}

bool P2p::holds_receives() const { return !recv_f_.empty() || !recv_b_.empty() || !pending_.empty(); }

}  // namespace stagecraft::runtime
