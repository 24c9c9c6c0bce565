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

// The ranks as a (tp, dp x cp, pp) grid: context parallelism's ranks are data-parallel ranks
// that split each sample's sequence, so the middle axis holds both, numbered as the plan's
// rank order numbers them (costmodel::cp_before_dp; the runtime needs cp next to dp in that
// order, costmodel::check_runtime_plan). Its group is the one that reduces gradients.
struct Grid {
  std::array<int, 3> size{1, 1, 1};   // degree of tp, dp x cp, pp
  std::array<int, 3> order{0, 1, 2};  // axes fastest first (0 tp, 1 dp x cp, 2 pp)
  int dp = 1, cp = 1;                 // the middle axis's two factors
  bool cp_first = true;               // cp varies faster than dp along the middle axis
  Grid(const costmodel::ParallelPlan& p);
  std::array<int, 3> coords(int global) const;         // (tp, dp x cp index, pp)
  int global(const std::array<int, 3>& coords) const;
  std::vector<int> group(int global, int axis) const;  // ranks that differ only along axis
  int dp_of(int middle) const { return cp_first ? middle / cp : middle % dp; }  // data-parallel index
  int cp_of(int middle) const { return cp_first ? middle % cp : middle / dp; }  // context-parallel index
  int middle(int dp_index, int cp_index) const { return cp_first ? cp_index + cp * dp_index : dp_index + dp * cp_index; }
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
// `extra`: tensors kept beside the optimizer's (zero 3: this member's parameter chunks); on
// load, the names and shapes wanted, replaced by the file's tensors.
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;
void save_rank_state(const std::string& dir, int rank, const AdamW& opt, const NamedTensors& extra = {});
void load_rank_state(const std::string& dir, int rank, AdamW& opt, NamedTensors* extra = nullptr);

}  // namespace stagecraft::runtime
