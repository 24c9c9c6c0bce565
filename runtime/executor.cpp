// The executor's action dispatcher: the action loop and the compute actions (F, B, I, W, R,
// OVERLAP_F_B, OFFLOAD, RELOAD, OPTIMIZER) on each (stage, microbatch)'s saved state. The
// transfers are p2p.h's, the gradient reductions grad_reduction.h's, the step's record
// exec_accounting.h's; what the runtime supports is runtime/support/rules.h's, asserted here.
#include "runtime/executor.h"

#include <set>

#include "runtime/support/rules.h"
#include "runtime/exec_accounting.h"
#include "runtime/grad_reduction.h"
#include "runtime/op_times.h"
#include "runtime/output_release.h"
#include "runtime/p2p.h"
#include "schedules/error.h"
#include "schedules/memory_events.h"

namespace stagecraft::runtime {

using schedules::Action;
using schedules::Op;

namespace {

// The support rules of the gradient reductions, asserted with the rule's owner
// (runtime/support/rules.h): `train`'s preflight applies them to the plan already; a caller
// that builds an ExecConfig itself gets the same refusal.
void assert_supported(const ExecConfig& cfg) {
  const runtime::ReductionPlan r{cfg.ep, cfg.zero, cfg.preemptive_comm};
  runtime::check_expert_reductions(r);
  runtime::check_reduction_schedule(r, *cfg.schedule);
}

}  // namespace

struct Executor::Impl {
  // Saved state of one (stage, microbatch) between its forward and its backward.
  struct MbState {
    torch::Tensor ckpt;      // (b, s, h) leaf the stage's layers start from (received input or embedding output)
    torch::Tensor embed_out; // (1) embedding output's graph, values released (first stage only; output_release.h)
    torch::Tensor mid_leaf;  // (b, s, h) leaf after the first k layers (recomputed stages)
    torch::Tensor mid;       // (b, s, h) the first k layers recomputed with a graph (after R)
    torch::Tensor output;    // (b, s, h) stage output with its graph; () loss on the last stage
    torch::Tensor host_ckpt; // (b, s, h) checkpoint offloaded to host memory
    int recompute_layers = 0;  // k: layers run without a graph in F and again in R
    bool per_layer = false;    // R runs inside the B, layer by layer (Megatron's per-layer checkpoints)
    std::vector<torch::Tensor> layer_in;       // (k - 1) x (b, s, h) inputs of layers 1..k-1 (layer 0's: ckpt)
    std::vector<torch::Tensor> host_layer_in;  // the same, offloaded
    std::shared_ptr<TpMicrobatch> tp;  // sub-batches of a stage run with tp overlap (null: blocking)
  };

  Impl(ExecConfig c, std::map<int, ModelPart*> p, AdamW* optimizer);

  ExecConfig cfg;
  std::map<int, ModelPart*> parts;
  AdamW* opt = nullptr;
  const std::vector<Action>* list = nullptr;
  std::map<ExecKey, double> recompute_fraction;  // from this rank's R actions
  std::set<ExecKey> per_layer_recompute;         // R directly before its B: recomputed layer by layer in
                                                 // the B (schedules::recompute_fused_with_backward)
  ExecAccounting acc;
  P2p p2p;
  std::unique_ptr<GradReduction> grads;
  // Per-iteration state.
  std::map<ExecKey, MbState> states;
  std::map<ExecKey, DeferredGrads> deferred;
  const BatchFn* batch = nullptr;
  size_t position = 0;  // index of the action being executed

  ModelPart& part(int stage) { return part_of(parts, stage, cfg.global_rank); }

  // The stage's input: received from another rank, or handed over by the previous stage
  // when it sits on this rank too (V placements).
  torch::Tensor take_input(int stage, int mb) {
    torch::Tensor t = p2p.take_received_input(stage, mb);
    if (t.defined()) return t;
    int prev = cfg.schedule->prev_stage(stage);
    auto local = states.find({prev, mb});
    if (parts.count(prev) && local != states.end()) return local->second.output.detach();
    throw Error("runtime: F of stage " + std::to_string(stage) + " mb " + std::to_string(mb) + " has no input (no RECV_F, no local forward)");
  }

