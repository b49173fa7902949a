// Local learning (docs/SCHEDULES.md, "Local learning"): every stage but the last trains on its own
// auxiliary head and loss, so no gradient crosses ranks. Rank s runs, per micro-batch k, F(k),
// HEAD(k) (the head's forward, loss and backward: the gradient of the stage output), BW(k) (the
// stage's backward from it; the input gradient is dropped) and UPDATE: after every micro-batch
// (`ppll`, Guo et al. 2024; "local parallelism", Laskin et al. 2020) or after the last micro-batch of
// every step of m (`local-updates`). The last stage runs F (with the model's loss), BW, UPDATE.
// Activations go forward only, through the transport's bounded mailboxes (SEND_F/RECV_F).
// A trainer step is a window (step_windows.h) in which rank s runs the micro-batches rank s-1
// forwarded one step before or in this step (lag s), so the pipeline never drains between steps.
#pragma once

#include <string>
#include <vector>

#include "runtime/schedules/ir.h"
#include "runtime/schedules/step_windows.h"

namespace pf::sched {

// The generators "ppll" and "local-updates" register with their traits (family local-learning;
// update interval: every micro-batch or once per step).
// True when the schedule has HEAD actions.
bool has_local_heads(const Schedule& schedule);

// The unlowered run of `micro_batches` micro-batches with an UPDATE after every `update_every`-th
// BW of each stage (and after the last).
Schedule local_run(const std::string& name, int ranks, int micro_batches, int update_every);

// The trainer's step windows (rank s lags s micro-batches). Needs micro_batches >= ranks - 1.
StepWindows make_local_windows(const std::string& name, int ranks, int micro_batches);
// The steady state (step_windows.h) of a local-learning schedule under `costs`.
SteadyState simulate_local_steady_state(const std::string& name, int ranks, int micro_batches, const CostModel& costs);

}  // namespace pf::sched
