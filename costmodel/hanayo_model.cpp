#include "costmodel/hanayo_model.h"

#include <string>

#include "schedules/error.h"

namespace stagecraft::costmodel::hanayo {
namespace {

void check(int P, int W) {
  if (P < 2) throw InputError("hanayo eq. (1): P = " + std::to_string(P) + " is invalid (at least 2 devices)");
  if (W < 1) throw InputError("hanayo eq. (1): W = " + std::to_string(W) + " is invalid (at least 1 wave)");
}

}  // namespace

double bubble_ratio_eq1(int P, int W, double tf_s, double tb_s, double tc_s) {
  check(P, W);
  const double p = P, w = W;
  double num = tb_s / w + (1 + 2 * w + 2 / p + (p - 2) / 3) * tc_s;
  double den = p / (p - 1) * tf_s + (1 / (2 * w) + p / (p - 1)) * tb_s + ((p - 2) / 2 + 4 * w) * tc_s;
  return num / den;
}

double bubble_ratio_simplified(int P, int W) {
  check(P, W);
  return (2.0 * P - 2) / (3.0 * P * W + P - 1);
}

double idle_s(int P, int W, double tb_s, double tc_s) {
  check(P, W);
  const double p = P, w = W;
  return (p - 1) * (tb_s / w + (1 + 2 * w + 2 / p + (p - 2) / 3) * tc_s);
}

}  // namespace stagecraft::costmodel::hanayo