  void forward(int stage, int mb) {
    ModelPart& P = part(stage);
    MbState& st = states[{stage, mb}];
    auto [tokens_host, targets_host] = (*batch)(mb);
    torch::Tensor tokens = tokens_host.to(cfg.device), targets = targets_host.to(cfg.device);  // (b, s)
    AutocastScope autocast(cfg.device, cfg.precision);
    auto rf = recompute_fraction.find({stage, mb});
    const int n = P.shape().num_layers;
    st.recompute_layers = rf == recompute_fraction.end() ? 0 : schedules::recomputed_layers(rf->second, n);
    if (overlapped(stage)) return forward_overlapped(stage, mb, st, tokens, targets);
    if (P.shape().embedding) {
      st.embed_out = P.embed(tokens);
      st.ckpt = st.embed_out.detach().requires_grad_(true);
      release_output_values(st.embed_out);  // its values live on in ckpt alone (offloaded with it)
    } else {
      st.ckpt = take_input(stage, mb).requires_grad_(true);
    }
    torch::Tensor x = st.recompute_layers > 0 ? forward_recomputed(stage, mb, st) : st.ckpt;
    x = P.layers(x, st.recompute_layers, n);
    if (P.shape().head) {
      st.output = P.loss(x, targets);
      acc.add_loss(st.output);
    } else {
      st.output = x;
    }
  }

  // The first k layers of a recomputed stage, without a graph; their output becomes a leaf
  // (mid_leaf) that the rest of the stage starts from.
  torch::Tensor forward_recomputed(int stage, int mb, MbState& st) {
    ModelPart& P = part(stage);
    torch::Tensor h;
    {
      torch::NoGradGuard ng;
      st.per_layer = per_layer_recompute.count({stage, mb}) > 0;
      h = st.ckpt;
      for (int j = 0; j < st.recompute_layers; ++j) {
        if (j > 0 && st.per_layer) st.layer_in.push_back(h);  // Megatron's per-layer checkpoints
        h = P.layers(h, j, j + 1);
      }
    }
    st.mid_leaf = h.detach().requires_grad_(true);
    return st.mid_leaf;
  }

  // ---- stages with tensor-parallel overlap (runtime/tp_pieces.h) ----
  bool overlapped(int stage) const {
    auto it = cfg.tp_overlap.find(stage);
    return it != cfg.tp_overlap.end() && it->second != schedules::TpOverlap::Blocking;
  }

  PieceEnv piece_env(int stage) {
    PieceEnv e;
    e.part = dynamic_cast<GptPart*>(&part(stage));
    if (!e.part) throw Error("runtime: stage " + std::to_string(stage) + " is not a GPT part; tensor-parallel overlap needs one");
    e.mode = cfg.tp_overlap.at(stage);
    e.tp = tp_context().group;
    e.timeout = cfg.timeout;
    e.precision = cfg.precision;
    e.device = cfg.device;
    e.timeline = acc.timeline();
    e.marks = &acc.piece_marks();
    e.position = static_cast<int>(position);
    e.global_rank = cfg.global_rank;
    return e;
  }

  void forward_overlapped(int stage, int mb, MbState& st, const torch::Tensor& tokens, const torch::Tensor& targets) {
    ModelPart& P = part(stage);
    st.tp = std::make_shared<TpMicrobatch>();
    st.tp->recompute_layers = st.recompute_layers;
    torch::Tensor input = P.shape().embedding ? torch::Tensor() : take_input(stage, mb);
    StageForward f = overlap_forward(piece_env(stage), *st.tp, input, tokens, targets);
    st.ckpt = f.ckpt;
    st.output = f.output;
    if (P.shape().head) acc.add_loss(st.output);
  }

