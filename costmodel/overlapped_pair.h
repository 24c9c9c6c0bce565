// DualPipe's overlapped forward-backward pair (costs.h set_overlapped_pair), its rule in one place
// for both engines: the evaluator prices a pair's backward half with it (StageCost::overlap_b_s,
// overlap_i_s) and the simulator times the compute it runs beside the pair's all-to-all flows
// with it (sim/compute.cpp). Kept out of costs.h so that the simulator alone includes it.
#pragma once

#include <algorithm>

namespace stagecraft::costmodel {

struct OverlappedPair {
  double compute_s = 0;  // the two halves' compute (their durations less their expert communication)
  double comm_s = 0;     // their expert communication (all-to-alls and the experts' tp collectives)
  double busy_s = 0;     // compute_s plus the compute lost to the SMs the communication holds
                         // while it runs beside it: share x min(comm_s, compute_s)
  double time_s() const { return std::max(busy_s, comm_s); }  // the pair, communication alone on its links
};

// kDualPipeCommSms (costs.h) of gpu_sms go to the communication kernels while they run (DeepSeek-V3,
// arXiv 2412.19437, Sec. 3.2.2): the compute beside them runs on the rest, slowed by
// kDualPipeCommSms / (gpu_sms - kDualPipeCommSms) of its overlapped time (none with gpu_sms <= 20).
OverlappedPair overlapped_pair(double compute_s, double comm_s, int gpu_sms);

}  // namespace stagecraft::costmodel
