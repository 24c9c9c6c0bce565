#include "runtime/executor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "costmodel/costs.h"
#include "runtime/fsdp.h"
#include "runtime/op_times.h"
#include "runtime/output_release.h"
#include "runtime/preempt.h"
#include "schedules/buckets.h"
#include "schedules/error.h"
#include "schedules/memory_events.h"

namespace stagecraft::runtime {

using schedules::Action;
using schedules::Op;
using Clock = std::chrono::steady_clock;
using Key = std::pair<int, int>;  // (stage, microbatch)

namespace {

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int stream_of(Op op) {
  if (schedules::is_p2p(op)) return 1;
  if (op == Op::REDUCE_GRAD) return 2;
  if (op == Op::OFFLOAD || op == Op::RELOAD) return 3;
  return 0;
}

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

struct Pending {             // a posted receive
  compat::WorkPtr work;
  size_t span = 0;           // index of its span, closed when a consumer waits
  Op op = Op::RECV_F;
  int peer_global = 0;
};

struct Bucket {              // one in-flight gradient all-reduce (with zero: a pending reduce-scatter)
  compat::WorkPtr work;
  std::shared_ptr<PreemptiveReducer::Job> job;  // preemptive_comm: the chunked all-reduce instead of work
  torch::Tensor flat;        // (n) concatenated gradients
  std::vector<torch::Tensor> params;
  compat::Group* group = nullptr;  // dp group, or the group of the part's copies
  size_t span = 0;
  int stage = -1;            // whose parameters
};

struct Gather {              // one bucket's parameter all-gather after the step (zero)
  compat::WorkPtr work;      // empty: finished
  torch::Tensor out;         // (dp * chunk) every member's updated chunk
  std::vector<torch::Tensor> params;
  compat::Group* group = nullptr;
  int stage = -1;
};

}  // namespace

struct Executor::Impl {
  ExecConfig cfg;
  std::map<int, ModelPart*> parts;
  AdamW* opt = nullptr;
  const std::vector<Action>* list = nullptr;
  std::map<Key, double> recompute_fraction;   // from this rank's R actions
  std::set<Key> per_layer_recompute;          // R directly before its B: recomputed layer by layer in
                                              // the B (schedules::recompute_fused_with_backward)
  // Per-iteration state.
  std::map<Key, MbState> states;
  std::map<Key, torch::Tensor> recv_f;        // (b, s, h) received activations
  std::map<Key, torch::Tensor> recv_b;        // (b, s, h) received output gradients
  std::map<Key, torch::Tensor> grad_in;       // (b, s, h) input gradients waiting for SEND_B
  std::map<Key, std::vector<Pending>> pending;
  std::map<Key, DeferredGrads> deferred;
  std::vector<std::pair<compat::WorkPtr, int>> sends;  // (work, peer global rank)
  // The open group of sends and receives (begin_p2p .. end_p2p): what they returned, and where
  // each handle lives (a send's index in `sends`, or a receive's key and index in `pending`).
  bool in_p2p_group = false;
  std::vector<compat::WorkPtr> group_issued;
  std::vector<std::pair<Key, long>> group_slots;  // key {-1,-1}: sends[index]
  std::vector<Bucket> buckets;
  std::unique_ptr<PreemptiveReducer> reducer;  // preemptive_comm with dp > 1
  PreemptStats reducer_seen;                   // its counters at the start of the step
  std::map<int, size_t> reduce_cursor;        // stage -> next parameter to reduce
  std::map<int, double> reduced_share;        // stage -> fraction reduced so far
  std::vector<Bucket> gathers;                // zero: reduced buckets whose parameters the step all-gathers
  std::vector<Gather> in_flight;              // zero: their all-gathers, until each stage's next compute
  std::vector<AdamW::Owned> shards;           // zero: the elements this member reduces and updates
  std::unique_ptr<ShardedParams> fsdp;        // zero 3 with dp > 1: the parameters themselves sharded
  // overlap_grad_reduce: buckets launched from gradient hooks during the stage's last backward.
  struct HookBucket {
    std::vector<torch::Tensor> params;
    std::vector<torch::Tensor> totals;        // each parameter's final gradient, once its hook fired
    int ready = 0;
    bool started = false;
    size_t span = 0;                          // the REDUCE_GRAD that reduces it (its trace span)
  };
  std::map<int, std::vector<HookBucket>> hook_buckets;  // stage -> its buckets, in reduction order
  std::map<int, size_t> last_backward;        // stage -> list position of its last backward
  std::map<int, size_t> last_input_backward;  // stage -> list position of its last I (split backward)
  std::map<const void*, std::pair<size_t, size_t>> hook_slot;  // parameter -> (bucket, index in it)
  int armed_stage = -1;                       // the stage whose last backward runs now
  // Deferred reductions (REDUCE_GRAD before the stage's first compute action).
  using Share = std::vector<std::vector<torch::Tensor>>;  // parameters, by bucket
  std::set<size_t> deferred_reduce;           // positions of those REDUCE_GRADs in the list
  std::vector<std::pair<int, Share>> held;    // (stage, share) this iteration's OPTIMIZER skips
  std::vector<std::pair<int, Share>> late;    // what the last OPTIMIZER skipped, in list order
  std::set<int> late_stages;                  // stages whose skipped share is not yet applied
  struct LateShare {                          // a skipped share whose reduction is in flight
    std::vector<Bucket> buckets;              // its all-reduces (none with one dp member)
    std::vector<torch::Tensor> params;        // the parameters the update waits for
  };
  std::map<int, LateShare> awaiting;          // stage -> launched, applied at its next compute
  const BatchFn* batch = nullptr;
  StepRecord rec;
  double wait_in_action = 0;
  std::unique_ptr<Timeline> timeline;         // marks of this iteration (device events on a GPU)
  std::vector<int> start_mark;                // per span: its start
  std::vector<std::vector<int>> end_marks;    // per span: the latest of these is its end
  torch::Tensor loss_acc;                     // () sum of this iteration's microbatch losses, on the device
  torch::Tensor grad_sq_acc;                  // () squared gradients summed at OPTIMIZER, fp64 on the device
  std::vector<PieceMarks> piece_marks;        // pieces of overlapped tp stages in this iteration
  size_t position = 0;                        // index of the action being executed

