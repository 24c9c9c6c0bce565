// Ranges of the numeric flags (cli/flag_bounds.h). A flag shared by several subcommands has one
// range everywhere unless a subcommand gives its own (the first match wins: command, then "").
// The upper bounds keep inputs where the program answers in seconds and in bounded memory
// (issue 36: 10^8 microbatches or 10^5 simulated iterations are typing errors, not plans).
#include "cli/flag_bounds.h"

#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>

#include "cli/common.h"
#include "schedules/error.h"

namespace stagecraft::cli {
namespace {

struct FlagBound {
  const char* command;  // subcommand name; "" = every subcommand
  const char* flag;     // long name, e.g. "--tp"
  double lo, hi;        // allowed, inclusive
  bool integer;         // whole numbers only
};

// clang-format off
constexpr FlagBound kBounds[] = {
    // parallel plan (estimate, compare, simulate, train, plan, partition)
    {"", "--dp", 1, 1 << 20, true},
    {"", "--tp", 1, 1024, true},
    {"", "--pp", 1, 4096, true},
    {"", "--cp", 1, 1024, true},
    {"", "--ep", 1, 4096, true},
    {"", "--etp", 0, 1024, true},
    {"", "--offload-layers", 0, 100000, true},
    {"", "--seq-length", 1, 1 << 22, true},
    {"", "--microbatch-size", 1, 1 << 16, true},
    {"", "--microbatches", 1, 1 << 16, true},
    {"", "--chunks", 1, 256, true},
    {"", "--stages", 1, 4096, true},
    {"", "--waves", 1, 64, true},
    {"", "--zero", 0, 3, true},
    {"", "--shard-group", 0, 1 << 20, true},  // 0: the whole dp group
    {"", "--grad-bucket-mb", 1.0 / 1024, 1 << 20, false},  // 1 KiB to 1 TiB
    {"", "--memory-margin", 0, 0.99, false},  // [0, 1) in the cluster spec
    {"", "--nodes", 1, 1 << 17, true},
    {"", "--gpus-used-per-node", 0, 4096, true},  // 0: all of a node's GPUs
    // simulate
    {"simulate", "--iterations", 1, 100, true},
    {"simulate", "--seed", 0, 1e18, true},
    // plan
    {"plan", "--gpus", 1, 1 << 20, true},
    {"plan", "--global-batch", 1, 1 << 24, true},
    {"plan", "--tokens", 1, 1e16, false},
    {"plan", "--top", 1, 1000, true},
    {"plan", "--threads", 1, 1024, true},
    {"plan", "--max-tp", 1, 1024, true},
    {"plan", "--microbatch-sizes", 1, 1 << 16, true},
    // import, check-run
    {"import", "--gpus", 1, 1 << 20, true},
    {"check-run", "--warmup", 0, 100000, true},
    // partition
    {"partition", "--max-subgraphs", 1, 1 << 16, true},
    {"partition", "--common-min-users", 2, 1 << 16, true},
    // train
    {"train", "--nproc", 1, 1024, true},
    {"train", "--steps", 1, 1e9, true},
    {"train", "--seed", 0, 1e18, true},
    {"train", "--lr", 1e-12, 10, false},
    {"train", "--timeout", 0.1, 7 * 86400, false},
    {"train", "--log-every", 0, 1e9, true},
    {"", "--threads", 1, 1024, true},
    // profile
    {"profile", "--nproc", 0, 64, true},
    {"profile", "--hidden", 1, 1 << 17, true},
    {"profile", "--heads", 1, 1024, true},
    {"profile", "--kv-heads", 1, 1024, true},
    {"profile", "--seq", 1, 1 << 20, true},
    {"profile", "--vocab", 1, 1 << 22, true},
    {"profile", "--warmup", 0, 10000, true},
    {"profile", "--runs", 1, 100000, true},
    {"profile", "--max-bytes", 4, 1e11, true},
};
// clang-format on

const FlagBound* bound_of(const std::string& command, const std::string& flag) {
  const FlagBound* shared = nullptr;
  for (const FlagBound& b : kBounds) {
    if (flag != b.flag) continue;
    if (command == b.command) return &b;  // the subcommand's own range wins
    if (!shared && std::string(b.command).empty()) shared = &b;
  }
  return shared;
}

std::string num(double v) {  // whole numbers in full (16777216, not 1.67772e+07)
  std::ostringstream s;
  if (std::floor(v) == v && std::fabs(v) < 1e15)
    s << static_cast<long long>(v);
  else
    s << std::setprecision(6) << v;
  return s.str();
}

std::string allowed(const FlagBound& b) {
  return std::string(b.integer ? "an integer" : "a number") + " from " + num(b.lo) + " to " + num(b.hi);
}

CLI::Validator validator(const FlagBound& b) {
  CLI::Validator v(
      [b](std::string& text) -> std::string {
        double x = 0;
        try {
          size_t used = 0;
          x = std::stod(text, &used);
          if (used != text.size()) x = NAN;
        } catch (const std::exception&) {
          x = NAN;
        }
        const bool whole = std::floor(x) == x;
        if (!std::isfinite(x) || x < b.lo || x > b.hi || (b.integer && !whole))
          return "'" + text + "' is invalid (allowed: " + allowed(b) + ")";
        return std::string();
      },
      "", "bounds");
  return v;
}

bool numeric(const std::string& type) {
  for (const char* t : {"INT", "UINT", "FLOAT", "NUMBER"})
    if (type.rfind(t, 0) == 0) return true;
  return false;
}

void bound(CLI::App& app, const std::string& command) {
  for (CLI::Option* o : app.get_options()) {
    // An empty value ("--out ''", "--schedule ''") is refused (issue 52): it read as the flag
    // not given, so `--trace ''` wrote nothing and exited 0.
    if (o->get_items_expected_min() > 0 && o->get_name() != "help") o->check(non_empty("a non-empty value"));
    if (o->get_lnames().empty() || !numeric(o->get_type_name())) continue;
    const std::string flag = "--" + o->get_lnames().front();
    const FlagBound* b = bound_of(command, flag);
    if (!b) throw Error("stagecraft " + command + " " + flag + " is numeric but has no range in cli/flag_bounds.cpp (a build defect)");
    o->check(validator(*b));
  }
  for (CLI::App* sub : app.get_subcommands({})) bound(*sub, sub->get_name());
}

}  // namespace

bool flag_range(const std::string& command, const std::string& flag, FlagRange& out) {
  const FlagBound* b = bound_of(command, flag);
  if (b) out = FlagRange{b->lo, b->hi, b->integer};
  return b != nullptr;
}

void bound_numeric_flags(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) bound(*sub, sub->get_name());
}

}  // namespace stagecraft::cli
