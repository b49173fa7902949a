// How far each one-stage-per-rank heuristic is from the optimum (runtime/schedules/optimal_schedule.h)
// on small pipelines: p in {2, 3, 4}, m in {p, 2p}, unit costs and the zero-bubble paper's ratio
// T_F : T_B : T_W = 1 : 1 : 0.5 with T_comm 0.03, memory caps p and 2p (in M_B; M_W = 0). For each
// setting: the optimum (or the best order found when the time limit ends the search: proven false),
// the solve time, and every heuristic's simulated makespan divided by it (null when its order does
// not fit the cap). Prints one JSON object.
//
//   bazel run //bench/schedules:optimality_table [-- --time-limit SECONDS] [--p P] [--m M]
// (default 60 s per solve, which only p = 4, m = 8, cap 4 comes near; --p / --m keep only the settings with that p / m)
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/schedules/optimal_schedule.h"
#include "runtime/schedules/simulator.h"

namespace {

using pf::sched::CostModel;
using pf::sched::Schedule;

// The heuristic's makespan over the optimum, or null when its order needs more memory than the cap.
nlohmann::json ratio(const Schedule& s, const CostModel& costs, double cap, double optimum) {
  const pf::sched::SimulationResult sim = pf::sched::simulate(s, costs);
  if (!pf::sched::fits_memory_cap(sim, costs, cap)) return nullptr;
  return sim.makespan / optimum;
}

}  // namespace

int main(int argc, char** argv) {
  double time_limit = 60.0;
  int only_p = 0, only_m = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--time-limit") == 0 && i + 1 < argc) time_limit = std::atof(argv[++i]);
    if (std::strcmp(argv[i], "--p") == 0 && i + 1 < argc) only_p = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--m") == 0 && i + 1 < argc) only_m = std::atoi(argv[++i]);
  }
  if (!pf::sched::optimal_solver_available()) {
    std::cerr << "optimality_table: built without GLPK (install libglpk-dev, then bazel sync --configure)\n";
    return 1;
  }
  struct Costs {
    const char* label;
    double t_w, t_comm;
  };
  const Costs cost_sets[] = {{"unit", 1.0, 0.0}, {"zb-paper 1:1:0.5 comm 0.03", 0.5, 0.03}};
  nlohmann::json rows = nlohmann::json::array();
  for (int p : {2, 3, 4}) {
    for (int m : {p, 2 * p}) {
      if ((only_p != 0 && p != only_p) || (only_m != 0 && m != only_m)) continue;
      for (const Costs& cs : cost_sets) {
        const CostModel costs = CostModel::uniform(p, 1.0, 1.0, cs.t_w, cs.t_comm);
        for (double cap : {1.0 * p, 2.0 * p}) {
          pf::sched::OptimalOptions o;
          o.time_limit_s = time_limit;
          const pf::sched::OptimalResult r = pf::sched::solve_optimal_schedule(p, m, costs, cap, o);
          nlohmann::json ratios = {{"zb-auto", nullptr}};  // null too when no zb-auto order fits
          for (const Schedule& h : pf::sched::one_stage_per_rank_heuristics(p, m, costs, cap))
            ratios[h.name] = ratio(h, costs, cap, r.makespan);
          rows.push_back({{"p", p},
                          {"m", m},
                          {"costs", cs.label},
                          {"cap_mb", cap},
                          {"optimum", r.makespan},
                          {"lower_bound", r.lower_bound},
                          {"proven", r.proven},
                          {"source", r.source},
                          {"solve_s", r.solve_seconds},
                          {"ratio", ratios}});
        }
      }
    }
  }
  nlohmann::json out = {{"benchmark", "optimality_table"},
                        {"time_limit_s", time_limit},
                        {"solver", "GLPK (glp_intopt), static"},
                        {"rows", rows}};
  std::cout << out.dump(1) << "\n";
  return 0;
}
