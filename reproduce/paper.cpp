#include "reproduce/paper.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "reproduce/csv.h"
#include "schedules/error.h"

namespace stagecraft::reproduce {

namespace fs = std::filesystem;

namespace {

const CsvRow kHeader = {"figure", "series", "x", "quantity", "value", "source", "note"};

bool is_aggregate(const std::string& x) { return x == "min" || x == "max" || x == "mean"; }

std::string ratio_of(const std::string& quantity) { return quantity.rfind("over:", 0) == 0 ? quantity.substr(5) : ""; }
std::string x_ratio_of(const std::string& quantity) { return quantity.rfind("over_x:", 0) == 0 ? quantity.substr(7) : ""; }

PaperRow row_of(const CsvRow& f, const Spec& s, const std::string& where) {
  if (f.size() != kHeader.size())
    throw InputError(where + ": " + std::to_string(f.size()) + " fields (expected " + std::to_string(kHeader.size()) +
                     ": figure,series,x,quantity,value,source,note; quote a field holding a comma)");
  PaperRow r{f[0], f[1], f[2], f[3], 0, f[5], f[6]};
  if (!s.find_series(r.series)) throw InputError(where + ": series = '" + r.series + "' is not a series of the spec");
  if (!is_aggregate(r.x) && !s.find_x(r.x)) throw InputError(where + ": x = '" + r.x + "' is not an x label of the spec (nor min, max, mean)");
  const std::string base = ratio_of(r.quantity), base_x = x_ratio_of(r.quantity);
  if (r.quantity != "value" && base.empty() && base_x.empty())
    throw InputError(where + ": quantity = '" + r.quantity + "' is invalid (allowed: value, over:SERIES, over_x:X)");
  if (!base.empty() && !s.find_series(base)) throw InputError(where + ": quantity = '" + r.quantity + "' names no series of the spec");
  if (!base_x.empty() && !s.find_x(base_x)) throw InputError(where + ": quantity = '" + r.quantity + "' names no x label of the spec");
  if (!base_x.empty() && is_aggregate(r.x)) throw InputError(where + ": x = '" + r.x + "' cannot go with quantity over_x (name one x label)");
  char* end = nullptr;
  r.value = std::strtod(f[4].c_str(), &end);
  if (f[4].empty() || *end != '\0' || !std::isfinite(r.value) || r.value <= 0)
    throw InputError(where + ": value = '" + f[4] + "' is invalid (must be a number > 0)");
  if (r.source != "text" && r.source != "table" && r.source != "bar")
    throw InputError(where + ": source = '" + r.source + "' is invalid (allowed: text, table, bar)");
  return r;
}

double point(const Results& res, const std::string& series, const std::string& x) {
  const Point* p = res.find(series, x);
  if (!p) throw Error("no result for series '" + series + "' at x '" + x + "'");
  return p->predicted;
}

// The predicted quantity of a paper row at one x label: the metric, its ratio to another series
// at that x (over:), or to the same series at another x (over_x:).
double at(const Results& res, const std::string& series, const std::string& x, const std::string& quantity) {
  const double v = point(res, series, x);
  const std::string base = ratio_of(quantity), base_x = x_ratio_of(quantity);
  const double d = !base.empty() ? point(res, base, x) : !base_x.empty() ? point(res, series, base_x) : 1;
  if (d == 0) throw Error("series '" + series + "' at x '" + x + "': " + quantity + " divides by zero");
  return v / d;
}

}  // namespace

std::vector<PaperRow> parse_paper(const std::string& text, const Spec& s, const std::string& name) {
  const std::vector<CsvRow> rows = parse_csv(text, name);
  if (rows.empty() || rows[0] != kHeader)
    throw InputError(name + ":1: header must be figure,series,x,quantity,value,source,note");
  std::vector<PaperRow> out;
  for (size_t i = 1; i < rows.size(); ++i) out.push_back(row_of(rows[i], s, name + ":" + std::to_string(i + 1)));
  return out;
}

std::vector<PaperRow> load_paper(const Spec& s) {
  const fs::path file = fs::path(s.dir) / "paper.csv";
  std::ifstream in(file);
  if (!in) throw InputError("experiment '" + s.dir + "': cannot read " + file.string() + " (the published values; header alone when none)");
  std::stringstream text;
  text << in.rdbuf();
  return parse_paper(text.str(), s, file.string());
}

std::vector<Comparison> compare(const Spec& s, const Results& r, const std::vector<PaperRow>& paper) {
  std::vector<Comparison> out;
  for (const PaperRow& row : paper) {
    double v = 0;
    if (!is_aggregate(row.x)) {
      v = at(r, row.series, row.x, row.quantity);
    } else {
      std::vector<double> all;
      for (const XPoint& x : s.x) all.push_back(at(r, row.series, x.label, row.quantity));
      if (row.x == "min") v = *std::min_element(all.begin(), all.end());
      if (row.x == "max") v = *std::max_element(all.begin(), all.end());
      if (row.x == "mean") {
        for (double a : all) v += a;
        v /= static_cast<double>(all.size());
      }
    }
    Comparison c{row, v, v / row.value - 1, std::nullopt};
    if (row.quantity != "value") c.same_order = (v > 1) == (row.value > 1) && (v < 1) == (row.value < 1);
    out.push_back(c);
  }
  return out;
}

std::string compare_csv(const std::vector<Comparison>& cs) {
  std::vector<CsvRow> rows;
  char p[32], e[32];
  for (const Comparison& c : cs) {
    std::snprintf(p, sizeof p, "%.6g", c.predicted);
    std::snprintf(e, sizeof e, "%.4f", c.error);
    rows.push_back({c.paper.figure, c.paper.series, c.paper.x, c.paper.quantity, fmt_double(c.paper.value), p, e,
                    c.same_order ? (*c.same_order ? "yes" : "no") : "", c.paper.source, c.paper.note});
  }
  return csv_table({"figure", "series", "x", "quantity", "paper", "predicted", "error", "same_order", "source", "note"}, rows);
}

}  // namespace stagecraft::reproduce
