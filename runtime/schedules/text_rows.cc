#include "runtime/schedules/text_rows.h"

#include <cctype>
#include <cstdint>

#include "runtime/core/error.h"
#include "runtime/core/input_file.h"
#include "runtime/core/limits.h"

namespace pf::sched {

Placement infer_placement(const std::vector<ReadRank>& ranks, int stages, const std::string& source,
                          const std::string& item, const std::string& missing_hint) {
  std::vector<int> map(static_cast<size_t>(stages), -1);
  std::vector<int> where(static_cast<size_t>(stages), 0);  // line of first sighting
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    const ReadRank& row = ranks[static_cast<size_t>(r)];
    for (const auto& [a, tok] : row.actions) {
      int& owner = map[static_cast<size_t>(a.stage)];
      PF_CHECK_ARG(owner == -1 || owner == r, source, " line ", row.line, ", ", item, " '", tok, "': stage ",
                   a.stage, " appears on rank ", owner, " (line ", where[static_cast<size_t>(a.stage)],
                   ") and on rank ", r, "; a stage lives on one rank");
      if (owner == -1) where[static_cast<size_t>(a.stage)] = row.line;
      owner = r;
    }
  }
  for (int s = 0; s < stages; ++s) {
    PF_CHECK_ARG(map[static_cast<size_t>(s)] >= 0, source, ": stage ", s,
                 " has no actions on any rank, so its rank cannot be inferred", missing_hint);
  }
  Placement placement;
  const int num_ranks = static_cast<int>(ranks.size());
  placement.kind = classify_placement(num_ranks, map);
  placement.num_ranks = num_ranks;
  placement.stage_to_rank = std::move(map);
  return placement;
}

std::string trim_blanks(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string read_schedule_text_file(const std::string& path) {
  return read_input_file(path, "schedule file", limits::kMaxScheduleTextBytes);
}

}  // namespace pf::sched
