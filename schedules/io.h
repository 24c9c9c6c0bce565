// Import and export of schedules: PyTorch's pipelining CSV (one row per rank, one action per
// cell, an empty cell an idle step) and stagecraft's JSON. See docs/formats.md.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "schedules/schedule.h"

namespace stagecraft::schedules {

// CSV in PyTorch's format. Cells are placed at the step the unit-time dry run gives them,
// so idle steps show as empty cells, as PyTorch writes them.
std::string to_csv(const Schedule& s);

// Reads PyTorch's CSV (both notations: B/I/W, and the older one where B is the input
// backward when a W of the same stage and microbatch follows and BW is a full backward).
// Infers the placement (every stage on exactly one rank), the stage and microbatch counts.
Schedule from_csv(const std::string& text, const std::string& name = "imported");

nlohmann::json to_json(const Schedule& s);
Schedule from_json(const nlohmann::json& j);  // throws InputError naming the field

// Reads a file by extension (.csv or .json); throws InputError if unreadable or unknown.
Schedule load_schedule_file(const std::string& path);

}  // namespace stagecraft::schedules
