// Shared by the fuzz targets: feed one input to a parser and accept only the failures a parser
// is allowed: InputError (bad input, named) and, for JSON targets, nlohmann's errors on text
// that is not JSON or holds a number out of range (the loaders turn those into InputError). Anything else (another exception, a crash, a sanitizer report, a
// hang) is a finding. docs/testing.md: how to run them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "schedules/error.h"

namespace stagecraft::fuzz {

inline std::string text_of(const uint8_t* data, size_t size) { return std::string(reinterpret_cast<const char*>(data), size); }

template <class F>
int guarded(F&& f) {
  try {
    f();
  } catch (const InputError&) {
  }
  return 0;
}

// The input as JSON, then `f(json)`; text that is not JSON is rejected before `f`.
template <class F>
int guarded_json(const uint8_t* data, size_t size, F&& f) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text_of(data, size));
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  return guarded([&] { f(j); });
}

}  // namespace stagecraft::fuzz
