// One entry point that turns "which schedule, for which p, m, v and costs" into a Schedule, shared by
// the command line and the C API. The cost-driven generators, zb-auto and v-half / v-min (list
// scheduling under a memory cap), see the cost model and the cap; the others depend only on p, m, v.
#pragma once

#include <string>

#include "runtime/schedules/generators.h"
#include "runtime/schedules/ir.h"
#include "runtime/schedules/simulator.h"

namespace pf::sched {

struct ScheduleRequest {
  std::string name;       // a registered generator (see generator_names())
  int ranks = 0;          // p
  int micro_batches = 0;  // m
  int chunks = 0;         // v; 0 = the schedule's default (ScheduleTraits::default_chunks: 2 looped or V, else 1)
  int seq_slices = 1;     // S, sequence slices per micro-batch (seq1f1b)
  UniformCosts costs;     // zb-auto, v-half, v-min only
  // zb-auto, v-half, v-min only: cap on in-flight micro-batches per rank; 0 = the schedule's own cap
  // (p for zb-auto, ZB-1p; v_half_cap(p), v_min_cap(p) for v-half and v-min: capped_v.h)
  double mem_limit = 0;
};

// Generates and validates. Errors name the option at fault (kInvalidArgument).
Schedule make_schedule(const ScheduleRequest& request);

}  // namespace pf::sched
