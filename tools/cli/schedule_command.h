// `pipeforge schedule` prints a generated schedule in the text form or PyTorch's CSV; `pipeforge simulate` times a
// generated or user-written schedule under a cost model and reports makespan, bubble rate, busy and
// idle time and peak activations per rank, with optional Chrome-trace and SVG timelines.
#pragma once

#include "tools/cli/cli_fwd.h"
#include <string>

#include "runtime/schedules/schedule_request.h"

namespace pf::cli {

struct ScheduleArgs {
  sched::ScheduleRequest request;
  std::string schedule_file;  // simulate only: a schedule file instead of a generator
  // schedule: the output's format; simulate: --schedule-file's. "native" (the text form) or "pytorch"
  // (PyTorch's pipeline CSV, pytorch_format.h).
  std::string format = "native";
  std::string comm = "rendezvous";  // simulate only: SEND/RECV semantics, "rendezvous" or "posted"
  bool lower = false;         // insert SEND/RECV actions
  bool json = false;          // simulate only
  std::string trace_file;     // simulate only
  std::string svg_file;       // simulate only
  double svg_width = 1200;    // simulate: the drawing's width in pixels
  int grid_width = 100;       // simulate only: ASCII grid columns (0 = no grid)
  std::string activation_policy = "none";  // simulate only
  double activation_budget = 0;            // simulate only: selective, bytes per rank
  double transfer_bandwidth = 0;           // simulate only: bytes per time unit for OFFLOAD/RELOAD
  int windows = 3;                         // simulate only, asynchronous schedules: steps shown in a row
  int steps = 1;                           // simulate only, synchronous schedules: overlapped steps in a row
  std::string chakra;                      // simulate only: write Chakra execution traces here
  double message_bytes = 1;                // simulate only, --chakra: bytes of one message between ranks
};

CLI::App* add_schedule_command(CLI::App& app, ScheduleArgs& args);
// The title of a timeline drawing: "zb-v: p=2, m=8, v=2, <what>, bubble rate 0.123".
std::string timeline_title(const sched::Schedule& schedule, int micro_batches, const std::string& what,
                           double bubble_rate);
CLI::App* add_simulate_command(CLI::App& app, ScheduleArgs& args);
int run_schedule(const ScheduleArgs& args);
int run_simulate(const ScheduleArgs& args);

}  // namespace pf::cli
