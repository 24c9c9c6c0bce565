// Prices every (series, x) point of an experiment and writes results.csv.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "costmodel/estimate.h"
#include "reproduce/spec.h"

namespace stagecraft::reproduce {

// The simulator as an engine: an estimate in, the same estimate with the simulated iteration
// out (sim::simulated_estimate). The experiment library does not depend on sim; the caller
// passes it.
using SimulateFn = std::function<costmodel::Estimate(const costmodel::Estimate&)>;

struct RunOptions {
  SimulateFn simulate;  // engine "sim"; empty: a spec asking for it is refused (InputError)
};

struct Point {
  std::string series;    // a series name of the spec
  std::string x;         // an x label of the spec
  double predicted = 0;  // the metric times the spec's scale, in its unit
  bool fits = true;      // the plan fits every GPU's usable memory
  std::string choice;    // the best_of patch that won (compact JSON); empty without best_of
};

struct Results {
  std::vector<Point> points;  // series-major, in the spec's order
  // The point of (series, x); nullptr when absent.
  const Point* find(const std::string& series, const std::string& x) const;
};

// The estimate of one point's configuration (fields model, cluster, nodes, memory_margin,
// global_batch, plan, profile; docs/experiments.md); `where` prefixes every error.
costmodel::Estimate estimate_config(const Spec& s, const nlohmann::json& config, const RunOptions& opt, const std::string& where);
// The spec's metric of an estimate, times its scale; `rank` picks an element of a per-rank
// metric, which is otherwise reduced over the ranks as the spec's `reduce` says.
double metric_of(const Spec& s, const costmodel::Estimate& e, std::optional<int> rank, const std::string& where);

// Every point, in the spec's order; InputError naming the series and x of a point that fails.
Results run(const Spec& s, const RunOptions& opt = {});

// results.csv: series,x,metric,predicted,unit,fits,choice.
std::string results_csv(const Spec& s, const Results& r);

}  // namespace stagecraft::reproduce
