// Schedule generators, registered by name. A generator states its parameters and constraints,
// refuses what it cannot do with an InputError naming the constraint, and emits a
// compute-only schedule; generate() also validates it.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "schedules/schedule.h"

namespace stagecraft::schedules {

struct GeneratorOptions {
  int ranks = 4;         // pipeline ranks p (`--stages` on the command line)
  int microbatches = 8;  // microbatches per iteration m
  int chunks = 0;        // stages per rank v for schedules that take it; 0 = the generator's default
  nlohmann::json extra = nlohmann::json::object();  // generator-specific parameters by name
};

struct GeneratorInfo {
  std::string name;                  // canonical name: lowercase with hyphens
  std::vector<std::string> aliases;  // other accepted names (matching ignores case, '-' and '_')
  std::string summary;               // one line
  std::string source;                // where it comes from
  std::vector<std::string> params;   // GeneratorOptions fields and extra keys it reads
  std::string constraints;           // what it requires, in words
  bool owns_recompute = false;       // places its own recomputation (Merak, FOLD3D): a plan's full
                                     // recomputation adds nothing to it, the same schedule as none
  std::function<void(const GeneratorOptions&)> check;      // throws InputError on a violation
  std::function<Schedule(const GeneratorOptions&)> build;  // compute-only schedule; after check
};

// Every registered generator, in a stable order.
const std::vector<GeneratorInfo>& generators();

// Case-insensitive lookup ignoring '-', '_' and spaces; throws InputError listing the names.
const GeneratorInfo& find_generator(std::string_view name);

// check + build + validate. The result is compute-only; lower() it before evaluating.
// The most compute actions a generated schedule may hold (ranks x chunks x microbatches x 3):
// generate refuses larger ones with InputError. Pricing one takes about 3 KB and 20 us per action
// today (docs/benchmarks.md), so 2^20 keeps any input to seconds and a few GB; pp 64 x 2 chunks
// x 2,048 microbatches (786k) fits.
inline constexpr long kMaxComputeActions = 1L << 20;
void check_size(const std::string& schedule, const GeneratorOptions& opt);  // InputError above the bound

Schedule generate(std::string_view name, const GeneratorOptions& opt);

// Shared checks for generators, each throwing InputError that names the schedule and field.
// Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm; pipeline_parallel/schedules.py
// combined_1f1b_schedule_for_no_pipelining, and one more warm-up forward in the interleaved
// schedule "to ensure the forward and backward computations are independent in all 1f1b steps"):
// the generator parameter `a2a_overlap` (true or false, default false) of 1f1b and interleaved-1f1b.
inline constexpr const char* kA2aOverlapKey = "a2a_overlap";
// The parameter's value; InputError naming it when it is not a boolean.
bool a2a_overlap(const GeneratorOptions& o, const std::string& schedule);
// One rank's 1F1B after `warmup` forwards: forward(k) and backward(k) give the k-th forward and
// backward; each steady-state forward then the backward after it, or with `paired` the two as
// one OVERLAP_F_B (its all-to-alls behind the other's compute) after one more warm-up forward;
// then the remaining backwards.
void append_one_f_one_b(std::vector<Action>& list, int total, int warmup, bool paired,
                        const std::function<Action(int)>& forward, const std::function<Action(int)>& backward);

namespace constraint {
void positive(const std::string& schedule, const char* field, int value);
void at_least(const std::string& schedule, const char* field, int value, int minimum, const std::string& why = "");
void multiple_of(const std::string& schedule, const char* field, int value, int divisor, const std::string& why);
void no_chunks(const std::string& schedule, const GeneratorOptions& opt);
// ranks and microbatches positive, one stage per rank (no_chunks): the checks every schedule
// without chunks starts with.
void one_stage_per_rank(const std::string& schedule, const GeneratorOptions& opt);
// ranks and microbatches positive, chunks at least 1 (0: the looped schedules' default of 2).
void looped_stages(const std::string& schedule, const GeneratorOptions& opt);
}  // namespace constraint

// The generators of this build, one file each under generators/.
GeneratorInfo gpipe_generator();
GeneratorInfo one_f_one_b_generator();
GeneratorInfo interleaved_1f1b_generator();
GeneratorInfo looped_bfs_generator();
GeneratorInfo chimera_generator();
GeneratorInfo chimera_wave_generator();
GeneratorInfo hanayo_generator();
GeneratorInfo hanayo_greedy_generator();
GeneratorInfo merak_early_recompute_generator();
GeneratorInfo merak_generator();
GeneratorInfo fold3d_generator();
GeneratorInfo zb_h1_generator();
GeneratorInfo zb_h2_generator();
GeneratorInfo zb_h1_greedy_generator();
GeneratorInfo zb_h2_greedy_generator();
GeneratorInfo zb_v_generator();
GeneratorInfo zb1p_generator();
GeneratorInfo dualpipe_generator();
GeneratorInfo dualpipe_v_generator();

}  // namespace stagecraft::schedules