  void backward_overlapped(int stage, int mb, MbState& st, bool split) {
    ModelPart& P = part(stage);
    torch::Tensor g = P.shape().head ? torch::Tensor() : p2p.take_output_grad(stage, mb);
    const double scale = 1.0 / static_cast<double>(cfg.schedule->num_microbatches);
    torch::Tensor gin = overlap_backward(piece_env(stage), *st.tp, split ? Op::I : Op::B, g, scale, st.ckpt);
    if (!P.shape().embedding) p2p.keep_input_grad(stage, mb, gin);
  }

  void recompute(int stage, int mb) {
    MbState& st = states.at({stage, mb});
    if (st.recompute_layers == 0) return;
    AutocastScope autocast(cfg.device, cfg.precision);
    // Overlapped stages recompute inside their backward, layer by layer as it reaches them
    // (merak with pass barriers, cross-pass and oases jointly: schedules/tp_overlap.h).
    if (st.tp || st.per_layer) return;  // per layer: inside the B (backward_per_layer)
    if (!st.ckpt.defined()) throw Error("runtime: R of stage " + std::to_string(stage) + " before its checkpoint was reloaded");
    st.mid = part(stage).layers(st.ckpt, 0, st.recompute_layers);
  }

  // The recomputed layers' backward, last first: each layer rebuilt from its kept input just
  // before its own backward, so one layer's activations live at a time; ends with ckpt.grad().
  void backward_per_layer(int stage, MbState& st, torch::Tensor g) {
    if (!st.ckpt.defined()) throw Error("runtime: B of stage " + std::to_string(stage) + " before its checkpoint was reloaded");
    AutocastScope autocast(cfg.device, cfg.precision);
    ModelPart& P = part(stage);
    for (int j = st.recompute_layers - 1; j >= 0; --j) {
      torch::Tensor x = j == 0 ? st.ckpt : st.layer_in[static_cast<size_t>(j - 1)].detach().requires_grad_(true);
      P.layers(x, j, j + 1).backward(g);
      g = x.grad();
      if (j > 0) st.layer_in[static_cast<size_t>(j - 1)] = torch::Tensor();
    }
  }

  // Ends a (stage, microbatch) after its backward. Its output, if sent, is then held only by the
  // send (memory_counter.h: SendHeld).
  void release_state(std::map<ExecKey, MbState>::iterator it) {
    if (!cfg.schedule->is_last(it->first.first)) tag_tensor(it->second.output, MemCategory::SendHeld);
    states.erase(it);
  }

  void backward(int stage, int mb, bool split) {
    auto it = states.find({stage, mb});
    if (it == states.end()) throw Error("runtime: backward of stage " + std::to_string(stage) + " mb " + std::to_string(mb) + " without its forward");
    MbState& st = it->second;
    ModelPart& P = part(stage);
    DeferWeightGrads guard(split ? &deferred[{stage, mb}] : nullptr);
    if (st.tp) {
      backward_overlapped(stage, mb, st, split);
      release_state(it);
      return;
    }
    if (P.shape().head) {
      (st.output / static_cast<double>(cfg.schedule->num_microbatches)).backward();
    } else {
      st.output.backward(p2p.take_output_grad(stage, mb));
    }
    if (st.recompute_layers > 0 && st.per_layer) {
      backward_per_layer(stage, st, st.mid_leaf.grad());
    } else if (st.recompute_layers > 0) {
      if (!st.mid.defined()) throw Error("runtime: backward of recomputed stage " + std::to_string(stage) + " before its R");
      st.mid.backward(st.mid_leaf.grad());
    }
    if (P.shape().embedding && st.embed_out.requires_grad()) backward_through(st.embed_out, st.ckpt.grad());
    else p2p.keep_input_grad(stage, mb, st.ckpt.grad());
    release_state(it);
  }

  void weight(int stage, int mb) {
    auto it = deferred.find({stage, mb});
    if (it == deferred.end()) throw Error("runtime: W of stage " + std::to_string(stage) + " mb " + std::to_string(mb) + " without its I");
    torch::NoGradGuard ng;
    // In the stage's last W the weights' final gradients come from these jobs, outside
    // autograd: report them to the buckets as the tensor hooks report the others.
    const WeightGradHook hook = grads->hooks().weight_hook(stage);
    HookDeferredGrads reporting(grads->hooks().armed(stage) ? &hook : nullptr);
    for (auto& job : it->second) job();
    deferred.erase(it);
  }

