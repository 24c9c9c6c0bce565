#include "costmodel/inner.h"

#include <array>

#include <algorithm>

#include "costmodel/memo.h"
#include "schedules/error.h"

namespace stagecraft::costmodel {

using schedules::InnerSchedule;
using schedules::InnerSpec;
using schedules::Op;
using schedules::Pass;
using schedules::Piece;
using schedules::PieceKind;

namespace {

bool is_attention(int block) { return block % 2 == 0; }

double compute_duration(const Piece& p, Op op, const InnerCosts& c) {
  const int n = 2 * c.layers;
  const bool end_embed = p.block == schedules::kEmbeddingBlock, end_head = p.block == n;
  switch (p.pass) {
    case Pass::Forward:
      if (end_embed) return c.embed_f_s;
      if (end_head) return c.head_f_s;
      return is_attention(p.block) ? c.attn_f_s : c.mlp_f_s;
    case Pass::Recompute:
      return is_attention(p.block) ? c.attn_r_s : c.mlp_r_s;
    case Pass::Weight:
      if (end_embed) return 0;  // the embedding's gradient is its whole backward (in I / B)
      if (end_head) return c.head_w_s;
      return is_attention(p.block) ? c.attn_w_s : c.mlp_w_s;
    case Pass::Backward: {
      const bool full = op == Op::B;  // B computes weight gradients too
      if (end_embed) return c.embed_b_s;
      if (end_head) return c.head_i_s + (full ? c.head_w_s : 0);
      return is_attention(p.block) ? c.attn_i_s + (full ? c.attn_w_s : 0) : c.mlp_i_s + (full ? c.mlp_w_s : 0);
    }
  }
  return 0;
}

}  // namespace

double piece_duration(const Piece& p, Op op, const InnerCosts& c) {
  if (p.kind == PieceKind::Comm) return c.comm_s * p.fraction;
  const double d = compute_duration(p, op, c);
  // te: a block's compute shares the GPU with its collective's chunks beside it, whose kernels
  // hold k of the SMs while they run (the embedding and the head have none beside them).
  const bool beside = c.mode == schedules::TpOverlap::Te && c.comm_s > 0 && c.comm_chunks > 1 && p.block >= 0 &&
                      p.block < 2 * c.layers && p.pass != Pass::Weight;
  return beside ? d + std::min(d, c.comm_s * (c.comm_chunks - 1.0) / c.comm_chunks) * c.comm_sm_slowdown : d;
}

InnerResult evaluate_inner(const InnerSchedule& s, const std::vector<double>& d) {
  if (d.size() != s.pieces.size())
    throw Error("evaluate_inner: " + std::to_string(d.size()) + " durations for " + std::to_string(s.pieces.size()) + " pieces");
  InnerResult r;
  r.start_s.resize(d.size());
  r.end_s.resize(d.size());
  double stream_free[2] = {0, 0};  // compute, comm
  for (size_t i = 0; i < s.pieces.size(); ++i) {
    const Piece& p = s.pieces[i];
    const int k = p.kind == PieceKind::Compute ? 0 : 1;
    double t = stream_free[k];
    for (int j : p.deps) t = std::max(t, r.end_s[static_cast<size_t>(j)]);
    r.start_s[i] = t;
    r.end_s[i] = t + d[i];
    stream_free[k] = r.end_s[i];
    (k == 0 ? r.compute_s : r.comm_s) += d[i];
    r.time_s = std::max(r.time_s, r.end_s[i]);
  }
  r.exposed_comm_s = std::max(0.0, r.time_s - r.compute_s);
  return r;
}

InnerResult evaluate_inner(const InnerSchedule& s, const InnerCosts& c) {
  std::vector<double> d;
  d.reserve(s.pieces.size());
  for (const Piece& p : s.pieces) d.push_back(piece_duration(p, s.spec.op, c));
  return evaluate_inner(s, d);
}

const InnerSchedule& inner_schedule_for(const InnerCosts& c, Op op, int recompute_layers) {
  InnerSpec spec;
  spec.mode = c.mode;
  spec.op = op;
  spec.layers = c.layers;
  spec.embedding = c.embedding;
  spec.head = c.head;
  spec.comm = c.comm_s > 0 || c.comm_bytes > 0;
  spec.recompute_layers = recompute_layers;
  spec.comm_chunks = c.comm_chunks;
  using Key = std::array<int, 8>;
  const Key key = {static_cast<int>(spec.mode), static_cast<int>(op), spec.layers, spec.embedding, spec.head, spec.comm,
                   recompute_layers, spec.comm_chunks};
  static SharedMemo<Key, InnerSchedule> built;  // for the process
  return built.get(key, [&] { return schedules::inner_schedule(spec); });
}

InnerDurations inner_durations(const InnerCosts& c) {
  if (c.layers < 1) throw Error("inner_durations: a stage with no layers has no inner schedule");
  InnerDurations out;
  InnerResult f = evaluate_inner(inner_schedule_for(c, Op::F), c);
  InnerResult b = evaluate_inner(inner_schedule_for(c, Op::B), c);
  out.f_s = f.time_s;
  out.b_s = b.time_s;
  out.i_s = evaluate_inner(inner_schedule_for(c, Op::I), c).time_s;
  out.w_s = evaluate_inner(inner_schedule_for(c, Op::W), c).time_s;
  out.exposed_comm_f_s = f.exposed_comm_s;
  out.exposed_comm_b_s = b.exposed_comm_s;
  if (schedules::tp_overlap_joins_recompute(c.mode)) {
    out.r_s = evaluate_inner(inner_schedule_for(c, Op::B, c.layers), c).time_s - out.b_s;
  } else {
    out.r_s = evaluate_inner(inner_schedule_for(c, Op::R), c).time_s;
  }
  return out;
}

}  // namespace stagecraft::costmodel
