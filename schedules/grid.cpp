#include "schedules/grid.h"

#include <algorithm>
#include <sstream>

namespace stagecraft::schedules {

std::string format_grid(const Schedule& s, const GridOptions& opt) {
  size_t steps = 0;
  for (const auto& list : s.actions) steps = std::max(steps, list.size());
  size_t lo = 0, hi = steps;  // half-open window of steps shown
  if (opt.window > 0 && !opt.marks.empty()) {
    int mn = opt.marks.front().second, mx = mn;
    for (auto [r, st] : opt.marks) {
      (void)r;
      mn = std::min(mn, st);
      mx = std::max(mx, st);
    }
    lo = static_cast<size_t>(std::max(0, mn - opt.window));
    hi = std::min(steps, static_cast<size_t>(mx + opt.window + 1));
  }
  auto marked = [&](int r, size_t st) {
    return std::find(opt.marks.begin(), opt.marks.end(), std::make_pair(r, static_cast<int>(st))) !=
           opt.marks.end();
  };
  auto cell = [&](int r, size_t st) -> std::string {
    const auto& list = s.actions[static_cast<size_t>(r)];
    std::string t = st < list.size() ? to_text(list[st]) : (marked(r, st) ? "(end)" : "");
    if (marked(r, st)) t = ">>" + t + "<<";
    return t;
  };
  std::vector<size_t> width(hi > lo ? hi - lo : 0, 0);  // per column: widest cell or header, plus a space
  for (size_t st = lo; st < hi; ++st) {
    size_t& w = width[st - lo];
    w = std::to_string(st).size();
    for (int r = 0; r < s.num_ranks; ++r) w = std::max(w, cell(r, st).size());
    w += 1;
  }
  std::ostringstream out;
  std::string label = "rank " + std::to_string(s.num_ranks - 1);
  size_t lw = label.size() + 1;
  out << std::string(lw, ' ');
  if (lo > 0) out << "... ";
  for (size_t st = lo; st < hi; ++st) {
    std::string h = std::to_string(st);
    out << std::string(width[st - lo] - h.size(), ' ') << h;
  }
  if (hi < steps) out << " ...";
  out << "   (step)\n";
  for (int r = 0; r < s.num_ranks; ++r) {
    std::string l = "rank " + std::to_string(r);
    out << l << std::string(lw - l.size(), ' ');
    if (lo > 0) out << "... ";
    for (size_t st = lo; st < hi; ++st) {
      std::string c = cell(r, st);
      out << std::string(width[st - lo] - c.size(), ' ') << c;
    }
    if (hi < steps) out << " ...";
    out << "\n";
  }
  return out.str();
}

}  // namespace stagecraft::schedules
