// The one reader of spec objects (models, clusters, plans, kernel stacks): fields of one JSON
// object read with "<what>.<field>" named in every error, integers range-checked, and fields it
// does not know rejected (a typo would otherwise pass silently).
#pragma once

#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "schedules/error.h"
#include "schedules/json_read.h"

namespace stagecraft::costmodel {

class Reader {
 public:
  Reader(const nlohmann::json& j, std::string what) : j_(j), what_(std::move(what)) {
    if (!j.is_object()) throw InputError(what_ + ": expected a JSON object, got " + std::string(j.type_name()));
  }
  // A required field; a missing one is reported by done(), with every other missing field, so
  // that one run names all that a file lacks. Until then it reads as T{}.
  template <class T>
  T req(const char* field) {
    seen_.insert(field);
    if (!j_.contains(field)) {
      missing_.push_back(field);
      return T{};
    }
    return get<T>(field);
  }
  template <class T>
  T opt(const char* field, T def) {
    seen_.insert(field);
    if (!j_.contains(field)) return def;
    return get<T>(field);
  }
  // Call after the last field: throws InputError naming every missing required field, else the
  // first field the reader does not know.
  void done() const {
    if (!missing_.empty()) {
      std::string names;
      for (const auto& f : missing_) names += (names.empty() ? "" : ", ") + what_ + "." + f;
      throw InputError(names + (missing_.size() == 1 ? " is" : " are") + " missing (required)");
    }
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key())) {
        std::string allowed;
        for (const auto& s : seen_) allowed += (allowed.empty() ? "" : ", ") + s;
        throw InputError(what_ + "." + it.key() + " is not a known field (allowed: " + allowed + ")");
      }
  }

 private:
  template <class T>
  T get(const char* field) {
    const auto& v = j_.at(field);
    if constexpr (std::is_same_v<T, int>) {
      return schedules::json_int(v, what_ + "." + field);
    } else if constexpr (std::is_same_v<T, std::vector<int>>) {
      if (!v.is_array()) throw InputError(what_ + "." + field + " = " + v.dump() + " is invalid (expected an array of integers)");
      std::vector<int> out;
      for (size_t i = 0; i < v.size(); ++i)
        out.push_back(schedules::json_int(v[i], what_ + "." + field + "[" + std::to_string(i) + "]"));  // range-checked
      return out;
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      if (!v.is_array()) throw InputError(what_ + "." + field + " = " + v.dump() + " is invalid (expected an array of strings)");
      std::vector<std::string> out;
      for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_string())
          throw InputError(what_ + "." + field + "[" + std::to_string(i) + "] = " + v[i].dump() + " is invalid (expected a string)");
        out.push_back(v[i].get<std::string>());
      }
      return out;
    } else if constexpr (std::is_same_v<T, double>) {
      if (!v.is_number()) throw InputError(what_ + "." + field + " = " + v.dump() + " is invalid (expected a number)");
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!v.is_string()) throw InputError(what_ + "." + field + " = " + v.dump() + " is invalid (expected a string)");
    }
    try {
      return v.get<T>();
    } catch (const nlohmann::json::exception& e) {
      throw InputError(what_ + "." + field + " = " + v.dump() + " has the wrong type (" + e.what() + ")");
    }
  }
  const nlohmann::json& j_;
  std::string what_;
  std::set<std::string> seen_;
  std::vector<std::string> missing_;
};

}  // namespace stagecraft::costmodel
