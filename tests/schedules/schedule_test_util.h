// Small helpers shared by the schedule tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/schedules/ir.h"

namespace pf::sched::testing {

// "0F0 0F1 ..." for one rank.
inline std::string rank_text(const Schedule& s, int rank) {
  std::string out;
  for (const Action& a : s.ranks[static_cast<size_t>(rank)]) {
    if (!out.empty()) out += ' ';
    out += action_to_string(a);
  }
  return out;
}

// Builds a schedule from one "a b c" string per rank.
inline Schedule from_lists(const std::vector<std::string>& lists, int micro_batches,
                           Placement placement, const std::string& name = "custom") {
  Schedule s;
  s.name = name;
  s.num_micro_batches = micro_batches;
  s.placement = std::move(placement);
  for (const std::string& line : lists) {
    std::vector<Action> list;
    size_t pos = 0;
    while (pos < line.size()) {
      size_t end = line.find(' ', pos);
      if (end == std::string::npos) end = line.size();
      if (end > pos) list.push_back(parse_action(line.substr(pos, end - pos)));
      pos = end + 1;
    }
    s.ranks.push_back(std::move(list));
  }
  return s;
}

// Most forwards of one rank in flight at once: F done, its B/BW not yet (activations kept).
inline int peak_activations(const Schedule& s, int rank) {
  int cur = 0, peak = 0;
  for (const Action& a : s.ranks[static_cast<size_t>(rank)]) {
    if (a.kind == ActionKind::kForward) ++cur;
    if (a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackward) --cur;
    peak = std::max(peak, cur);
  }
  return peak;
}

// Most micro-batches of one rank in flight: F done, BW (or W) not yet.
inline int peak_in_flight(const Schedule& s, int rank) {
  int cur = 0, peak = 0;
  for (const Action& a : s.ranks[static_cast<size_t>(rank)]) {
    if (a.kind == ActionKind::kForward) ++cur;
    if (a.kind == ActionKind::kBackwardWeight || a.kind == ActionKind::kBackward) --cur;
    peak = std::max(peak, cur);
  }
  return peak;
}

// Most W's waiting to run: B done, W not yet.
inline int peak_pending_w(const Schedule& s, int rank) {
  int cur = 0, peak = 0;
  for (const Action& a : s.ranks[static_cast<size_t>(rank)]) {
    if (a.kind == ActionKind::kBackwardInput) ++cur;
    if (a.kind == ActionKind::kBackwardWeight) --cur;
    peak = std::max(peak, cur);
  }
  return peak;
}

// Forwards before the first backward (B or BW) on a rank.
inline int warmup_forwards(const Schedule& s, int rank) {
  int n = 0;
  for (const Action& a : s.ranks[static_cast<size_t>(rank)]) {
    if (a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackward) break;
    if (a.kind == ActionKind::kForward) ++n;
  }
  return n;
}

// The message of the pf::Error `fn` throws ("" and a test failure if it throws none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a pf::Error";
  return "";
}

}  // namespace pf::sched::testing

// EXPECT_HAS(text, part): `text` contains `part` (prints both when it does not).
#define EXPECT_HAS(text, part)                                                        \
  do {                                                                                \
    const std::string pf_text_ = (text);                                              \
    const std::string pf_part_ = (part);                                              \
    EXPECT_NE(pf_text_.find(pf_part_), std::string::npos)                             \
        << "expected to find: " << pf_part_ << "\n                in: " << pf_text_; \
  } while (0)
