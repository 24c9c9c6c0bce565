// What the executor's parts share (runtime/executor.cpp the action dispatcher, p2p.h the
// transfers, grad_reduction.h the gradient reductions, exec_accounting.h the step's record):
// the (stage, microbatch) key, the host clock, and the two lookups every part reports errors
// with. Internal to the runtime.
#pragma once

#include <chrono>
#include <exception>
#include <map>
#include <string>
#include <utility>

#include "runtime/model.h"
#include "schedules/error.h"

namespace stagecraft::runtime {

using ExecKey = std::pair<int, int>;  // (stage, microbatch)
using ExecClock = std::chrono::steady_clock;

// Seconds from `a` to `b` on the host clock.
inline double seconds_between(ExecClock::time_point a, ExecClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// A failed wait on communication, as the Error a rank reports: `what` waited, with whom
// (peer < 0: a collective), and the backend's reason.
[[noreturn]] inline void comm_failure(int global_rank, const std::string& what, int peer, const std::exception& e) {
  throw Error("rank " + std::to_string(global_rank) + ": " + what + (peer >= 0 ? " (peer rank " + std::to_string(peer) + ")" : "") +
              " failed: " + e.what());
}

// The model part of `stage` on this rank; an Error when the rank holds no such stage.
inline ModelPart& part_of(const std::map<int, ModelPart*>& parts, int stage, int global_rank) {
  auto it = parts.find(stage);
  if (it == parts.end()) throw Error("runtime: rank " + std::to_string(global_rank) + " holds no stage " + std::to_string(stage));
  return *it->second;
}

}  // namespace stagecraft::runtime
