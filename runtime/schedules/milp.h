// A small mixed-integer linear program (minimise c'x subject to row and column bounds, some columns
// binary) and one call that solves it with GLPK's branch-and-cut (glp_intopt). Only the exact
// schedule solver (optimal_schedule.h) uses it; it lives in //runtime/schedules:optimal, not in the
// core schedules library, so nothing else links GLPK.
#pragma once

#include <limits>
#include <vector>

namespace pf::sched {

constexpr double kMilpInfinity = std::numeric_limits<double>::infinity();

struct Milp {
  struct Term {
    int column = 0;
    double coefficient = 0.0;
  };
  struct Column {
    double lower = 0.0, upper = kMilpInfinity, objective = 0.0;
    bool binary = false;
  };
  struct Row {
    std::vector<Term> terms;
    double lower = -kMilpInfinity, upper = kMilpInfinity;  // lower <= sum of terms <= upper
  };
  std::vector<Column> columns;
  std::vector<Row> rows;

  int add_column(double lower, double upper, double objective, bool binary);
  void add_row(std::vector<Term> terms, double lower, double upper);
};

struct MilpOptions {
  double time_limit_s = 10.0;  // wall-clock limit of the whole solve (LP relaxation included)
  // A feasible point to start from (GLPK's heuristic-solution hook); empty = none.
  std::vector<double> start;
  // The search stops, proven optimal, once an incumbent's objective is <= this (a known lower bound).
  double stop_at_objective = -kMilpInfinity;
};

struct MilpResult {
  enum class Status {
    kOptimal,     // proven (branch-and-cut finished, or the incumbent reached stop_at_objective)
    kFeasible,    // the time limit ran out with an incumbent
    kInfeasible,  // proven infeasible
    kNoSolution,  // the time limit ran out without one
  };
  Status status = Status::kNoSolution;
  double objective = 0.0;
  std::vector<double> x;  // one value per column when status is kOptimal or kFeasible
  double seconds = 0.0;
};

// True when this build has GLPK (libglpk-dev was installed when Bazel configured @glpk).
bool milp_solver_available();

// Throws kUnimplemented when !milp_solver_available(), kInvalidArgument for a bad time limit or a
// start of the wrong size, kInternal when GLPK reports an error.
MilpResult solve_milp(const Milp& milp, const MilpOptions& options);

}  // namespace pf::sched