  void offload(int stage, int mb) {
    MbState& st = states.at({stage, mb});
    st.host_ckpt = host_buffer_like(st.ckpt, cfg.device);  // pinned on a GPU: the copy is asynchronous
    st.host_ckpt.copy_(st.ckpt.detach(), /*non_blocking=*/cfg.device.is_cuda());
    for (const torch::Tensor& t : st.layer_in) {
      st.host_layer_in.push_back(host_buffer_like(t, cfg.device));
      st.host_layer_in.back().copy_(t, /*non_blocking=*/cfg.device.is_cuda());
    }
    // Without recomputed layers the checkpoint is also the graph's input: keep it linked.
    if (st.recompute_layers > 0) st.ckpt = torch::Tensor(), st.layer_in.clear();
  }

  void reload(int stage, int mb) {
    MbState& st = states.at({stage, mb});
    if (!st.ckpt.defined()) {
      st.ckpt = st.host_ckpt.to(cfg.device, /*non_blocking=*/cfg.device.is_cuda()).requires_grad_(true);
      for (const torch::Tensor& t : st.host_layer_in) st.layer_in.push_back(t.to(cfg.device, /*non_blocking=*/cfg.device.is_cuda()));
    }
    st.host_ckpt = torch::Tensor();  // the copy is stream-ordered: the pinned buffer may go
    st.host_layer_in.clear();
  }

  // OPTIMIZER: every reduction, then every send finished, then the step.
  void optimizer() {
    grads->finish_for_step();
    p2p.wait_sends();
    acc.set_grad_sq(grads->step());
    if (!states.empty() || !deferred.empty() || p2p.holds_receives())
      throw Error("runtime: state left over at the optimizer step (a forward without backward or an unused receive)");
  }

  void compute(const Action& a) {
    if (schedules::is_compute(a.op)) grads->finish_gathers(a.stage);  // its parameters, gathered after the last step
    if (a.op == Op::OVERLAP_F_B) grads->finish_gathers(a.b_stage);
    switch (a.op) {
      case Op::F: p2p.wait_inputs(a.stage, a.microbatch, false); forward(a.stage, a.microbatch); break;
      case Op::B: p2p.wait_inputs(a.stage, a.microbatch, true); backward(a.stage, a.microbatch, false); break;
      case Op::I: p2p.wait_inputs(a.stage, a.microbatch, true); backward(a.stage, a.microbatch, true); break;
      case Op::W: weight(a.stage, a.microbatch); break;
      case Op::R: p2p.wait_inputs(a.stage, a.microbatch, true); recompute(a.stage, a.microbatch); break;
      case Op::OVERLAP_F_B: {
        p2p.wait_inputs(a.stage, a.microbatch, false);
        forward(a.stage, a.microbatch);
        MemoryScope scope(MemCategory::Backward);
        p2p.wait_inputs(a.b_stage, a.b_microbatch, true);
        backward(a.b_stage, a.b_microbatch, a.b_op == Op::I);
        break;
      }
      case Op::OPTIMIZER: optimizer(); break;
      default: break;
    }
  }

  // A compute action, with the hooks of its stage armed in the stage's last backward and the
  // deferred shares it waits for applied first.
  void run_compute(const Action& a, size_t span) {
    grads->hooks().arm(a, span);
    if (a.op != Op::OPTIMIZER) grads->finish_late(a.stage);
    if (a.op == Op::OVERLAP_F_B) grads->finish_late(a.b_stage);
    compute(a);
    grads->hooks().disarm();
  }

