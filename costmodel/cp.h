// Context parallelism (ParallelPlan::cp) as Megatron-Core runs it through Transformer Engine
// (Megatron-Core's context parallelism guide; TE's ring attention, AttnFuncWithCPAndKVP2P): each
// sample's sequence is cut into 2 cp chunks and rank i keeps chunks i and 2cp - 1 - i (the
// causal mask's work balanced), s / cp tokens in all. Everything outside the attention core
// works on those tokens alone (workload.h: layer_work with cp); the core attends them to every
// key: the ranks pass their key/value chunks around a ring, cp - 1 steps, each step's transfer
// behind the core's kernel on the chunk that arrived before. The backward passes the key/value
// chunks again and their gradients back. Gradients are reduced over dp x cp (topology.h kDpCp).
#pragma once

#include "costmodel/comm.h"
#include "costmodel/specs.h"

namespace stagecraft::costmodel {

// What one layer's ring moves on one rank, per sub-batch of bb samples: the workload's part
// (plan_workload.h StageWorkload::cp_ring), priced by cp_layer.
struct CpRingWork {
  int exchanges_f = 0;      // key/value chunks sent in one forward: K and V, cp - 1 steps: 2(cp - 1)
  int exchanges_b = 0;      // in one backward: K, V and their gradients: 4(cp - 1)
  double chunk_bytes = 0;   // (bb, s/cp, h_kv/t) one chunk of K (or V), 16-bit
};
// Nothing at cp < 2.
CpRingWork cp_ring_work(const ModelSpec& m, int bb, int t, int cp);

// One layer's ring on one rank, per sub-batch of bb samples: its work and its times.
struct CpLayer {
  int exchanges_f = 0;      // key/value chunks sent in one forward: K and V, cp - 1 steps: 2(cp - 1)
  int exchanges_b = 0;      // in one backward: K, V and their gradients: 4(cp - 1)
  double chunk_bytes = 0;   // (bb, s/cp, h_kv/t) one chunk of K (or V), 16-bit
  double step_f_s = 0;      // one forward step's transfer: K and V to the next rank
  double step_b_s = 0;      // one backward step's: K, V, dK and dV
  double exposed_f_s = 0;   // what the ring adds to the layer's forward: the steps longer than the
                            // core's kernel on one chunk (core_f_s / cp)
  double exposed_b_s = 0;   // to its backward (core_i_s / cp)
};

// The ring's work priced: `core_f_s` and `core_i_s`, the core's whole forward and input-gradient
// time on the rank (all cp chunks); `ring`: the link between ring neighbours
// (Topology::group_link(kCp)).
CpLayer cp_layer(const CpRingWork& w, int cp, double core_f_s, double core_i_s, const Link& ring);

nlohmann::json to_json(const CpLayer& c);

// The tokens of a sample one context-parallel rank holds: s / cp (Megatron-Core cuts each
// sequence into 2 cp chunks and gives a rank two, one from each end; check() requires 2 cp to
// divide s). The one statement of the split: the workload's token-wise products, the ring's
// chunks and the rank's model below all take it.
double cp_rank_tokens(const ModelSpec& m, int cp);
// The model as one cp rank sees it for memory and messages: cp_rank_tokens per sample.
ModelSpec cp_rank_model(const ModelSpec& m, int cp);

}  // namespace stagecraft::costmodel
