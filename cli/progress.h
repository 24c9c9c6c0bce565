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
  // "12.3 s elapsed, about 40 s left": the remaining time at the rate measured since the first
  // report (issue 52: the first unit carries the start-up, and priced from it the first estimate
  // was 27 times too long), none before a second report.
  std::string eta(long done, long total) const;
  // "<what> done/total, <eta>" on standard error, at most once every `interval_s` and always
  // when done == total; nothing before the first unit is done. The first time the measured
  // remaining time passes a minute, `slow_hint` (when set) follows once: what makes it faster.
  void report(const std::string& what, long done, long total, double interval_s = 2.0);
  // eta() for a caller that prints its own lines (validate): the first call starts the rate.
  std::string tick(long done, long total);
  bool quiet() const { return quiet_; }
  std::string slow_hint;  // e.g. "--tp, --pp or --schedules narrow the search"

 private:
  // The remaining seconds at the measured rate; negative while not measured.
  double left_s(long done, long total) const;
  bool quiet_;
  std::chrono::steady_clock::time_point start_;
  double last_report_s_ = -1e9;
  double base_s_ = -1;   // time of the first report, the rate's start
  long base_done_ = 0;   // units done then
  bool hinted_ = false;  // slow_hint printed
};

// "1 min 02 s" above a minute, else "12.3 s".
std::string fmt_duration(double s);

}  // namespace stagecraft::cli