  void execute(const Action& a, size_t span) {
    position = span;
    MemoryScope scope(ExecAccounting::category_of(a.op));
    struct TagAfter {  // also when the action throws
      ExecAccounting& acc;
      bool on;
      ~TagAfter() { if (on) acc.tag_gradients(); }
    } tag_after{acc, a.op == Op::B || a.op == Op::I || a.op == Op::W || a.op == Op::OVERLAP_F_B};
    switch (a.op) {
      case Op::SEND_F: case Op::SEND_B: {
        const torch::Tensor out = a.op == Op::SEND_F ? states.at({a.stage, a.microbatch}).output : torch::Tensor();
        grads->track_send(p2p.post_send(a, out));
        break;
      }
      case Op::RECV_F: case Op::RECV_B: p2p.post_recv(a, span); break;
      case Op::REDUCE_GRAD: grads->reduce_grad(a, span); break;
      case Op::OFFLOAD: offload(a.stage, a.microbatch); break;
      case Op::RELOAD: reload(a.stage, a.microbatch); break;
      default: run_compute(a, span); break;
    }
  }

  // Action i of the list, timed; a run of consecutive sends and receives is one group (NCCL-safe, docs/runtime.md).
  void run_action(size_t i) {
    const Action& a = (*list)[i];
    acc.begin_action(i);
    if (schedules::is_p2p(a.op) && !p2p.in_group()) p2p.begin_group();
    execute(a, i);
    if (p2p.in_group() && (i + 1 == list->size() || !schedules::is_p2p((*list)[i + 1].op))) p2p.end_group();
    acc.end_action(i);
  }
};

Executor::Impl::Impl(ExecConfig c, std::map<int, ModelPart*> p, AdamW* optimizer)
    : cfg(std::move(c)), parts(std::move(p)), opt(optimizer), acc(cfg, parts), p2p(cfg, parts, acc) {
  list = &cfg.schedule->actions.at(static_cast<size_t>(cfg.pp_rank));
  for (size_t i = 0; i < list->size(); ++i) {
    const Action& a = (*list)[i];
    if (a.op == Op::R) recompute_fraction[{a.stage, a.microbatch}] = a.fraction;
    if (a.op == Op::R && schedules::recompute_fused_with_backward(*list, i)) per_layer_recompute.insert({a.stage, a.microbatch});
  }
  assert_supported(cfg);
  grads = std::make_unique<GradReduction>(cfg, parts, opt, *list, acc);
}

Executor::Executor(ExecConfig cfg, std::map<int, ModelPart*> parts, AdamW* optimizer)
    : impl_(std::make_unique<Impl>(std::move(cfg), std::move(parts), optimizer)) {}

Executor::~Executor() = default;

void Executor::flush() { impl_->grads->flush(); }

std::vector<std::pair<std::string, torch::Tensor>> Executor::sharded_state() const {
  ShardedParams* f = impl_->grads->fsdp();
  return f ? f->state() : std::vector<std::pair<std::string, torch::Tensor>>{};
}

void Executor::load_sharded_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  if (ShardedParams* f = impl_->grads->fsdp()) f->load(state);
}

std::int64_t Executor::sharded_param_bytes() const {
  ShardedParams* f = impl_->grads->fsdp();
  return f ? f->shard_bytes() : -1;
}

long Executor::unit_gathers() const {
  ShardedParams* f = impl_->grads->fsdp();
  return f ? f->gathers() : 0;
}

StepRecord Executor::run_step(const BatchFn& batch, std::chrono::steady_clock::time_point t0) {
  Impl& m = *impl_;
  m.batch = &batch;
  m.acc.begin_step(t0, m.list->size());
  std::unique_ptr<OpRecorder> ops;  // --op-times: the model's products and cores mark the timeline
  if (m.cfg.op_times) ops = std::make_unique<OpRecorder>(*m.acc.timeline()), op_recorder() = ops.get();
  struct Uninstall {
    bool on;
    ~Uninstall() { if (on) op_recorder() = nullptr; }
  } uninstall{static_cast<bool>(ops)};
  for (size_t i = 0; i < m.list->size(); ++i) m.run_action(i);
  m.acc.finish_step(*m.list, ops.get());
  m.grads->count_preemption(m.acc.rec());
  return m.acc.rec();
}

}  // namespace stagecraft::runtime
