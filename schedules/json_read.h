// The one way the loaders (model, cluster and plan specs, schedule JSON, profiles, sweeps, plan
// parameters) read JSON: the text or file parsed with syntax errors as an InputError naming the
// input, and integers range-checked: nlohmann's get<int>() of a number outside int's range, a
// float above all, is undefined behaviour (found by the long fuzz run, docs/testing.md); these
// refuse it with an InputError naming the field.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "schedules/error.h"

namespace stagecraft::schedules {

// `text` parsed; a syntax error (or a number out of range) is an InputError "<what> is not valid JSON: ...".
nlohmann::json parse_json(const std::string& text, const std::string& what);

// The JSON in file `path`: an InputError "<what> '<path>' cannot be read" when it cannot be opened,
// "<what> '<path>' is not valid JSON: ..." when it does not parse.
nlohmann::json read_json_file(const std::string& path, const std::string& what);

// `v` as an int: an integer, or an integral float, within int's range; `what` names the field.
inline int json_int(const nlohmann::json& v, const std::string& what) {
  constexpr double lo = std::numeric_limits<int>::min(), hi = std::numeric_limits<int>::max();
  if (v.is_number_unsigned()) {
    if (v.get<std::uint64_t>() <= static_cast<std::uint64_t>(hi)) return static_cast<int>(v.get<std::uint64_t>());
  } else if (v.is_number_integer()) {
    const std::int64_t x = v.get<std::int64_t>();
    if (x >= static_cast<std::int64_t>(lo) && x <= static_cast<std::int64_t>(hi)) return static_cast<int>(x);
  } else if (v.is_number_float()) {
    const double x = v.get<double>();
    if (std::isfinite(x) && x == std::floor(x) && x >= lo && x <= hi) return static_cast<int>(x);
  }
  throw InputError(what + " = " + v.dump() + " is invalid (expected an integer within 32 bits)");
}

// obj[key] as an int when present, else `def`.
inline int json_int_or(const nlohmann::json& obj, const char* key, int def, const std::string& what) {
  return obj.contains(key) ? json_int(obj.at(key), what + "." + key) : def;
}

}  // namespace stagecraft::schedules
