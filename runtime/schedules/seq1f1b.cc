// "seq1f1b": sequence-sliced 1F1B (Seq1F1B, Sun et al. 2024; SlimPipe). The unit is slice j of
// micro-batch mb, numbered u = mb * S + j (S = GeneratorOptions::seq_slices). Rank s, one stage
// per rank, runs w = min(p - s - 1 + S - 1, m * S) warm-up forwards, then (F, BW) pairs, then the
// remaining BW's. Forwards go in unit order; the k-th backward is unit (k div S) * S + S-1 - k mod S,
// i.e. micro-batch-major with the slices in reverse. The S - 1 extra warm-up units let the last
// stage finish a micro-batch's forwards before that micro-batch's first backward (its last slice).
// This is the order of sail-sg/zero-bubble-pipeline-parallelism's seq1f1b scheduler. With S = 1 it
// is exactly 1f1b.
#include <algorithm>

#include "runtime/schedules/generator_parts.h"
#include "runtime/schedules/generators.h"

namespace pf::sched {
namespace {

Schedule seq1f1b(const GeneratorOptions& o) {
  gen::require_one_chunk("seq1f1b", o.chunks);
  gen::require_no_reverse("seq1f1b", o.reverse_backward);
  const int p = o.ranks, S = o.seq_slices, units = o.micro_batches * o.seq_slices;
  Schedule s = gen::make_schedule("seq1f1b", units, Placement::one_per_rank(p));
  s.seq_slices = S;
  const auto backward_unit = [S](int k) { return (k / S) * S + S - 1 - k % S; };
  for (int r = 0; r < p; ++r) {
    auto& list = s.ranks[static_cast<size_t>(r)];
    const int warm = std::min(p - r - 1 + S - 1, units);
    for (int i = 0; i < warm; ++i) list.push_back(gen::F(r, i));
    for (int i = 0; i < units - warm; ++i) {
      list.push_back(gen::F(r, warm + i));
      list.push_back(gen::BW(r, backward_unit(i)));
    }
    for (int i = units - warm; i < units; ++i) list.push_back(gen::BW(r, backward_unit(i)));
  }
  gen::add_steps(s);
  return s;
}

ScheduleTraits sliced() {
  ScheduleTraits t;
  t.slices_sequences = true;
  return t;
}

const bool kRegistered = (register_generator("seq1f1b", seq1f1b, sliced()), true);

}  // namespace
}  // namespace pf::sched
