// The YAML subset Megatron-Bridge's and NeMo's config files use, read into JSON: block mappings
// and sequences by indentation ("key: value", "key:" with a block below, "- item", "- key: v"),
// plain, single- and double-quoted scalars (null, ~, true/false, numbers typed), flow sequences
// and mappings on one line ([a, b], {a: 1}), # comments, "---". Anchors, tags other than
// ignorable ones and multi-line scalars are refused: InputError naming `where` and the line.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace stagecraft::configs {

nlohmann::json parse_yaml(const std::string& text, const std::string& where);

}  // namespace stagecraft::configs
