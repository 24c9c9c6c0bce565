// The inner schedule of one stage action under tensor parallelism: the layers of the stage as
// a sequence of compute pieces and tensor-parallel collectives, ordered on a compute stream
// and a communication stream. Schedule as data, one level down: the generator below emits the
// pieces and their data dependencies; the cost model evaluates them (costmodel/inner.h), the
// simulator turns them into activities and flows, the runtime executes them with asynchronous
// collectives (docs/tp-overlap.md).
//
// A stage of L transformer layers has 2L tensor-parallel blocks (Megatron-LM: block 2l is the
// attention of layer l, block 2l+1 its MLP). Each block's forward ends in a collective over the
// tp group (all-reduce after the row-parallel product; with sequence parallelism a
// reduce-scatter and the next block's all-gather, at the same place); each block's backward
// ends in the collective of its input gradient (the all-reduce of Megatron's f operator).
//
// Modes (the plan's tp_overlap):
//   blocking    one chain, every collective waits (Megatron-LM without overlap).
//   merak       the microbatch split into two sub-batches; while one communicates the other
//               computes (Merak Sec. 5.3, Fig. 4b). With recomputation, each recomputed layer's
//               R runs when the backward reaches it (Megatron's per-layer checkpoints), R and B
//               sub-pipelined separately: a pass barrier before and after each layer's R
//               (Oases Sec. IV-A, Fig. 4b).
//   cross-pass  merak, plus the recomputation and backward of a stage scheduled jointly:
//               each block's recomputation sits before its backward in one chain, so backward
//               collectives overlap recomputation too (Oases Sec. IV-A, Fig. 4c).
//   oases       cross-pass with fine-grained recomputation: each recomputation sequence starts
//               after a forward collective, from that collective's saved output, so the
//               recomputation repeats no collective (Oases Sec. IV-B, eq. (1), Fig. 4d).
//   te          Transformer Engine's userbuffers overlap (Megatron-Core --tp-comm-overlap, which
//               needs sequence parallelism): one sub-batch; each block's collective runs in
//               chunks pipelined with the block's own GEMMs over the tp ring (ring-exchange
//               all-gathers, pipelined reduce-scatters, the input-gradient collectives in bulk
//               beside the weight-gradient GEMM), so all but its last chunk runs beside the
//               block's compute and only that chunk is exposed; the communication kernels'
//               SMs slow the compute they overlap (transformer_engine/pytorch/module/base.py,
//               initialize_ub).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "schedules/action.h"

namespace stagecraft::schedules {

enum class TpOverlap : std::uint8_t { Blocking, Merak, CrossPass, Oases, Te };

std::string_view tp_overlap_name(TpOverlap m);
// "blocking", "merak", "cross-pass", "oases", "te"; throws InputError naming `field` and the choices.
TpOverlap parse_tp_overlap(std::string_view s, const std::string& field = "tp_overlap");
// Sub-batches one microbatch is split into: 1 blocking and te, 2 otherwise.
int tp_overlap_sub_batches(TpOverlap m);
// R and B (or I) of a (stage, microbatch) run as one joint inner schedule.
bool tp_overlap_cross_pass(TpOverlap m);
// Recomputation starts after each forward collective and repeats none (Oases eq. (1)).
bool tp_overlap_fine_grained(TpOverlap m);
// The R of a (stage, microbatch) runs inside its B or I, layer by layer as the backward reaches
// it (merak with pass barriers, cross-pass and oases without): every mode that splits.
bool tp_overlap_joins_recompute(TpOverlap m);

enum class PieceKind : std::uint8_t { Compute, Comm };
enum class Pass : std::uint8_t {
  Forward,    // forward of a block (or the embedding / the head and loss)
  Recompute,  // recomputation of a block's forward
  Backward,   // input gradient of a block (and its weight gradient when the action is B)
  Weight,     // weight gradient of a block (W of a split backward)
};
std::string_view pass_name(Pass p);

// Block index of the pieces at the stage's ends.
inline constexpr int kEmbeddingBlock = -1;  // embedding (first stage): before block 0 in F, last in B
// The head and loss (last stage) use block = blocks (after the last block in F, first in B).

struct Piece {
  PieceKind kind = PieceKind::Compute;
  Pass pass = Pass::Forward;
  int block = 0;          // tp block 0..blocks-1; kEmbeddingBlock or blocks for the stage's ends
  int sub_batch = 0;      // 0 or 1 (always 0 when blocking)
  bool redundant = false; // a collective whose result nothing reads (the last all-reduce of a
                          // recomputed layer, Oases eq. (1)); still issued where the mode runs it
  double fraction = 1;    // a collective: the share of its block's collective it moves (te's
                          // chunks: (n-1)/n beside the compute, 1/n after it)
  int segment = 0;        // pass segment: pieces of a later segment start after every piece of
                          // the earlier ones has ended (merak's barriers between R and B)
  std::vector<int> deps;  // indices of earlier pieces whose results this piece reads; the first
                          // piece of a segment also lists the last compute piece and the last
                          // collective of the segment before (the barrier)
};

// What one stage action runs.
struct InnerSpec {
  TpOverlap mode = TpOverlap::Blocking;
  Op op = Op::F;            // F, B, I, W or R
  int layers = 1;           // transformer layers of the stage (2 blocks each)
  bool embedding = false;   // the stage starts the model
  bool head = false;        // the stage ends it
  bool comm = true;         // false: tp = 1, no collectives (a single compute chain remains)
  int recompute_layers = 0; // B or I in a mode that joins recomputation: the first layers whose
                            // recomputation runs inside this backward (0: none)
  int comm_chunks = 1;      // te: chunks each collective is pipelined in (the tp degree)
};

struct InnerSchedule {
  InnerSpec spec;
  int blocks = 0;              // 2 * layers
  int sub_batches = 1;
  std::vector<Piece> pieces;   // issue order: each stream runs its own pieces in this order;
                               // every dependency points to an earlier piece
  int count(PieceKind k) const;
  int count(PieceKind k, Pass p) const;
};

// Generates the inner schedule. Each sub-batch's pieces form one program (a chain); the
// chains are merged segment by segment, switching sub-batch after every collective (Oases
// Algorithm 1: Sync, StartAsync, switch). Throws InputError for an op that has no inner schedule or layers < 1.
InnerSchedule inner_schedule(const InnerSpec& spec);

// One line per piece, e.g. "C F b3 sb1 <- 5", for tests and --explain output.
std::string to_text(const InnerSchedule& s);

}  // namespace stagecraft::schedules
