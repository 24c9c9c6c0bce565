#include "configs/yaml.h"

#include <sstream>
#include <vector>

#include "schedules/error.h"

namespace stagecraft::configs {
namespace {

struct Line {
  int indent = 0;
  std::string text;  // without indentation and comment
  int number = 0;    // 1-based, for errors
};

std::string strip_comment(const std::string& s) {
  char q = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (q) {
      if (s[i] == q) q = 0;
    } else if (s[i] == '\'' || s[i] == '"') {
      q = s[i];
    } else if (s[i] == '#' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t')) {
      return s.substr(0, i);
    }
  }
  return s;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

class YamlParser {
 public:
  YamlParser(const std::string& text, const std::string& where) : where_(where) {
    std::istringstream in(text);
    int n = 0;
    for (std::string l; std::getline(in, l);) {
      ++n;
      const std::string t = trim(strip_comment(l));
      if (t.empty() || t == "---" || t == "...") continue;
      if (l.find('\t') < l.find_first_not_of(" \t")) fail(n, "a tab in the indentation");
      lines_.push_back({static_cast<int>(l.find_first_not_of(' ')), t, n});
    }
  }
  nlohmann::json parse() {
    if (lines_.empty()) return nlohmann::json::object();
    nlohmann::json v = block(lines_[0].indent);
    if (i_ < lines_.size()) fail(lines_[i_].number, "indentation does not match any open block");
    return v;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw InputError(where_ + ": line " + std::to_string(line) + ": " + what + " (not YAML as Megatron-Bridge/NeMo write it; truncated?)");
  }
  nlohmann::json block(int indent);
  nlohmann::json mapping(int indent);
  nlohmann::json sequence(int indent);
  nlohmann::json scalar(const std::string& s, int line);
  nlohmann::json flow(const std::string& s, size_t& i, int line);
  // "key: rest" split; false when the text is not a mapping entry.
  static bool split_key(const std::string& t, std::string& key, std::string& rest);

