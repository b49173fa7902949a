// "interleaved-zb": zero-bubble 1F1B over v chunks per rank in the looped placement (PyTorch's
// ScheduleInterleavedZeroBubble, the paper's ZB-1P order generalised to virtual stages).
//
// Rank s runs the interleaved table of generator_parts.h: warm-up of (v-1)*g0 + (p-1-s) forwards
// (g0 = the first micro-batch group; capped at v*m) — one per hop where interleaved-1f1b waits two,
// because B's alone come back up the pipeline — then (F, B) pairs and the remaining B's. After its
// k-th B (k from 0) the rank runs the oldest pending W once k >= s; the rest run at the end. W's
// follow B order, so each stage's W's run in micro-batch order. With v = 1 this is zb-h1.
#include <algorithm>
#include <deque>
#include <utility>

#include "runtime/schedules/generator_parts.h"
#include "runtime/schedules/generators.h"

namespace pf::sched {
namespace {

Schedule interleaved_zero_bubble(const GeneratorOptions& o) {
  gen::require_no_reverse("interleaved-zb", o.reverse_backward);
  const int p = o.ranks, m = o.micro_batches, v = o.chunks;
  Schedule s = gen::make_schedule("interleaved-zb", m, Placement::looped(p, v));
  const int first_group = gen::interleave_groups(p, m).front();
  const std::vector<std::pair<int, int>> table = gen::interleave_table(p, m, v);  // (micro-batch, chunk)
  const int total = v * m;
  for (int r = 0; r < p; ++r) {
    auto& list = s.ranks[static_cast<size_t>(r)];
    const int warm = std::min((v - 1) * first_group + (p - 1 - r), total);
    int next_f = 0, next_b = 0;
    std::deque<Action> pending_w;
    auto forward = [&] {
      const auto [mb, c] = table[static_cast<size_t>(next_f++)];
      list.push_back(gen::F(c * p + r, mb));
    };
    auto backward = [&] {
      const int k = next_b;
      const auto [mb, c] = table[static_cast<size_t>(next_b++)];
      const int stage = (v - 1 - c) * p + r;
      list.push_back(gen::B(stage, mb));
      pending_w.push_back(gen::W(stage, mb));
      if (k >= r) {
        list.push_back(pending_w.front());
        pending_w.pop_front();
      }
    };
    while (next_f < warm) forward();
    while (next_f < total) {
      forward();
      backward();
    }
    while (next_b < total) backward();
    list.insert(list.end(), pending_w.begin(), pending_w.end());
  }
  gen::add_steps(s);
  return s;
}

// The library is built with alwayslink, so this initialiser runs in every binary that links it.
ScheduleTraits looped() {
  ScheduleTraits t;
  t.chunks = ChunkRule::kAny;
  return t;
}

const bool kRegistered = (register_generator("interleaved-zb", interleaved_zero_bubble, looped()), true);

}  // namespace
}  // namespace pf::sched
