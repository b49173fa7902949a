// `pipeforge compare`: several schedules side by side under one cost model (runtime/schedules/
// comparison.h): a table on stdout (or --json), and with --html one self-contained page.
#pragma once

#include "tools/cli/cli_fwd.h"
#include <string>
#include <vector>

#include "runtime/schedules/schedule_request.h"

namespace pf::cli {

struct CompareArgs {
  std::vector<std::string> schedules;  // names
  sched::ScheduleRequest request;      // p, m, costs, cap (the name is each schedule's)
  int chunks = 0;                      // looped schedules: V; 0 = the schedule's default (2)
  double message_bytes = 1.0;
  std::string html_file;
  double width = 1200;
  bool json = false;
};

CLI::App* add_compare_command(CLI::App& app, CompareArgs& args);
int run_compare(const CompareArgs& args);

}  // namespace pf::cli
