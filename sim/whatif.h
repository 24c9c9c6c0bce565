// What-ifs for the simulator (docs/whatif.md): a slow GPU or node, a degraded or failed NIC, a
// rank that starts late, and run-to-run variability (per-kernel durations drawn from a seeded
// distribution over N iterations). The what-if is data (WhatIf, read from JSON or built from
// flags); resolve() places it on a plan's GPUs and nodes; simulate_whatif() runs it and
// summarises the iteration times. Where only a few data-parallel replicas differ, the
// simulator runs the blocks holding them plus one block standing for all the identical ones
// (sim/symmetry.h, "What-ifs" in docs/sim.md).
//
// This header has no SimGrid types.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "costmodel/estimate.h"
#include "costmodel/specs.h"

namespace stagecraft::sim {

struct SimOptions;
struct SimResult;

enum class JitterDist { None, Normal, Lognormal };
JitterDist parse_jitter_dist(const std::string& s);  // "none" | "normal" | "lognormal"; throws InputError
std::string jitter_dist_name(JitterDist d);

struct SlowGpus {             // one entry of WhatIf::slow: GPUs whose compute runs slower
  std::string scope = "rank"; // "rank" (one GPU), "node" (every GPU of one node), "fraction" (random GPUs)
  int index = 0;              // the rank or node (scope rank or node)
  double fraction = 0;        // scope fraction: share of the plan's GPUs, (0, 1]; at least one GPU
  std::uint64_t seed = 1;     // scope fraction: which GPUs (std::mt19937_64, docs/whatif.md)
  double factor = 1;          // compute rate times this, (0, 1]: 0.5 = every kernel takes twice as long
  std::string source;         // where it was given, for errors (a flag or a file's field); empty = "what-if"
};

struct NicFault {             // one entry of WhatIf::nics
  int node = 0;               // the node
  int nic = -1;               // the NIC on it (0 .. nics_per_node - 1); -1 = every NIC of the node
  double factor = 1;          // bandwidth times this, [0, 1]; 0 = failed: its GPUs' traffic moves to
                              // the node's next working NIC (refused where the node has no other)
  std::string source;         // where it was given, for errors
};

struct LateRank {             // one entry of WhatIf::late
  int rank = 0;               // global GPU rank
  double delay_s = 0;         // wait before its first action, >= 0
  std::string source;         // where it was given, for errors
};

struct Jitter {               // run-to-run variability of kernel durations
  JitterDist dist = JitterDist::None;  // distribution of each kernel's duration multiplier (mean 1)
  double cv = 0;              // coefficient of variation, [0, 1]; 0 = nominal durations exactly
  std::uint64_t seed = 1;     // seed of the draws (std::mt19937_64 per unit, docs/whatif.md)
};

struct WhatIf {
  std::vector<SlowGpus> slow;   // slow GPUs; a GPU in several entries takes the product of factors
  std::vector<NicFault> nics;   // degraded or failed NICs
  std::vector<LateRank> late;   // ranks that start late
  Jitter jitter;                // per-kernel variability
  int iterations = 0;           // iterations whose times are summarised; 0 = 1, or 20 with jitter
  bool empty() const { return slow.empty() && nics.empty() && late.empty() && jitter.dist == JitterDist::None; }
  int samples() const { return iterations > 0 ? iterations : jitter.dist == JitterDist::None ? 1 : 20; }
};

// Reads the JSON format of docs/whatif.md; `where` names the source in errors (a file name).
// Throws InputError naming the field, the value and what is allowed.
WhatIf whatif_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::json to_json(const WhatIf& w);

// A what-if placed on a plan's GPUs (global ranks of dp x tp x pp, cp folded into dp as the
// simulator folds it).
struct Resolved {
  std::vector<double> rate;                       // (num_gpus) compute rate factor, 1 = nominal
  std::vector<double> delay_s;                    // (num_gpus) wait before the first action
  std::map<int, std::vector<double>> nic_factor;  // node -> bandwidth factor of each of its NICs
  Jitter jitter;                                  // as given
  bool touches_gpu(int g, int gpus_per_node) const;  // whether g, or a NIC of its node, differs
};

// Places `w` on the plan's GPUs; throws InputError for a rank, node or NIC outside the plan's
// (naming the field and the allowed range), a factor out of range, or a failed NIC with no other
// working NIC on its node.
Resolved resolve(const WhatIf& w, const costmodel::ClusterSpec& c, int num_gpus);

// Multipliers of kernel durations for run-to-run variability: one std::mt19937_64 per stream,
// seeded from (seed, stream) by splitmix64; normal by Box-Muller (redrawn until positive),
// lognormal exp(mu + sigma z) with mean 1. Written out (std::*_distribution's algorithms are
// implementation-defined) so draws repeat bit for bit wherever log, sqrt, sin, cos and exp round
// alike (docs/whatif.md).
class JitterDraws {
 public:
  JitterDraws(const Jitter& j, std::uint64_t stream);
  double next();  // the next multiplier (1 exactly when dist is None or cv is 0)

 private:
  double uniform();  // in (0, 1): 53 random bits, never 0
  Jitter j_;
  std::mt19937_64 rng_;
  double spare_ = 0;        // Box-Muller's second normal deviate
  bool has_spare_ = false;
};

// Iteration times of a what-if run and their distribution.
struct WhatIfResult {
  std::vector<double> iteration_s;  // the summarised iterations (after one warm-up), in order
  double first_iteration_s = 0;     // the warm-up iteration, from time 0 (holds late starts)
  double mean_s = 0, p50_s = 0, p90_s = 0, p99_s = 0, min_s = 0, max_s = 0;  // of iteration_s
  double nominal_s = 0;             // the same plan without the what-if (0 when not asked for)
  int dp_simulated = 0;             // data-parallel replicas simulated (of the plan's dp x cp)
  int dp_replicas = 0;              // the plan's data-parallel replicas (dp x cp)
  double sim_wall_s = 0;            // wall time of the what-if's simulation
  double peak_rss_bytes = 0;        // peak resident memory of its simulating process
  // What a planner ranks plans by: p90 under jitter, else the median (the iteration time).
  double ranking_s(bool jitter) const { return jitter ? p90_s : p50_s; }
};

// Nearest-rank percentile (p in (0, 100]) of `v`: the smallest value with at least p% at or below it.
double percentile(std::vector<double> v, double p);

// Fills the distribution of `times` (the iterations after the warm-up one).
void summarise_times(const std::vector<double>& all_iterations_s, WhatIfResult& out);

// The library function for planners and the CLI: simulates estimate e's plan under `w`
// (samples() + 1 iterations; the first is a warm-up, reported apart) with `opt` (its iterations
// and whatif are set here) and returns the times. `with_nominal` also simulates the plan without
// the what-if, for nominal_s. *sim gets the what-if run's full SimResult when given.
WhatIfResult simulate_whatif(const costmodel::Estimate& e, const WhatIf& w, const SimOptions& opt, bool with_nominal = false,
                             SimResult* sim = nullptr);

nlohmann::json to_json(const WhatIfResult& r);

}  // namespace stagecraft::sim
