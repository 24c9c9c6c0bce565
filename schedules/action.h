// One step of a rank's action list: (stage, op, microbatch) plus the optional fields later
// schedules need. The text form follows PyTorch's torch.distributed.pipelining (`2F0`,
// `1SEND_F3`, `(0F7;7B3)OVERLAP_F_B`), extended with a bracketed suffix for the extra fields
// (`0REDUCE_GRAD[frac=0.25]`, `3F2[sb=1]`); see docs/ir.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace stagecraft::schedules {

enum class Op : std::uint8_t {
  F,            // forward of one stage for one microbatch
  B,            // full backward (inputs and weights)
  I,            // backward for inputs only (zero-bubble "B")
  W,            // backward for weights only, after I
  R,            // recompute the forward of a stage (a fraction of its layers) before its backward
  SEND_F,       // send the stage's forward output to the next stage
  RECV_F,       // post the receive of the stage's forward input from the previous stage
  SEND_B,       // send the stage's input gradient to the previous stage
  RECV_B,       // post the receive of the stage's output gradient from the next stage
  REDUCE_GRAD,  // data-parallel reduction of the stage's gradients (or a fraction of them)
  OFFLOAD,      // copy a stage's saved activations of one microbatch to host memory
  RELOAD,       // copy them back before the backward (or recompute) needs them
  OPTIMIZER,    // optimizer step of every stage on the rank; waits for the rank's reductions
  OVERLAP_F_B,  // a forward and a backward of two (stage, microbatch) pairs run together
  UNSHARD,      // FSDP: all-gather the stage's sharded parameters before its compute (PyTorch's
                // _ComputationType.UNSHARD); imported and validated, priced by the plan's zero 3
  RESHARD,      // FSDP: free the stage's gathered parameters after its compute (RESHARD)
};

inline constexpr int kNumOps = 16;

// Name as written in the text form ("F", "SEND_F", "OVERLAP_F_B", ...).
std::string_view op_name(Op op);
// Inverse of op_name; throws InputError naming the allowed ops. Accepts PyTorch's legacy
// "BW" (full backward) as B.
Op parse_op(std::string_view name);

bool is_compute(Op op);    // F, B, I, W, R, OVERLAP_F_B, OPTIMIZER: occupy the compute stream
bool is_backward(Op op);   // B, I (what consumes the next stage's gradient)
bool is_p2p(Op op);        // SEND_F, RECV_F, SEND_B, RECV_B
bool needs_microbatch(Op op);
bool is_fsdp(Op op);       // UNSHARD, RESHARD

struct Action {
  int stage = -1;       // global stage index; -1 only for OPTIMIZER (rank-wide)
  Op op = Op::F;
  int microbatch = -1;  // -1 where the op has none (REDUCE_GRAD, OPTIMIZER)
  int sub_batch = -1;   // Oases sub-batch within the microbatch; -1 = the whole microbatch
  int segment = -1;     // FOLD3D segment the action belongs to; -1 = not set
  double fraction = 1;  // REDUCE_GRAD: share of the stage's gradients; R: share of its layers
  double early = 0;     // REDUCE_GRAD: share of the backward before it (the last compute action)
                        // still to run when this bucket's gradients are ready (buckets.h); 0 = after it
  int peer = -1;        // SEND/RECV: stage at the other end; -1 = implied (next/previous stage)
  // OVERLAP_F_B only: the backward half. (stage, microbatch) above are the forward half.
  int b_stage = -1;
  Op b_op = Op::B;
  int b_microbatch = -1;

  static Action make(int stage, Op op, int microbatch = -1) {
    Action a;
    a.stage = stage;
    a.op = op;
    a.microbatch = microbatch;
    return a;
  }
  static Action overlap(int f_stage, int f_mb, int b_stage, int b_mb, Op b_op = Op::B) {
    Action a = make(f_stage, Op::OVERLAP_F_B, f_mb);
    a.b_stage = b_stage;
    a.b_microbatch = b_mb;
    a.b_op = b_op;
    return a;
  }
};

bool operator==(const Action& a, const Action& b);
inline bool operator!=(const Action& a, const Action& b) { return !(a == b); }

// Text form: "2F0", "1SEND_F3", "(0F7;7B3)OVERLAP_F_B", "0REDUCE_GRAD[frac=0.5]", "OPTIMIZER".
std::string to_text(const Action& a);
// Parses the text form; throws InputError quoting the token and the grammar.
Action parse_action(std::string_view text);

}  // namespace stagecraft::schedules
