// The whole-schedule text form (see docs/SCHEDULES.md, "Text format"):
//
//   # pipeforge schedule v1
//   name: 1f1b
//   ranks: 2
//   stages: 2
//   microbatches: 2
//   seq_slices: 2                      (only when the schedule slices sequences: Schedule::seq_slices > 1)
//   placement: one-per-rank            (or: looped | v-shape | custom <rank of stage 0> <...> ...)
//   rank 0: 0F0 0F1 0BW0 0BW1 0STEP
//   rank 1: 1F0 1BW0 1F1 1BW1 1STEP
//
// schedule_to_text and parse_schedule round-trip exactly. parse_schedule also reads PyTorch-style
// text: one rank per line, actions separated by commas and/or spaces, no header; the rank count is the
// number of lines, the stage and micro-batch counts are one more than the largest seen, and the
// placement is inferred from which rank holds which stage.
#pragma once

#include <string>
#include <vector>

#include "runtime/schedules/ir.h"

namespace pf::sched {

// Prints the native v1 form. Throws kInvalidArgument for what the form cannot carry exactly: a name
// with a line break or leading/trailing blanks, ranks.size() != placement.num_ranks, or a placement
// whose map is not what its kind says.
std::string schedule_to_text(const Schedule& schedule);

// Parses either form. Errors (kInvalidArgument) name the line number and the offending token.
// The parser checks syntax and ranges only; run validate() for the schedule's semantics.
Schedule parse_schedule(const std::string& text);

// File helpers: errors name the path (kIoError for I/O, kInvalidArgument for content).
Schedule read_schedule_file(const std::string& path);
void write_schedule_file(const Schedule& schedule, const std::string& path);

// An ASCII grid of the schedule, one row per rank and one column per action slot:
//
//   slot   |   0    1    2     3
//   rank 0 | 0F0  0F1  0F2 [0B0]
//   rank 1 | 1F0  1F1
//
// Marked actions are drawn in brackets. When a rank has more than max_slots actions, a window of
// max_slots slots around the first mark (or the start) is shown, with "..." where slots are cut.
struct GridMark {
  int rank = -1;
  int index = -1;
};
std::string schedule_grid(const Schedule& schedule, const std::vector<GridMark>& marks = {},
                          int max_slots = 32);

}  // namespace pf::sched
