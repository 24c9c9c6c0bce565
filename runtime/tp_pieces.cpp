#include "runtime/tp_pieces.h"

#include <memory>
#include <string>

#include "schedules/error.h"

namespace stagecraft::runtime {

using schedules::InnerSchedule;
using schedules::Op;
using schedules::Pass;
using schedules::Piece;
using schedules::PieceKind;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A value computed elsewhere standing in for `t`: the forward returns `value`, the backward
// passes the gradient to `t` unchanged. It joins an all-reduce's result to the partial sum it
// came from (the all-reduce's backward is the identity: Megatron's g, Oases eq. (1)), and gives
// a recomputed block the output value its forward saved, so that recomputation needs no collective.
struct Substitute : torch::autograd::Function<Substitute> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor&, const torch::Tensor& value) { return value; }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], torch::Tensor()}; }
};

torch::Tensor leaf(const torch::Tensor& t) { return t.detach().requires_grad_(true); }

// A tp collective in flight.
struct InFlight {
  compat::WorkPtr work;
  torch::Tensor buf;        // (b/2, s, h) summed in place (an fp32 copy where the group widens)
  torch::ScalarType dtype = torch::kFloat32;  // the dtype its result is read in
  size_t marks = 0;         // index of its span in env.marks
  bool unread = false;      // a recomputed block's collective whose output was known: nothing reads it
  bool launched = false;
  bool done = false;
};

// Executes one inner schedule over one (stage, microbatch): compute pieces in issue order,
// each first completing the collectives it depends on; collectives launched asynchronously.
class Runner {
 public:
  Runner(const PieceEnv& env, TpMicrobatch& mb, InnerSchedule s)
      : env_(env), part_(*env.part), mb_(mb), s_(std::move(s)), flight_(s_.pieces.size()), R_(2 * mb.recompute_layers) {}

  torch::Tensor ckpt;        // (b, s, h) the stage's checkpoint, for recomputation from it
  double loss_scale = 0;     // the factor of the loss's gradient (B or I of the last stage)

  void run() {
    for (size_t i = 0; i < s_.pieces.size(); ++i) {
      if (s_.pieces[i].kind == PieceKind::Comm) launch(i);
      else compute(i);
    }
    for (size_t i = 0; i < s_.pieces.size(); ++i)  // what no piece read: the last blocks, redundant ones
      if (s_.pieces[i].kind == PieceKind::Comm) complete(i);
  }

 private:
  const PieceEnv& env_;
  GptPart& part_;
  TpMicrobatch& mb_;
  const InnerSchedule s_;
  std::vector<InFlight> flight_;  // per piece (collectives only)
  const int R_;                   // blocks F ran without a graph

  SubBatch& sb(const Piece& p) { return mb_.sb[static_cast<size_t>(p.sub_batch)]; }
  bool mode_saves(int k) const {  // F keeps block k's input for the recomputation joined to B
    if (schedules::tp_overlap_fine_grained(env_.mode)) return true;
    return schedules::tp_overlap_joins_recompute(env_.mode) && k % 2 == 0;  // merak, cross-pass: layer inputs
  }
  std::string name(const Piece& p) const {
    return std::string(p.kind == PieceKind::Comm ? "all-reduce " : "piece ") + std::string(schedules::pass_name(p.pass)) +
           " of block " + std::to_string(p.block) + " sub-batch " + std::to_string(p.sub_batch);
  }
  [[noreturn]] void fail(const Piece& p, const std::string& why) const {
    throw Error("runtime: rank " + std::to_string(env_.global_rank) + ": " + name(p) + ": " + why);
  }

  size_t open_span(const Piece& p) {
    PieceMarks m;
    m.span = {env_.position, p.kind == PieceKind::Comm, p.pass, p.block, p.sub_batch, 0, 0};
    m.start_mark = env_.timeline->mark();
    env_.marks->push_back(m);
    return env_.marks->size() - 1;
  }
  void close_span(size_t i) { (*env_.marks)[i].end_mark = env_.timeline->mark(); }

