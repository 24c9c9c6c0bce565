// `stagecraft experiment run`: the seed papers' figures as experiments (docs/experiments.md).
// Every experiment is priced before any file is written, so a failure leaves nothing behind.
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "cli/common.h"
#include "reproduce/paper.h"
#include "reproduce/report.h"
#include "reproduce/run.h"
#include "schedules/error.h"
#include "workbench/route.h"

namespace stagecraft::cli {
namespace {

namespace fs = std::filesystem;

struct ExperimentOpts {
  std::vector<std::string> paths;  // experiment folders, or folders holding them
  std::string report;              // the Markdown page to write (docs/figures.md); empty: none
  std::string out_dir;             // write each experiment's CSVs under OUT/<id>/ instead of beside its spec
  std::string figures_dir = "figures";  // where the report's images are, relative to the report
};

// The experiment folders named: a folder with a spec.json, or every one below a folder.
std::vector<std::string> experiment_dirs(const std::vector<std::string>& paths) {
  std::vector<std::string> dirs;
  for (const std::string& p : paths) {
    if (fs::exists(fs::path(p) / "spec.json")) {
      dirs.push_back(p);
      continue;
    }
    const auto found = reproduce::find_experiments(p);
    if (found.empty()) throw InputError("'" + p + "' holds no experiment (no spec.json in it or below it)");
    dirs.insert(dirs.end(), found.begin(), found.end());
  }
  return dirs;
}

void run_experiments(const ExperimentOpts& o) {
  if (!o.report.empty()) check_output_file("--report", o.report);  // before any experiment is priced
  if (!o.out_dir.empty()) check_output_dir("--out-dir", o.out_dir);
  reproduce::RunOptions ro;
  ro.simulate = workbench::simulator();  // empty without the simulator: a spec asking for it is refused
  std::vector<reproduce::Outcome> all;
  for (const std::string& dir : experiment_dirs(o.paths)) {
    reproduce::Outcome x{reproduce::load_spec(dir), {}, {}};
    const auto paper = reproduce::load_paper(x.spec);
    x.results = reproduce::run(x.spec, ro);
    x.comparisons = reproduce::compare(x.spec, x.results, paper);
    const auto m = reproduce::summarize(x.comparisons);
    std::cout << dir << ": " << x.results.points.size() << " points, " << m.values + m.ratios << " published values";
    if (m.ratios) std::cout << ", " << m.same_order << "/" << m.ratios << " ratios in the paper's order";
    std::cout << "\n";
    all.push_back(std::move(x));
  }
  for (const reproduce::Outcome& x : all) {
    const fs::path out = o.out_dir.empty() ? fs::path(x.spec.dir) : fs::path(o.out_dir) / x.spec.id();
    write_file_atomic((out / "results.csv").string(), reproduce::results_csv(x.spec, x.results));
    write_file_atomic((out / "compare.csv").string(), reproduce::compare_csv(x.comparisons));
  }
  if (!o.report.empty()) write_file_atomic(o.report, reproduce::report_markdown(all, o.figures_dir));
}

}  // namespace

void add_experiment_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("experiment", "the seed papers' figures: predicted beside published (docs/experiments.md)");
  cmd->require_subcommand(1);
  auto o = std::make_shared<ExperimentOpts>();
  auto* run = cmd->add_subcommand("run", "price every point of each experiment; write results.csv and compare.csv beside its spec");
  run->add_option("paths", o->paths, "experiment folders (holding spec.json and paper.csv), or folders holding them, e.g. experiments")
      ->required();
  run->add_option("--report", o->report, "also write the Markdown page of every experiment run (docs/figures.md)");
  run->add_option("--out-dir", o->out_dir, "write the CSVs under OUT_DIR/<paper>-<figure>/ instead of beside each spec");
  run->add_option("--figures-dir", o->figures_dir, "where the report's PNGs are, relative to the report (default: figures)");
  run->callback([o] { run_experiments(*o); });
}

}  // namespace stagecraft::cli
