// A small mixed-integer linear program and its solution with COIN-OR CBC (the open-source
// solver Oases Sec. V-C solves its planner's ILP with). Minimisation; variables are binary or
// continuous with bounds; rows are sparse linear constraints. The planner's formulations
// (planner/layer_tp.h) build on it and never touch the solver's API.
#pragma once

#include <utility>
#include <vector>

namespace stagecraft::planner {

class Milp {
 public:
  using Terms = std::vector<std::pair<int, double>>;  // (variable, coefficient); repeats add up

  int add_binary(double objective);
  int add_continuous(double objective, double lower = 0, double upper = 1e30);
  void add_objective(int variable, double coefficient);  // adds to its objective coefficient
  void add_le(const Terms& terms, double rhs);  // sum <= rhs
  void add_ge(const Terms& terms, double rhs);  // sum >= rhs
  void add_eq(const Terms& terms, double rhs);  // sum == rhs
  int num_variables() const { return static_cast<int>(objective_.size()); }
  int num_rows() const { return static_cast<int>(rows_.size()); }

  struct Result {
    bool optimal = false;      // CBC proved optimality
    bool infeasible = false;   // CBC proved there is no solution
    double objective = 0;      // at the solution
    std::vector<double> x;     // (num_variables) values at the solution
  };
  // Solves with CBC, silently; time_limit_s bounds the branch and bound.
  Result solve(double time_limit_s = 60) const;

 private:
  struct Row {
    Terms terms;
    char sense;  // 'L', 'G' or 'E'
    double rhs;
  };
  std::vector<double> objective_, lower_, upper_;  // (num_variables)
  std::vector<bool> integer_;                      // (num_variables)
  std::vector<Row> rows_;
};

}  // namespace stagecraft::planner
