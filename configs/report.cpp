#include "configs/report.h"

#include <sstream>

namespace stagecraft::configs {

void ImportReport::append(const ImportReport& o) {
  mapped.insert(mapped.end(), o.mapped.begin(), o.mapped.end());
  assumed.insert(assumed.end(), o.assumed.begin(), o.assumed.end());
  not_modelled.insert(not_modelled.end(), o.not_modelled.begin(), o.not_modelled.end());
  ignored.insert(ignored.end(), o.ignored.begin(), o.ignored.end());
  unknown.insert(unknown.end(), o.unknown.begin(), o.unknown.end());
}

namespace {

// "  FIELD VALUE -> NOTE", the note continued on indented lines so that none passes 100 columns.
void entry_lines(std::ostringstream& out, const ReportEntry& e) {
  std::string head = "  " + e.field + (e.value.empty() ? "" : " " + e.value);
  if (head.size() > 60) head = head.substr(0, 57) + "...";
  if (e.note.empty()) {
    out << head << "\n";
    return;
  }
  std::string line = head + " -> ";
  std::istringstream words(e.note);
  std::string w;
  bool first = true;
  while (words >> w) {
    if (!first && line.size() + 1 + w.size() > 100) {
      out << line << "\n";
      line = "      ";
      first = true;
    }
    line += (first ? "" : " ") + w;
    first = false;
  }
  out << line << "\n";
}

void section(std::ostringstream& out, const std::string& title, const std::vector<ReportEntry>& es) {
  if (es.empty()) return;
  out << title << " (" << es.size() << "):\n";
  for (const ReportEntry& e : es) entry_lines(out, e);
}

nlohmann::json entries_json(const std::vector<ReportEntry>& es) {
  nlohmann::json a = nlohmann::json::array();
  for (const ReportEntry& e : es) a.push_back({{"field", e.field}, {"value", e.value}, {"note", e.note}});
  return a;
}

}  // namespace

std::string report_text(const ImportReport& r) {
  std::ostringstream out;
  section(out, "mapped", r.mapped);
  section(out, "assumed (absent from the file: the framework's default)", r.assumed);
  section(out, "not modelled (understood; stagecraft has no such concept)", r.not_modelled);
  if (!r.ignored.empty()) {
    out << "ignored (" << r.ignored.size() << ", no bearing on time or memory):";
    std::string line;
    size_t col = 100;
    for (const ReportEntry& e : r.ignored) {
      if (col + 1 + e.field.size() > 100) {
        out << line << "\n ";
        line.clear();
        col = 1;
      }
      line += " " + e.field;
      col += 1 + e.field.size();
    }
    out << line << "\n";
  }
  for (const ReportEntry& e : r.unknown)
    out << "warning: unknown field " << e.field << (e.value.empty() ? "" : " = " + e.value) << " (not understood; left out)\n";
  return out.str();
}

nlohmann::json report_json(const ImportReport& r) {
  return {{"mapped", entries_json(r.mapped)},
          {"assumed", entries_json(r.assumed)},
          {"not_modelled", entries_json(r.not_modelled)},
          {"ignored", entries_json(r.ignored)},
          {"unknown", entries_json(r.unknown)}};
}

}  // namespace stagecraft::configs
