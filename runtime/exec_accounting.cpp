#include "runtime/exec_accounting.h"

#include <algorithm>

#include "schedules/error.h"

namespace stagecraft::runtime {

using schedules::Action;
using schedules::Op;

namespace {

// The trace track of an action: 0 compute, 1 p2p, 2 collective, 3 copy.
int stream_of(Op op) {
  if (schedules::is_p2p(op)) return 1;
  if (op == Op::REDUCE_GRAD) return 2;
  if (op == Op::OFFLOAD || op == Op::RELOAD) return 3;
  return 0;
}

}  // namespace

void ExecAccounting::begin_step(std::chrono::steady_clock::time_point t0, size_t n) {
  rec_ = StepRecord{};
  loss_acc_ = torch::Tensor();
  grad_sq_acc_ = torch::Tensor();
  if (!timeline_) timeline_ = std::make_unique<Timeline>(cfg_.device);
  timeline_->begin(t0);
  step_mark_ = timeline_->mark();
  start_mark_.assign(n, -1);
  end_marks_.assign(n, {});
  piece_marks_.clear();
  host_wait_.assign(n, 0);
  tp_comm_.assign(n, 0);
  live_.assign(n, -1);
  collectives_before_ = tp_context().collectives;
  reset_device_peak(cfg_.device);
}

void ExecAccounting::begin_action(size_t i) {
  wait_in_action_ = 0;
  tp_before_ = tp_context().comm_s;
  start_mark_[i] = timeline_->mark();
}

void ExecAccounting::end_action(size_t i) {
  end_marks_[i].insert(end_marks_[i].begin(), timeline_->mark());  // first: the action's own end
  host_wait_[i] = wait_in_action_;
  tp_comm_[i] = tp_context().comm_s - tp_before_;
  live_[i] = device_allocated_bytes(cfg_.device);
}

void ExecAccounting::close_span(size_t i) {
  if (i < end_marks_.size()) end_marks_[i].push_back(timeline_->mark());
}

void ExecAccounting::add_loss(const torch::Tensor& loss) {
  torch::Tensor l = loss.detach().to(torch::kFloat64);  // no host sync here on a GPU
  loss_acc_ = loss_acc_.defined() ? loss_acc_ + l : l;
  rec_.loss_count += 1;
}

void ExecAccounting::finish_step(const std::vector<Action>& list, const OpRecorder* ops) {
  resolve_times(ops);
  add_spans(list);
}

void ExecAccounting::resolve_times(const OpRecorder* ops) {
  Timeline& tl = *timeline_;
  tl.resolve();  // on a GPU: waits for the iteration's kernels, then reads the events
  if (ops) rec_.op_s = ops->seconds();
  rec_.time_s = tl.resolved_at_s() - tl.seconds(step_mark_);
  rec_.peak_bytes = device_peak_bytes(cfg_.device);
  if (memory_counter_installed(cfg_.device)) rec_.peak_breakdown = device_peak_breakdown(cfg_.device);
  rec_.tp_collectives = tp_context().collectives - collectives_before_;
  for (PieceMarks& pm : piece_marks_) {
    if (pm.end_mark < 0) throw Error("runtime: a tp piece of action " + std::to_string(pm.span.position) + " never ended");
    pm.span.start_s = tl.seconds(pm.start_mark);
    pm.span.end_s = tl.seconds(pm.end_mark);
    rec_.pieces.push_back(pm.span);
  }
  if (loss_acc_.defined()) rec_.loss_sum = loss_acc_.item<double>();
  if (grad_sq_acc_.defined()) rec_.grad_sq = grad_sq_acc_.item<double>();
}

// One span per action, and the iteration's compute, communication and wait times from them: a
// compute action's own duration less its host waits and tp communication is compute.
void ExecAccounting::add_spans(const std::vector<Action>& list) {
  const Timeline& tl = *timeline_;
  const size_t n = list.size();
  rec_.spans.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const Action& a = list[i];
    ActionSpan sp;
    sp.position = static_cast<int>(i);
    sp.stream = stream_of(a.op);
    sp.start_s = tl.seconds(start_mark_[i]);
    const double own_end = tl.seconds(end_marks_[i].front());
    sp.end_s = own_end;  // receives and reductions are closed again when waited
    for (int k : end_marks_[i]) sp.end_s = std::max(sp.end_s, tl.seconds(k));
    sp.live_bytes = live_[i];
    rec_.spans.push_back(sp);
    const double dur = own_end - sp.start_s;
    rec_.wait_s += host_wait_[i];
    if (schedules::is_compute(a.op)) {
      rec_.compute_s += dur - host_wait_[i] - tp_comm_[i];
      if (a.op == Op::OPTIMIZER) rec_.optimizer_s += dur - host_wait_[i] - tp_comm_[i];
      rec_.comm_s += tp_comm_[i];
    } else if (a.op != Op::OFFLOAD && a.op != Op::RELOAD) {
      rec_.comm_s += dur;
    }
  }
}

MemCategory ExecAccounting::category_of(Op op) {
  switch (op) {
    case Op::RECV_F: case Op::RECV_B: return MemCategory::Received;
    case Op::SEND_F: case Op::SEND_B: case Op::REDUCE_GRAD: return MemCategory::Communication;
    case Op::OFFLOAD: return MemCategory::OffloadHost;
    case Op::B: case Op::I: case Op::W: return MemCategory::Backward;
    case Op::OPTIMIZER: return MemCategory::OptimizerStates;
    default: return MemCategory::Activations;  // F, R, RELOAD, OVERLAP_F_B's forward
  }
}

void ExecAccounting::tag_gradients() const {
  if (!memory_counter_installed(cfg_.device)) return;
  for (const auto& [stage, P] : parts_)
    for (const auto& np : P->named_parameters()) tag_tensor(np.second.grad(), MemCategory::Gradients);
}

}  // namespace stagecraft::runtime
