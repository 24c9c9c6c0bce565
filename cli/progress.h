// How far a long command is (issue 16, part 5): the time elapsed and, from the share of the
// work done, an estimate of what remains, on standard error so that standard output (tables,
// JSON) stays clean. `--quiet` silences it.
#pragma once

#include <chrono>
#include <string>

namespace stagecraft::cli {

class Progress {
 public:
  explicit Progress(bool quiet = false);
  double elapsed_s() const;
  // "12.3 s elapsed, about 40 s left": the remaining time assumes the rest goes at the pace so far.
  std::string eta(long done, long total) const;
  // "<what> done/total, <eta>" on standard error, at most once every `interval_s` and always
  // when done == total; nothing before the first unit is done.
  void report(const std::string& what, long done, long total, double interval_s = 2.0);
  bool quiet() const { return quiet_; }

 private:
  bool quiet_;
  std::chrono::steady_clock::time_point start_;
  double last_report_s_ = -1e9;
};

// "1 min 02 s" above a minute, else "12.3 s".
std::string fmt_duration(double s);

}  // namespace stagecraft::cli
