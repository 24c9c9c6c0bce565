#include "configs/shell_args.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>

#include "schedules/error.h"

namespace stagecraft::configs {
namespace {

using Vars = std::map<std::string, std::string>;

// Logical lines: backslash-newline joined; the words of each with quotes removed and '#'
// comments dropped. Variables are expanded later, word by word.
std::vector<std::vector<std::string>> logical_lines(const std::string& text, const std::string& where) {
  std::vector<std::vector<std::string>> lines(1);
  std::string word;
  bool in_word = false;
  char quote = 0;
  auto end_word = [&] {
    if (in_word) lines.back().push_back(word);
    word.clear();
    in_word = false;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == quote) quote = 0;
      else word += c;
      continue;
    }
    size_t after = i + 1;  // a backslash, then perhaps stray blanks, then the end of the line
    while (c == '\\' && after < text.size() && (text[after] == ' ' || text[after] == '\t')) ++after;
    if (c == '\\' && after < text.size() && (text[after] == '\n' || text[after] == '\r')) {
      end_word();
      i = after + (text[after] == '\r' && after + 1 < text.size() && text[after + 1] == '\n' ? 1 : 0);
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == '#' && !in_word) {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '\n' || c == ';') {
      end_word();
      lines.emplace_back();
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      end_word();
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote) throw InputError(where + ": unterminated quote " + std::string(1, quote) + " (truncated file?)");
  end_word();
  return lines;
}

// $((A*B)) and $((A+B)) of integers or variables (bare or with $) after expansion; the text
// unchanged when it is not one.
std::string arithmetic(const std::string& s, const Vars& vars) {
  if (s.size() < 5 || s.compare(0, 3, "$((") != 0 || s.compare(s.size() - 2, 2, "))") != 0) return s;
  const std::string e = s.substr(3, s.size() - 5);
  const size_t op = e.find_first_of("*+");
  if (op == std::string::npos) return s;
  auto operand = [&](std::string t) {
    t.erase(std::remove(t.begin(), t.end(), ' '), t.end());
    if (!t.empty() && t[0] == '$') t.erase(0, 1);
    const auto it = vars.find(t);
    return std::stol(it != vars.end() ? it->second : t);
  };
  try {
    const long a = operand(e.substr(0, op)), b = operand(e.substr(op + 1));
    return std::to_string(e[op] == '*' ? a * b : a + b);
  } catch (const std::exception&) {
    return s;
  }
}

std::string expand(const std::string& w, const Vars& vars) {
  std::string out;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] != '$' || i + 1 >= w.size() || w[i + 1] == '(') {
      out += w[i];
      continue;
    }
    size_t j = i + 1;
    std::string name;
    if (w[j] == '{') {
      const size_t close = w.find('}', j);
      if (close == std::string::npos) {
        out += w[i];
        continue;
      }
      name = w.substr(j + 1, close - j - 1);
      const size_t br = name.find('[');
      if (br != std::string::npos) name.resize(br);
      j = close + 1;
    } else {
      while (j < w.size() && (std::isalnum(static_cast<unsigned char>(w[j])) || w[j] == '_')) name += w[j++];
    }
    const auto it = vars.find(name);
    out += it != vars.end() ? it->second : w.substr(i, j - i);
    i = j - 1;
  }
  return arithmetic(out, vars);
}

bool is_assignment(const std::string& w) {
  const size_t eq = w.find('=');
  if (eq == std::string::npos || eq == 0 || w[0] == '-') return false;
  for (size_t i = 0; i < eq; ++i)
    if (!(std::isalnum(static_cast<unsigned char>(w[i])) || w[i] == '_')) return false;
  return true;
}

// A word that ends a flag's values: a program or script, or the end of a bash array.
bool ends_values(const std::string& w) {
  return w == ")" || w == "(" || (w.size() > 3 && (w.compare(w.size() - 3, 3, ".py") == 0 || w.compare(w.size() - 3, 3, ".sh") == 0));
}

std::string key_of(const std::string& name) {
  const size_t b = name.find_first_not_of('-');
  std::string k = b == std::string::npos ? name : name.substr(b);
  for (char& c : k)
    if (c == '_') c = '-';
  return k;
}

}  // namespace

std::vector<ShellFlag> shell_flags(const std::string& text, const std::string& where) {
  Vars vars;
  std::vector<ShellFlag> flags;
  for (const std::vector<std::string>& raw : logical_lines(text, where)) {
    std::vector<std::string> words;
    for (const std::string& w : raw) {
      if (w == "export" && words.empty()) continue;
      if (is_assignment(w) && words.empty()) {
        const size_t eq = w.find('=');
        std::string v = expand(w.substr(eq + 1), vars);
        if (v == "(" || (!v.empty() && v[0] == '(')) v.clear();  // an array: its words follow
        vars[w.substr(0, eq)] = v;
        continue;
      }
      const std::string e = expand(w, vars);
      std::istringstream split(e);  // ${ARRAY[@]} and $VAR expand to several words
      for (std::string s; split >> s;)
        if (s != "$@" && s != "$*") words.push_back(s);  // the script's own arguments: not in the file
    }
    ShellFlag* cur = nullptr;
    for (const std::string& w : words) {
      if (w.size() > 2 && w.compare(0, 2, "--") == 0 && w[2] != '-' && w[2] != '=') {
        const size_t eq = w.find('=');
        ShellFlag f{w.substr(0, eq), key_of(w.substr(0, eq)), {}};
        if (eq != std::string::npos) f.values.push_back(w.substr(eq + 1));
        flags.push_back(f);
        cur = eq == std::string::npos ? &flags.back() : nullptr;
      } else if (ends_values(w)) {
        cur = nullptr;
      } else if (cur) {
        cur->values.push_back(w);
      }
    }
  }
  return flags;
}

}  // namespace stagecraft::configs
