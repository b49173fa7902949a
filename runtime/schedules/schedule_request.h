// One entry point that turns "which schedule, for which p, m, v and costs" into a Schedule, shared by
// the command line and the C API. zb-auto is cost-driven, so it is the one generator that sees the
// cost model and the memory cap; the others depend only on p, m and v.
#pragma once

#include <string>

#include "runtime/schedules/ir.h"
#include "runtime/schedules/simulator.h"

namespace pf::sched {

struct UniformCosts {
  double t_f = 1.0, t_b = 1.0, t_w = 1.0, t_comm = 0.0;
  double m_b = 1.0, m_w = 0.0;  // activation memory per micro-batch (bytes or units)
  double t_head = 0.0;          // local learning: one HEAD (the auxiliary head's forward, loss, backward)
  CostModel expand(int num_stages) const;
};

struct ScheduleRequest {
  std::string name;       // a registered generator (see generator_names())
  int ranks = 0;          // p
  int micro_batches = 0;  // m
  int chunks = 1;         // v (interleaved-1f1b, bfs; zb-v always uses 2)
  int seq_slices = 1;     // S, sequence slices per micro-batch (seq1f1b)
  UniformCosts costs;     // zb-auto only
  double mem_limit = 0;   // zb-auto only: cap on in-flight micro-batches per rank; 0 = p (ZB-1p)
};

// Generates and validates. Errors name the option at fault (kInvalidArgument).
Schedule make_schedule(const ScheduleRequest& request);

}  // namespace pf::sched
