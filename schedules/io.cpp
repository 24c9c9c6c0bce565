#include "schedules/io.h"
#include "schedules/json_read.h"

#include <type_traits>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "schedules/error.h"
#include "schedules/validate.h"

namespace stagecraft::schedules {
namespace {

std::vector<std::string> split_row(const std::string& line) {
  // Split on commas outside parentheses and brackets ("(0F7;7B3)OVERLAP_F_B" has none, but a
  // suffix "[sb=1,seg=2]" does).
  std::vector<std::string> cells;
  std::string cur;
  int depth = 0;
  for (char c : line) {
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      cells.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  cells.push_back(cur);
  return cells;
}

PlacementKind classify(const std::vector<int>& map, int ranks) {
  if (map == loop_placement(static_cast<int>(map.size()), ranks)) return PlacementKind::Loop;
  if (map == v_placement(static_cast<int>(map.size()), ranks)) return PlacementKind::V;
  return PlacementKind::Explicit;
}

template <class T>
T field(const nlohmann::json& j, const char* name) {
  if (!j.contains(name)) throw InputError(std::string("schedule JSON: missing field '") + name + "'");
  if constexpr (std::is_same_v<T, int>) return json_int(j.at(name), std::string("schedule JSON: ") + name);
  if constexpr (std::is_same_v<T, std::vector<int>>) {
    const auto& v = j.at(name);
    if (!v.is_array()) throw InputError(std::string("schedule JSON: field '") + name + "' must be an array of integers");
    std::vector<int> out;
    for (size_t i = 0; i < v.size(); ++i)
      out.push_back(json_int(v[i], std::string("schedule JSON: ") + name + "[" + std::to_string(i) + "]"));
    return out;
  }
  try {
    return j.at(name).get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("schedule JSON: field '") + name + "' has the wrong type: " + e.what());
  }
}

}  // namespace

std::string to_csv(const Schedule& s) {
  DryRunResult d = dry_run(s);
  std::ostringstream out;
  for (int r = 0; r < s.num_ranks; ++r) {
    const auto& list = s.actions[static_cast<size_t>(r)];
    std::vector<std::string> row;
    if (d.deadlock) {
      for (const auto& a : list) row.push_back(to_text(a));
    } else {
      for (size_t i = 0; i < list.size(); ++i) {
        size_t step = static_cast<size_t>(d.step_of[static_cast<size_t>(r)][i]);
        if (row.size() <= step) row.resize(step + 1);
        row[step] = to_text(list[i]);
      }
    }
    for (size_t i = 0; i < row.size(); ++i) out << (i ? "," : "") << row[i];
    out << "\n";
  }
  return out.str();
}

// Chains (Chimera's pipelines in two directions) are not written in PyTorch's CSV: stages run
// every microbatch in one pipeline, or, with c chains, c equal blocks of consecutive stages
// each run their own disjoint share (a block's stages the same share). Returns c.
static int infer_chains(const std::map<int, std::set<int>>& forwards, int stages, const std::string& name) {
  if (forwards.empty()) return 1;
  std::vector<std::set<int>> f(static_cast<size_t>(stages));
  for (const auto& [st, mbs] : forwards) f[static_cast<size_t>(st)] = mbs;
  for (int c = 1; c <= stages; ++c) {
    if (stages % c != 0) continue;
    const int per = stages / c;
    bool ok = true;
    std::set<int> all;
    for (int k = 0; k < c && ok; ++k) {
      const auto& first = f[static_cast<size_t>(k * per)];
      for (int st = k * per; st < (k + 1) * per && ok; ++st) ok = f[static_cast<size_t>(st)] == first;
      for (int mb : first) ok = ok && all.insert(mb).second;  // disjoint across chains
    }
    if (ok) return c;
  }
  throw InputError("CSV schedule '" + name + "': the stages run different sets of microbatches, and no split into "
                   "equal blocks of consecutive stages (chains, as Chimera's) explains them");
}

Schedule from_csv(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  std::vector<std::vector<Action>> rows;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<Action> row;
    for (const std::string& cell : split_row(line)) {
      if (cell.find_first_not_of(" \t") == std::string::npos) continue;  // idle step
      try {
        row.push_back(parse_action(cell));
      } catch (const InputError& e) {
        throw InputError("CSV line " + std::to_string(line_no) + ": " + e.what());
      }
    }
    rows.push_back(std::move(row));
  }
  while (!rows.empty() && rows.back().empty()) rows.pop_back();
  if (rows.empty()) throw InputError("CSV schedule '" + name + "' has no rows (expected one row per rank)");
  int ranks = static_cast<int>(rows.size());
  // Infer placement and sizes.
  std::map<int, int> stage_rank;
  int max_mb = -1;
  std::set<std::pair<int, int>> has_w;
  std::set<int> seen_mb;
  std::map<int, std::set<int>> forwards;  // stage -> microbatches it runs forward
  for (int r = 0; r < ranks; ++r) {
    for (const Action& a : rows[static_cast<size_t>(r)]) {
      auto place = [&](int st) {
        if (st < 0) return;
        auto [it, fresh] = stage_rank.emplace(st, r);
        if (!fresh && it->second != r)
          throw InputError("CSV schedule '" + name + "': stage " + std::to_string(st) + " appears on rank " +
                           std::to_string(it->second) + " and on rank " + std::to_string(r) +
                           " (each stage must live on exactly one rank)");
      };
      place(a.stage);
      if (a.op == Op::OVERLAP_F_B) place(a.b_stage);
      max_mb = std::max({max_mb, a.microbatch, a.b_microbatch});
      for (int mb : {a.microbatch, a.b_microbatch})
        if (mb >= 0) seen_mb.insert(mb);
      if (a.op == Op::W) has_w.emplace(a.stage, a.microbatch);
      if (a.op == Op::F || a.op == Op::OVERLAP_F_B) forwards[a.stage].insert(a.microbatch);
    }
  }
  if (stage_rank.empty()) throw InputError("CSV schedule '" + name + "' has no actions");
  int stages = stage_rank.rbegin()->first + 1;
  // Checked before anything is sized by it: a stray huge stage index is an error, not a map of
  // that many stages (the long fuzz run's memory peak).
  int expect = 0;
  for (const auto& entry : stage_rank) {
    if (entry.first != expect)
      throw InputError("CSV schedule '" + name + "': stage " + std::to_string(expect) + " never appears (stages run 0.." +
                       std::to_string(stages - 1) + ")");
    ++expect;
  }
  std::vector<int> map(static_cast<size_t>(stages), -1);
  for (auto [st, r] : stage_rank) map[static_cast<size_t>(st)] = r;
  // Microbatches run 0..max; a gap (or a huge stray index) is an error, not max+1 microbatches.
  if (max_mb >= 0 && static_cast<int>(seen_mb.size()) != max_mb + 1) {
    int missing = 0;
    while (seen_mb.count(missing)) ++missing;
    throw InputError("CSV schedule '" + name + "': microbatch " + std::to_string(missing) +
                     " never appears, yet indices run to " + std::to_string(max_mb) +
                     " (microbatch indices must be 0..n-1 with none missing)");
  }
  const int chains = infer_chains(forwards, stages, name);
  // Older notation: B followed by a W of the same stage and microbatch is the input backward.
  for (auto& row : rows)
    for (Action& a : row) {
      if (a.op == Op::B && has_w.count({a.stage, a.microbatch})) a.op = Op::I;
      if (a.op == Op::OVERLAP_F_B && a.b_op == Op::B && has_w.count({a.b_stage, a.b_microbatch})) a.b_op = Op::I;
    }
  // Several chains share ranks in no loop or V pipeline of their own (Chimera): explicit.
  const PlacementKind kind = chains > 1 ? PlacementKind::Explicit : classify(map, ranks);
  Schedule s = make_schedule(name, ranks, stages, max_mb + 1, kind, map, chains);
  s.actions = std::move(rows);
  return s;
}

