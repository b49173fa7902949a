// Pieces the built-in generators share: action constructors, an empty schedule of a placement,
// the option checks every fixed-placement generator makes, and the micro-batch groups of the
// interleaved orders. Internal to runtime/schedules.
#pragma once

#include <functional>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "runtime/schedules/ir.h"

namespace pf::sched::gen {

inline Action F(int stage, int mb) { return Action{ActionKind::kForward, stage, mb}; }
inline Action B(int stage, int mb) { return Action{ActionKind::kBackwardInput, stage, mb}; }
inline Action W(int stage, int mb) { return Action{ActionKind::kBackwardWeight, stage, mb}; }
inline Action BW(int stage, int mb) { return Action{ActionKind::kBackward, stage, mb}; }

// A schedule named `name` with one empty action list per rank of `placement`.
Schedule make_schedule(const char* name, int micro_batches, Placement placement);

// kInvalidArgument unless chunks is 1 (the generator places one stage per rank).
void require_one_chunk(const char* name, int chunks);
// kInvalidArgument unless chunks is 1 (the default) or 2: the generator's V placement has 2.
void require_v_chunks(const char* name, int chunks);
// kInvalidArgument when reverse_backward is set (it applies to bfs only).
void require_no_reverse(const char* name, bool reverse_backward);

// One STEP per stage, right after that stage's last W/BW on its rank.
void add_steps(Schedule& s);

// The micro-batch groups the interleaved orders send through the chunks together: p each when
// m % p == 0 (Megatron); one group of m when m < p; otherwise floor(m/p) groups as equal as
// possible, larger first (every group >= p).
std::vector<int> interleave_groups(int p, int m);

// The (micro-batch, chunk) table of the interleaved orders: [group 0 x chunk 0, group 0 x chunk 1,
// ..., group 1 x chunk 0, ...]. The k-th forward of a rank runs entry k; the k-th backward runs
// entry k with the chunk reversed (v - 1 - chunk).
std::vector<std::pair<int, int>> interleave_table(int p, int m, int v);

// How a candidate schedule ranks: `first`, then `second`, smaller is better.
struct Score {
  double first = std::numeric_limits<double>::infinity();
  double second = std::numeric_limits<double>::infinity();
};
// a ranks before b (differences within a relative 1e-9 of a.first count as ties).
bool better(const Score& a, const Score& b);

// The best of the candidates offered so far; a tie keeps the earlier one.
class BestSchedule {
 public:
  // Keeps make()'s schedule when `score` beats the best so far (make runs only then).
  void offer(Score score, const std::function<Schedule()>& make);
  bool empty() const { return !schedule_.has_value(); }
  const Score& score() const { return score_; }
  Schedule take() { return std::move(*schedule_); }

 private:
  std::optional<Schedule> schedule_;
  Score score_;
};

}  // namespace pf::sched::gen
