// Interleaved 1F1B (Megatron-LM virtual pipeline stages, Narayanan et al., SC 2021, Sec. 2.2):
// v chunks per rank, p*v stages in loop placement (stage c*p + r on rank r). The forward and
// backward order of "virtual microbatches" follows Megatron-LM's
// forward_backward_pipelining_with_interleaving (megatron/core/pipeline_parallel/schedules.py):
// microbatches go through the chunks in groups of N = microbatch_group_size_per_vp_stage
// (default p): the N microbatches of a group on chunk 0, then the same N on chunk 1, ... (its
// get_schedule_table; the last group takes the microbatches left); the backward visits the
// same table with the chunks reversed; warm-up (p-r-1)*2 + (v-1)*N forwards, then 1F1B.
// Megatron-LM requires p <= N <= m and m mod N either 0 or at least p (a shorter last group
// leaves dependency bubbles); with N = p that is m a multiple of p. With a2a_overlap (registry.h,
// Megatron-Core's combined 1F1B) one more warm-up forward, then each steady-state forward and
// backward as one OVERLAP_F_B.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "schedules/error.h"
#include "schedules/json_read.h"
#include "schedules/registry.h"

namespace stagecraft::schedules {
namespace {

const char* kGroupKey = "microbatch_group_size_per_vp_stage";

int group_size(const GeneratorOptions& o) {
  if (!o.extra.contains(kGroupKey)) return o.ranks;
  return json_int(o.extra[kGroupKey], std::string("schedule interleaved-1f1b: ") + kGroupKey);
}

// Virtual microbatch k -> (microbatch, chunk) in forward order (Megatron-LM's schedule table).
std::vector<std::pair<int, int>> schedule_table(int m, int v, int group) {
  std::vector<std::pair<int, int>> table;
  for (int first = 0; first < m; first += group) {
    const int last = first + group >= m ? m : first + group;  // the last group takes the rest
    for (int chunk = 0; chunk < v; ++chunk)
      for (int mb = first; mb < last; ++mb) table.emplace_back(mb, chunk);
  }
  return table;
}

Action virtual_action(const std::pair<int, int>& entry, int r, int p, int v, bool forward) {
  const int chunk = forward ? entry.second : v - 1 - entry.second;
  return Action::make(chunk * p + r, forward ? Op::F : Op::B, entry.first);
}

}  // namespace

GeneratorInfo interleaved_1f1b_generator() {
  GeneratorInfo g;
  g.name = "interleaved-1f1b";
  g.aliases = {"interleaved", "megatron-interleaved", "scheduleinterleaved1f1b", "virtual-pipeline"};
  g.summary = "1F1B over v model chunks per rank (Megatron-LM virtual pipeline stages)";
  g.source = "Narayanan et al., Megatron-LM, SC 2021, Sec. 2.2";
  g.params = {"ranks", "microbatches", "chunks", kGroupKey, kA2aOverlapKey};
  g.constraints =
      "chunks >= 1 (default 2); microbatch_group_size_per_vp_stage N (default ranks) with ranks <= N <= microbatches, "
      "microbatches mod N 0 or at least ranks (Megatron-LM's requirements; with N = ranks, microbatches a multiple of ranks)";
  g.check = [](const GeneratorOptions& o) {
    constraint::looped_stages("interleaved-1f1b", o);
    a2a_overlap(o, "interleaved-1f1b");  // a boolean, or InputError
    const int group = group_size(o);
    if (!o.extra.contains(kGroupKey)) {
      constraint::multiple_of("interleaved-1f1b", "microbatches", o.microbatches, o.ranks,
                              "microbatches go through the ranks in groups of p");
      return;
    }
    if (group < o.ranks || group > o.microbatches)
      throw InputError(std::string("schedule interleaved-1f1b: ") + kGroupKey + " = " + std::to_string(group) +
                       " is invalid (allowed: ranks = " + std::to_string(o.ranks) + " to microbatches = " +
                       std::to_string(o.microbatches) + ", as Megatron-LM requires)");
    const int rest = o.microbatches % group;
    if (rest > 0 && rest < o.ranks)
      throw InputError("schedule interleaved-1f1b: microbatches = " + std::to_string(o.microbatches) + " leaves a last group of " +
                       std::to_string(rest) + " with " + kGroupKey + " = " + std::to_string(group) +
                       " (allowed: microbatches mod N either 0 or at least ranks = " + std::to_string(o.ranks) +
                       "; a shorter last group leaves dependency bubbles, Megatron-LM refuses it)");
  };
  g.build = [](const GeneratorOptions& o) {
    const int p = o.ranks, m = o.microbatches, v = o.chunks == 0 ? 2 : o.chunks;
    Schedule s = make_schedule("interleaved-1f1b", p, p * v, m, PlacementKind::Loop);
    s.params["chunks"] = v;
    const int group = group_size(o);
    if (o.extra.contains(kGroupKey)) s.params[kGroupKey] = group;
    const bool paired = a2a_overlap(o, "interleaved-1f1b");
    if (paired) s.params[kA2aOverlapKey] = true;
    const auto table = schedule_table(m, v, group);
    const int total = m * v;
    for (int r = 0; r < p; ++r)
      append_one_f_one_b(s.actions[static_cast<size_t>(r)], total, (p - r - 1) * 2 + (v - 1) * group, paired,
                         [&, r](int k) { return virtual_action(table[static_cast<size_t>(k)], r, p, v, true); },
                         [&, r](int k) { return virtual_action(table[static_cast<size_t>(k)], r, p, v, false); });
    return s;
  };
  return g;
}

}  // namespace stagecraft::schedules
