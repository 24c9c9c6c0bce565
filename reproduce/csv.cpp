#include "reproduce/csv.h"

#include <cstdio>

#include "schedules/error.h"

namespace stagecraft::reproduce {

namespace {
bool needs_quotes(const std::string& f) { return f.find_first_of(",\"\n\r") != std::string::npos; }
}  // namespace

std::string csv_line(const CsvRow& fields) {
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) out += ',';
    const std::string& f = fields[i];
    if (!needs_quotes(f)) {
      out += f;
      continue;
    }
    out += '"';
    for (char c : f) out += c == '"' ? std::string("\"\"") : std::string(1, c);
    out += '"';
  }
  return out + "\n";
}

std::string csv_table(const CsvRow& header, const std::vector<CsvRow>& rows) {
  std::string out = csv_line(header);
  for (const CsvRow& r : rows) out += csv_line(r);
  return out;
}

std::vector<CsvRow> parse_csv(const std::string& text, const std::string& name) {
  std::vector<CsvRow> rows;
  CsvRow row;
  std::string field;
  bool quoted = false, any = false;
  int line = 1, row_line = 1;
  auto end_row = [&] {
    if (any || !field.empty() || !row.empty()) {
      row.push_back(field);
      rows.push_back(row);
    }
    row.clear();
    field.clear();
    any = false;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        if (c == '\n') ++line;
        field += c;
      }
    } else if (c == '"') {
      quoted = any = true;
    } else if (c == ',') {
      row.push_back(field);
      field.clear();
      any = true;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      end_row();
      row_line = ++line;
    } else {
      field += c;
    }
  }
  if (quoted) throw InputError(name + ":" + std::to_string(row_line) + ": unterminated quoted field (a field opened with \" must close with \")");
  end_row();
  return rows;
}

std::string fmt_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

}  // namespace stagecraft::reproduce
