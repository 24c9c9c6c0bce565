#include "drawing/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "schedules/error.h"

namespace stagecraft::drawing {

using schedules::Action;
using schedules::Op;

namespace {

const char* fill_of(Op op) {
  switch (op) {
    case Op::F: return "#7fb8e6";
    case Op::B: return "#f2a65a";
    case Op::I: return "#f6c27a";
    case Op::W: return "#c9a0dc";
    case Op::R: return "#b8c7a3";
    case Op::OVERLAP_F_B: return "#9fd6c0";
    case Op::OPTIMIZER: return "#6c6c6c";
    default: return "#dddddd";
  }
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

struct Window {
  int iteration = 0;
  double t0 = 0, t1 = 0;
};

Window last_iteration(const EvalResult& r) {
  Window w;
  for (const Span& s : r.spans) w.iteration = std::max(w.iteration, s.iteration);
  bool first = true;
  for (const Span& s : r.spans)
    if (s.iteration == w.iteration && s.stream == Stream::Compute) {
      if (first || s.start_s < w.t0) w.t0 = s.start_s;
      if (first || s.end_s > w.t1) w.t1 = s.end_s;
      first = false;
    }
  return w;
}

// Axis: a round tick step and a unit for labels.
void axis_unit(double span, const std::string& forced, double& scale, std::string& unit) {
  if (!forced.empty()) {
    scale = 1;
    unit = forced;
    return;
  }
  if (span >= 1) scale = 1, unit = "s";
  else if (span >= 1e-3) scale = 1e3, unit = "ms";
  else scale = 1e6, unit = "us";
}

double tick_step(double span) {
  double raw = span / 10, p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

std::string label_of(const Action& a) {
  if (a.op == Op::OVERLAP_F_B) return std::to_string(a.microbatch) + "/" + std::to_string(a.b_microbatch);
  if (a.op == Op::OPTIMIZER) return "opt";
  return std::to_string(a.microbatch);
}

}  // namespace

std::string schedule_svg(const std::vector<SvgPanel>& panels, const SvgOptions& opt) {
  if (panels.empty()) throw InputError("svg: nothing to draw");
  double span = 0;
  std::vector<Window> win;
  for (const SvgPanel& p : panels) {
    if (!p.result || !p.schedule || p.result->spans.empty())
      throw InputError("svg: panel '" + p.title + "' has no recorded timeline (evaluate with EvalOptions::record)");
    win.push_back(last_iteration(*p.result));
    span = std::max(span, win.back().t1 - win.back().t0);
  }
  if (span <= 0) span = 1;
  const double left = 70, top = 10, title_h = 22, gap = 18, axis_h = 34, legend_h = 26;
  const double px = opt.width_px / span;
  double height = top;
  for (const SvgPanel& p : panels) height += title_h + p.schedule->num_ranks * opt.row_px + gap;
  height += axis_h + legend_h;
  const double width = left + opt.width_px + 20;

  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width) << "\" height=\"" << num(height)
    << "\" viewBox=\"0 0 " << num(width) << " " << num(height) << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect x=\"0\" y=\"0\" width=\"" << num(width) << "\" height=\"" << num(height) << "\" fill=\"white\"/>\n";
  double y = top;
  for (size_t k = 0; k < panels.size(); ++k) {
    const SvgPanel& p = panels[k];
    const auto& s = *p.schedule;
    const Window& w = win[k];
    o << "<text x=\"4\" y=\"" << num(y + 15) << "\" font-size=\"13\" font-weight=\"bold\">" << esc(p.title) << "</text>\n";
    y += title_h;
    for (int r = 0; r < s.num_ranks; ++r) {
      double ry = y + r * opt.row_px;
      o << "<text x=\"4\" y=\"" << num(ry + opt.row_px * 0.65) << "\">rank " << r << "</text>\n"
        << "<line x1=\"" << num(left) << "\" y1=\"" << num(ry + opt.row_px) << "\" x2=\"" << num(left + opt.width_px)
        << "\" y2=\"" << num(ry + opt.row_px) << "\" stroke=\"#eeeeee\"/>\n";
    }
    for (const Span& sp : p.result->spans) {
      if (sp.iteration != w.iteration || sp.end_s < w.t0) continue;
      const Action& a = s.actions[static_cast<size_t>(sp.rank)][static_cast<size_t>(sp.position)];
      double from = std::max(sp.start_s, w.t0);  // communication issued before the first compute is clipped
      double x = left + (from - w.t0) * px, len = std::max(0.0, (sp.end_s - from) * px);
      double ry = y + sp.rank * opt.row_px;
      if (sp.stream == Stream::Compute) {
        o << "<rect x=\"" << num(x) << "\" y=\"" << num(ry + 4) << "\" width=\"" << num(len) << "\" height=\""
          << num(opt.row_px - 8) << "\" fill=\"" << fill_of(a.op) << "\" stroke=\"#444444\" stroke-width=\"0.5\"><title>"
          << esc(schedules::to_text(a)) << "</title></rect>\n";
        std::string lab = label_of(a);
        if (len >= 7.0 * lab.size())
          o << "<text x=\"" << num(x + len / 2) << "\" y=\"" << num(ry + opt.row_px * 0.65) << "\" text-anchor=\"middle\">"
            << esc(lab) << "</text>\n";
      } else if (sp.stream == Stream::P2P) {
        // A transfer: a thin mark under the sender's row, and a tick where it lands.
        int peer_stage = a.op == Op::SEND_F ? s.next_stage(a.stage) : s.prev_stage(a.stage);
        double py = y + s.rank_of(peer_stage) * opt.row_px;
        o << "<rect x=\"" << num(x) << "\" y=\"" << num(ry + opt.row_px - 3) << "\" width=\"" << num(std::max(len, 1.0))
          << "\" height=\"2\" fill=\"#8a5fbf\"><title>" << esc(schedules::to_text(a)) << "</title></rect>\n"
          << "<line x1=\"" << num(x + len) << "\" y1=\"" << num(py + 1) << "\" x2=\"" << num(x + len) << "\" y2=\""
          << num(py + 4) << "\" stroke=\"#8a5fbf\" stroke-width=\"1\"/>\n";
      } else {
        const char* c = sp.stream == Stream::Collective ? "#d9534f" : "#5a9e6f";
        o << "<rect x=\"" << num(x) << "\" y=\"" << num(ry + 1) << "\" width=\"" << num(std::max(len, 1.0))
          << "\" height=\"2\" fill=\"" << c << "\"><title>" << esc(schedules::to_text(a)) << "</title></rect>\n";
      }
    }
    y += s.num_ranks * opt.row_px + gap;
  }
  // Time axis.
  double scale;
  std::string unit;
  axis_unit(span, opt.time_unit, scale, unit);
  double step = tick_step(span);
  o << "<line x1=\"" << num(left) << "\" y1=\"" << num(y) << "\" x2=\"" << num(left + opt.width_px) << "\" y2=\"" << num(y)
    << "\" stroke=\"black\"/>\n";
  for (double t = 0; t <= span + 1e-12; t += step) {
    double x = left + t * px;
    o << "<line x1=\"" << num(x) << "\" y1=\"" << num(y) << "\" x2=\"" << num(x) << "\" y2=\"" << num(y + 4)
      << "\" stroke=\"black\"/>\n<text x=\"" << num(x) << "\" y=\"" << num(y + 15) << "\" text-anchor=\"middle\">"
      << esc(num(t * scale).substr(0, 8)) << "</text>\n";
  }
  o << "<text x=\"" << num(left + opt.width_px) << "\" y=\"" << num(y + 28) << "\" text-anchor=\"end\">time (" << esc(unit)
    << ")</text>\n";
  // Legend.
  double lx = left, ly = y + axis_h;
  for (Op op : {Op::F, Op::B, Op::I, Op::W, Op::R, Op::OVERLAP_F_B}) {
    o << "<rect x=\"" << num(lx) << "\" y=\"" << num(ly) << "\" width=\"12\" height=\"12\" fill=\"" << fill_of(op)
      << "\" stroke=\"#444444\" stroke-width=\"0.5\"/><text x=\"" << num(lx + 16) << "\" y=\"" << num(ly + 10) << "\">"
      << schedules::op_name(op) << "</text>\n";
    lx += 40 + 7.0 * schedules::op_name(op).size();
  }
  for (auto [name, color] : {std::pair{"transfer", "#8a5fbf"}, {"dp reduction", "#d9534f"}, {"host copy", "#5a9e6f"}}) {
    o << "<rect x=\"" << num(lx) << "\" y=\"" << num(ly + 5) << "\" width=\"12\" height=\"2\" fill=\"" << color
      << "\"/><text x=\"" << num(lx + 16) << "\" y=\"" << num(ly + 10) << "\">" << name << "</text>\n";
    lx += 40 + 7.0 * std::string(name).size();
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace stagecraft::drawing
