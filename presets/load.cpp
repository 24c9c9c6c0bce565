#include "presets/load.h"

#include "presets/catalog.h"

#include "schedules/error.h"
#include "schedules/json_read.h"

namespace stagecraft::presets {
namespace {

bool ends_with_json(const std::string& s) { return s.size() > 5 && s.substr(s.size() - 5) == ".json"; }

// A cluster that names a preset in "extends" takes that preset's fields (resolved the same way)
// and overrides them with its own: a GPU variant or a cluster size without copying the figures.
nlohmann::json resolve_cluster(nlohmann::json j, const std::string& what, int depth = 0) {
  if (!j.is_object() || !j.contains("extends")) return j;
  const nlohmann::json& base_name = j.at("extends");
  if (!base_name.is_string())
    throw InputError(what + ": extends = " + base_name.dump() + " is invalid (allowed: the name of a cluster preset)");
  const std::string name = base_name.get<std::string>();
  const Entry* e = find("cluster", name);
  if (!e)
    throw InputError(what + ": extends = \"" + name + "\" is not a cluster preset (presets: " + joined(cluster_preset_names()) + ")");
  if (depth > 8) throw InputError(what + ": extends = \"" + name + "\" makes a chain longer than 8 (a cycle?)");
  nlohmann::json merged = resolve_cluster(schedules::parse_json(e->json, "cluster preset " + name), "cluster preset " + name, depth + 1);
  j.erase("extends");
  for (auto it = j.begin(); it != j.end(); ++it) merged[it.key()] = it.value();
  return merged;
}

}  // namespace

std::vector<std::string> model_preset_names() { return names("model"); }

std::vector<std::string> cluster_preset_names() { return names("cluster"); }

ModelSpec load_model(const std::string& name) {
  if (const Entry* e = find("model", name)) return costmodel::model_from_json(schedules::parse_json(e->json, "model preset " + name));
  if (ends_with_json(name)) return costmodel::model_from_json(schedules::read_json_file(name, "model file"));
  throw InputError("model '" + name + "' is not a preset (presets: " + joined(model_preset_names()) +
                   ") nor a .json file");
}

ClusterSpec load_cluster(const std::string& name) {
  if (const Entry* e = find("cluster", name))
    return costmodel::cluster_from_json(resolve_cluster(schedules::parse_json(e->json, "cluster preset " + name), "cluster preset " + name));
  if (ends_with_json(name))
    return costmodel::cluster_from_json(resolve_cluster(schedules::read_json_file(name, "cluster file"), "cluster file " + name));
  throw InputError("cluster '" + name + "' is not a preset (presets: " + joined(cluster_preset_names()) +
                   ") nor a .json file");
}

ParallelPlan load_plan_file(const std::string& path) {
  nlohmann::json j = schedules::read_json_file(path, "plan file");
  if (j.is_object()) {
    j.erase("model");
    j.erase("cluster");
  }
  return costmodel::plan_from_json(j);
}

nlohmann::json plan_file_input(const std::string& path, const std::string& key) {
  const nlohmann::json j = schedules::read_json_file(path, "plan file");
  if (!j.is_object() || !j.contains(key)) return nullptr;
  const nlohmann::json& v = j[key];
  if (!v.is_object() && !v.is_string())
    throw InputError("plan file '" + path + "': field '" + key + "' is " + v.dump() +
                     " (allowed: a preset name, a file name, or a JSON object)");
  return v;
}

}  // namespace stagecraft::presets