nlohmann::json to_json(const Schedule& s) {
  nlohmann::json j;
  j["format"] = "stagecraft-schedule";
  j["version"] = 1;
  j["name"] = s.name;
  j["params"] = s.params;
  j["num_ranks"] = s.num_ranks;
  j["num_stages"] = s.num_stages;
  j["num_microbatches"] = s.num_microbatches;
  j["num_chains"] = s.num_chains;
  j["placement"] = std::string(placement_name(s.placement));
  j["stage_to_rank"] = s.stage_to_rank;
  nlohmann::json acts = nlohmann::json::array();
  for (const auto& list : s.actions) {
    nlohmann::json row = nlohmann::json::array();
    for (const auto& a : list) row.push_back(to_text(a));
    acts.push_back(row);
  }
  j["actions"] = acts;
  return j;
}

static Schedule from_json_fields(const nlohmann::json& j) {
  if (!j.is_object()) throw InputError("schedule JSON: expected an object at the top level");
  if (j.contains("format") && j["format"] != "stagecraft-schedule")
    throw InputError("schedule JSON: field 'format' is " + j["format"].dump() + " (expected \"stagecraft-schedule\")");
  Schedule s;
  s.name = j.value("name", std::string("imported"));
  s.params = j.value("params", nlohmann::json::object());
  s.num_ranks = field<int>(j, "num_ranks");
  s.num_stages = field<int>(j, "num_stages");
  s.num_microbatches = field<int>(j, "num_microbatches");
  s.num_chains = json_int_or(j, "num_chains", 1, "schedule JSON");
  s.placement = parse_placement(j.value("placement", std::string("explicit")));
  s.stage_to_rank = field<std::vector<int>>(j, "stage_to_rank");
  auto rows = field<std::vector<std::vector<std::string>>>(j, "actions");
  for (size_t r = 0; r < rows.size(); ++r) {
    std::vector<Action> list;
    for (size_t i = 0; i < rows[r].size(); ++i) {
      try {
        list.push_back(parse_action(rows[r][i]));
      } catch (const InputError& e) {
        throw InputError("schedule JSON: actions[" + std::to_string(r) + "][" + std::to_string(i) + "]: " + e.what());
      }
    }
    s.actions.push_back(std::move(list));
  }
  check_shape(s);
  return s;
}

// A field of the wrong JSON type (e.g. "name": 5) is bad input like any other: InputError, not
// nlohmann's type_error (found by fuzz_schedule_json's long run).
Schedule from_json(const nlohmann::json& j) {
  try {
    return from_json_fields(j);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("schedule JSON: a field has the wrong type or value: ") + e.what());
  }
}

Schedule load_schedule_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw InputError("cannot read schedule file '" + path + "'");
  std::stringstream buf;
  buf << f.rdbuf();
  std::string ext = path.size() >= 5 ? path.substr(path.size() - 5) : "";
  std::string base = path.substr(path.find_last_of('/') + 1);
  base = base.substr(0, base.find_last_of('.'));
  if (ext == ".json") return from_json(parse_json(buf.str(), "schedule file '" + path + "'"));
  if (path.size() >= 4 && path.substr(path.size() - 4) == ".csv") return from_csv(buf.str(), base);
  throw InputError("schedule file '" + path + "': unknown extension (allowed: .csv, .json)");
}

}  // namespace stagecraft::schedules
