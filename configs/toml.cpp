#include "configs/toml.h"

#include <cctype>

#include "schedules/error.h"

namespace stagecraft::configs {
namespace {

class TomlParser {
 public:
  TomlParser(const std::string& t, const std::string& w) : s_(t), where_(w) {}
  nlohmann::json parse();

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(where_ + ": line " + std::to_string(line_) + ": " + what + " (not TOML as torchtitan writes it; truncated?)");
  }
  bool at_end() const { return i_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[i_]; }
  void skip_space() {
    while (!at_end() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  // Spaces, newlines and comments (inside arrays and between lines).
  void skip_blank() {
    for (;;) {
      skip_space();
      if (peek() == '#') while (!at_end() && s_[i_] != '\n') ++i_;
      if (peek() != '\n') return;
      ++line_;
      ++i_;
    }
  }
  std::string string_value();
  std::string key_part();
  std::vector<std::string> key();
  nlohmann::json value();
  nlohmann::json scalar();
  nlohmann::json& at(nlohmann::json& root, const std::vector<std::string>& path, bool last_is_array);
  void end_of_line() {
    skip_space();
    if (peek() == '#') while (!at_end() && s_[i_] != '\n') ++i_;
    if (!at_end() && peek() != '\n') fail("unexpected '" + std::string(1, peek()) + "' after a value");
  }

  const std::string& s_;
  std::string where_;
  size_t i_ = 0;
  int line_ = 1;
};

std::string TomlParser::string_value() {
  const char q = s_[i_++];
  std::string out;
  while (!at_end() && s_[i_] != q) {
    if (s_[i_] == '\n') fail("a string runs past the end of its line");
    if (q == '"' && s_[i_] == '\\' && i_ + 1 < s_.size()) {
      const char e = s_[++i_];
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
    } else {
      out += s_[i_];
    }
    ++i_;
  }
  if (at_end()) fail("an unterminated string");
  ++i_;
  return out;
}

std::string TomlParser::key_part() {
  skip_space();
  if (peek() == '"' || peek() == '\'') return string_value();
  std::string k;
  while (!at_end() && (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '_' || peek() == '-')) k += s_[i_++];
  if (k.empty()) fail("a key is missing");
  return k;
}

std::vector<std::string> TomlParser::key() {
  std::vector<std::string> parts{key_part()};
  skip_space();
  while (peek() == '.') {
    ++i_;
    parts.push_back(key_part());
    skip_space();
  }
  return parts;
}

nlohmann::json TomlParser::scalar() {
  std::string w;
  while (!at_end() && !std::isspace(static_cast<unsigned char>(peek())) && peek() != ',' && peek() != ']' && peek() != '}' && peek() != '#')
    w += s_[i_++];
  if (w == "true") return true;
  if (w == "false") return false;
  std::string n;
  for (char c : w)
    if (c != '_') n += c;
  try {
    size_t used = 0;
    if (n.find_first_of(".eE") == std::string::npos || n.find("inf") != std::string::npos) {
      const long long v = std::stoll(n, &used);
      if (used == n.size()) return v;
    }
    const double d = std::stod(n, &used);
    if (used == n.size()) return d;
  } catch (const std::exception&) {
  }
  fail("'" + w + "' is not a value (allowed: a string, number, boolean, array or inline table)");
}

nlohmann::json TomlParser::value() {
  skip_space();
  if (peek() == '"' || peek() == '\'') return string_value();
  if (peek() == '[') {
    ++i_;
    nlohmann::json a = nlohmann::json::array();
    for (skip_blank(); peek() != ']'; skip_blank()) {
      if (at_end()) fail("an unterminated array");
      a.push_back(value());
      skip_blank();
      if (peek() == ',') ++i_;
      else if (peek() != ']') fail("',' or ']' expected in an array");
    }
    ++i_;
    return a;
  }
  if (peek() == '{') {
    ++i_;
    nlohmann::json t = nlohmann::json::object();
    for (skip_space(); peek() != '}'; skip_space()) {
      if (at_end() || peek() == '\n') fail("an unterminated inline table");
      const std::vector<std::string> k = key();
      if (peek() != '=') fail("'=' expected after a key");
      ++i_;
      at(t, k, false) = value();
      skip_space();
      if (peek() == ',') ++i_;
    }
    ++i_;
    return t;
  }
  return scalar();
}

nlohmann::json& TomlParser::at(nlohmann::json& root, const std::vector<std::string>& path, bool last_is_array) {
  nlohmann::json* cur = &root;
  for (size_t k = 0; k < path.size(); ++k) {
    nlohmann::json& next = (*cur)[path[k]];
    if (k + 1 == path.size() && last_is_array) {
      if (next.is_null()) next = nlohmann::json::array();
      next.push_back(nlohmann::json::object());
      return next.back();
    }
    if (next.is_array() && !next.empty()) cur = &next.back();
    else cur = &next;
    if (k + 1 < path.size() && !cur->is_null() && !cur->is_object()) fail("key '" + path[k] + "' is both a value and a table");
  }
  return *cur;
}

nlohmann::json TomlParser::parse() {
  nlohmann::json root = nlohmann::json::object();
  nlohmann::json* table = &root;
  for (skip_blank(); !at_end(); skip_blank()) {
    if (peek() == '[') {
      ++i_;
      const bool array = peek() == '[';
      if (array) ++i_;
      const std::vector<std::string> k = key();
      if (peek() != ']' || (array && (i_ + 1 >= s_.size() || s_[i_ + 1] != ']'))) fail("a table header without its ']'");
      i_ += array ? 2 : 1;
      table = &at(root, k, array);
      if (table->is_null()) *table = nlohmann::json::object();
    } else {
      const std::vector<std::string> k = key();
      if (peek() != '=') fail("'=' expected after key '" + k.back() + "'");
      ++i_;
      nlohmann::json& slot = at(*table, k, false);
      if (!slot.is_null()) fail("key '" + k.back() + "' given twice");
      slot = value();
    }
    end_of_line();
  }
  return root;
}

}  // namespace

nlohmann::json parse_toml(const std::string& text, const std::string& where) { return TomlParser(text, where).parse(); }

}  // namespace stagecraft::configs
