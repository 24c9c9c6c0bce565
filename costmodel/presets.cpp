#include "costmodel/presets.h"

#include "schedules/error.h"
#include "schedules/json_read.h"

namespace stagecraft::costmodel {
namespace {

bool ends_with_json(const std::string& s) { return s.size() > 5 && s.substr(s.size() - 5) == ".json"; }

std::string names_of(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& n : v) out += (out.empty() ? "" : ", ") + n;
  return out;
}

const PresetEntry* find(const std::string& kind, const std::string& name) {
  for (const auto& e : preset_entries())
    if (e.kind == kind && e.name == name) return &e;
  return nullptr;
}

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> out;
  for (const auto& e : preset_entries())
    if (e.kind == "model") out.push_back(e.name);
  return out;
}

std::vector<std::string> cluster_preset_names() {
  std::vector<std::string> out;
  for (const auto& e : preset_entries())
    if (e.kind == "cluster") out.push_back(e.name);
  return out;
}

ModelSpec load_model(const std::string& name) {
  if (const PresetEntry* e = find("model", name)) return model_from_json(schedules::parse_json(e->json, "model preset " + name));
  if (ends_with_json(name)) return model_from_json(schedules::read_json_file(name, "model file"));
  throw InputError("model '" + name + "' is not a preset (presets: " + names_of(model_preset_names()) +
                   ") nor a .json file");
}

ClusterSpec load_cluster(const std::string& name) {
  if (const PresetEntry* e = find("cluster", name))
    return cluster_from_json(schedules::parse_json(e->json, "cluster preset " + name));
  if (ends_with_json(name))
    return cluster_from_json(schedules::read_json_file(name, "cluster file"));
  throw InputError("cluster '" + name + "' is not a preset (presets: " + names_of(cluster_preset_names()) +
                   ") nor a .json file");
}

ParallelPlan load_plan_file(const std::string& path) {
  return plan_from_json(schedules::read_json_file(path, "plan file"));
}

}  // namespace stagecraft::costmodel
