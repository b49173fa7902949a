// How long the schedule engine takes for a large pipeline: p = 32 ranks, m = 256 micro-batches.
// For each schedule it times generating (generate_schedule, which also validates the generator's
// output), lowering (lower_communication, which validates its input first), validating the lowered
// schedule, and simulating the unlowered and the lowered schedule; each phase is the fastest of a few
// repetitions. Prints one JSON object; times in milliseconds.
//
//   bazel run //bench/schedules:schedule_engine_bench [-- --reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/validator.h"
#include "runtime/schedules/zb_auto.h"

namespace {

using pf::sched::CostModel;
using pf::sched::Schedule;

double best_ms(int reps, const std::function<void()>& fn) {
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return best;
}

size_t count_actions(const Schedule& s) {
  size_t n = 0;
  for (const auto& r : s.ranks) n += r.size();
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
  }
  const int p = 32, m = 256;
  struct Config {
    const char* label;
    const char* generator;
    int chunks;
  };
  const Config configs[] = {{"1f1b", "1f1b", 1},
                            {"zb-h1", "zb-h1", 1},
                            {"zb-v", "zb-v", 2},
                            {"interleaved-1f1b-v2", "interleaved-1f1b", 2},
                            {"zb-auto-2p", "zb-auto", 1}};
  nlohmann::json out;
  out["p"] = p;
  out["m"] = m;
  out["reps"] = reps;
  nlohmann::json& table = out["schedules"];
  for (const Config& c : configs) {
    pf::sched::GeneratorOptions o;
    o.ranks = p;
    o.micro_batches = m;
    o.chunks = c.chunks;
    const int stages = p * c.chunks;
    // Costs in milliseconds-like units, unequal passes and a latency, as in the zero-bubble paper.
    const CostModel costs = CostModel::uniform(stages, 1.0, 1.0, 0.75, 0.04, 1.0, 0.43);
    Schedule s, lowered;
    const bool is_auto = std::string(c.generator) == "zb-auto";
    const double gen_ms = best_ms(reps, [&] {
      s = is_auto ? pf::sched::generate_zb_auto(p, m, costs, 2.0 * p)
                  : pf::sched::generate_schedule(c.generator, o);
    });
    const double lower_ms = best_ms(reps, [&] { lowered = pf::sched::lower_communication(s); });
    bool ok = false;
    const double validate_ms = best_ms(reps, [&] { ok = pf::sched::validate(lowered).ok(); });
    pf::sched::SimulationResult r, rl;
    const double sim_ms = best_ms(reps, [&] { r = pf::sched::simulate(s, costs); });
    const double sim_lowered_ms = best_ms(reps, [&] { rl = pf::sched::simulate(lowered, costs); });
    nlohmann::json e;
    e["actions"] = count_actions(s);
    e["lowered_actions"] = count_actions(lowered);
    e["valid"] = ok;
    e["generate_ms"] = gen_ms;
    e["lower_ms"] = lower_ms;
    e["validate_ms"] = validate_ms;
    e["simulate_ms"] = sim_ms;
    e["simulate_lowered_ms"] = sim_lowered_ms;
    e["total_ms"] = gen_ms + lower_ms + validate_ms + sim_ms + sim_lowered_ms;
    e["bubble_rate"] = r.bubble_rate;
    e["span_bubble_rate"] = r.span_bubble_rate;
    e["lowered_makespan_equal"] = r.makespan == rl.makespan;
    table[c.label] = e;
  }
  std::cout << out.dump(2) << std::endl;
  return 0;
}