  std::vector<Line> lines_;
  size_t i_ = 0;
  std::string where_;
};

bool YamlParser::split_key(const std::string& t, std::string& key, std::string& rest) {
  char q = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (q) {
      if (t[i] == q) q = 0;
      continue;
    }
    if (t[i] == '\'' || t[i] == '"') q = t[i];
    else if (t[i] == '[' || t[i] == '{') return false;
    else if (t[i] == ':' && (i + 1 == t.size() || t[i + 1] == ' ')) {
      key = trim(t.substr(0, i));
      if (key.size() >= 2 && (key[0] == '"' || key[0] == '\'')) key = key.substr(1, key.size() - 2);
      rest = trim(t.substr(i + 1));
      return !key.empty();
    }
  }
  return false;
}

nlohmann::json YamlParser::block(int indent) {
  const Line& l = lines_[i_];
  if (l.text == "-" || l.text.compare(0, 2, "- ") == 0) return sequence(indent);
  std::string k, r;
  if (split_key(l.text, k, r)) return mapping(indent);
  ++i_;
  return scalar(l.text, l.number);
}

nlohmann::json YamlParser::mapping(int indent) {
  nlohmann::json m = nlohmann::json::object();
  while (i_ < lines_.size() && lines_[i_].indent == indent) {
    const Line& l = lines_[i_];
    std::string key, rest;
    if (!split_key(l.text, key, rest)) fail(l.number, "'" + l.text + "' is not a 'key: value' entry");
    if (m.contains(key)) fail(l.number, "key '" + key + "' given twice");
    ++i_;
    if (!rest.empty() && rest != "|" && rest != ">") {
      m[key] = scalar(rest, l.number);
    } else if (!rest.empty()) {
      fail(l.number, "block scalars (| and >) are not read");
    } else if (i_ < lines_.size() && lines_[i_].indent > indent) {
      m[key] = block(lines_[i_].indent);
    } else if (i_ < lines_.size() && lines_[i_].indent == indent && lines_[i_].text.compare(0, 1, "-") == 0) {
      m[key] = sequence(indent);  // a sequence at the key's own indentation
    } else {
      m[key] = nullptr;
    }
  }
  if (i_ < lines_.size() && lines_[i_].indent > indent) fail(lines_[i_].number, "indented more than its block");
  return m;
}

nlohmann::json YamlParser::sequence(int indent) {
  nlohmann::json a = nlohmann::json::array();
  while (i_ < lines_.size() && lines_[i_].indent == indent && (lines_[i_].text == "-" || lines_[i_].text.compare(0, 2, "- ") == 0)) {
    Line& l = lines_[i_];
    const std::string rest = l.text == "-" ? "" : trim(l.text.substr(2));
    if (rest.empty()) {
      ++i_;
      a.push_back(i_ < lines_.size() && lines_[i_].indent > indent ? block(lines_[i_].indent) : nlohmann::json());
      continue;
    }
    std::string k, r;
    if (split_key(rest, k, r)) {  // "- key: v": a mapping whose entries sit at the item's column
      l.indent = indent + static_cast<int>(l.text.size() - rest.size());
      l.text = rest;
      a.push_back(mapping(l.indent));
    } else {
      ++i_;
      a.push_back(scalar(rest, l.number));
    }
  }
  return a;
}

nlohmann::json YamlParser::flow(const std::string& s, size_t& i, int line) {
  const char open = s[i++], close = open == '[' ? ']' : '}';
  nlohmann::json out = open == '[' ? nlohmann::json::array() : nlohmann::json::object();
  while (i < s.size() && s[i] != close) {
    while (i < s.size() && s[i] == ' ') ++i;
    if (i < s.size() && s[i] == close) break;
    nlohmann::json item;
    std::string text;
    if (s[i] == '[' || s[i] == '{') {
      item = flow(s, i, line);
    } else {
      char q = 0;
      while (i < s.size() && (q || (s[i] != ',' && s[i] != close))) {
        if (q && s[i] == q) q = 0;
        else if (!q && (s[i] == '\'' || s[i] == '"')) q = s[i];
        text += s[i++];
      }
    }
    if (open == '{') {
      std::string k, r;
      if (!split_key(trim(text), k, r)) fail(line, "'" + text + "' is not 'key: value'");
      out[k] = scalar(r, line);
    } else {
      out.push_back(text.empty() ? item : scalar(trim(text), line));
    }
    while (i < s.size() && s[i] == ' ') ++i;
    if (i < s.size() && s[i] == ',') ++i;
  }
  if (i >= s.size()) fail(line, "an unterminated flow collection");
  ++i;
  return out;
}

nlohmann::json YamlParser::scalar(const std::string& s, int line) {
  if (s.empty()) return nullptr;
  if (s[0] == '&' || s[0] == '*') fail(line, "anchors and aliases are not read");
  if (s[0] == '[' || s[0] == '{') {
    size_t i = 0;
    nlohmann::json v = flow(s, i, line);
    if (!trim(s.substr(i)).empty()) fail(line, "text after a flow collection");
    return v;
  }
  if (s[0] == '"' || s[0] == '\'') {
    if (s.size() < 2 || s.back() != s[0]) fail(line, "an unterminated quoted string");
    return s.substr(1, s.size() - 2);
  }
  if (s == "null" || s == "~" || s == "None") return nullptr;
  if (s == "true" || s == "True") return true;
  if (s == "false" || s == "False") return false;
  try {
    size_t used = 0;
    if (s.find_first_of(".eE") == std::string::npos) {
      const long long v = std::stoll(s, &used);
      if (used == s.size()) return v;
    }
    const double d = std::stod(s, &used);
    if (used == s.size()) return d;
  } catch (const std::exception&) {
  }
  return s;
}

}  // namespace

nlohmann::json parse_yaml(const std::string& text, const std::string& where) { return YamlParser(text, where).parse(); }

}  // namespace stagecraft::configs
