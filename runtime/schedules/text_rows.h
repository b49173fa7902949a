// What the schedule text readers (text_format.cc, pytorch_format.cc) share: rank rows as read, with
// where each action came from, and the placement they imply.
#pragma once

#include <string>
#include <vector>

#include "runtime/schedules/ir.h"

namespace pf::sched {

struct ReadAction {
  Action action;
  std::string token;  // the text it was read from, for messages
};

struct ReadRank {
  int line = 0;  // 1-based line of the row
  std::vector<ReadAction> actions;
};

// The placement implied by which rank (row) runs actions of which stage in [0, stages); its kind is
// classify_placement's. Every action's stage must be < stages. Errors (kInvalidArgument) start with
// `source` ("schedule text"), name the line and the `item` ("token"): a stage on two ranks; a stage
// on no rank, followed by `missing_hint`.
Placement infer_placement(const std::vector<ReadRank>& ranks, int stages, const std::string& source,
                          const std::string& item, const std::string& missing_hint);

// `s` without leading and trailing whitespace.
std::string trim_blanks(const std::string& s);

// The file's text, after checking that it is a regular file of at most kMaxScheduleTextBytes
// (kIoError / kInvalidArgument naming the path).
std::string read_schedule_text_file(const std::string& path);

}  // namespace pf::sched
