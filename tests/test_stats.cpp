// Rank correlation and error statistics against values computed by hand (ties included).
#include <gtest/gtest.h>

#include <cmath>

#include "stats/stats.h"
#include "schedules/error.h"

using namespace stagecraft;
using namespace stagecraft::stats;

TEST(Stats, AverageRanksShareTies) {
  EXPECT_EQ(average_ranks({10, 20, 20, 5}), (std::vector<double>{2, 3.5, 3.5, 1}));
  EXPECT_EQ(average_ranks({1, 1, 1}), (std::vector<double>{2, 2, 2}));
}

TEST(Stats, SpearmanByHand) {
  // No ties: rho = 1 - 6 sum d^2 / (n (n^2 - 1)). x ranks 1 2 3 4 5, y ranks 2 1 4 3 5:
  // sum d^2 = 4, rho = 1 - 24 / 120 = 0.8.
  EXPECT_NEAR(spearman({1, 2, 3, 4, 5}, {20, 10, 40, 30, 50}), 0.8, 1e-12);
  EXPECT_NEAR(spearman({1, 2, 3}, {3, 2, 1}), -1.0, 1e-12);
  // Ties: x = (1, 2, 2, 3) ranks (1, 2.5, 2.5, 4); y = (1, 3, 2, 4) ranks (1, 3, 2, 4).
  // Pearson of the ranks: means 2.5 and 2.5; deviations x (-1.5, 0, 0, 1.5), y (-1.5, 0.5,
  // -0.5, 1.5); sxy = 4.5, sxx = 4.5, syy = 5; rho = 4.5 / sqrt(22.5) = 0.948683.
  EXPECT_NEAR(spearman({1, 2, 2, 3}, {1, 3, 2, 4}), 4.5 / std::sqrt(22.5), 1e-12);
}

TEST(Stats, KendallTauBByHand) {
  // x = (1, 2, 3, 4), y = (1, 3, 2, 4): pairs 6, one discordant (2,3): tau = (5 - 1) / 6.
  EXPECT_NEAR(kendall_tau_b({1, 2, 3, 4}, {1, 3, 2, 4}), 4.0 / 6.0, 1e-12);
  // Ties: x = (1, 2, 2, 3), y = (1, 3, 2, 4). Pairs: (1,2) c, (1,3) c, (1,4) c, (2,3) tie in
  // x, (2,4) c, (3,4) c: 5 concordant, 0 discordant; n0 = 6, n1 = 1, n2 = 0:
  // tau-b = 5 / sqrt(5 * 6).
  EXPECT_NEAR(kendall_tau_b({1, 2, 2, 3}, {1, 3, 2, 4}), 5.0 / std::sqrt(30.0), 1e-12);
  // Ties on both sides: x = (1, 1, 2), y = (1, 2, 2): pairs (1,2) tie x, (1,3) c, (2,3) tie y:
  // tau-b = 1 / sqrt(2 * 2) = 0.5.
  EXPECT_NEAR(kendall_tau_b({1, 1, 2}, {1, 2, 2}), 0.5, 1e-12);
}

TEST(Stats, MapeByHand) {
  // |110 - 100| / 100 = 0.1, |45 - 50| / 50 = 0.1, |30 - 20| / 20 = 0.5: mean 0.7 / 3.
  EXPECT_NEAR(mape({110, 45, 30}, {100, 50, 20}), 0.7 / 3, 1e-12);
}

TEST(Stats, Median) {
  EXPECT_DOUBLE_EQ(median({5, 1, 3}), 3);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({7}), 7);
  EXPECT_THROW(median({}), InputError);
}

TEST(Stats, DegenerateInputs) {
  EXPECT_THROW(spearman({1}, {1}), InputError);
  EXPECT_THROW(kendall_tau_b({1, 2}, {1}), InputError);
  EXPECT_THROW(mape({1, 2}, {1, 0}), InputError);
  EXPECT_TRUE(std::isnan(spearman({1, 1, 1}, {1, 2, 3})));
}
