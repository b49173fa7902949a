// Several schedules side by side under one cost model: what `pipeforge compare` prints and draws
// (docs/SCHEDULES.md, "Comparing schedules"). Each is generated, lowered and simulated; the result
// adds what moves between ranks and each rank's activation memory over time.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/schedules/ir.h"
#include "runtime/schedules/schedule_request.h"
#include "runtime/schedules/simulator.h"

namespace pf::sched {

struct ScheduleComparison {
  std::string name;
  int chunks = 1;            // model chunks per rank the schedule ran with
  Schedule schedule;         // lowered
  SimulationResult result;
  int64_t messages = 0;      // cross-rank activations and gradients (SEND actions)
  double moved_bytes = 0.0;  // messages x message_bytes
  // Per rank: (time, device-resident activation bytes) after every change, from 0 at time 0
  // (activation_delta of each action applied at its end).
  std::vector<std::vector<std::pair<double, double>>> memory;
};

// Generates `request` (its name, p, m, v; zb-auto also its cap), lowers it, simulates it and
// measures it. request.costs are those of one rank's share of the model (1/p of it): a schedule
// with v chunks per rank (interleaved, bfs, zb-v) runs stages of 1/v of them (t_f, t_b, t_w, m_b,
// m_w; t_comm unchanged), so every schedule trains the same model. message_bytes: the size of one activation or
// gradient crossing ranks (1: moved_bytes counts messages). kInvalidArgument for a bad request.
ScheduleComparison compare_schedule(const ScheduleRequest& request, double message_bytes);

// A rank's activation bytes over a simulated run (see ScheduleComparison::memory).
std::vector<std::pair<double, double>> activation_over_time(const Schedule& schedule, const SimulationResult& result,
                                                            const CostModel& costs, int rank);

}  // namespace pf::sched