  void compute(size_t i) {
    const Piece& p = s_.pieces[i];
    // Recomputation inside a backward (cross-pass) runs under autocast like a forward; the
    // backward pieces and the layer-norm backwards of their collectives do not.
    std::unique_ptr<AutocastScope> autocast;
    if (p.pass == Pass::Recompute) autocast = std::make_unique<AutocastScope>(env_.device, env_.precision);
    for (int d : p.deps)
      if (s_.pieces[static_cast<size_t>(d)].kind == PieceKind::Comm) complete(static_cast<size_t>(d));
    const size_t span = open_span(p);
    switch (p.pass) {
      case Pass::Forward: forward_piece(p); break;
      case Pass::Recompute: recompute_piece(p); break;
      case Pass::Backward: backward_piece(p); break;
      case Pass::Weight: fail(p, "weight gradients run from the queue of W, not as pieces");
    }
    close_span(span);
  }

  // ---- forward -------------------------------------------------------------------------
  void forward_piece(const Piece& p) {
    SubBatch& b = sb(p);
    const int k = p.block;
    if (k == schedules::kEmbeddingBlock) {
      b.embed_out = part_.embed(b.tokens);
      b.x[0] = R_ > 0 ? b.embed_out.detach() : leaf(b.embed_out);
      return;
    }
    if (k == s_.blocks) {
      b.loss = part_.loss(b.x[static_cast<size_t>(k)], b.targets);
      return;
    }
    const size_t u = static_cast<size_t>(k);
    if (k < R_) {  // recomputed later: no graph
      torch::NoGradGuard ng;
      b.partial[u] = part_.block_core(part_.block_norm(b.x[u], k), k);
      return;
    }
    b.q[u] = part_.block_norm(b.x[u], k);
    b.qd[u] = leaf(b.q[u]);
    b.partial[u] = part_.block_core(b.qd[u], k);
  }

  // The consumer of block k's forward all-reduce: the residual stream after the block.
  void finish_forward(const Piece& p, const torch::Tensor& sum) {
    SubBatch& b = sb(p);
    const int k = p.block;
    const size_t u = static_cast<size_t>(k);
    const bool graph = p.pass == Pass::Recompute || k >= R_;
    c10::AutoGradMode mode(graph);
    torch::Tensor y = b.x[u] + (Substitute::apply(b.partial[u], sum) + part_.block_bias(k));
    b.partial[u] = torch::Tensor();
    if (graph) {
      b.y[u] = y;
      b.x[u + 1] = leaf(y);
      return;
    }
    b.x[u] = torch::Tensor();  // F of a recomputed block: values only
    if (k + 1 == R_) {
      b.x[u + 1] = leaf(y);  // the graph of the rest of the stage starts here
    } else {
      b.x[u + 1] = y;
      if (mode_saves(k + 1)) b.saved[u + 1] = y;
    }
  }

  // ---- recomputation -------------------------------------------------------------------
  torch::Tensor recompute_input(const Piece& p) {
    SubBatch& b = sb(p);
    const size_t u = static_cast<size_t>(p.block);
    if (p.block == 0) {
      if (!ckpt.defined()) fail(p, "the stage's checkpoint is not on the device (RELOAD missing before it)");
      const int64_t half = ckpt.size(0) / 2;
      return ckpt.narrow(0, p.sub_batch * half, half);
    }
    torch::Tensor t = b.saved[u];
    if (!t.defined()) fail(p, "neither the forward nor an earlier recomputation left this block's input");
    b.saved[u] = torch::Tensor();
    return t;
  }

  void recompute_piece(const Piece& p) {
    SubBatch& b = sb(p);
    const int k = p.block;
    const size_t u = static_cast<size_t>(k);
    c10::AutoGradMode on(true);
    if (!b.x[u].defined()) b.x[u] = leaf(recompute_input(p));
    b.q[u] = part_.block_norm(b.x[u], k);
    b.qd[u] = leaf(b.q[u]);
    b.partial[u] = part_.block_core(b.qd[u], k);
    // The block's output is the next block's input, known when the forward kept it (or when
    // the next block's recomputation or the not-recomputed rest of the stage holds it as a leaf):
    // the graph needs no all-reduce result then (Oases eq. (1)).
    const torch::Tensor& known = b.x[u + 1];
    if (known.defined())
      b.y[u] = Substitute::apply(b.x[u] + (b.partial[u] + part_.block_bias(k)), known.detach());
  }

