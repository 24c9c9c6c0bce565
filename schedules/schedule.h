// A pipeline schedule as data: one ordered action list per rank, the placement of stages on
// ranks, and the name and parameters of the generator that made it. Generators produce
// compute-only schedules; passes (lower.h) add communication; validate.h checks them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "schedules/action.h"

namespace stagecraft::schedules {

enum class PlacementKind {
  Loop,      // stage s on rank s mod p (1F1B, interleaved, looped BFS)
  V,         // zig-zag: s on s mod p when (s div p) is even, on p-1-(s mod p) when odd
  Explicit,  // any other map, given stage by stage
};

std::string_view placement_name(PlacementKind k);
PlacementKind parse_placement(std::string_view name);  // throws InputError

// stage -> rank map for the two regular placements.
std::vector<int> loop_placement(int num_stages, int num_ranks);
std::vector<int> v_placement(int num_stages, int num_ranks);

struct Schedule {
  std::string name;                 // generator name, e.g. "1f1b"
  nlohmann::json params = nlohmann::json::object();  // generator parameters, e.g. {"chunks": 2}
  int num_ranks = 0;                // pipeline ranks p
  int num_stages = 0;               // all stages, over all chains
  int num_microbatches = 0;         // m
  int num_chains = 1;               // independent pipelines over the same model (Chimera: 2);
                                    // chain c holds stages [c*S, (c+1)*S), S = num_stages/num_chains
  PlacementKind placement = PlacementKind::Loop;
  std::vector<int> stage_to_rank;   // (num_stages) rank of each stage
  std::vector<std::vector<Action>> actions;  // (num_ranks) ordered actions of each rank

  int stages_per_chain() const { return num_stages / num_chains; }
  int chain_of(int stage) const { return stage / stages_per_chain(); }
  // Which part of the model a stage computes: 0 is the first (embedding), S-1 the last (head).
  int model_part(int stage) const { return stage % stages_per_chain(); }
  bool is_first(int stage) const { return model_part(stage) == 0; }
  bool is_last(int stage) const { return model_part(stage) == stages_per_chain() - 1; }
  int next_stage(int stage) const { return is_last(stage) ? -1 : stage + 1; }
  int prev_stage(int stage) const { return is_first(stage) ? -1 : stage - 1; }
  int rank_of(int stage) const { return stage_to_rank[static_cast<size_t>(stage)]; }
  // Stages a rank holds, in increasing order.
  std::vector<int> stages_of(int rank) const;
  // True when any SEND/RECV appears: communication has been made explicit.
  bool is_lowered() const;
  size_t total_actions() const;
};

// Schedule with empty action lists and the given placement; checks the shape
// (positive counts, stages divisible by chains, map entries in range).
Schedule make_schedule(std::string name, int num_ranks, int num_stages, int num_microbatches,
                       PlacementKind placement, std::vector<int> stage_to_rank = {},
                       int num_chains = 1);

// Throws InputError when the shape is inconsistent (counts, map size and range).
void check_shape(const Schedule& s);

}  // namespace stagecraft::schedules
