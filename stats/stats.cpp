#include "stats/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "schedules/error.h"

namespace stagecraft::stats {
namespace {

void same_size(const std::vector<double>& x, const std::vector<double>& y, const char* what) {
  if (x.size() != y.size())
    throw InputError(std::string(what) + ": " + std::to_string(x.size()) + " and " + std::to_string(y.size()) +
                     " values (the two series must pair up)");
  if (x.size() < 2) throw InputError(std::string(what) + ": needs at least 2 pairs, got " + std::to_string(x.size()));
}

}  // namespace

double median(std::vector<double> x) {
  if (x.empty()) throw InputError("median: no values");
  std::sort(x.begin(), x.end());
  size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

std::vector<double> average_ranks(const std::vector<double>& x) {
  std::vector<size_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> r(x.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && x[idx[j + 1]] == x[idx[i]]) ++j;
    double mean_rank = (static_cast<double>(i) + static_cast<double>(j)) / 2.0 + 1.0;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = mean_rank;
    i = j + 1;
  }
  return r;
}

double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  same_size(x, y, "pearson");
  double n = static_cast<double>(x.size());
  double mx = std::accumulate(x.begin(), x.end(), 0.0) / n, my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (sxx == 0 || syy == 0) return std::numeric_limits<double>::quiet_NaN();
  return sxy / std::sqrt(sxx * syy);
}

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  same_size(x, y, "spearman");
  return pearson(average_ranks(x), average_ranks(y));
}

double kendall_tau_b(const std::vector<double>& x, const std::vector<double>& y) {
  same_size(x, y, "kendall");
  double concordant = 0, discordant = 0, tie_x = 0, tie_y = 0;
  for (size_t i = 0; i < x.size(); ++i)
    for (size_t j = i + 1; j < x.size(); ++j) {
      double dx = x[i] - x[j], dy = y[i] - y[j];
      if (dx == 0) tie_x += 1;
      if (dy == 0) tie_y += 1;
      if (dx == 0 || dy == 0) continue;
      ((dx > 0) == (dy > 0) ? concordant : discordant) += 1;
    }
  double n0 = static_cast<double>(x.size()) * (static_cast<double>(x.size()) - 1) / 2;
  double denom = std::sqrt((n0 - tie_x) * (n0 - tie_y));
  if (denom == 0) return std::numeric_limits<double>::quiet_NaN();
  return (concordant - discordant) / denom;
}

double mape(const std::vector<double>& predicted, const std::vector<double>& measured) {
  same_size(predicted, measured, "mape");
  double sum = 0;
  for (size_t i = 0; i < predicted.size(); ++i) {
    if (!(measured[i] > 0))
      throw InputError("mape: measured value " + std::to_string(i) + " = " + std::to_string(measured[i]) + " (must be > 0)");
    sum += std::fabs(predicted[i] - measured[i]) / measured[i];
  }
  return sum / static_cast<double>(predicted.size());
}

}  // namespace stagecraft::stats
