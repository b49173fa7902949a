#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/schedules/milp.h"

#ifdef PF_HAVE_GLPK
#include <glpk.h>
#endif

namespace pf::sched {

int Milp::add_column(double lower, double upper, double objective, bool binary) {
  columns.push_back(Column{lower, upper, objective, binary});
  return static_cast<int>(columns.size()) - 1;
}

void Milp::add_row(std::vector<Term> terms, double lower, double upper) {
  rows.push_back(Row{std::move(terms), lower, upper});
}

#ifdef PF_HAVE_GLPK

bool milp_solver_available() { return true; }

namespace {

int bound_type(double lower, double upper) {
  const bool lo = std::isfinite(lower), hi = std::isfinite(upper);
  if (lo && hi) return lower == upper ? GLP_FX : GLP_DB;
  if (lo) return GLP_LO;
  if (hi) return GLP_UP;
  return GLP_FR;
}

double finite_or_zero(double v) { return std::isfinite(v) ? v : 0.0; }

struct CallbackState {
  std::vector<double> start;  // 1-based, as GLPK wants it; empty = none
  bool start_offered = false;
  double stop_at = -kMilpInfinity;
  bool stopped_at_bound = false;
};

void on_search_event(glp_tree* tree, void* info) {
  auto* state = static_cast<CallbackState*>(info);
  switch (glp_ios_reason(tree)) {
    case GLP_IHEUR:
      if (!state->start_offered && !state->start.empty()) {
        state->start_offered = true;
        glp_ios_heur_sol(tree, state->start.data());
      }
      break;
    case GLP_IBINGO:
      if (glp_mip_obj_val(glp_ios_get_prob(tree)) <= state->stop_at) {
        state->stopped_at_bound = true;
        glp_ios_terminate(tree);
      }
      break;
    default:
      break;
  }
}

struct ProblemDeleter {
  void operator()(glp_prob* p) const { glp_delete_prob(p); }
};

}  // namespace

MilpResult solve_milp(const Milp& milp, const MilpOptions& options) {
  PF_CHECK_ARG(std::isfinite(options.time_limit_s) && options.time_limit_s > 0.0,
               "solve_milp: time_limit_s must be finite and > 0, got ", options.time_limit_s);
  const int n = static_cast<int>(milp.columns.size());
  PF_CHECK_ARG(options.start.empty() || static_cast<int>(options.start.size()) == n,
               "solve_milp: start has ", options.start.size(), " values for ", n, " columns");
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed_s = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };

  std::unique_ptr<glp_prob, ProblemDeleter> owner(glp_create_prob());
  glp_prob* lp = owner.get();
  glp_set_obj_dir(lp, GLP_MIN);
  if (n > 0) glp_add_cols(lp, n);
  for (int j = 0; j < n; ++j) {
    const Milp::Column& c = milp.columns[static_cast<size_t>(j)];
    // The kind first: GLP_BV resets the bounds to [0, 1]; a binary fixed at 0 keeps its [0, 0].
    if (c.binary) glp_set_col_kind(lp, j + 1, GLP_BV);
    glp_set_col_bnds(lp, j + 1, bound_type(c.lower, c.upper), finite_or_zero(c.lower), finite_or_zero(c.upper));
    glp_set_obj_coef(lp, j + 1, c.objective);
  }
  const int rows = static_cast<int>(milp.rows.size());
  if (rows > 0) glp_add_rows(lp, rows);
  std::vector<int> ia{0}, ja{0};
  std::vector<double> ar{0.0};
  for (int i = 0; i < rows; ++i) {
    const Milp::Row& r = milp.rows[static_cast<size_t>(i)];
    glp_set_row_bnds(lp, i + 1, bound_type(r.lower, r.upper), finite_or_zero(r.lower), finite_or_zero(r.upper));
    for (const Milp::Term& t : r.terms) {
      PF_INTERNAL_CHECK(t.column >= 0 && t.column < n, "solve_milp: row ", i, " names column ", t.column);
      ia.push_back(i + 1);
      ja.push_back(t.column + 1);
      ar.push_back(t.coefficient);
    }
  }
  glp_load_matrix(lp, static_cast<int>(ia.size()) - 1, ia.data(), ja.data(), ar.data());

  MilpResult result;
  const auto remaining_ms = [&] {
    return std::max(1, static_cast<int>(std::lround((options.time_limit_s - elapsed_s()) * 1000.0)));
  };
  glp_smcp simplex;
  glp_init_smcp(&simplex);
  simplex.msg_lev = GLP_MSG_OFF;
  simplex.tm_lim = remaining_ms();
  const int lp_ret = glp_simplex(lp, &simplex);
  if (lp_ret != 0 || glp_get_status(lp) != GLP_OPT) {
    const int status = glp_get_status(lp);
    PF_INTERNAL_CHECK(lp_ret == 0 || lp_ret == GLP_ETMLIM || lp_ret == GLP_EITLIM,
                      "solve_milp: glp_simplex returned ", lp_ret);
    result.status = status == GLP_NOFEAS ? MilpResult::Status::kInfeasible : MilpResult::Status::kNoSolution;
    result.seconds = elapsed_s();
    return result;
  }

  CallbackState state;
  if (!options.start.empty()) {
    state.start.assign(1, 0.0);
    state.start.insert(state.start.end(), options.start.begin(), options.start.end());
  }
  state.stop_at = options.stop_at_objective;
  glp_iocp mip;
  glp_init_iocp(&mip);
  mip.msg_lev = GLP_MSG_OFF;
  mip.tm_lim = remaining_ms();
  mip.cb_func = on_search_event;
  mip.cb_info = &state;
  // Measured on bench/schedules:optimality_table (p = 4, m = 8, cap 4, the hardest setting there):
  // pseudo-cost branching with depth-first backtracking proves it about 1.5x faster than GLPK's
  // defaults, which time out at 15 s; MIR cuts slow the p = 3 settings down 5x.
  mip.br_tech = GLP_BR_PCH;
  mip.bt_tech = GLP_BT_DFS;
  const int ret = glp_intopt(lp, &mip);
  PF_INTERNAL_CHECK(ret == 0 || ret == GLP_ETMLIM || ret == GLP_ESTOP, "solve_milp: glp_intopt returned ", ret);
  const int status = glp_mip_status(lp);
  result.seconds = elapsed_s();
  if (status == GLP_NOFEAS) {
    result.status = MilpResult::Status::kInfeasible;
    return result;
  }
  if (status != GLP_OPT && status != GLP_FEAS) return result;  // kNoSolution
  const bool proven = (ret == 0 && status == GLP_OPT) || state.stopped_at_bound;
  result.status = proven ? MilpResult::Status::kOptimal : MilpResult::Status::kFeasible;
  result.objective = glp_mip_obj_val(lp);
  result.x.resize(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) result.x[static_cast<size_t>(j)] = glp_mip_col_val(lp, j + 1);
  return result;
}

#else  // !PF_HAVE_GLPK

bool milp_solver_available() { return false; }

MilpResult solve_milp(const Milp&, const MilpOptions&) {
  fail(ErrorCode::kUnimplemented,
       "solve_milp: this build has no MILP solver (GLPK was not found when Bazel configured @glpk: install "
       "Debian's libglpk-dev, e.g. with tools/setup.sh, then run `bazel sync --configure`)");
}

#endif  // PF_HAVE_GLPK

}  // namespace pf::sched
