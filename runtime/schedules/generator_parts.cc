#include "runtime/schedules/generator_parts.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/schedules/stage_actions.h"

namespace pf::sched::gen {

Schedule make_schedule(const char* name, int micro_batches, Placement placement) {
  Schedule s;
  s.name = name;
  s.num_micro_batches = micro_batches;
  s.ranks.resize(static_cast<size_t>(placement.num_ranks));
  s.placement = std::move(placement);
  return s;
}

void require_one_chunk(const char* name, int chunks) {
  PF_CHECK_ARG(chunks == 1, name, " places one stage per rank: chunks must be 1, got ", chunks,
               " (chunks > 1 is for interleaved-1f1b, interleaved-zb and bfs; the V schedules have 2)");
}

void require_v_chunks(const char* name, int chunks) {
  PF_CHECK_ARG(chunks == 1 || chunks == 2, name,
               " always has 2 chunks per rank (V placement); chunks must be 2 (or the default 1), got ",
               chunks);
}

void require_no_reverse(const char* name, bool reverse_backward) {
  PF_CHECK_ARG(!reverse_backward, "reverse_backward applies to bfs only, not to ", name);
}

void add_steps(Schedule& s) { insert_after_last_weight_gradient(s, ActionKind::kStep); }

std::vector<int> interleave_groups(int p, int m) {
  if (m % p == 0) return std::vector<int>(static_cast<size_t>(m / p), p);
  if (m < p) return {m};
  const int rounds = m / p;
  const int base = m / rounds, extra = m % rounds;
  std::vector<int> g(static_cast<size_t>(extra), base + 1);
  g.insert(g.end(), static_cast<size_t>(rounds - extra), base);
  return g;
}

std::vector<std::pair<int, int>> interleave_table(int p, int m, int v) {
  std::vector<std::pair<int, int>> table;
  table.reserve(static_cast<size_t>(m) * static_cast<size_t>(v));
  int first = 0;
  for (int g : interleave_groups(p, m)) {
    for (int c = 0; c < v; ++c) {
      for (int mb = first; mb < first + g; ++mb) table.emplace_back(mb, c);
    }
    first += g;
  }
  return table;
}

bool better(const Score& a, const Score& b) {
  const double tol = 1e-9 * std::max(1.0, std::fabs(a.first));
  return a.first < b.first - tol || (a.first <= b.first + tol && a.second < b.second - tol);
}

void BestSchedule::offer(Score score, const std::function<Schedule()>& make) {
  if (!better(score, score_)) return;
  score_ = score;
  schedule_ = make();
}

}  // namespace pf::sched::gen
