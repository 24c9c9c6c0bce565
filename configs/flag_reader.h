// Reading a framework's flat key/value fields (Megatron-LM's flags, or a YAML/TOML/JSON config
// flattened to dotted keys) with a record of which were read, so that what is left over can be
// reported as ignored or unknown (configs/report.h).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "configs/report.h"

namespace stagecraft::configs {

struct FlatField {
  std::string name;                 // as the file spells it (--num-layers, training.seq_len)
  std::vector<std::string> values;  // its values as text ("" entries for none)
};

class FlagReader {
 public:
  // `fields` keyed by a normalised name (the caller's choice); a later repeat wins, as argparse's.
  FlagReader(std::map<std::string, FlatField> fields, ImportReport& report, std::string where)
      : fields_(std::move(fields)), report_(report), where_(std::move(where)) {}

  bool has(const std::string& key) const { return fields_.count(key) > 0; }
  // The field's single value, marked as read and reported as mapped with `note`; none when absent.
  std::optional<std::string> text(const std::string& key, const std::string& note);
  // The same as an integer, a number or a boolean (a flag without a value is true); InputError
  // naming the field and the value when it is not one.
  std::optional<int> integer(const std::string& key, const std::string& note);
  std::optional<double> number(const std::string& key, const std::string& note);
  std::optional<bool> boolean(const std::string& key, const std::string& note);
  // A count (a degree, a batch size, layers): an integer of at least 1, else InputError naming the
  // field; `fallback` when absent.
  int count(const std::string& key, const std::string& note, int fallback);
  // Every value of a list field (--recompute-modules a b), marked as read.
  std::optional<std::vector<std::string>> list(const std::string& key, const std::string& note);
  // Marks the field read and reports it as not modelled, or ignored, when present.
  void unmodelled(const std::string& key, const std::string& note);
  void ignore(const std::string& key);
  // The spelled name of a field (for errors), or `key` when absent.
  std::string name(const std::string& key) const;
  // Reports every field not read: ignored when `ignorable` says so, else unknown.
  template <class Pred> void finish(Pred ignorable) {
    for (const auto& [key, f] : fields_) {
      if (read_.count(key)) continue;
      const std::string v = joined(f.values);
      if (ignorable(key)) report_.ignore(f.name, v);
      else report_.unknown_field(f.name, v);
    }
  }
  ImportReport& report() { return report_; }
  const std::string& where() const { return where_; }

 private:
  static std::string joined(const std::vector<std::string>& v);
  const FlatField* take(const std::string& key);
  std::map<std::string, FlatField> fields_;
  std::set<std::string> read_;
  ImportReport& report_;
  std::string where_;
};

// Whether `key` is in `names` (a list of fields that have no bearing on the cost model), or
// starts with one of `prefixes`.
bool in_list(const std::string& key, const std::vector<std::string>& names, const std::vector<std::string>& prefixes = {});

}  // namespace stagecraft::configs

#include <nlohmann/json.hpp>

namespace stagecraft::configs {

// The scalar and list fields of a JSON tree (from JSON, TOML or YAML) as dotted names
// ("parallelism.tensor_parallel_degree"), each keyed by that name; a list of scalars is one
// field of several values; strings without quotes, null as "null".
std::map<std::string, FlatField> flatten(const nlohmann::json& j);
// A JSON value as text for reports and errors; bytes that are not UTF-8 shown as U+FFFD.
std::string json_text(const nlohmann::json& v);

}  // namespace stagecraft::configs
