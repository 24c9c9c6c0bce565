// The project's exception types. Every library of stagecraft throws these at its API
// boundaries, with enough context to act on: the field or action, the value, what is allowed.
#pragma once

#include <stdexcept>
#include <string>

namespace stagecraft {

// A failure at run time that is not the user's input (a deadlock found while evaluating,
// an I/O failure writing an output file). The CLI exits 1.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Bad input: an unknown preset, a missing or out-of-range field, a schedule that breaks its
// constraints, a malformed file. The message names the field, the value and what is allowed.
// The CLI exits 2.
class InputError : public Error {
 public:
  explicit InputError(const std::string& what) : Error(what) {}
};

// A schedule that does not pass validation. Carries the rank-by-step grid with the failing
// step marked, already part of what(). Counts as bad input (exit 2).
class ScheduleError : public InputError {
 public:
  ScheduleError(const std::string& reason, const std::string& grid)
      : InputError(reason + "\n" + grid), reason_(reason), grid_(grid) {}
  const std::string& reason() const { return reason_; }
  const std::string& grid() const { return grid_; }

 private:
  std::string reason_;
  std::string grid_;
};

}  // namespace stagecraft
