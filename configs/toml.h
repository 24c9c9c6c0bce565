// The TOML subset torchtitan's job files use, read into JSON: [table] and [[array]] headers,
// key = value with dotted and quoted keys, basic and literal strings, integers, floats,
// booleans, arrays (over several lines) and inline tables, # comments. InputError naming
// `where` and the line on anything else.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace stagecraft::configs {

nlohmann::json parse_toml(const std::string& text, const std::string& where);

}  // namespace stagecraft::configs
