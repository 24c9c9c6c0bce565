#include "schedules/json_read.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace stagecraft::schedules {

nlohmann::json parse_json(const std::string& text, const std::string& what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // syntax, or a number out of range
    throw InputError(what + " is not valid JSON: " + e.what());
  }
}

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(what + " '" + path + "' is a directory (allowed: a JSON file)");
  std::ifstream f(path);
  if (!f) throw InputError(what + " '" + path + "' cannot be read");
  std::stringstream text;
  text << f.rdbuf();
  return parse_json(text.str(), what + " '" + path + "'");
}

}  // namespace stagecraft::schedules
