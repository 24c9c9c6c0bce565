#include "presets/catalog.h"

namespace stagecraft::presets {

std::vector<std::string> names(const std::string& kind) {
  std::vector<std::string> out;
  for (const Entry& e : entries())
    if (e.kind == kind) out.push_back(e.name);
  return out;
}

const Entry* find(const std::string& kind, const std::string& name) {
  for (const Entry& e : entries())
    if (e.kind == kind && e.name == name) return &e;
  return nullptr;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace stagecraft::presets
