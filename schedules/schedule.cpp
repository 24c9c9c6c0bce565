#include "schedules/schedule.h"

#include "schedules/error.h"

namespace stagecraft::schedules {

std::string_view placement_name(PlacementKind k) {
  switch (k) {
    case PlacementKind::Loop: return "loop";
    case PlacementKind::V: return "v";
    case PlacementKind::Explicit: return "explicit";
  }
  return "?";
}

PlacementKind parse_placement(std::string_view name) {
  if (name == "loop") return PlacementKind::Loop;
  if (name == "v") return PlacementKind::V;
  if (name == "explicit") return PlacementKind::Explicit;
  throw InputError("placement '" + std::string(name) + "' is unknown (allowed: loop, v, explicit)");
}

std::vector<int> loop_placement(int num_stages, int num_ranks) {
  std::vector<int> m(static_cast<size_t>(num_stages));
  for (int s = 0; s < num_stages; ++s) m[static_cast<size_t>(s)] = s % num_ranks;
  return m;
}

std::vector<int> v_placement(int num_stages, int num_ranks) {
  std::vector<int> m(static_cast<size_t>(num_stages));
  for (int s = 0; s < num_stages; ++s) {
    int lap = s / num_ranks, pos = s % num_ranks;
    m[static_cast<size_t>(s)] = (lap % 2 == 0) ? pos : num_ranks - 1 - pos;
  }
  return m;
}

std::vector<int> Schedule::stages_of(int rank) const {
  std::vector<int> out;
  for (int s = 0; s < num_stages; ++s)
    if (stage_to_rank[static_cast<size_t>(s)] == rank) out.push_back(s);
  return out;
}

bool Schedule::is_lowered() const {
  for (const auto& list : actions)
    for (const auto& a : list)
      if (is_p2p(a.op)) return true;
  return false;
}

size_t Schedule::total_actions() const {
  size_t n = 0;
  for (const auto& list : actions) n += list.size();
  return n;
}

void check_shape(const Schedule& s) {
  auto fail = [&](const std::string& field, long value, const std::string& allowed) {
    throw InputError("schedule '" + s.name + "': " + field + " = " + std::to_string(value) +
                     " is invalid (" + allowed + ")");
  };
  if (s.num_ranks < 1) fail("num_ranks", s.num_ranks, "must be at least 1");
  if (s.num_stages < 1) fail("num_stages", s.num_stages, "must be at least 1");
  if (s.num_microbatches < 1) fail("num_microbatches", s.num_microbatches, "must be at least 1");
  if (s.num_chains < 1) fail("num_chains", s.num_chains, "must be at least 1");
  if (s.num_stages % s.num_chains != 0)
    fail("num_stages", s.num_stages, "must be a multiple of num_chains = " + std::to_string(s.num_chains));
  if (static_cast<int>(s.stage_to_rank.size()) != s.num_stages)
    fail("stage_to_rank size", static_cast<long>(s.stage_to_rank.size()),
         "must equal num_stages = " + std::to_string(s.num_stages));
  for (size_t i = 0; i < s.stage_to_rank.size(); ++i) {
    int r = s.stage_to_rank[i];
    if (r < 0 || r >= s.num_ranks)
      fail("stage_to_rank[" + std::to_string(i) + "]", r,
           "must be a rank in [0, " + std::to_string(s.num_ranks) + ")");
  }
  if (static_cast<int>(s.actions.size()) != s.num_ranks)
    fail("number of action lists", static_cast<long>(s.actions.size()),
         "must equal num_ranks = " + std::to_string(s.num_ranks));
}

Schedule make_schedule(std::string name, int num_ranks, int num_stages, int num_microbatches,
                       PlacementKind placement, std::vector<int> stage_to_rank, int num_chains) {
  Schedule s;
  s.name = std::move(name);
  s.num_ranks = num_ranks;
  s.num_stages = num_stages;
  s.num_microbatches = num_microbatches;
  s.num_chains = num_chains;
  s.placement = placement;
  if (stage_to_rank.empty() && num_ranks > 0 && num_stages > 0) {
    if (placement == PlacementKind::Loop) stage_to_rank = loop_placement(num_stages, num_ranks);
    if (placement == PlacementKind::V) stage_to_rank = v_placement(num_stages, num_ranks);
  }
  s.stage_to_rank = std::move(stage_to_rank);
  s.actions.assign(static_cast<size_t>(std::max(num_ranks, 0)), {});
  check_shape(s);
  return s;
}

}  // namespace stagecraft::schedules
