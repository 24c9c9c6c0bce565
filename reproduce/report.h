// docs/figures.md: every experiment's figure, its published values beside the predicted ones
// with the error, and the spec's discussion of the larger differences.
#pragma once

#include <string>
#include <vector>

#include "reproduce/paper.h"
#include "reproduce/run.h"
#include "reproduce/spec.h"

namespace stagecraft::reproduce {

struct Outcome {
  Spec spec;
  Results results;
  std::vector<Comparison> comparisons;
};

// Summary figures of one experiment's comparisons.
struct Summary {
  int values = 0;                   // rows comparing the metric itself
  int ratios = 0;                   // rows comparing a ratio between two series
  double median_value_error = 0;    // median |error| over value rows
  double median_ratio_error = 0;    // median |error| over ratio rows
  int same_order = 0;               // ratio rows the prediction orders as the paper does
};
Summary summarize(const std::vector<Comparison>& c);

// The whole Markdown page; `figures_dir` is where the PNGs are, relative to the page.
std::string report_markdown(const std::vector<Outcome>& all, const std::string& figures_dir = "figures");

}  // namespace stagecraft::reproduce
