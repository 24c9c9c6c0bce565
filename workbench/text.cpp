#include "workbench/text.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "schedules/error.h"

namespace stagecraft::workbench {

std::vector<std::string> split_list(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep))
    if (!cur.empty()) out.push_back(cur);
  return out;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::optional<int> to_int(const std::string& text) {
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

int parse_int(const std::string& flag, const std::string& v) {
  if (const std::optional<int> x = to_int(v)) return *x;
  throw InputError(flag + " = \"" + v + "\" is invalid (expected an integer)");
}

std::string fmt_num(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

std::string fmt_seconds(double s) {
  char buf[64];
  double a = std::fabs(s);
  if (a >= 1 || a == 0) std::snprintf(buf, sizeof buf, "%.3f s", s);
  else if (a >= 1e-3) std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  return buf;
}

std::string fmt_bytes(double b) {
  char buf[64];
  double gib = b / (1024.0 * 1024.0 * 1024.0);
  if (gib >= 1) std::snprintf(buf, sizeof buf, "%.2f GiB", gib);
  else std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024.0));
  return buf;
}

std::string fmt_signed_bytes(double b) { return b < 0 ? "-" + fmt_bytes(-b) : fmt_bytes(b); }

std::string fmt_percent(double fraction) {
  std::string s = fmt_num(100 * fraction, 1);
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s + "%";
}

}  // namespace stagecraft::workbench
