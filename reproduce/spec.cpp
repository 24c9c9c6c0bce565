#include "reproduce/spec.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "schedules/error.h"

namespace stagecraft::reproduce {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::set<std::string> kPapers = {"merak", "oases", "hanayo", "fold3d"};

[[noreturn]] void bad(const std::string& where, const std::string& field, const std::string& value, const std::string& allowed) {
  throw InputError(where + ": " + field + " = " + value + " is invalid (" + allowed + ")");
}

std::string str(const json& j, const std::string& where, const std::string& key, const std::string& dflt, bool required = false) {
  if (!j.contains(key)) {
    if (required) throw InputError(where + ": " + key + " is missing (required)");
    return dflt;
  }
  if (!j[key].is_string()) bad(where, key, j[key].dump(), "must be a string");
  return j[key].get<std::string>();
}

void only_keys(const json& j, const std::string& where, const std::set<std::string>& allowed) {
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!allowed.count(it.key())) {
      std::string list;
      for (const std::string& k : allowed) list += (list.empty() ? "" : ", ") + k;
      throw InputError(where + ": unknown field '" + it.key() + "' (allowed: " + list + ")");
    }
}

json patch(const json& j, const std::string& where, const std::string& key) {
  if (!j.contains(key)) return json::object();
  if (!j[key].is_object()) bad(where, key, j[key].dump(), "must be an object, a merge patch over the base");
  return j[key];
}

// Less is better for times, bytes and bubbles; more for rates (per_s), FLOP/s and utilisation.
std::string default_goal(const std::string& metric) {
  auto ends = [&](const std::string& suffix) {
    return metric.size() >= suffix.size() && metric.compare(metric.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends("per_s")) return "max";
  return ends("_s") || ends("_bytes") || metric.rfind("bubble", 0) == 0 || metric.rfind("mean_idle", 0) == 0 ? "min" : "max";
}

XPoint x_point(const json& j, const std::string& where) {
  if (!j.is_object()) bad(where, "point", j.dump(), "must be an object with x and set");
  only_keys(j, where, {"x", "set", "rank"});
  XPoint p;
  if (!j.contains("x")) throw InputError(where + ": x is missing (the label the paper gives this point)");
  p.label = j["x"].is_string() ? j["x"].get<std::string>() : j["x"].dump();
  if (p.label == "min" || p.label == "max" || p.label == "mean")
    bad(where, "x", p.label, "min, max and mean name claims over the whole axis in paper.csv; pick another label");
  p.set = patch(j, where, "set");
  if (j.contains("rank")) {
    if (!j["rank"].is_number_integer() || j["rank"].get<int>() < 0) bad(where, "rank", j["rank"].dump(), "must be a rank, an integer >= 0");
    p.rank = j["rank"].get<int>();
  }
  return p;
}

Series series_of(const json& j, const std::string& where) {
  if (!j.is_object()) bad(where, "series", j.dump(), "must be an object with name and set");
  only_keys(j, where, {"name", "set", "best_of"});
  Series s;
  s.name = str(j, where, "name", "", true);
  if (s.name.empty()) bad(where, "name", "''", "must not be empty");
  s.set = patch(j, where, "set");
  if (j.contains("best_of")) {
    if (!j["best_of"].is_array() || j["best_of"].empty()) bad(where, "best_of", j["best_of"].dump(), "must be a non-empty list of merge patches");
    for (const json& b : j["best_of"]) {
      if (!b.is_object()) bad(where, "best_of entry", b.dump(), "must be an object, a merge patch");
      s.best_of.push_back(b);
    }
  }
  return s;
}

// Numbers in names compare as numbers: fig2 before fig10.
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      const std::string na = a.substr(i, ie - i), nb = b.substr(j, je - j);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

}  // namespace

std::string Spec::id() const { return paper + "-" + fs::path(dir).lexically_normal().filename().string(); }

const Series* Spec::find_series(const std::string& name) const {
  for (const Series& s : series)
    if (s.name == name) return &s;
  return nullptr;
}

const XPoint* Spec::find_x(const std::string& label) const {
  for (const XPoint& p : x)
    if (p.label == label) return &p;
  return nullptr;
}

