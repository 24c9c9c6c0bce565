#include "planner/milp.h"

#include <map>
#include <memory>
#include <string>

#ifdef STAGECRAFT_WITH_CBC
#include <Cbc_C_Interface.h>
#endif

#include "schedules/error.h"

namespace stagecraft::planner {

int Milp::add_binary(double objective) {
  objective_.push_back(objective);
  lower_.push_back(0);
  upper_.push_back(1);
  integer_.push_back(true);
  return num_variables() - 1;
}

int Milp::add_continuous(double objective, double lower, double upper) {
  objective_.push_back(objective);
  lower_.push_back(lower);
  upper_.push_back(upper);
  integer_.push_back(false);
  return num_variables() - 1;
}

void Milp::add_objective(int variable, double coefficient) {
  objective_.at(static_cast<size_t>(variable)) += coefficient;
}

void Milp::add_le(const Terms& terms, double rhs) { rows_.push_back({terms, 'L', rhs}); }
void Milp::add_ge(const Terms& terms, double rhs) { rows_.push_back({terms, 'G', rhs}); }
void Milp::add_eq(const Terms& terms, double rhs) { rows_.push_back({terms, 'E', rhs}); }

#ifndef STAGECRAFT_WITH_CBC
Milp::Result Milp::solve(double /*time_limit_s*/) const {
  throw Error("planner: this build has no MILP solver (configured with STAGECRAFT_WITH_CBC=OFF); "
              "the per-layer ILP needs COIN-OR CBC (coinor-libcbc-dev, scripts/install-deps.sh)");
}
#else
Milp::Result Milp::solve(double time_limit_s) const {
  std::unique_ptr<Cbc_Model, void (*)(Cbc_Model*)> model(Cbc_newModel(), Cbc_deleteModel);
  if (!model) throw Error("CBC: could not create a model");
  Cbc_setLogLevel(model.get(), 0);
  Cbc_setMaximumSeconds(model.get(), time_limit_s);
  for (int v = 0; v < num_variables(); ++v)
    Cbc_addCol(model.get(), "", lower_[v], upper_[v], objective_[v], integer_[v] ? 1 : 0, 0, nullptr, nullptr);
  for (const Row& r : rows_) {
    std::map<int, double> merged;  // a variable named twice in a row: one coefficient, their sum
    for (const auto& [v, a] : r.terms) {
      if (v < 0 || v >= num_variables()) throw Error("Milp: row refers to variable " + std::to_string(v));
      merged[v] += a;
    }
    std::vector<int> cols;
    std::vector<double> coefs;
    for (const auto& [v, a] : merged) {
      cols.push_back(v);
      coefs.push_back(a);
    }
    Cbc_addRow(model.get(), "", static_cast<int>(cols.size()), cols.data(), coefs.data(), r.sense, r.rhs);
  }
  Cbc_solve(model.get());
  Result out;
  out.optimal = Cbc_isProvenOptimal(model.get()) != 0;
  out.infeasible = Cbc_isProvenInfeasible(model.get()) != 0;
  if (out.optimal) {
    const double* x = Cbc_getColSolution(model.get());
    out.x.assign(x, x + num_variables());
    out.objective = Cbc_getObjValue(model.get());
  }
  return out;
}

#endif  // STAGECRAFT_WITH_CBC

}  // namespace stagecraft::planner
