// The published values an experiment is compared with (paper.csv) and the comparison
// (compare.csv): each paper value beside the predicted one, the error and, for a ratio between
// two methods, whether the prediction orders them as the paper does.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "reproduce/run.h"
#include "reproduce/spec.h"

namespace stagecraft::reproduce {

struct PaperRow {
  std::string figure;    // as the paper numbers it
  std::string series;    // a series of the spec
  std::string x;         // an x label of the spec, or min | max | mean over the whole axis
  std::string quantity;  // "value" (the metric, in the spec's unit), "over:NAME" (ratio to series NAME
                         // at the same x) or "over_x:X" (ratio to the same series at x label X)
  double value = 0;      // the published number
  std::string source;    // text | table | bar (read off a plot, approximate)
  std::string note;      // where it stands in the paper
};

// Reads DIR/paper.csv (header figure,series,x,quantity,value,source,note) and checks each row
// against the spec; InputError naming the file, the line and the field.
std::vector<PaperRow> load_paper(const Spec& s);
std::vector<PaperRow> parse_paper(const std::string& text, const Spec& s, const std::string& name);

struct Comparison {
  PaperRow paper;
  double predicted = 0;   // the same quantity from the results
  double error = 0;       // predicted / paper - 1
  // For ratio rows: whether the prediction puts the ratio on the same side of 1 as the paper
  // (both above, both below, or both equal); nullopt for value rows.
  std::optional<bool> same_order;
};

// One comparison per paper row; the predicted quantity aggregated over x for min/max/mean.
std::vector<Comparison> compare(const Spec& s, const Results& r, const std::vector<PaperRow>& paper);

// compare.csv: figure,series,x,quantity,paper,predicted,error,same_order,source,note.
std::string compare_csv(const std::vector<Comparison>& c);

}  // namespace stagecraft::reproduce
