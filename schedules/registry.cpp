#include "schedules/registry.h"

#include <algorithm>
#include <cctype>

#include "schedules/error.h"
#include "schedules/validate.h"

namespace stagecraft::schedules {
namespace {

std::string normalize(std::string_view name) {
  std::string out;
  for (char c : name)
    if (c != '-' && c != '_' && c != ' ') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

const std::vector<GeneratorInfo>& generators() {
  static const std::vector<GeneratorInfo> all = {
      gpipe_generator(),
      one_f_one_b_generator(),
      interleaved_1f1b_generator(),
      looped_bfs_generator(),
      chimera_generator(),
      chimera_wave_generator(),
      hanayo_generator(),
      hanayo_greedy_generator(),
      merak_early_recompute_generator(),
      merak_generator(),
      fold3d_generator(),
      zb_h1_generator(),
      zb_h2_generator(),
      zb_h1_greedy_generator(),
      zb_h2_greedy_generator(),
      zb_v_generator(),
      zb1p_generator(),
      dualpipe_generator(),
      dualpipe_v_generator(),
  };
  return all;
}

const GeneratorInfo& find_generator(std::string_view name) {
  std::string key = normalize(name);
  for (const auto& g : generators()) {
    if (normalize(g.name) == key) return g;
    for (const auto& a : g.aliases)
      if (normalize(a) == key) return g;
  }
  std::string names;
  for (const auto& g : generators()) names += (names.empty() ? "" : ", ") + g.name;
  throw InputError("schedule '" + std::string(name) + "' is unknown (registered: " + names + ")");
}

void check_size(const std::string& schedule, const GeneratorOptions& opt) {
  // F, B (or I and W) of every microbatch on every stage of every rank, before lowering adds the
  // sends and receives: bounded so that no input makes generation allocate without bound.
  const double slots = 3.0 * std::max(1, opt.ranks) * std::max(1, opt.chunks) * std::max(1, opt.microbatches);
  if (slots > kMaxComputeActions)
    throw InputError("schedule " + schedule + ": stages " + std::to_string(opt.ranks) + " x chunks " +
                     std::to_string(std::max(1, opt.chunks)) + " x microbatches " + std::to_string(opt.microbatches) +
                     " is too large (allowed: at most " + std::to_string(kMaxComputeActions) +
                     " compute actions, 3 per microbatch and stage)");
}

Schedule generate(std::string_view name, const GeneratorOptions& opt) {
  const GeneratorInfo& g = find_generator(name);
  check_size(g.name, opt);
  g.check(opt);
  Schedule s = g.build(opt);
  s.name = g.name;
  validate(s);
  return s;
}

bool a2a_overlap(const GeneratorOptions& o, const std::string& schedule) {
  if (!o.extra.contains(kA2aOverlapKey)) return false;
  const nlohmann::json& v = o.extra[kA2aOverlapKey];
  if (!v.is_boolean())
    throw InputError("schedule " + schedule + ": " + kA2aOverlapKey + " = " + v.dump() + " is invalid (expected true or false)");
  return v.get<bool>();
}

void append_one_f_one_b(std::vector<Action>& list, int total, int warmup, bool paired,
                        const std::function<Action(int)>& forward, const std::function<Action(int)>& backward) {
  warmup = std::min(total, warmup + (paired ? 1 : 0));
  int f = 0, b = 0;
  while (f < warmup) list.push_back(forward(f++));
  while (f < total) {
    if (paired) {
      const Action fa = forward(f++), ba = backward(b++);
      list.push_back(Action::overlap(fa.stage, fa.microbatch, ba.stage, ba.microbatch));
      continue;
    }
    list.push_back(forward(f++));
    list.push_back(backward(b++));
  }
  while (b < total) list.push_back(backward(b++));
}

namespace constraint {

void positive(const std::string& schedule, const char* field, int value) {
  if (value < 1)
    throw InputError("schedule " + schedule + ": " + field + " = " + std::to_string(value) + " is invalid (must be at least 1)");
}

void at_least(const std::string& schedule, const char* field, int value, int minimum, const std::string& why) {
  if (value < minimum)
    throw InputError("schedule " + schedule + ": " + field + " = " + std::to_string(value) + " is invalid (must be at least " +
                     std::to_string(minimum) + (why.empty() ? "" : ": " + why) + ")");
}

void multiple_of(const std::string& schedule, const char* field, int value, int divisor, const std::string& why) {
  if (divisor <= 0 || value % divisor != 0)
    throw InputError("schedule " + schedule + ": " + field + " = " + std::to_string(value) + " is invalid (must be a multiple of " +
                     std::to_string(divisor) + ": " + why + ")");
}

void no_chunks(const std::string& schedule, const GeneratorOptions& opt) {
  if (opt.chunks > 1)
    throw InputError("schedule " + schedule + ": chunks = " + std::to_string(opt.chunks) +
                     " is invalid (this schedule holds one stage per rank; use interleaved-1f1b or looped-bfs for several)");
}

void one_stage_per_rank(const std::string& schedule, const GeneratorOptions& opt) {
  positive(schedule, "ranks", opt.ranks);
  positive(schedule, "microbatches", opt.microbatches);
  no_chunks(schedule, opt);
}

void looped_stages(const std::string& schedule, const GeneratorOptions& opt) {
  positive(schedule, "ranks", opt.ranks);
  positive(schedule, "microbatches", opt.microbatches);
  at_least(schedule, "chunks", opt.chunks == 0 ? 2 : opt.chunks, 1);
}

}  // namespace constraint
}  // namespace stagecraft::schedules