  // Closes span `i` again now (a receive or reduction ends when its consumer's wait returns).
  void close_span(size_t i) {
    if (i < end_marks.size()) end_marks[i].push_back(timeline->mark());
  }
  // A receive buffer: the stage's input (forward) or its output's gradient, fp32 (stage
  // outputs are fp32 under autocast too).
  torch::Tensor activation(int stage, bool forward) {
    return torch::empty(part(stage).boundary_shape(forward, cfg.microbatch_size), torch::TensorOptions().device(cfg.device));
  }
  int global_of_stage(int stage) const { return cfg.global_of(cfg.schedule->rank_of(stage)); }
  int tag(bool forward, int consumer, int mb) const {
    const auto& s = *cfg.schedule;
    return ((forward ? 0 : 1) * s.num_stages + consumer) * s.num_microbatches + mb;
  }
  ModelPart& part(int stage) {
    auto it = parts.find(stage);
    if (it == parts.end()) throw Error("runtime: rank " + std::to_string(cfg.global_rank) + " holds no stage " + std::to_string(stage));
    return *it->second;
  }
  [[noreturn]] void comm_failure(const std::string& what, int peer, const std::exception& e) {
    throw Error("rank " + std::to_string(cfg.global_rank) + ": " + what + (peer >= 0 ? " (peer rank " + std::to_string(peer) + ")" : "") +
                " failed: " + e.what());
  }

  // Waits for the receives of (stage, mb) posted so far: the activation for a forward
  // (grad = false), the output gradient for a backward or recompute (grad = true), as the
  // evaluator does (docs/evaluator.md).
  void wait_inputs(int stage, int mb, bool grad) {
    auto it = pending.find({stage, mb});
    if (it == pending.end()) return;
    std::vector<Pending> keep;
    for (Pending& p : it->second) {
      if ((p.op == Op::RECV_B) != grad) {
        keep.push_back(p);
        continue;
      }
      auto a = Clock::now();
      try {
        compat::wait(p.work, cfg.timeout);
      } catch (const std::exception& e) {
        comm_failure(std::string("waiting for ") + std::string(schedules::op_name(p.op)) + " of stage " +
                     std::to_string(stage) + " microbatch " + std::to_string(mb), p.peer_global, e);
      }
      wait_in_action += seconds(a, Clock::now());
      close_span(p.span);
    }
    if (keep.empty()) pending.erase(it);
    else it->second = keep;
  }

  // The stage's input: received from another rank, or handed over by the previous stage
  // when it sits on this rank too (V placements).
  torch::Tensor take_input(int stage, int mb) {
    auto it = recv_f.find({stage, mb});
    if (it != recv_f.end()) {
      torch::Tensor t = it->second;
      recv_f.erase(it);
      tag_tensor(t, MemCategory::Activations);  // the stage's input, kept for its backward
      return t;
    }
    int prev = cfg.schedule->prev_stage(stage);
    auto local = states.find({prev, mb});
    if (parts.count(prev) && local != states.end()) return local->second.output.detach();
    throw Error("runtime: F of stage " + std::to_string(stage) + " mb " + std::to_string(mb) + " has no input (no RECV_F, no local forward)");
  }

