// Pieces of one rank's run that are not the executor: where the rank sits in the (tp, dp,
// pp) grid, the synthetic data, the heartbeat watchdog that names a failed peer, and
// checkpoints.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/compat.h"
#include "runtime/optim.h"
#include "runtime/train.h"

namespace stagecraft::runtime {

struct Grid {
  std::array<int, 3> size{1, 1, 1};   // degree of tp, dp, pp
  std::array<int, 3> order{0, 1, 2};  // axes fastest first (0 tp, 1 dp, 2 pp)
  Grid(const costmodel::ParallelPlan& p);
  std::array<int, 3> coords(int global) const;         // (tp, dp, pp)
  int global(const std::array<int, 3>& coords) const;
  std::vector<int> group(int global, int axis) const;  // ranks that differ only along axis
};

// (b, s) tokens and (b, s) next-token targets of samples [first, first + b): each sample is
// an arithmetic progression modulo the vocabulary with a random start and one of five
// strides, drawn from (seed, sample index) only; a model learns it from the first tokens.
std::pair<torch::Tensor, torch::Tensor> synthetic_batch(std::uint64_t seed, std::int64_t first, std::int64_t b,
                                                        std::int64_t s, std::int64_t vocab);

// (b, ...) input and target of samples [first, first + b) for a TorchScript model, shaped as
// `shapes` (one microbatch of each): standard normal values drawn from (seed, sample index,
// argument) only, so that every dp split sees the same global batch.
std::pair<torch::Tensor, torch::Tensor> script_batch(std::uint64_t seed, std::int64_t first,
                                                     const std::vector<std::vector<std::int64_t>>& shapes);

// Heartbeats through its own TCPStore client; when a peer stops beating for timeout/2 (or
// the store's host is gone) it prints which peer failed and ends the process with exit 1.
class Watchdog {
 public:
  Watchdog(const RankEnv& env, double timeout_s);
  ~Watchdog();
  void stop();
  // Called by the main thread after a communication error: gives the heartbeat the time to
  // name the dead peer (the process then ends there); returns if none is found.
  void await_verdict();
  // Marks this rank itself as the failed peer, with the reason, for the others to report.
  void declare_self_failed(const std::string& reason);
  double stale_s() const { return stale_s_; }
  bool aborting() const { return aborting_; }  // the heartbeat thread is ending the process

 private:
  void loop();
  [[noreturn]] void abort_naming(int peer, const std::string& why);
  RankEnv env_;
  double interval_s_, stale_s_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> aborting_{false};
  std::thread thread_;
};

// Per-rank checkpoint files: DIR/rank-<r>.pt (written as .tmp and renamed) and DIR/meta.json.
void save_rank_state(const std::string& dir, int rank, const AdamW& opt);
void load_rank_state(const std::string& dir, int rank, AdamW& opt);

}  // namespace stagecraft::runtime
