#include "configs/flag_reader.h"

#include <algorithm>
#include <cmath>

#include "schedules/error.h"

namespace stagecraft::configs {

std::string FlagReader::joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

const FlatField* FlagReader::take(const std::string& key) {
  const auto it = fields_.find(key);
  if (it == fields_.end()) return nullptr;
  read_.insert(key);
  return &it->second;
}

std::string FlagReader::name(const std::string& key) const {
  const auto it = fields_.find(key);
  return it == fields_.end() ? key : it->second.name;
}

std::optional<std::string> FlagReader::text(const std::string& key, const std::string& note) {
  const FlatField* f = take(key);
  if (!f) return std::nullopt;
  if (f->values.size() != 1)
    throw InputError(where_ + ": " + f->name + " takes one value (given " + std::to_string(f->values.size()) + ": '" + joined(f->values) + "')");
  report_.map(f->name, f->values[0], note);
  return f->values[0];
}

std::optional<int> FlagReader::integer(const std::string& key, const std::string& note) {
  const std::optional<std::string> t = text(key, note);
  if (!t) return std::nullopt;
  try {
    size_t used = 0;
    const long v = std::stol(*t, &used);
    if (used == t->size() && v >= -1000000000L && v <= 1000000000L) return static_cast<int>(v);
  } catch (const std::exception&) {
  }
  throw InputError(where_ + ": " + name(key) + " = '" + *t + "' is invalid (allowed: an integer)");
}

int FlagReader::count(const std::string& key, const std::string& note, int fallback) {
  const std::optional<int> v = integer(key, note);
  if (v && *v < 1) throw InputError(where_ + ": " + name(key) + " = " + std::to_string(*v) + " is invalid (allowed: at least 1)");
  return v.value_or(fallback);
}

std::optional<double> FlagReader::number(const std::string& key, const std::string& note) {
  const std::optional<std::string> t = text(key, note);
  if (!t) return std::nullopt;
  try {
    size_t used = 0;
    const double v = std::stod(*t, &used);
    if (used == t->size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw InputError(where_ + ": " + name(key) + " = '" + *t + "' is invalid (allowed: a number)");
}

std::optional<bool> FlagReader::boolean(const std::string& key, const std::string& note) {
  const FlatField* f = take(key);
  if (!f) return std::nullopt;
  const std::string v = joined(f->values);
  report_.map(f->name, v, note);
  std::string l = v;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (l.empty() || l == "true" || l == "1" || l == "yes") return true;
  if (l == "false" || l == "0" || l == "no" || l == "null" || l == "none") return false;
  throw InputError(where_ + ": " + f->name + " = '" + v + "' is invalid (allowed: true or false)");
}

std::optional<std::vector<std::string>> FlagReader::list(const std::string& key, const std::string& note) {
  const FlatField* f = take(key);
  if (!f) return std::nullopt;
  report_.map(f->name, joined(f->values), note);
  return f->values;
}

void FlagReader::unmodelled(const std::string& key, const std::string& note) {
  if (const FlatField* f = take(key)) report_.unmodelled(f->name, joined(f->values), note);
}

void FlagReader::ignore(const std::string& key) {
  if (const FlatField* f = take(key)) report_.ignore(f->name, joined(f->values));
}

bool in_list(const std::string& key, const std::vector<std::string>& names, const std::vector<std::string>& prefixes) {
  if (std::find(names.begin(), names.end(), key) != names.end()) return true;
  return std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& p) { return key.compare(0, p.size(), p) == 0; });
}

}  // namespace stagecraft::configs

namespace stagecraft::configs {
namespace {

std::string scalar_text(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : json_text(v); }

void flatten_into(const nlohmann::json& j, const std::string& prefix, std::map<std::string, FlatField>& out) {
  if (j.is_object()) {
    if (j.empty() && !prefix.empty()) out[prefix] = {prefix, {}};
    for (auto it = j.begin(); it != j.end(); ++it) flatten_into(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
    return;
  }
  FlatField f{prefix, {}};
  if (j.is_array()) {
    for (const nlohmann::json& v : j) f.values.push_back(v.is_primitive() ? scalar_text(v) : json_text(v));
  } else {
    f.values.push_back(scalar_text(j));
  }
  out[prefix] = f;
}

}  // namespace

std::string json_text(const nlohmann::json& v) { return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

std::map<std::string, FlatField> flatten(const nlohmann::json& j) {
  std::map<std::string, FlatField> out;
  flatten_into(j, "", out);
  return out;
}

}  // namespace stagecraft::configs