  // ---- backward ------------------------------------------------------------------------
  torch::Tensor output_grad(const Piece& p) {
    SubBatch& b = sb(p);
    const int k = p.block;
    torch::Tensor g = k + 1 == s_.blocks && !part_.shape().head ? b.out_grad : b.x[static_cast<size_t>(k + 1)].grad();
    if (!g.defined()) fail(p, "the gradient of the block's output is missing");
    return g;
  }

  void backward_piece(const Piece& p) {
    SubBatch& b = sb(p);
    const int k = p.block;
    if (k == s_.blocks) {
      torch::autograd::backward({b.loss}, {torch::full({}, loss_scale * b.weight, b.loss.options())});
      b.loss = torch::Tensor();
      return;
    }
    if (k == schedules::kEmbeddingBlock) {
      torch::Tensor g = b.x[0].grad();
      if (!g.defined()) fail(p, "the embedding output's gradient is missing");
      b.embed_out.backward(g);
      b.embed_out = torch::Tensor();
      return;
    }
    const size_t u = static_cast<size_t>(k);
    if (!b.y[u].defined()) fail(p, "the block has no graph (recomputation missing)");
    torch::autograd::backward({b.y[u]}, {output_grad(p)});
    b.y[u] = torch::Tensor();
    b.x[u + 1] = torch::Tensor();
    if (k + 1 == s_.blocks) b.out_grad = torch::Tensor();
  }

  // The consumer of block k's backward all-reduce: Megatron's f is done, the layer norm's
  // backward adds its part to x[k].grad.
  void finish_backward(const Piece& p, const torch::Tensor& sum) {
    SubBatch& b = sb(p);
    const size_t u = static_cast<size_t>(p.block);
    torch::autograd::backward({b.q[u]}, {sum});
    b.q[u] = torch::Tensor();
    b.qd[u] = torch::Tensor();
  }

  // ---- collectives ---------------------------------------------------------------------
  void launch(size_t i) {
    const Piece& p = s_.pieces[i];
    SubBatch& b = sb(p);
    const size_t u = static_cast<size_t>(p.block);
    torch::Tensor src = p.pass == Pass::Backward ? b.qd[u].grad() : b.partial[u];
    if (!src.defined()) fail(p, "nothing to reduce");
    InFlight& f = flight_[i];
    const auto t0 = Clock::now();
    f.marks = open_span(p);
    f.dtype = src.scalar_type();
    if (compat::all_reduce_widens(*env_.tp, src)) f.buf = src.detach().to(torch::kFloat32);
    else if (p.pass == Pass::Backward) f.buf = src.detach().contiguous();  // the leaf's own gradient, summed in place
    else f.buf = src.detach().clone(at::MemoryFormat::Contiguous);
    f.work = compat::all_reduce_sum(*env_.tp, f.buf);
    f.launched = true;
    f.unread = p.pass == Pass::Recompute && b.y[u].defined();
    if (f.unread) b.partial[u] = torch::Tensor();
    TpContext& tp = tp_context();
    tp.collectives += 1;
    tp.comm_s += since(t0);
  }

  void complete(size_t i) {
    InFlight& f = flight_[i];
    const Piece& p = s_.pieces[i];
    if (f.done) return;
    if (!f.launched) fail(p, "waited for before its launch");
    const auto t0 = Clock::now();
    try {
      compat::wait(f.work, env_.timeout);
    } catch (const std::exception& e) {
      fail(p, "waiting in the " + env_.tp->name + " failed: " + e.what());
    }
    tp_context().comm_s += since(t0);
    close_span(f.marks);
    f.done = true;
    torch::Tensor sum = f.buf.scalar_type() == f.dtype ? f.buf : f.buf.to(f.dtype);
    f.buf = torch::Tensor();
    f.work.reset();
    if (p.pass == Pass::Backward) finish_backward(p, sum);
    else if (!f.unread) finish_forward(p, sum);
  }
};

