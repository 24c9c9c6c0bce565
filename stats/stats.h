// Statistics that say how far to trust a prediction: rank correlation (Spearman's rho with
// average ranks for ties; Kendall's tau-b, which corrects for ties on either side) as Oases
// reports for its cost model (Fig. 9), and mean absolute percentage error as simulators report
// absolute accuracy.
#pragma once

#include <vector>

namespace stagecraft::stats {

// Median (mean of the two middle values for an even count). Throws InputError when empty.
double median(std::vector<double> x);
// Ranks 1..n, tied values sharing the mean of their positions.
std::vector<double> average_ranks(const std::vector<double>& x);
double pearson(const std::vector<double>& x, const std::vector<double>& y);
// Pearson correlation of the average ranks. Throws InputError for fewer than 2 points or
// sizes that differ; NaN when one side is constant.
double spearman(const std::vector<double>& x, const std::vector<double>& y);
// tau-b = (concordant - discordant) / sqrt((n0 - n1)(n0 - n2)), n0 = n(n-1)/2, n1 and n2 the
// pairs tied in x and in y.
double kendall_tau_b(const std::vector<double>& x, const std::vector<double>& y);
// mean over i of |predicted_i - measured_i| / measured_i (a fraction: 0.1 = 10%).
double mape(const std::vector<double>& predicted, const std::vector<double>& measured);

}  // namespace stagecraft::stats
