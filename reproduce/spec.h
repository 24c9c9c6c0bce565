// An experiment: one figure or table of a seed paper as data (docs/experiments.md). The spec
// names the configurations as JSON merge patches over a base, the x points and series that vary
// them, and the metric predicted.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace stagecraft::reproduce {

struct XPoint {
  std::string label;            // as the paper labels it, e.g. "PC (8,1)" or "32"
  nlohmann::json set;           // merge patch over the base
  std::optional<int> rank;      // for a per-rank metric: the element taken (else the largest)
};

struct Series {
  std::string name;             // as the paper names the method, e.g. "Megatron-LM"
  nlohmann::json set;           // merge patch over the base and the x point
  std::vector<nlohmann::json> best_of;  // patches tried on top, the best by goal kept; empty: none
};

struct Spec {
  std::string dir;              // the experiment's folder; files in points are relative to it
  std::string paper;            // merak | oases | hanayo | fold3d
  std::string figure;           // as the paper numbers it, e.g. "Fig. 9" or "Table II"
  std::string title;            // what the figure shows
  std::string metric;           // a field of the estimate's JSON (costmodel::to_json)
  std::string goal;             // max | min, for best_of
  double scale = 1;             // predicted values are multiplied by it ...
  std::string unit;             // ... and are then in this unit, the paper's
  std::string reduce = "max";   // a per-rank metric over the ranks: max | min | mean | variance
  std::string engine = "eval";  // eval (the fast evaluator) | sim (the SimGrid simulator)
  std::string plot = "bar";     // bar (grouped bars per x) | line (one line per series)
  std::string xlabel, ylabel;   // axis labels of the plot (optional)
  std::string discussion;       // what explains the larger differences
  nlohmann::json base;          // the configuration every point starts from
  std::vector<XPoint> x;
  std::vector<Series> series;

  // The file name a notebook gives the figure: "<paper>-<folder name>".
  std::string id() const;
  const Series* find_series(const std::string& name) const;
  const XPoint* find_x(const std::string& label) const;
};

// Reads DIR/spec.json; InputError naming the file and the field on anything malformed.
Spec load_spec(const std::string& dir);
Spec spec_from_json(const nlohmann::json& j, const std::string& dir);

// The configuration of one point: base, then x.set, then series.set (RFC 7386 merge patches).
nlohmann::json point_config(const Spec& s, const XPoint& x, const Series& series);

// The experiment folders under `root` (every folder holding a spec.json), sorted with numbers
// compared as numbers (fig2 before fig10).
std::vector<std::string> find_experiments(const std::string& root);

}  // namespace stagecraft::reproduce