schedules::InnerSchedule schedule_of(const PieceEnv& env, Op op, int layers, int recompute_layers) {
  schedules::InnerSpec spec;
  spec.mode = env.mode;
  spec.op = op;
  spec.layers = layers;
  spec.embedding = env.part->shape().embedding;
  spec.head = env.part->shape().head;
  spec.comm = true;
  spec.recompute_layers = recompute_layers;
  schedules::InnerSchedule s = schedules::inner_schedule(spec);
  if (s.sub_batches != 2)
    throw Error("runtime: the inner schedule of a tp-overlap mode has " + std::to_string(s.sub_batches) + " sub-batches, not 2");
  return s;
}

void size_state(TpMicrobatch& mb, int blocks) {
  for (SubBatch& b : mb.sb) {
    b.x.assign(static_cast<size_t>(blocks) + 1, torch::Tensor());
    for (auto* v : {&b.q, &b.qd, &b.partial, &b.y, &b.saved}) v->assign(static_cast<size_t>(blocks), torch::Tensor());
  }
}

// Rows [j*b/2, (j+1)*b/2) of `t` (b, ...).
torch::Tensor half_of(const torch::Tensor& t, int j) {
  const int64_t b = t.size(0);
  if (b % 2 != 0)
    throw Error("runtime: a microbatch of " + std::to_string(b) + " samples cannot split into two equal sub-batches");
  return t.narrow(0, j * (b / 2), b / 2);
}

}  // namespace

StageForward overlap_forward(const PieceEnv& env, TpMicrobatch& mb, const torch::Tensor& input, const torch::Tensor& tokens,
                             const torch::Tensor& targets) {
  GptPart& P = *env.part;
  const int blocks = P.blocks();
  size_state(mb, blocks);
  const bool graph_from_input = mb.recompute_layers == 0;
  for (int j = 0; j < 2; ++j) {
    SubBatch& b = mb.sb[static_cast<size_t>(j)];
    if (P.shape().embedding) b.tokens = half_of(tokens, j);
    else b.x[0] = graph_from_input ? leaf(half_of(input, j)) : half_of(input, j).detach();
    if (P.shape().head) b.targets = half_of(targets, j);
  }
  Runner run(env, mb, schedule_of(env, Op::F, P.shape().num_layers, 0));
  run.run();
  StageForward out;
  if (P.shape().embedding) out.ckpt = torch::cat({mb.sb[0].embed_out.detach(), mb.sb[1].embed_out.detach()});
  else out.ckpt = input;
  if (P.shape().head) out.output = (mb.sb[0].loss * mb.sb[0].weight + mb.sb[1].loss * mb.sb[1].weight).detach();
  else out.output = torch::cat({mb.sb[0].x.back().detach(), mb.sb[1].x.back().detach()});
  for (SubBatch& b : mb.sb) b.tokens = b.targets = torch::Tensor();
  return out;
}

torch::Tensor overlap_backward(const PieceEnv& env, TpMicrobatch& mb, Op op, const torch::Tensor& out_grad, double loss_scale,
                               const torch::Tensor& ckpt) {
  GptPart& P = *env.part;
  for (int j = 0; j < 2; ++j)
    if (!P.shape().head) mb.sb[static_cast<size_t>(j)].out_grad = half_of(out_grad, j);
  Runner run(env, mb, schedule_of(env, op, P.shape().num_layers, mb.recompute_layers));
  run.ckpt = ckpt;
  run.loss_scale = loss_scale;
  run.run();
  if (P.shape().embedding) return torch::Tensor();
  torch::Tensor g0 = mb.sb[0].x[0].grad(), g1 = mb.sb[1].x[0].grad();
  if (!g0.defined() || !g1.defined())
    throw Error("runtime: rank " + std::to_string(env.global_rank) + ": the stage's input gradient is missing");
  return torch::cat({g0, g1});
}

}  // namespace stagecraft::runtime