  // The gradient of the stage's output: received, or left by the next stage on this rank.
  torch::Tensor take_output_grad(int stage, int mb) {
    for (auto* from : {&recv_b, &grad_in}) {
      Key k = from == &recv_b ? Key{stage, mb} : Key{cfg.schedule->next_stage(stage), mb};
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
    torch::Tensor x = st.ckpt;
    if (st.recompute_layers > 0) {
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
      x = st.mid_leaf;
    }
    x = P.layers(x, st.recompute_layers, n);
    if (P.shape().head) {
      st.output = P.loss(x, targets);
      add_loss(st.output);
    } else {
      st.output = x;
    }
  }

  void add_loss(const torch::Tensor& loss) {
    torch::Tensor l = loss.detach().to(torch::kFloat64);  // no host sync here on a GPU
    loss_acc = loss_acc.defined() ? loss_acc + l : l;
    rec.loss_count += 1;
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
    e.timeline = timeline.get();
    e.marks = &piece_marks;
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
    if (P.shape().head) add_loss(st.output);
  }

  void backward_overlapped(int stage, int mb, MbState& st, bool split) {
    ModelPart& P = part(stage);
    torch::Tensor g = P.shape().head ? torch::Tensor() : take_output_grad(stage, mb);
    const double scale = 1.0 / static_cast<double>(cfg.schedule->num_microbatches);
    torch::Tensor gin = overlap_backward(piece_env(stage), *st.tp, split ? Op::I : Op::B, g, scale, st.ckpt);
    if (!P.shape().embedding) grad_in[{stage, mb}] = gin;
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
  void release_state(std::map<Key, MbState>::iterator it) {
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
      st.output.backward(take_output_grad(stage, mb));
    }
    if (st.recompute_layers > 0 && st.per_layer) {
      backward_per_layer(stage, st, st.mid_leaf.grad());
    } else if (st.recompute_layers > 0) {
      if (!st.mid.defined()) throw Error("runtime: backward of recomputed stage " + std::to_string(stage) + " before its R");
      st.mid.backward(st.mid_leaf.grad());
    }
    if (P.shape().embedding && st.embed_out.requires_grad()) backward_through(st.embed_out, st.ckpt.grad());
    else grad_in[{stage, mb}] = st.ckpt.grad();
    release_state(it);
  }

  void weight(int stage, int mb) {
    auto it = deferred.find({stage, mb});
    if (it == deferred.end()) throw Error("runtime: W of stage " + std::to_string(stage) + " mb " + std::to_string(mb) + " without its I");
    torch::NoGradGuard ng;
    // In the stage's last W the weights' final gradients come from these jobs, outside
    // autograd: report them to the buckets as the tensor hooks report the others.
    const WeightGradHook hook = [this, stage](const torch::Tensor& w, const torch::Tensor& g) {
      if (auto s = hook_slot.find(w.unsafeGetTensorImpl()); s != hook_slot.end()) on_grad(stage, s->second.first, s->second.second, g);
    };
    HookDeferredGrads reporting(armed_stage == stage ? &hook : nullptr);
    for (auto& job : it->second) job();
    deferred.erase(it);
  }

  void post_send(const Action& a) {
    const auto& s = *cfg.schedule;
    bool fwd = a.op == Op::SEND_F;
    int peer_stage = fwd ? s.next_stage(a.stage) : s.prev_stage(a.stage);
    torch::Tensor t;
    if (fwd) {
      t = states.at({a.stage, a.microbatch}).output.detach().contiguous();
    } else {
      auto g = grad_in.find({a.stage, a.microbatch});
      if (g == grad_in.end()) throw Error("runtime: SEND_B of stage " + std::to_string(a.stage) + " before its backward");
      t = g->second.contiguous();
      grad_in.erase(g);
      tag_tensor(t, MemCategory::SendHeld);  // only the send needs it now
    }
    int peer = global_of_stage(peer_stage);
    sends.emplace_back(compat::send(*cfg.world, t, peer, tag(fwd, fwd ? peer_stage : peer_stage, a.microbatch)), peer);
    note_in_group(sends.back().first, {-1, -1}, static_cast<long>(sends.size()) - 1);
    if (reducer) reducer->track_send(sends.back().first);
  }

  void note_in_group(const compat::WorkPtr& w, Key key, long index) {
    if (!in_p2p_group) return;
    group_issued.push_back(w);
    group_slots.emplace_back(key, index);
  }

  void begin_p2p_group() {
    compat::begin_p2p(*cfg.world);
    in_p2p_group = true;
    group_issued.clear();
    group_slots.clear();
  }

  // Ends the group; a handle the backend left null inside it becomes the group's.
  void end_p2p_group() {
    compat::WorkPtr whole = compat::end_p2p(*cfg.world, group_issued);
    in_p2p_group = false;
    ++rec.p2p_groups;
    for (const auto& [key, index] : group_slots) {
      compat::WorkPtr& w = key.first < 0 ? sends.at(static_cast<size_t>(index)).first
                                         : pending.at(key).at(static_cast<size_t>(index)).work;
      if (!w) w = whole;
      if (!w) throw Error("runtime: a grouped send or receive has no handle to wait on");
    }
  }

  void post_recv(const Action& a, size_t span) {
    const auto& s = *cfg.schedule;
    bool fwd = a.op == Op::RECV_F;
    int peer_stage = fwd ? s.prev_stage(a.stage) : s.next_stage(a.stage);
    torch::Tensor t = activation(a.stage, fwd);
    int peer = global_of_stage(peer_stage);
    Pending p{compat::recv(*cfg.world, t, peer, tag(fwd, a.stage, a.microbatch)), span, a.op, peer};
    (fwd ? recv_f : recv_b)[{a.stage, a.microbatch}] = t;
    auto& list_of_key = pending[{a.stage, a.microbatch}];
    list_of_key.push_back(p);
    note_in_group(p.work, {a.stage, a.microbatch}, static_cast<long>(list_of_key.size()) - 1);
  }

  // The parameters of the stage's next `fraction` share (parameter granularity), cut into
  // buckets of about bucket_bytes.
  std::vector<std::vector<torch::Tensor>> take_share(const Action& a) { return take_share(a, reduce_cursor, reduced_share); }
  std::vector<std::vector<torch::Tensor>> take_share(const Action& a, std::map<int, size_t>& cursor,
                                                     std::map<int, double>& shares) {
    const auto& named = part(a.stage).named_parameters();
    size_t& cur = cursor[a.stage];
    double& share = shares[a.stage];
    share = std::min(1.0, share + a.fraction);
    double total = 0;
    for (const auto& np : named) total += static_cast<double>(np.second.numel());
    double done = 0;
    for (size_t i = 0; i < cur; ++i) done += static_cast<double>(named[i].second.numel());
    std::vector<std::vector<torch::Tensor>> out(1);
    double bytes = 0;
    int unit = 0;  // zero 3: a bucket holds one unit's parameters (runtime/fsdp.h)
    while (cur < named.size() && (share >= 1.0 || done < share * total - 0.5)) {
      const bool new_unit = cfg.zero == 3 && !out.back().empty() && fsdp_unit_of(named[cur].first) != unit;
      if (cfg.zero == 3) unit = fsdp_unit_of(named[cur].first);
      torch::Tensor p = named[cur++].second;
      done += static_cast<double>(p.numel());
      if (new_unit || (!out.back().empty() && is_expert(out.back().front()) != is_expert(p))) {  // one group a bucket
        out.emplace_back();
        bytes = 0;
      }
      out.back().push_back(p);
      bytes += static_cast<double>(p.numel()) * 4;
      if (bytes >= cfg.bucket_bytes) {
        out.emplace_back();
        bytes = 0;
      }
    }
    if (out.back().empty()) out.pop_back();
    return out;
  }

  void reduce_grad(const Action& a, size_t span) {
    auto share = take_share(a);
    if (deferred_reduce.count(span)) return reduce_deferred(a.stage, share, span);
    for (const auto& params : share) {
      HookBucket* hb = hook_bucket(a.stage, params);
      const bool started = hb && hb->started;
      if (hb) *hb = HookBucket{hb->params, std::vector<torch::Tensor>(hb->params.size()), 0, false, hb->span};
      if (started) continue;  // launched by the gradient hooks during the backward
      start_bucket(params, span, a.stage, buckets);
    }
  }

  HookBucket* hook_bucket(int stage, const std::vector<torch::Tensor>& params) {
    auto it = hook_buckets.find(stage);
    if (it == hook_buckets.end()) return nullptr;
    for (HookBucket& hb : it->second)
      if (!hb.params.empty() && hb.params.front().is_same(params.front())) return &hb;
    return nullptr;
  }

  // overlap_grad_reduce: the buckets each stage's REDUCE_GRADs will cut (take_share replayed),
  // and a hook on each parameter that, during the stage's last backward, records its final
  // gradient (what it held plus this backward's) and launches the bucket's all-reduce when the
  // bucket is complete; finish_reductions writes the reduced sum over .grad as before.
  void install_grad_hooks() {
    if (!deferred_reduce.empty() || !cfg.grad_groups.empty() || cfg.zero > 0 || cfg.dp->size() == 1) return;
    std::map<int, size_t> cursor;
    std::map<int, double> shares;
    for (size_t i = 0; i < list->size(); ++i) {
      const Action& a = (*list)[i];
      const bool bwd = a.op == Op::B || a.op == Op::W || a.op == Op::OVERLAP_F_B;
      if (bwd) last_backward[a.op == Op::OVERLAP_F_B ? a.b_stage : a.stage] = i;
      if (a.op == Op::I) last_input_backward[a.stage] = i;
      if (a.op != Op::REDUCE_GRAD) continue;
      for (auto& params : take_share(a, cursor, shares))
        if (grad_group(a.stage, params).size() > 1)  // the others are only scaled, at the REDUCE_GRAD
          hook_buckets[a.stage].push_back({params, std::vector<torch::Tensor>(params.size()), 0, false, i});
    }
    for (auto& [stage, list_of] : hook_buckets)
      for (size_t b = 0; b < list_of.size(); ++b)
        for (size_t k = 0; k < list_of[b].params.size(); ++k) {
          torch::Tensor p = list_of[b].params[k];
          const int st = stage;
          p.register_hook([this, st, b, k](torch::Tensor g) { on_grad(st, b, k, g); });
          hook_slot[p.unsafeGetTensorImpl()] = {b, k};
        }
  }

  void on_grad(int stage, size_t b, size_t k, const torch::Tensor& g) {
    if (armed_stage != stage) return;
    HookBucket& hb = hook_buckets[stage][b];
    if (hb.started) return;
    const torch::Tensor& p = hb.params[k];
    if (!hb.totals[k].defined()) ++hb.ready;
    torch::NoGradGuard ng;
    hb.totals[k] = p.grad().defined() ? p.grad() + g : g.clone();
    if (hb.ready < static_cast<int>(hb.params.size())) return;
    std::vector<torch::Tensor> flat;
    for (const auto& t : hb.totals) flat.push_back(t.reshape({-1}));
    Bucket bk;
    bk.flat = torch::cat(flat);
    bk.params = hb.params;
    bk.group = &grad_group(stage, hb.params);
    bk.span = hb.span;
    launch(*bk.group, bk);
    buckets.push_back(std::move(bk));
    ++rec.buckets_in_backward;
    hb.started = true;
    hb.totals.assign(hb.params.size(), torch::Tensor());
  }

  // FOLD3D's deferred share (schedules/buckets.h, deferred_reductions): placed before the
  // stage's first compute, it reduces the previous iteration's gradients of these parameters,
  // which that iteration's OPTIMIZER skipped. The all-reduce starts here and runs beside the
  // compute that follows; the stage's first compute waits for it and applies the update
  // (finish_late) before reading the parameters, so the training equals synchronous data
  // parallelism. This share of this iteration waits in turn.
  void reduce_deferred(int stage, const std::vector<std::vector<torch::Tensor>>& share, size_t span) {
    if (late_stages.erase(stage)) {
      LateShare& l = awaiting[stage];
      for (const auto& b : share) {
        start_bucket(b, span, stage, l.buckets);
        l.params.insert(l.params.end(), b.begin(), b.end());
      }
    }
    held.emplace_back(stage, share);
  }

  void finish_late(int stage) {
    auto it = awaiting.find(stage);
    if (it == awaiting.end()) return;
    finish_reductions(it->second.buckets);
    opt->update_late(it->second.params);
    awaiting.erase(it);
  }

  void apply_late(int stage, const std::vector<std::vector<torch::Tensor>>& share, size_t span) {
    std::vector<Bucket> now;
    std::vector<torch::Tensor> params;
    for (const auto& b : share) {
      start_bucket(b, span, stage, now);
      params.insert(params.end(), b.begin(), b.end());
    }
    finish_reductions(now);
    opt->update_late(params);
  }

  bool is_expert(const torch::Tensor& p) const { return cfg.expert_params.count(p.unsafeGetTensorImpl()) > 0; }

  // The group a bucket of `params` (one kind: take_share) is reduced in.
  compat::Group& grad_group(int stage, const std::vector<torch::Tensor>& params) const {
    if (cfg.expert_dp && !params.empty() && is_expert(params.front())) return *cfg.expert_dp;
    auto it = cfg.grad_groups.find(stage);
    return it == cfg.grad_groups.end() ? shard_group() : *it->second;
  }

  // The group each bucket is cut over: dp, or with hybrid sharding its shard group.
  compat::Group& shard_group() const { return cfg.shard ? *cfg.shard : *cfg.dp; }

  // This member's chunk of a bucket of n elements: the bucket padded to a multiple of the shard
  // group's size (dp), cut into as many equal chunks (Megatron's distributed optimizer shards each
  // bucket so).
  std::pair<int64_t, int64_t> chunk_of(int64_t n) const {
    const int64_t d = shard_group().size(), c = (n + d - 1) / d;
    return {shard_group().rank * c, c};
  }

  // zero: the buckets every step reduces (take_share over the list's REDUCE_GRADs, as run_step
  // will cut them) and this member's chunk of each, for the optimizer's shards.
  void shard_optimizer() {
    if (!deferred_reduce.empty() || !cfg.grad_groups.empty())
      throw InputError("runtime: plan.zero = " + std::to_string(cfg.zero) +
                       " does not combine with deferred reductions (FOLD3D) or several chains (Chimera)");
    std::map<int, size_t> cursor;
    std::map<int, double> shares;
    std::vector<AdamW::Owned> owned;
    if (cfg.zero == 3) {
      ShardedParams::Options fo;
      fo.group = &shard_group();
      fo.timeout = cfg.timeout;
      fo.reshard_after_forward = cfg.reshard_after_forward;
      fsdp = std::make_unique<ShardedParams>(fo);
    }
    for (const Action& a : *list) {
      if (a.op != Op::REDUCE_GRAD) continue;
      for (const auto& params : take_share(a, cursor, shares)) {
        int64_t n = 0;
        for (const auto& p : params) n += p.numel();
        const auto [lo, len] = chunk_of(n);
        if (fsdp) fsdp->add_bucket(fsdp_unit_of(name_of(a.stage, params.front())), params, lo, len);
        for_each_owned(params, lo, len, [&](const torch::Tensor& p, int64_t at, int64_t, int64_t count) {
          owned.push_back({p, at, count});
        });
      }
    }
    {
      MemoryScope states(MemCategory::OptimizerStates);  // the sharded moments replace the whole ones
      opt->shard(owned);
    }
    shards = std::move(owned);
    if (fsdp) {
      opt->keep_params_elsewhere();  // checkpoints take the chunks from sharded_state()
      fsdp->shard();
      fsdp_params() = fsdp.get();
    }
  }

  const std::string& name_of(int stage, const torch::Tensor& p) {
    for (const auto& np : part(stage).named_parameters())
      if (np.second.is_same(p)) return np.first;
    throw Error("runtime: a parameter of stage " + std::to_string(stage) + " has no name");
  }

  // zero: reduce-scatters the bucket, averages this member's chunk into its gradients.
  void reduce_scatter_bucket(Bucket& b) {
    compat::Group& g = *b.group;
    const int64_t n = b.flat.numel();
    const auto [lo, len] = chunk_of(n);
    torch::Tensor padded = torch::zeros({len * g.size()}, b.flat.options());
    padded.narrow(0, 0, n).copy_(b.flat);
    torch::Tensor mine = torch::empty({len}, b.flat.options());
    compat::reduce_scatter_sum(g, padded, mine, cfg.timeout);
    // Hybrid sharding: the chunk's sums of the other shard groups (FSDP's HYBRID_SHARD all-reduce).
    if (cfg.replicate && cfg.replicate->size() > 1) compat::all_reduce_sum_blocking(*cfg.replicate, mine, cfg.timeout);
    mine.mul_(1.0 / cfg.dp->size());
    torch::NoGradGuard ng;
    for_each_owned(b.params, lo, len, [&](const torch::Tensor& p, int64_t at, int64_t in_chunk, int64_t count) {
      p.mutable_grad().view({-1}).narrow(0, at, count).copy_(mine.narrow(0, in_chunk, count));
    });
  }

  // zero: after the step, every member's updated chunk of every bucket to every member, one
  // asynchronous all-gather per bucket; without overlap_param_gather all finished at once, with
  // it each stage's when that stage next computes (finish_gathers).
  void gather_parameters() {
    torch::NoGradGuard ng;
    for (Bucket& b : gathers) {
      compat::Group& g = *b.group;
      std::vector<torch::Tensor> flat;
      for (const auto& p : b.params) flat.push_back(p.detach().reshape({-1}));
      torch::Tensor all = torch::cat(flat);
      const int64_t n = all.numel();
      const auto [lo, len] = chunk_of(n);
      torch::Tensor mine = torch::zeros({len}, all.options());
      const int64_t have = std::max<int64_t>(0, std::min(n, lo + len) - lo);
      if (have > 0) mine.narrow(0, 0, have).copy_(all.narrow(0, lo, have));
      Gather x;
      x.out = torch::empty({len * g.size()}, all.options());
      try {
        x.work = compat::all_gather_async(g, mine, x.out);
      } catch (const std::exception& e) {
        comm_failure("parameter all-gather in the " + g.name, -1, e);
      }
      x.params = b.params;
      x.group = &g;
      x.stage = b.stage;
      in_flight.push_back(std::move(x));
    }
    gathers.clear();
    if (!cfg.overlap_param_gather) finish_gathers(-1);
  }

  // Waits for the parameter all-gathers of `stage` (-1: all) and writes them into the
  // parameters; the time waited counts as waiting inside the action that needed them.
  void finish_gathers(int stage) {
    if (in_flight.empty()) return;
    torch::NoGradGuard ng;
    std::vector<Gather> rest;
    for (Gather& x : in_flight) {
      if (stage >= 0 && x.stage != stage) {
        rest.push_back(std::move(x));
        continue;
      }
      auto a = Clock::now();
      try {
        compat::wait(x.work, cfg.timeout);
      } catch (const std::exception& e) {
        comm_failure("parameter all-gather in the " + x.group->name, -1, e);
      }
      wait_in_action += seconds(a, Clock::now());
      if (stage >= 0) ++rec.gathers_overlapped;
      int64_t off = 0;
      for (auto& p : x.params) {
        p.detach().view({-1}).copy_(x.out.narrow(0, off, p.numel()));
        off += p.numel();
      }
    }
    in_flight = std::move(rest);
  }

  // The bucket's all-reduce: one asynchronous call, or queued chunk by chunk behind the sends.
  void launch(compat::Group& g, Bucket& b) {
    if (reducer) b.job = reducer->submit(g, b.flat);
    else b.work = compat::all_reduce_sum(g, b.flat);
  }

  void start_bucket(const std::vector<torch::Tensor>& params, size_t span, int stage, std::vector<Bucket>& into) {
    compat::Group& g = grad_group(stage, params);
    if (g.size() == 1) {  // nothing to sum; routed experts with dp = ep still average over dp
      if (cfg.dp->size() > 1) {
        torch::NoGradGuard ng;
        for (const auto& p : params)
          if (p.grad().defined()) p.mutable_grad().mul_(1.0 / cfg.dp->size());
      }
      return;
    }
    MemoryScope scope(MemCategory::Communication);
    std::vector<torch::Tensor> flat;
    for (const auto& p : params) {
      if (!p.grad().defined()) {
        p.mutable_grad() = torch::zeros_like(p);
        tag_tensor(p.grad(), MemCategory::Gradients);
      }
      flat.push_back(p.grad().reshape({-1}));
    }
    Bucket b;
    b.flat = torch::cat(flat);
    b.params = params;
    b.group = &g;
    b.span = span;
    b.stage = stage;
    if (cfg.zero == 0) launch(g, b);  // zero: reduce-scattered when finished
    into.push_back(std::move(b));
  }

  // Sums over dp (and over the copies of a part in several chains), then divides by dp: the
  // copies' gradients are partial sums over their chain's microbatches.
  void finish_reductions(std::vector<Bucket>& list) {
    MemoryScope scope(MemCategory::Communication);
    const double inv = 1.0 / cfg.dp->size();
    for (Bucket& b : list) {
      if (cfg.zero > 0) {
        auto a = Clock::now();
        try {
          reduce_scatter_bucket(b);
        } catch (const std::exception& e) {
          comm_failure("gradient reduce-scatter in the " + b.group->name, -1, e);
        }
        wait_in_action += seconds(a, Clock::now());
        close_span(b.span);
        gathers.push_back(std::move(b));
        continue;
      }
      auto a = Clock::now();
      try {
        if (b.job) b.job->wait(cfg.timeout);
        else compat::wait(b.work, cfg.timeout);
      } catch (const std::exception& e) {
        comm_failure("gradient all-reduce in the " + b.group->name, -1, e);
      }
      wait_in_action += seconds(a, Clock::now());
      close_span(b.span);
      torch::NoGradGuard ng;
      int64_t off = 0;
      for (auto& p : b.params) {
        p.mutable_grad().copy_(b.flat.narrow(0, off, p.numel()).view_as(p) * inv);
        off += p.numel();
      }
    }
    list.clear();
  }

  void optimizer() {
    while (!awaiting.empty()) finish_late(awaiting.begin()->first);  // a deferred share no compute waited for
    finish_reductions(buckets);
    for (auto& [work, peer] : sends) {
      auto a = Clock::now();
      try {
        compat::wait(work, cfg.timeout);
      } catch (const std::exception& e) {
        comm_failure("a send", peer, e);
      }
      wait_in_action += seconds(a, Clock::now());
    }
    sends.clear();
    for (const auto& [stage, share] : reduced_share)
      if (share < 1.0 - 1e-9) throw Error("runtime: stage " + std::to_string(stage) + " reduced only " + std::to_string(share) + " of its gradients");
    reduce_cursor.clear();
    reduced_share.clear();
    std::vector<torch::Tensor> later;
    for (const auto& [stage, share] : held) {
      late_stages.insert(stage);
      for (const auto& b : share) later.insert(later.end(), b.begin(), b.end());
    }
    late = std::move(held);
    held.clear();
    if (cfg.precision != Precision::Fp32) clear_autocast_cache();
    grad_sq_acc = squared_gradients();
    if (fsdp) {  // the step counted, then applied unit by unit to the chunks (runtime/fsdp.h)
      for (const auto& [stage, P] : parts)
        for (const auto& np : P->named_parameters()) later.push_back(np.second);
      opt->step(later);
      fsdp->update_units([this](const std::vector<torch::Tensor>& params) { opt->update_late(params); });
      gathers.clear();  // gathered unit by unit at their next passes instead
      for (const auto& [stage, P] : parts)  // the unsharded gradients go until the next backward
        for (const auto& np : P->named_parameters()) np.second.mutable_grad() = torch::Tensor();
    } else {
      opt->step(later);
    }
    if (cfg.zero > 0) gather_parameters();
    if (!states.empty() || !deferred.empty() || !recv_f.empty() || !recv_b.empty() || !pending.empty())
      throw Error("runtime: state left over at the optimizer step (a forward without backward or an unused receive)");
  }

  // Sum of the squared gradients of every parameter this rank holds (no host sync on a GPU).
  torch::Tensor squared_gradients() const {
    torch::NoGradGuard ng;
    torch::Tensor acc = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(cfg.device));
    if (!shards.empty()) {  // zero: each member holds the reduced gradients of its chunks only
      for (const auto& o : shards)
        acc += o.param.grad().reshape({-1}).narrow(0, o.offset, o.length).to(torch::kFloat64).pow(2).sum();
      compat::all_reduce_sum_blocking(shard_group(), acc, cfg.timeout);  // each chunk once (replicas hold the same)
      return acc;
    }
    for (const auto& [stage, P] : parts)
      for (const auto& np : P->named_parameters())
        if (np.second.grad().defined()) acc += np.second.grad().to(torch::kFloat64).pow(2).sum();
    return acc;
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

  void compute(const Action& a) {
    if (schedules::is_compute(a.op)) finish_gathers(a.stage);  // its parameters, gathered after the last step
    if (a.op == Op::OVERLAP_F_B) finish_gathers(a.b_stage);
    switch (a.op) {
      case Op::F: wait_inputs(a.stage, a.microbatch, false); forward(a.stage, a.microbatch); break;
      case Op::B: wait_inputs(a.stage, a.microbatch, true); backward(a.stage, a.microbatch, false); break;
      case Op::I: wait_inputs(a.stage, a.microbatch, true); backward(a.stage, a.microbatch, true); break;
      case Op::W: weight(a.stage, a.microbatch); break;
      case Op::R: wait_inputs(a.stage, a.microbatch, true); recompute(a.stage, a.microbatch); break;
      case Op::OVERLAP_F_B: {
        wait_inputs(a.stage, a.microbatch, false);
        forward(a.stage, a.microbatch);
        MemoryScope scope(MemCategory::Backward);
        wait_inputs(a.b_stage, a.b_microbatch, true);
        backward(a.b_stage, a.b_microbatch, a.b_op == Op::I);
        break;
      }
      case Op::OPTIMIZER: optimizer(); break;
      default: break;
    }
  }

  // What an action's allocations are, until retagged (memory_counter.h).
  static MemCategory category_of(Op op) {
    switch (op) {
      case Op::RECV_F: case Op::RECV_B: return MemCategory::Received;
      case Op::SEND_F: case Op::SEND_B: case Op::REDUCE_GRAD: return MemCategory::Communication;
      case Op::OFFLOAD: return MemCategory::OffloadHost;
      case Op::B: case Op::I: case Op::W: return MemCategory::Backward;
      case Op::OPTIMIZER: return MemCategory::OptimizerStates;
      default: return MemCategory::Activations;  // F, R, RELOAD, OVERLAP_F_B's forward
    }
  }

  // Gradients a backward produced leave its working memory for their own category.
  void tag_gradients() {
    if (!memory_counter_installed(cfg.device)) return;
    for (const auto& [stage, P] : parts)
      for (const auto& np : P->named_parameters()) tag_tensor(np.second.grad(), MemCategory::Gradients);
  }

  void execute(const Action& a, size_t span) {
    position = span;
    MemoryScope scope(category_of(a.op));
    struct TagAfter {  // also when the action throws
      Impl* m;
      bool on;
      ~TagAfter() { if (on) m->tag_gradients(); }
    } tag_after{this, a.op == Op::B || a.op == Op::I || a.op == Op::W || a.op == Op::OVERLAP_F_B};
    switch (a.op) {
      case Op::SEND_F: case Op::SEND_B: post_send(a); break;
      case Op::RECV_F: case Op::RECV_B: post_recv(a, span); break;
      case Op::REDUCE_GRAD: reduce_grad(a, span); break;
      case Op::OFFLOAD: offload(a.stage, a.microbatch); break;
      case Op::RELOAD: reload(a.stage, a.microbatch); break;
      default: {
        // Armed in the stage's last backward (B, W or OVERLAP_F_B) and, with a split backward, in
        // its last I, where the parameters outside the deferred linears get their final gradients.
        const int st = a.op == Op::OVERLAP_F_B ? a.b_stage : a.stage;
        auto lb = last_backward.find(st);
        auto li = last_input_backward.find(st);
        const bool last = (lb != last_backward.end() && lb->second == span) || (li != last_input_backward.end() && li->second == span);
        armed_stage = last ? st : -1;
        if (a.op != Op::OPTIMIZER) finish_late(a.stage);
        if (a.op == Op::OVERLAP_F_B) finish_late(a.b_stage);
        compute(a);
        armed_stage = -1;
        break;
      }
    }
  }
};

Executor::Executor(ExecConfig cfg, std::map<int, ModelPart*> parts, AdamW* optimizer) : impl_(std::make_unique<Impl>()) {
  impl_->cfg = std::move(cfg);
  impl_->parts = std::move(parts);
  impl_->opt = optimizer;
  impl_->list = &impl_->cfg.schedule->actions.at(static_cast<size_t>(impl_->cfg.pp_rank));
  const std::vector<bool> deferred = schedules::deferred_reductions(*impl_->list);
  for (size_t i = 0; i < impl_->list->size(); ++i) {
    const Action& a = (*impl_->list)[i];
    if (a.op == Op::R) impl_->recompute_fraction[{a.stage, a.microbatch}] = a.fraction;
    if (a.op == Op::R && schedules::recompute_fused_with_backward(*impl_->list, i))
      impl_->per_layer_recompute.insert({a.stage, a.microbatch});
    if (deferred[i]) impl_->deferred_reduce.insert(i);
  }
  if (impl_->cfg.zero > 0 && impl_->cfg.expert_dp)
    throw InputError("runtime: plan.zero = " + std::to_string(impl_->cfg.zero) + " does not combine with expert parallelism (ep > 1)");
  if (impl_->cfg.zero > 0 && impl_->cfg.dp->size() > 1) impl_->shard_optimizer();
  if (impl_->cfg.overlap_grad_reduce) impl_->install_grad_hooks();
  if (impl_->cfg.preemptive_comm) {
    if (impl_->cfg.zero > 0)
      throw InputError("runtime: plan.preemptive_comm = true with zero = " + std::to_string(impl_->cfg.zero) +
                       " is not supported (allowed: zero = 0; the distributed optimizer's reduce-scatters are not chunked)");
    if (!impl_->cfg.grad_groups.empty())
      throw InputError("runtime: plan.preemptive_comm = true is not supported for schedule '" + impl_->cfg.schedule->name +
                       "' (its copies reduce in chain groups; allowed: one pipeline chain)");
    if (impl_->cfg.dp->size() > 1) {
      PreemptOptions po;
      po.timeout = impl_->cfg.timeout;
      impl_->reducer = std::make_unique<PreemptiveReducer>(po);
    }
  }
}

void Executor::flush() {
  Impl& m = *impl_;
  m.finish_gathers(-1);
  for (const auto& [stage, share] : m.late)
    if (m.late_stages.erase(stage)) m.apply_late(stage, share, std::numeric_limits<size_t>::max());
  m.late.clear();
}

Executor::~Executor() {
  if (impl_->fsdp && fsdp_params() == impl_->fsdp.get()) fsdp_params() = nullptr;
}

std::vector<std::pair<std::string, torch::Tensor>> Executor::sharded_state() const {
  return impl_->fsdp ? impl_->fsdp->state() : std::vector<std::pair<std::string, torch::Tensor>>{};
}

void Executor::load_sharded_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  if (impl_->fsdp) impl_->fsdp->load(state);
}

std::int64_t Executor::sharded_param_bytes() const { return impl_->fsdp ? impl_->fsdp->shard_bytes() : -1; }

long Executor::unit_gathers() const { return impl_->fsdp ? impl_->fsdp->gathers() : 0; }

StepRecord Executor::run_step(const BatchFn& batch, Clock::time_point t0) {
  Impl& m = *impl_;
  m.rec = StepRecord{};
  m.batch = &batch;
  m.loss_acc = torch::Tensor();
  m.grad_sq_acc = torch::Tensor();
  if (!m.timeline) m.timeline = std::make_unique<Timeline>(m.cfg.device);
  Timeline& tl = *m.timeline;
  TpContext& tp = tp_context();
  const size_t n = m.list->size();
  tl.begin(t0);
  const int step_mark = tl.mark();
  std::unique_ptr<OpRecorder> ops;  // --op-times: the model's products and cores mark the timeline
  if (m.cfg.op_times) ops = std::make_unique<OpRecorder>(tl), op_recorder() = ops.get();
  struct Uninstall {
    bool on;
    ~Uninstall() { if (on) op_recorder() = nullptr; }
  } uninstall{static_cast<bool>(ops)};
  m.start_mark.assign(n, -1);
  m.end_marks.assign(n, {});
  m.piece_marks.clear();
  const long collectives_before = tp.collectives;
  reset_device_peak(m.cfg.device);
  std::vector<double> host_wait(n, 0), tp_comm(n, 0);  // per action, host-measured
  std::vector<std::int64_t> live(n, -1);               // per action, bytes in tensors after it
  for (size_t i = 0; i < n; ++i) {
    const Action& a = (*m.list)[i];
    m.wait_in_action = 0;
    const double tp_before = tp.comm_s;
    m.start_mark[i] = tl.mark();
    // A run of consecutive sends and receives is one group (NCCL-safe, docs/runtime.md).
    if (schedules::is_p2p(a.op) && !m.in_p2p_group) m.begin_p2p_group();
    m.execute(a, i);
    if (m.in_p2p_group && (i + 1 == n || !schedules::is_p2p((*m.list)[i + 1].op))) m.end_p2p_group();
    m.end_marks[i].insert(m.end_marks[i].begin(), tl.mark());  // first: the action's own end
    host_wait[i] = m.wait_in_action;
    tp_comm[i] = tp.comm_s - tp_before;
    live[i] = device_allocated_bytes(m.cfg.device);
  }
  tl.resolve();  // on a GPU: waits for the iteration's kernels, then reads the events
  if (ops) m.rec.op_s = ops->seconds();
  m.rec.time_s = tl.resolved_at_s() - tl.seconds(step_mark);
  m.rec.peak_bytes = device_peak_bytes(m.cfg.device);
  if (memory_counter_installed(m.cfg.device)) m.rec.peak_breakdown = device_peak_breakdown(m.cfg.device);
  m.rec.tp_collectives = tp.collectives - collectives_before;
  for (PieceMarks& pm : m.piece_marks) {
    if (pm.end_mark < 0) throw Error("runtime: a tp piece of action " + std::to_string(pm.span.position) + " never ended");
    pm.span.start_s = tl.seconds(pm.start_mark);
    pm.span.end_s = tl.seconds(pm.end_mark);
    m.rec.pieces.push_back(pm.span);
  }
  if (m.loss_acc.defined()) m.rec.loss_sum = m.loss_acc.item<double>();
  if (m.grad_sq_acc.defined()) m.rec.grad_sq = m.grad_sq_acc.item<double>();
  if (m.reducer) {
    const PreemptStats now = m.reducer->stats();
    m.rec.preempt_chunks = now.chunks - m.reducer_seen.chunks;
    m.rec.preempt_yields = now.yields - m.reducer_seen.yields;
    m.rec.preempt_expired = now.expired - m.reducer_seen.expired;
    m.rec.preempt_yield_s = now.yield_s - m.reducer_seen.yield_s;
    m.reducer_seen = now;
  }
  m.rec.spans.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const Action& a = (*m.list)[i];
    ActionSpan sp;
    sp.position = static_cast<int>(i);
    sp.stream = stream_of(a.op);
    sp.start_s = tl.seconds(m.start_mark[i]);
    const double own_end = tl.seconds(m.end_marks[i].front());
    sp.end_s = own_end;  // receives and reductions are closed again when waited
    for (int k : m.end_marks[i]) sp.end_s = std::max(sp.end_s, tl.seconds(k));
    sp.live_bytes = live[i];
    m.rec.spans.push_back(sp);
    const double dur = own_end - sp.start_s;
    m.rec.wait_s += host_wait[i];
    if (schedules::is_compute(a.op)) {
      m.rec.compute_s += dur - host_wait[i] - tp_comm[i];
      if (a.op == Op::OPTIMIZER) m.rec.optimizer_s += dur - host_wait[i] - tp_comm[i];
      m.rec.comm_s += tp_comm[i];
    } else if (a.op != Op::OFFLOAD && a.op != Op::RELOAD) {
      m.rec.comm_s += dur;
    }
  }
  return m.rec;
}

}  // namespace stagecraft::runtime