Spec spec_from_json(const json& j, const std::string& dir) {
  const std::string w = (fs::path(dir) / "spec.json").string();
  if (!j.is_object()) throw InputError(w + ": must be a JSON object");
  only_keys(j, w, {"paper", "figure", "title", "metric", "goal", "scale", "unit", "reduce", "engine", "plot", "xlabel", "ylabel",
                   "discussion", "base", "x", "series"});
  Spec s;
  s.dir = dir;
  s.paper = str(j, w, "paper", "", true);
  if (!kPapers.count(s.paper)) bad(w, "paper", "'" + s.paper + "'", "allowed: merak, oases, hanayo, fold3d");
  s.figure = str(j, w, "figure", "", true);
  s.title = str(j, w, "title", "");
  s.metric = str(j, w, "metric", "", true);
  s.goal = str(j, w, "goal", default_goal(s.metric));
  if (s.goal != "max" && s.goal != "min") bad(w, "goal", "'" + s.goal + "'", "allowed: max, min");
  if (j.contains("scale")) {
    if (!j["scale"].is_number() || !(j["scale"].get<double>() > 0)) bad(w, "scale", j["scale"].dump(), "must be a number > 0");
    s.scale = j["scale"].get<double>();
  }
  s.unit = str(j, w, "unit", "");
  s.reduce = str(j, w, "reduce", "max");
  if (s.reduce != "max" && s.reduce != "min" && s.reduce != "mean" && s.reduce != "variance")
    bad(w, "reduce", "'" + s.reduce + "'", "allowed: max, min, mean, variance");
  s.engine = str(j, w, "engine", "eval");
  if (s.engine != "eval" && s.engine != "sim") bad(w, "engine", "'" + s.engine + "'", "allowed: eval, sim");
  s.plot = str(j, w, "plot", "bar");
  if (s.plot != "bar" && s.plot != "line") bad(w, "plot", "'" + s.plot + "'", "allowed: bar, line");
  s.xlabel = str(j, w, "xlabel", "");
  s.ylabel = str(j, w, "ylabel", "");
  s.discussion = str(j, w, "discussion", "");
  s.base = patch(j, w, "base");
  if (!j.contains("x") || !j["x"].is_object()) throw InputError(w + ": x is missing or not an object ({\"label\": ..., \"points\": [...]})");
  only_keys(j["x"], w + ": x", {"label", "points"});
  if (s.xlabel.empty()) s.xlabel = str(j["x"], w + ": x", "label", "");
  const json& pts = j["x"].contains("points") ? j["x"]["points"] : json();
  if (!pts.is_array() || pts.empty()) throw InputError(w + ": x.points is missing or empty (a list of {\"x\": label, \"set\": patch})");
  for (size_t i = 0; i < pts.size(); ++i) {
    s.x.push_back(x_point(pts[i], w + ": x.points[" + std::to_string(i) + "]"));
    if (s.find_x(s.x.back().label) != &s.x.back()) bad(w, "x.points[" + std::to_string(i) + "].x", "'" + s.x.back().label + "'", "labels must differ");
  }
  if (!j.contains("series") || !j["series"].is_array() || j["series"].empty())
    throw InputError(w + ": series is missing or empty (a list of {\"name\": ..., \"set\": patch})");
  for (size_t i = 0; i < j["series"].size(); ++i) {
    s.series.push_back(series_of(j["series"][i], w + ": series[" + std::to_string(i) + "]"));
    if (s.find_series(s.series.back().name) != &s.series.back())
      bad(w, "series[" + std::to_string(i) + "].name", "'" + s.series.back().name + "'", "names must differ");
  }
  return s;
}

Spec load_spec(const std::string& dir) {
  const fs::path file = fs::path(dir) / "spec.json";
  std::ifstream in(file);
  if (!in) throw InputError("experiment '" + dir + "': cannot read " + file.string() + " (an experiment folder holds spec.json)");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    throw InputError(file.string() + ": not valid JSON: " + e.what());
  }
  return spec_from_json(j, dir);
}

json point_config(const Spec& s, const XPoint& x, const Series& series) {
  json c = s.base;
  c.merge_patch(x.set);
  c.merge_patch(series.set);
  return c;
}

std::vector<std::string> find_experiments(const std::string& root) {
  std::vector<std::string> dirs;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw InputError("experiments root '" + root + "' is not a folder");
  for (auto it = fs::recursive_directory_iterator(root, ec); it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) throw Error("cannot list '" + root + "': " + ec.message());
    if (it->is_regular_file() && it->path().filename() == "spec.json") dirs.push_back(it->path().parent_path().string());
  }
  std::sort(dirs.begin(), dirs.end(), natural_less);
  return dirs;
}

}  // namespace stagecraft::reproduce
