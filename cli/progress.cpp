#include "cli/progress.h"

#include <cmath>
#include <cstdio>
#include <iostream>

namespace stagecraft::cli {

Progress::Progress(bool quiet) : quiet_(quiet), start_(std::chrono::steady_clock::now()) {}

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

double Progress::left_s(long done, long total) const {
  const double t = elapsed_s();
  if (base_s_ < 0 || done <= base_done_ || t <= base_s_) return -1;
  return (t - base_s_) * static_cast<double>(total - done) / static_cast<double>(done - base_done_);
}

std::string Progress::eta(long done, long total) const {
  std::string out = fmt_duration(elapsed_s()) + " elapsed";
  if (done >= total) return out;
  const double left = left_s(done, total);
  return out + (left < 0 ? ", measuring the rate" : ", about " + fmt_duration(left) + " left");
}

std::string Progress::tick(long done, long total) {
  const std::string out = eta(done, total);
  if (base_s_ < 0) {
    base_s_ = elapsed_s();
    base_done_ = done;
  }
  return out;
}

void Progress::report(const std::string& what, long done, long total, double interval_s) {
  if (quiet_ || done <= 0) return;
  const double t = elapsed_s();
  if (done < total && t - last_report_s_ < interval_s) return;
  last_report_s_ = t;
  std::cerr << what << " " << done << "/" << total << ", " << eta(done, total) << "\n";
  const double left = left_s(done, total);
  if (!hinted_ && !slow_hint.empty() && left > 60) {
    std::cerr << "this will take about " << fmt_duration(t + left) << " in all; " << slow_hint << "\n";
    hinted_ = true;
  }
  if (base_s_ < 0) {
    base_s_ = t;
    base_done_ = done;
  }
  std::cerr.flush();
}

std::string fmt_duration(double s) {
  char buf[64];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  } else if (s < 3600) {
    const int whole = static_cast<int>(std::lround(s));
    std::snprintf(buf, sizeof buf, "%d min %02d s", whole / 60, whole % 60);
  } else {
    const int whole = static_cast<int>(std::lround(s / 60));
    std::snprintf(buf, sizeof buf, "%d h %02d min", whole / 60, whole % 60);
  }
  return buf;
}

}  // namespace stagecraft::cli
