// `stagecraft schedule`: generate or import a schedule, validate it, print it as a grid, CSV,
// JSON or Chrome trace; with --unit-costs, evaluate it with those durations and no
// communication and print the metrics as JSON.
#include <algorithm>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "costmodel/costs.h"
#include "costmodel/evaluator.h"
#include "drawing/svg.h"
#include "drawing/trace.h"
#include "schedules/error.h"
#include "schedules/grid.h"
#include "schedules/io.h"
#include "schedules/lower.h"
#include "schedules/registry.h"
#include "schedules/validate.h"
#include "workbench/plan.h"

namespace stagecraft::cli {
namespace {

struct ScheduleOpts {
  std::string name;
  int stages = 4;
  int microbatches = 8;
  int chunks = 0;
  std::string import_file;
  std::string format = "grid";
  std::string out;
  std::string unit_costs;
  std::string svg;
  bool lowered = false;
  bool list = false;
  bool verbose = false;
  bool wide = false;  // the grid on one line per rank, however wide (default: folded to 100 columns)
  ScheduleParams params;
};

void emit(const ScheduleOpts& o, const std::string& text) {
  if (o.out.empty()) std::cout << text;
  else write_file_atomic(o.out, text);
}

// Words of `text` in lines of at most `width` columns (a longer word stands alone).
std::vector<std::string> wrap(const std::string& text, size_t width) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string word, line;
  while (in >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > width) lines.push_back(line), line.clear();
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

// One line per schedule, name and summary, wrapped to kListColumns; with --verbose each
// schedule's constraints and source follow, wrapped the same way.
constexpr size_t kListColumns = 100;

void list_schedules(bool verbose) {
  size_t name_w = 8;
  for (const auto& g : schedules::generators()) name_w = std::max(name_w, g.name.size());
  const std::string pad(name_w + 2, ' ');
  auto block = [&](const std::string& first, const std::string& text) {
    std::vector<std::string> lines = wrap(text, kListColumns - pad.size());
    for (size_t i = 0; i < lines.size(); ++i)
      std::cout << (i == 0 ? first + std::string(pad.size() - first.size(), ' ') : pad) << lines[i] << "\n";
  };
  block("schedule", verbose ? "what it is; its constraints and source" : "what it is (--list --verbose: constraints, source)");
  for (const auto& g : schedules::generators()) {
    block(g.name, g.summary);
    if (!verbose) continue;
    std::string aliases;
    for (const auto& a : g.aliases) aliases += (aliases.empty() ? "" : ", ") + a;
    if (!aliases.empty()) block("", "also: " + aliases);
    block("", "constraints: " + g.constraints);
    block("", "source: " + g.source);
  }
}

nlohmann::json unit_metrics(const schedules::Schedule& s, const costmodel::EvalResult& r) {
  return {{"schedule", s.name},
          {"ranks", s.num_ranks},
          {"stages", s.num_stages},
          {"microbatches", s.num_microbatches},
          {"params", s.params},
          {"iteration_time", r.iteration_time_s},
          {"bubble_over_compute", r.bubble_over_compute},
          {"bubble_fraction", r.bubble_fraction},
          {"mean_idle_fraction", r.mean_idle_fraction},
          {"compute", r.compute_s},
          {"idle", r.idle_s},
          {"peak_activations", r.peak_activations}};
}

// A rank-by-step grid (schedules::format_grid) folded into blocks of steps within `width`
// columns, each block with the rank labels and its step numbers; cut only between steps (a
// position blank on every line). A grid that fits is returned as it is.
std::string fold_grid(const std::string& grid, int ranks, size_t width) {
  std::vector<std::string> lines;
  std::istringstream in(grid);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  const std::string tail = "   (step)";
  if (lines.empty() || lines.front().size() <= width) return grid;
  if (lines.front().size() >= tail.size() && lines.front().compare(lines.front().size() - tail.size(), tail.size(), tail) == 0)
    lines.front().resize(lines.front().size() - tail.size());
  const size_t label = ("rank " + std::to_string(ranks - 1)).size() + 1;
  size_t longest = 0;
  for (const auto& l : lines) longest = std::max(longest, l.size());
  auto blank = [&](size_t p) {
    for (const auto& l : lines)
      if (p < l.size() && l[p] != ' ') return false;
    return true;
  };
  std::string out;
  for (size_t start = label; start < longest;) {
    size_t end = longest;
    if (label + (longest - start) + tail.size() > width) {
      end = start + 1;
      for (size_t p = start + 1; p < longest && label + (p - start) + tail.size() <= width; ++p)
        if (blank(p)) end = p;
    }
    for (size_t i = 0; i < lines.size(); ++i) {
      std::string row = lines[i].substr(0, std::min(label, lines[i].size()));
      row += std::string(label - row.size(), ' ') + (start < lines[i].size() ? lines[i].substr(start, end - start) : "");
      while (!row.empty() && row.back() == ' ') row.pop_back();
      out += row + (i == 0 ? tail : "") + "\n";
    }
    start = end;
    if (start < longest) out += "\n";
  }
  return out;
}

void run(const ScheduleOpts& o) {
  if (o.list) {
    list_schedules(o.verbose);
    return;
  }
  static const std::vector<std::string> formats = {"grid", "csv", "json", "trace"};
  if (std::find(formats.begin(), formats.end(), o.format) == formats.end())
    throw InputError("--format " + o.format + " is invalid (allowed: grid, csv, json, trace)");
  if (!o.out.empty()) check_output_file("--out", o.out);
  if (!o.svg.empty()) check_output_file("--svg", o.svg);
  schedules::Schedule s;
  if (!o.import_file.empty()) {
    if (!o.name.empty()) throw InputError("--schedule and --import exclude each other: give one");
    s = schedules::load_schedule_file(o.import_file);
    schedules::validate(s);
  } else {
    if (o.name.empty()) throw InputError("--schedule NAME or --import FILE is required (schedules: see --list)");
    schedules::GeneratorOptions g;
    g.ranks = o.stages;
    g.microbatches = o.microbatches;
    g.chunks = o.chunks;
    g.extra = workbench::schedule_params_json(o.params);
    const auto& info = schedules::find_generator(o.name);
    for (auto it = g.extra.begin(); it != g.extra.end(); ++it)
      if (std::find(info.params.begin(), info.params.end(), it.key()) == info.params.end())
        throw InputError("schedule " + info.name + " takes no parameter '" + it.key() + "'");
    s = schedules::generate(o.name, g);
  }
  bool evaluate = !o.unit_costs.empty() || o.format == "trace" || !o.svg.empty();
  schedules::Schedule shown = (o.lowered || evaluate) ? schedules::lower(s) : s;
  if (evaluate) {
    costmodel::UnitCosts u = costmodel::parse_unit_costs(o.unit_costs);
    costmodel::EvalOptions eo;
    eo.record = o.format == "trace" || !o.svg.empty();
    costmodel::Evaluator ev(shown, eo);
    costmodel::EvalResult r = ev.evaluate(costmodel::unit_cost_table(shown, u));
    if (!o.svg.empty()) {
      drawing::SvgOptions so;
      so.time_unit = "units";
      std::string title = s.name + ", " + std::to_string(s.num_ranks) + " ranks, " + std::to_string(s.num_microbatches) +
                          " microbatches, unit costs " + (o.unit_costs.empty() ? "F=1,B=2,I=1,W=1,R=1" : o.unit_costs);
      write_file_atomic(o.svg, drawing::schedule_svg({{title, &shown, &r}}, so));
      if (o.unit_costs.empty() && o.format != "trace") {
        std::cout << "schedule " << s.name << " drawn in " << o.svg << "\n";
        return;
      }
    }
    if (o.format == "trace") {
      drawing::TraceOptions to;
      to.title = s.name + " with unit costs " + (o.unit_costs.empty() ? "F=1,B=2,I=1,W=1,R=1" : o.unit_costs);
      emit(o, drawing::chrome_trace(shown, r, to).dump() + "\n");
    } else {
      emit(o, unit_metrics(s, r).dump(2) + "\n");
    }
    return;
  }
  if (o.format == "grid") {
    std::string head = "schedule " + s.name + ": " + std::to_string(s.num_ranks) + " ranks, " +
                       std::to_string(s.num_stages) + " stages (" + std::string(schedules::placement_name(s.placement)) +
                       " placement), " + std::to_string(s.num_microbatches) + " microbatches, " +
                       std::to_string(shown.total_actions()) + " actions; valid\n";
    const std::string grid = schedules::format_grid(shown);
    emit(o, head + (o.wide || !o.out.empty() ? grid : fold_grid(grid, shown.num_ranks, kHelpWidth)));
  } else if (o.format == "csv") {
    emit(o, schedules::to_csv(shown));
  } else {
    emit(o, schedules::to_json(shown).dump(2) + "\n");
  }
}

}  // namespace

void add_schedule_command(CLI::App& app) {
  auto o = std::make_shared<ScheduleOpts>();
  CLI::App* c = app.add_subcommand("schedule", "generate or import a schedule, validate it and print it");
  c->add_option("--schedule", o->name, "registered schedule name (case-insensitive; see --list)");
  c->add_option("--stages", o->stages, "pipeline ranks p (a schedule with v chunks has p*v stages); default 4");
  c->add_option("--microbatches", o->microbatches, "microbatches m; default 8");
  c->add_option("--chunks", o->chunks, "stages per rank v, for interleaved-1f1b and looped-bfs; default 2 there");
  c->add_option("--import", o->import_file, "read a schedule from a .csv (PyTorch's format) or .json file instead");
  c->add_option("--format", o->format, "output: grid (default), csv, json or trace (Chrome trace, evaluated)");
  c->add_option("--out", o->out, "write to this file instead of standard output");
  c->add_option("--unit-costs", o->unit_costs,
                "evaluate with these per-stage, per-microbatch durations and no communication, e.g. F=1,B=2,I=1,W=1,R=1; "
                "prints the metrics as JSON")
      ->check(non_empty("OP=SECONDS pairs, e.g. F=1,B=2"));
  add_schedule_param_flags(c, o->params);
  c->add_option("--svg", o->svg, "draw the evaluated schedule (unit costs) as an SVG timeline into this file");
  c->add_flag("--lowered", o->lowered, "show the lowered schedule (sends, receives, reductions, optimizer)");
  c->add_flag("--list", o->list, "list the registered schedules, one line each");
  c->add_flag("--verbose", o->verbose, "with --list: each schedule's constraints and source as well");
  c->add_flag("--wide", o->wide, "the grid on one line per rank, however wide (default: folded into blocks of 100 columns)");
  c->callback([o] { run(*o); });
}

}  // namespace stagecraft::cli
