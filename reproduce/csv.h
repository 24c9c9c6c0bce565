// Comma-separated values as the experiments write and read them (RFC 4180: a field with a
// comma, a quote or a line break is quoted, quotes doubled).
#pragma once

#include <string>
#include <vector>

namespace stagecraft::reproduce {

using CsvRow = std::vector<std::string>;

// One line (with its trailing newline) of the fields, quoted where needed.
std::string csv_line(const CsvRow& fields);
// A whole table: the header, then the rows.
std::string csv_table(const CsvRow& header, const std::vector<CsvRow>& rows);

// Parses `text` (the content of `name`, for errors) into rows; InputError naming the line on an
// unterminated quote. Empty lines are skipped.
std::vector<CsvRow> parse_csv(const std::string& text, const std::string& name);

// A number as a published value is written: ten significant digits, no trailing zeros ("1.5", "90").
std::string fmt_double(double v);

}  // namespace stagecraft::reproduce
