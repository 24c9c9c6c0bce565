#include "schedules/tp_overlap.h"

#include <algorithm>

#include "schedules/error.h"

namespace stagecraft::schedules {

namespace {

constexpr TpOverlap kModes[] = {TpOverlap::Blocking, TpOverlap::Merak, TpOverlap::CrossPass, TpOverlap::Oases, TpOverlap::Te};

// One sub-batch's program: pieces with dependencies as indices into the same chain.
struct Chain {
  std::vector<Piece> pieces;
  int segment = 0;  // pass segment of the pieces added next

  int add(PieceKind k, Pass p, int block, std::vector<int> deps, bool redundant = false, double fraction = 1) {
    Piece x;
    x.fraction = fraction;
    x.kind = k;
    x.pass = p;
    x.block = block;
    x.redundant = redundant;
    x.segment = segment;
    x.deps = std::move(deps);
    pieces.push_back(std::move(x));
    return static_cast<int>(pieces.size()) - 1;
  }
};

std::vector<int> dep(int i) { return i >= 0 ? std::vector<int>{i} : std::vector<int>{}; }

// Compute then (with comm) its collective; returns the piece the next block reads. In te mode
// the collective's first n-1 of n chunks run beside the compute (issued with it, after what it
// reads) and the last chunk after both.
int block_with_comm(Chain& c, const InnerSpec& s, Pass p, int block, std::vector<int> deps, bool redundant = false) {
  const int n = s.mode == TpOverlap::Te && s.comm ? std::max(1, s.comm_chunks) : 1;
  const int beside = n > 1 ? c.add(PieceKind::Comm, p, block, deps, redundant, (n - 1.0) / n) : -1;
  int x = c.add(PieceKind::Compute, p, block, std::move(deps));
  if (!s.comm) return x;
  std::vector<int> after = {x};
  if (beside >= 0) after.push_back(beside);
  return c.add(PieceKind::Comm, p, block, after, redundant, 1.0 / n);
}

// Forward (or recomputation as the forward again) of blocks [0, n): each block reads the
// previous block's collective; with `ends` the embedding comes first and the head last.
void forward_chain(Chain& c, const InnerSpec& s, Pass p, int n, bool ends) {
  int prev = -1;
  if (ends && s.embedding) prev = c.add(PieceKind::Compute, p, kEmbeddingBlock, {});
  for (int k = 0; k < n; ++k) {
    bool last_recompute = p == Pass::Recompute && k == n - 1;  // nothing reads its collective
    prev = block_with_comm(c, s, p, k, dep(prev), last_recompute);
  }
  if (ends && s.head) c.add(PieceKind::Compute, p, 2 * s.layers, dep(prev));
}

// Fine-grained recomputation of block k: from the saved output of the collective before it.
int recompute_block_fine(Chain& c, int k) { return c.add(PieceKind::Compute, Pass::Recompute, k, {}); }

// Recomputation of layer l as Megatron runs it, from the layer's saved input: attention,
// its all-reduce, MLP, and the MLP's all-reduce that nothing reads. Returns {R_2l, R_2l+1}.
std::pair<int, int> recompute_layer(Chain& c, const InnerSpec& s, int l) {
  int ra = c.add(PieceKind::Compute, Pass::Recompute, 2 * l, {});
  int after = ra;
  if (s.comm) after = c.add(PieceKind::Comm, Pass::Recompute, 2 * l, {ra});
  int rm = c.add(PieceKind::Compute, Pass::Recompute, 2 * l + 1, {after});
  if (s.comm) c.add(PieceKind::Comm, Pass::Recompute, 2 * l + 1, {rm}, true);
  return {ra, rm};
}

// Backward of blocks n-1 .. 0 (head first, embedding last), with the recomputation of the
// first `recompute_layers` layers joined in. Cross-pass modes interleave it freely; merak
// runs each layer's recomputation as its own pass segment between two barriers.
void backward_chain(Chain& c, const InnerSpec& s) {
  const int n = 2 * s.layers;
  const Pass p = s.op == Op::W ? Pass::Weight : Pass::Backward;
  const bool fine = tp_overlap_fine_grained(s.mode);
  const bool barriers = !tp_overlap_cross_pass(s.mode);
  int prev = -1;
  if (s.head) prev = c.add(PieceKind::Compute, p, n, {});
  int r_of[2] = {-1, -1};  // recomputation of the current layer's two blocks
  for (int k = n - 1; k >= 0; --k) {
    std::vector<int> deps = dep(prev);
    if (k < 2 * s.recompute_layers) {
      if (fine) {
        deps.push_back(recompute_block_fine(c, k));
      } else {
        if (k % 2 == 1) {
          c.segment += barriers ? 1 : 0;
          auto [ra, rm] = recompute_layer(c, s, k / 2);
          c.segment += barriers ? 1 : 0;
          r_of[0] = ra;
          r_of[1] = rm;
        }
        deps.push_back(r_of[k % 2]);
      }
    }
    if (s.op == Op::W) {  // weight gradients: no collective, no chain between blocks
      c.add(PieceKind::Compute, p, k, {});
      continue;
    }
    prev = block_with_comm(c, s, p, k, deps);
  }
  if (s.embedding) c.add(PieceKind::Compute, p, kEmbeddingBlock, s.op == Op::W ? std::vector<int>{} : dep(prev));
}

Chain make_chain(const InnerSpec& s) {
  Chain c;
  switch (s.op) {
    case Op::F: forward_chain(c, s, Pass::Forward, 2 * s.layers, true); break;
    case Op::R:
      if (tp_overlap_fine_grained(s.mode)) {
        for (int k = 0; k < 2 * s.layers; ++k) recompute_block_fine(c, k);
      } else {
        forward_chain(c, s, Pass::Recompute, 2 * s.layers, false);
      }
      break;
    case Op::B: case Op::I: case Op::W: backward_chain(c, s); break;
    default:
      throw InputError(std::string("inner schedule: op ") + std::string(op_name(s.op)) +
                       " has none (allowed: F, B, I, W, R)");
  }
  return c;
}

// Merges one segment of the sub-batches' chains: run one chain up to and including its next
// collective, then switch to the other (Oases Algorithm 1; Merak Fig. 4b).
void merge_segment(std::vector<Chain>& chains, int segment, std::vector<size_t>& next,
                   std::vector<std::vector<int>>& global, std::vector<Piece>& out) {
  auto in_segment = [&](size_t x) {
    return next[x] < chains[x].pieces.size() && chains[x].pieces[next[x]].segment == segment;
  };
  auto left = [&] {
    for (size_t x = 0; x < chains.size(); ++x)
      if (in_segment(x)) return true;
    return false;
  };
  size_t x = 0;
  while (left()) {
    bool switched = false;
    while (in_segment(x) && !switched) {
      Piece p = chains[x].pieces[next[x]];
      for (int& d : p.deps) d = global[x][static_cast<size_t>(d)];
      p.sub_batch = static_cast<int>(x);
      switched = p.kind == PieceKind::Comm;
      global[x].push_back(static_cast<int>(out.size()));
      out.push_back(std::move(p));
      ++next[x];
    }
    x = (x + 1) % chains.size();
  }
}

// The barrier before segment g: its chains' first pieces also wait for the last compute piece
// and the last collective issued before the segment (each stream runs in issue order).
void add_barrier(std::vector<Piece>& out, size_t begin) {
  int last[2] = {-1, -1};
  for (size_t i = 0; i < begin; ++i) last[out[i].kind == PieceKind::Compute ? 0 : 1] = static_cast<int>(i);
  std::vector<bool> seen(2, false);
  for (size_t i = begin; i < out.size(); ++i) {
    auto sb = static_cast<size_t>(out[i].sub_batch);
    if (seen.size() <= sb) seen.resize(sb + 1, false);
    if (seen[sb]) continue;
    seen[sb] = true;
    for (int l : last)
      if (l >= 0 && std::find(out[i].deps.begin(), out[i].deps.end(), l) == out[i].deps.end()) out[i].deps.push_back(l);
  }
}

std::vector<Piece> merge(std::vector<Chain>& chains) {
  std::vector<Piece> out;
  std::vector<std::vector<int>> global(chains.size());
  std::vector<size_t> next(chains.size(), 0);
  int segments = 0;
  for (const auto& c : chains)
    for (const auto& p : c.pieces) segments = std::max(segments, p.segment + 1);
  for (int g = 0; g < segments; ++g) {
    const size_t begin = out.size();
    merge_segment(chains, g, next, global, out);
    if (g > 0) add_barrier(out, begin);
  }
  return out;
}

}  // namespace

std::string_view tp_overlap_name(TpOverlap m) {
  switch (m) {
    case TpOverlap::Blocking: return "blocking";
    case TpOverlap::Merak: return "merak";
    case TpOverlap::CrossPass: return "cross-pass";
    case TpOverlap::Oases: return "oases";
    case TpOverlap::Te: return "te";
  }
  return "?";
}

TpOverlap parse_tp_overlap(std::string_view s, const std::string& field) {
  for (TpOverlap m : kModes)
    if (s == tp_overlap_name(m)) return m;
  throw InputError(field + " = '" + std::string(s) + "' is invalid (expected blocking, merak, cross-pass, oases or te)");
}

int tp_overlap_sub_batches(TpOverlap m) { return m == TpOverlap::Blocking || m == TpOverlap::Te ? 1 : 2; }
bool tp_overlap_cross_pass(TpOverlap m) { return m == TpOverlap::CrossPass || m == TpOverlap::Oases; }
bool tp_overlap_fine_grained(TpOverlap m) { return m == TpOverlap::Oases; }
bool tp_overlap_joins_recompute(TpOverlap m) { return tp_overlap_sub_batches(m) > 1; }

std::string_view pass_name(Pass p) {
  switch (p) {
    case Pass::Forward: return "F";
    case Pass::Recompute: return "R";
    case Pass::Backward: return "B";
    case Pass::Weight: return "W";
  }
  return "?";
}

int InnerSchedule::count(PieceKind k) const {
  return static_cast<int>(std::count_if(pieces.begin(), pieces.end(), [&](const Piece& p) { return p.kind == k; }));
}

int InnerSchedule::count(PieceKind k, Pass pass) const {
  return static_cast<int>(
      std::count_if(pieces.begin(), pieces.end(), [&](const Piece& p) { return p.kind == k && p.pass == pass; }));
}

InnerSchedule inner_schedule(const InnerSpec& spec) {
  if (spec.layers < 1)
    throw InputError("inner schedule: layers = " + std::to_string(spec.layers) + " is invalid (expected >= 1)");
  if (spec.recompute_layers < 0 || spec.recompute_layers > spec.layers)
    throw InputError("inner schedule: recompute_layers = " + std::to_string(spec.recompute_layers) +
                     " is outside [0, layers = " + std::to_string(spec.layers) + "]");
  InnerSchedule s;
  s.spec = spec;
  if (!tp_overlap_joins_recompute(spec.mode) || (spec.op != Op::B && spec.op != Op::I)) s.spec.recompute_layers = 0;
  s.blocks = 2 * spec.layers;
  // Without collectives there is nothing to overlap: one chain, the microbatch whole.
  s.sub_batches = spec.comm ? tp_overlap_sub_batches(spec.mode) : 1;
  std::vector<Chain> chains(static_cast<size_t>(s.sub_batches), make_chain(s.spec));
  s.pieces = merge(chains);
  return s;
}

std::string to_text(const InnerSchedule& s) {
  std::string out;
  for (size_t i = 0; i < s.pieces.size(); ++i) {
    const Piece& p = s.pieces[i];
    out += std::to_string(i) + (p.kind == PieceKind::Compute ? " C " : " A ") + std::string(pass_name(p.pass)) + " b" +
           std::to_string(p.block) + " sb" + std::to_string(p.sub_batch);
    if (p.redundant) out += " redundant";
    if (p.kind == PieceKind::Comm && p.fraction != 1) out += " x" + std::to_string(p.fraction).substr(0, 5);
    if (p.segment > 0) out += " seg" + std::to_string(p.segment);
    if (!p.deps.empty()) {
      out += " <-";
      for (int d : p.deps) out += " " + std::to_string(d);
    }
    out += "\n";
  }
  return out;
}

}  // namespace stagecraft::schedules
