// Schedule generators: per-rank action lists for the schedules of docs/SCHEDULES.md, behind a small
// name -> function registry (built-ins: gpipe, 1f1b, interleaved-1f1b, bfs, zb-h1, zb-h2, zb-v here;
// interleaved-zb, dualpipe-v, v-half, v-min in their own files; other
// files add more with register_generator).
//
// Every built-in emits unlowered compute actions (add SEND/RECV with lower_communication) and ends each
// rank with one STEP per stage it holds, right after that stage's last W/BW. gpipe, 1f1b,
// interleaved-1f1b and bfs use the fused BW; the zb-* schedules split it into B and W. Every built-in
// runs each stage's weight gradients in micro-batch order 0..m-1 (the sequential reference's
// accumulation order), except bfs with reverse_backward = true. (seq1f1b, in its own file, runs each
// micro-batch's slices' backwards in reverse slice order.)
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/schedules/ir.h"
#include "runtime/schedules/schedule_traits.h"
#include "runtime/schedules/simulator.h"

namespace pf::sched {

// The same costs on every stage: what the cost-driven generators (ScheduleTraits::cost_driven) plan with.
struct UniformCosts {
  double t_f = 1.0, t_b = 1.0, t_w = 1.0, t_comm = 0.0;
  double m_b = 1.0, m_w = 0.0;  // activation memory per micro-batch (bytes or units)
  double t_head = 0.0;          // local learning: one HEAD (the auxiliary head's forward, loss, backward)
  CostModel expand(int num_stages) const;
};

struct GeneratorOptions {
  int ranks = 0;          // p, pipeline ranks
  int micro_batches = 0;  // m, micro-batches per step
  // v, model chunks per rank: interleaved-1f1b, interleaved-zb and bfs take any v >= 1 (stages =
  // p * v, looped placement); the V schedules (zb-v, dualpipe-v, v-half, v-min) always have 2 (they
  // accept 1 or 2); the others need 1. 0 = the schedule's default (ScheduleTraits::default_chunks:
  // 2 for the looped and V schedules, 1 for the others), resolved by generate_schedule.
  int chunks = 0;
  // bfs only: run each chunk's backwards m-1..0, the looped-BFS order of the reference table, which
  // accumulates weight gradients in reverse micro-batch order. Default: 0..m-1.
  bool reverse_backward = false;
  // S, sequence slices per micro-batch: seq1f1b takes any S >= 1 (its schedule has m * S units,
  // Schedule::seq_slices = S); the others need 1.
  int seq_slices = 1;
  // The cost-driven generators only (zb-auto, v-half, v-min): the costs they schedule with and the
  // cap on in-flight micro-batches per rank (0: the schedule's own; schedule_request.h).
  UniformCosts costs;
  double mem_limit = 0;
};

using GeneratorFn = std::function<Schedule(const GeneratorOptions&)>;

// Adds a generator and the traits of its family (default: a synchronous schedule with one chunk per
// rank). Throws kInvalidArgument for an empty name, an empty function or a name that is already
// registered. Thread-safe.
void register_generator(const std::string& name, GeneratorFn fn, ScheduleTraits traits = {});

// Registered names, sorted.
std::vector<std::string> generator_names();
// Registered names whose traits `keep` accepts, in registration order (a family's members in the
// order its file registers them: "ppll, local-updates").
std::vector<std::string> generator_names_where(const std::function<bool(const ScheduleTraits&)>& keep);
bool has_generator(const std::string& name);
// A registered generator whose chunks rule is ChunkRule::kAny (interleaved-1f1b, interleaved-zb, bfs).
bool takes_any_chunks(const std::string& name);
// The registered traits of `name` (the one place a schedule name turns into what it is); unknown
// name: kInvalidArgument listing the known names.
ScheduleTraits schedule_traits(const std::string& name);

// Checks the common options (ranks >= 1, micro_batches >= 1, chunks >= 1, seq_slices >= 1, a size limit), runs the
// generator, sets the schedule's name to `name` when the generator left it empty and its traits to the
// registered ones, and validates the
// result (a generator bug surfaces as an error naming the generator). Unknown name: kInvalidArgument
// listing the known names.
Schedule generate_schedule(const std::string& name, const GeneratorOptions& opts);

}  // namespace pf::sched
