// What an import did with each field of a framework's config: mapped onto stagecraft's model or
// plan, assumed (absent from the file: the framework's default taken), known but not modelled by
// stagecraft, ignored (no bearing on a step's time or memory), or not understood. Every field of
// the file lands in exactly one list, so nothing is dropped silently.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace stagecraft::configs {

struct ReportEntry {
  std::string field;   // the framework's name, e.g. --tensor-model-parallel-size
  std::string value;   // as the file gives it ("" for a flag without a value)
  std::string note;    // what it became, or why it is not used
};

struct ImportReport {
  std::vector<ReportEntry> mapped;        // onto a stagecraft field (note names it)
  std::vector<ReportEntry> assumed;       // absent: the framework's default (note says which)
  std::vector<ReportEntry> not_modelled;  // understood, but stagecraft has no such concept
  std::vector<ReportEntry> ignored;       // no bearing on the cost model (paths, learning rate)
  std::vector<ReportEntry> unknown;       // not understood: a warning each

  void map(const std::string& field, const std::string& value, const std::string& note) { mapped.push_back({field, value, note}); }
  void assume(const std::string& field, const std::string& value, const std::string& note) { assumed.push_back({field, value, note}); }
  void unmodelled(const std::string& field, const std::string& value, const std::string& note) {
    not_modelled.push_back({field, value, note});
  }
  void ignore(const std::string& field, const std::string& value) { ignored.push_back({field, value, ""}); }
  void unknown_field(const std::string& field, const std::string& value) { unknown.push_back({field, value, ""}); }
  void append(const ImportReport& other);  // another file's report (the model's config) after this one
};

// The report as text lines of at most 100 columns: sections "mapped", "assumed", "not modelled",
// "ignored" (names only) and one "warning: unknown field" line per unknown field.
std::string report_text(const ImportReport& r);
nlohmann::json report_json(const ImportReport& r);

}  // namespace stagecraft::configs
