// The comparison as one self-contained HTML page (no network, no external script or style): a
// table of the schedules (sortable by clicking a column; "#sort=<column>" in the URL sorts on
// load), their timelines stacked on one time axis, and each rank's activation memory over time on
// the same axis.
#pragma once

#include <string>
#include <vector>

#include "runtime/schedules/comparison.h"

namespace pf::sched {

struct ComparisonPage {
  std::string title = "PipeForge schedule comparison";
  std::string parameters;  // one line: p, m, costs
  double width = 1200.0;   // drawings' width in pixels
};

std::string comparison_html(const std::vector<ScheduleComparison>& schedules, const ComparisonPage& page);

// The table's columns (the keys "#sort=" takes): schedule, makespan, bubble_rate, peak_memory,
// messages, moved_bytes.
const std::vector<std::string>& comparison_columns();

}  // namespace pf::sched
