// Text the library reads and writes: comma-separated lists and integers as the flags give them,
// and numbers as its messages (and the commands' tables, cli/common.h) print them.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace stagecraft::workbench {

// `s` split at `sep`, empty items left out ("1,,2" -> {"1", "2"}).
std::vector<std::string> split_list(const std::string& s, char sep = ',');
// True when `s` ends with `tail` and is longer than it (a file name with that extension).
bool ends_with(const std::string& s, const std::string& tail);
// The whole of `text` as an integer; nothing when it is not one (the caller names the flag).
std::optional<int> to_int(const std::string& text);
// The whole of `v` as an integer; InputError `FLAG = "V" is invalid (expected an integer)`.
int parse_int(const std::string& flag, const std::string& v);

std::string fmt_seconds(double s);         // "1.234 s", "12.3 ms", "45.6 us"
std::string fmt_bytes(double b);           // "12.3 GiB", "512.0 MiB"
std::string fmt_signed_bytes(double b);    // fmt_bytes, with "-" ahead when negative (memory over a limit)
std::string fmt_percent(double fraction);  // 0.15 -> "15%", 0.125 -> "12.5%"
std::string fmt_num(double v, int precision = 3);  // "%.*f"

}  // namespace stagecraft::workbench
